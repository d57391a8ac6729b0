"""A wheel of slurm-ml carries every file `slurm-ml install` reads (slurm_ml/share/, plain
package data) and the simulator's traces (slurm_ml/data/), and a copy installed into a
fresh virtualenv outside the repository simulates and installs from its own files, with
no checkout in sight. Plus slurm_ml.assets in-process.

The wheel is built offline (``--no-build-isolation --no-index``: the venv's setuptools)
from a copy of the checkout, so that the build's ``build/`` and ``*.egg-info`` do not land
in the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from deploy_helpers import make_conf_dir

from slurm_ml import assets
from slurm_ml.slurm import render

REPO = Path(__file__).resolve().parents[2]
SHARE = REPO / "slurm_ml" / "share"
#: The executables in slurm_ml/share/, relative to it.
SCRIPTS = ("slurm-ml-hook", "gpu-selfcheck")
MARKER = "-- slurm-ml test: this is the installed copy"


def _package_data() -> list[str]:
    """Every non-Python file under slurm_ml/ that git tracks, relative to the checkout."""
    out = _run(["git", "ls-files", "slurm_ml"], cwd=REPO).stdout.split()
    return sorted(f for f in out if not f.endswith(".py"))


def _run(argv: list[str], *, check_rc: bool = True,
         **kw: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                         **kw)  # type: ignore[call-overload]
    if check_rc:
        assert res.returncode == 0, f"{argv}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    have = metadata.version("setuptools")
    if tuple(int(x) for x in have.split(".")[:2]) < (70, 1):
        pytest.fail(f"setuptools {have} in this venv cannot build a wheel offline (bdist_wheel "
                    "needs >= 70.1, a dev extra): run `make venv` or "
                    "`pip install -e '.[dev]'`", pytrace=False)
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".*", "build", "dist", "*.egg-info", "__pycache__", "*.whl"))
    out = tmp / "out"
    _run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(out)], cwd=src)
    (whl,) = out.glob("slurm_ml-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel: Path) -> Path:
    """A fresh virtualenv outside the repository with only the wheel installed. Its
    dependencies are this venv's (a .pth line names its site-packages: no network, and
    the editable slurm_ml there stays invisible, since that directory's own .pth files are
    not processed)."""
    target = wheel.parent.parent / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(target)])
    (site_dir,) = (target / "lib").glob("python3*/site-packages")
    deps = next(p for p in map(Path, sys.path) if p.name == "site-packages" and
                (p / "click").is_dir())
    (site_dir / "slurm-ml-test-deps.pth").write_text(f"{deps}\n")
    _run([sys.executable, "-m", "pip", "--python", str(target / "bin" / "python"), "install",
          "--no-deps", "--no-index", "-q", str(wheel)])
    return target


def _installed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """No slurm-ml settings from the caller's environment, no PYTHONPATH, no DSN."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SLURM_ML_") and k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return {**env, "SLURM_ML_DSN": "", **(extra or {})}


def test_the_wheel_ships_every_asset_with_its_mode(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        wanted = _package_data()
        assert {"slurm_ml/share/slurm-ml.yaml", "slurm_ml/share/slurm-ml.conf.tmpl",
                "slurm_ml/share/job_submit.lua", "slurm_ml/share/slurm-ml-hook",
                "slurm_ml/share/systemd/slurm-ml-submitd.service.tmpl",
                "slurm_ml/data/SOURCES.md",
                "slurm_ml/data/traces/pollux_philly/philly.csv"} <= set(wanted)
        missing = [f for f in wanted if f not in infos]
        assert not missing, f"not in {wheel.name}: {missing}"
        for f in SCRIPTS:
            mode = infos[f"slurm_ml/share/{f}"].external_attr >> 16
            assert mode & stat.S_IXUSR, f"{f}: mode {mode:o} in the wheel"
        for f in wanted:  # byte for byte the checkout's
            assert zf.read(f) == (REPO / f).read_bytes(), f
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "slurm_ml").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= set(infos), sorted(modules - set(infos))
    assert "slurm_ml/store/migrations/0001_init.sql" in infos
    # Test and trial inputs stay out: the GPU captures (some copyleft), the dev cluster's
    # templates, the examples, the tests.
    assert not [n for n in infos if n.startswith(("data/", "devcluster/", "examples/",
                                                   "tests/"))]


def test_a_fresh_venv_simulates_from_the_packaged_traces(venv: Path, tmp_path: Path) -> None:
    """`pip install slurm-ml` then `slurm-ml sim --hours 24 --policy budget`, outside any
    checkout: the trace, its VC sizes and the default config all come with the package."""
    res = _run([str(venv / "bin" / "slurm-ml"), "sim", "--hours", "24", "--policy", "budget",
                "--json"], cwd=tmp_path, env=_installed_env())
    out = json.loads(res.stdout)
    text = json.dumps(out)
    site = str(venv)
    assert "philly.csv" in text and site in text, "the packaged trace was not the one read"
    assert str(REPO) not in text


def test_a_fresh_venv_installs_from_its_own_assets(venv: Path, tmp_path: Path) -> None:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    shipped = site / "slurm_ml" / "share"
    for f in SCRIPTS:
        assert (shipped / f).stat().st_mode & stat.S_IXUSR, f
    # Mark the installed shim and hook: the diff must show the marked text.
    for f in ("job_submit.lua", "slurm-ml-hook"):
        with (shipped / f).open("a") as fh:
            fh.write(f"{MARKER}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _installed_env()
    python = str(venv / "bin" / "python")
    probe = _run([python, "-c", (
        "import slurm_ml, slurm_ml.assets as a\n"
        "from slurm_ml.slurm import render\n"
        "print(slurm_ml.__file__); print(a.checkout_root()); print(render.shim_source())\n"
        "print(a.DEFAULT_CONFIG)\n")], cwd=elsewhere, env=env).stdout.splitlines()
    assert probe == [str(site / "slurm_ml" / "__init__.py"), "None",
                     str(shipped / "job_submit.lua"), str(shipped / "slurm-ml.yaml")]

    etc = make_conf_dir(tmp_path)
    # The packaged default config, whose partitions the sample conf dir has.
    res = _run([str(venv / "bin" / "slurm-ml"), "install",
                "--config", str(shipped / "slurm-ml.yaml"), "--slurm-conf-dir", str(etc),
                "--no-systemd", "--dry-run", "--diff", "--no-accounts"],
               cwd=elsewhere, env=env)
    out = res.stdout
    for name in ("job_submit.lua", "slurm-ml.conf", "slurm-ml-prolog", "slurm-ml-epilog",
                 "slurm-ml-healthcheck"):
        assert f"+++ {etc}/{name}\n" in out, name
    # the shim once, the one hook wrapper under each of its three names
    assert out.count(f"+{MARKER}") == 4
    assert f"+Include {etc}/slurm-ml.conf" in out
    assert not (etc / "job_submit.lua").exists()  # a dry run


def test_an_installed_copy_has_no_dev_cluster_templates(venv: Path, tmp_path: Path) -> None:
    res = _run([str(venv / "bin" / "python"), "-c",
                "from slurm_ml.slurm import render\nrender.conf_dir()"],
               cwd=tmp_path, env=_installed_env(), check_rc=False)
    assert res.returncode == 1
    assert "the dev cluster's Slurm templates come with a source checkout" in res.stderr
    assert "SLURM_ML_CONF_DIR" in res.stderr


def test_from_the_checkout_assets_are_the_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_ML_CONF_DIR", raising=False)
    assert assets.checkout_root() == REPO
    assert render.conf_dir() == REPO / "devcluster" / "templates"
    assert render.shim_source() == SHARE / "job_submit.lua"
    for f in SCRIPTS:
        assert assets.asset_path(f) == SHARE / f
    assert assets.DEFAULT_CONFIG == SHARE / "slurm-ml.yaml"


def test_conf_dir_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_ML_CONF_DIR", str(tmp_path))
    assert assets.conf_dir() == tmp_path == render.conf_dir()
    # ... the dev cluster's templates only: the shim still comes from the package
    assert render.shim_source() == SHARE / "job_submit.lua"


def test_a_missing_asset_names_where_it_looked(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "SHARE", tmp_path / "share")
    with pytest.raises(assets.AssetNotFound) as err:
        assets.asset_path("nope")
    assert err.value.tried == [tmp_path / "share" / "nope"]
    assert str(tmp_path / "share" / "nope") in str(err.value)
    assert "reinstall slurm-ml" in str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    # not strict: where it would be (for defaults computed at import time)
    assert assets.asset_path("nope", strict=False) == tmp_path / "share" / "nope"
    for bad in (("..", "etc"), ("/etc/passwd",), ()):
        with pytest.raises(ValueError):
            assets.asset_path(*bad)


def test_a_package_without_its_share_is_a_template_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "SHARE", tmp_path / "share")
    with pytest.raises(render.TemplateError, match=re.escape("share/job_submit.lua")):
        render.shim_source()
    from slurm_ml.deploy import state
    from slurm_ml.deploy.errors import BadInput
    (tmp_path / "share").mkdir()
    shutil.copy(SHARE / "job_submit.lua", tmp_path / "share")
    with pytest.raises(BadInput, match="share/slurm-ml-hook"):
        state.read_sources(templates=SHARE)
