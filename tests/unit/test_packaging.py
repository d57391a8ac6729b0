"""A wheel of slurm-ml carries every file `slurm-ml install` reads (conf/, job_submit/,
prolog/, epilog/, scripts/ as slurm_ml/_share/), and an installed, non-editable copy
installs from its own copies, not from a checkout. Plus slurm_ml.assets in-process.

The wheel is built offline (``--no-build-isolation --no-index``: the venv's setuptools)
from a copy of the checkout, so that the build's ``build/`` and ``*.egg-info`` do not land
in the checkout.
"""

from __future__ import annotations

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
#: Every file the wheel must ship (besides all of conf/), relative to the checkout.
SCRIPTS = ("prolog/slurm-ml-prolog", "epilog/slurm-ml-epilog",
           "scripts/slurm-ml-healthcheck", "scripts/gpu-selfcheck")
FILES = ("job_submit/job_submit.lua", *SCRIPTS)
MARKER = "-- slurm-ml test: this is the installed copy"


def _conf_files() -> list[str]:
    return sorted(p.relative_to(REPO).as_posix() for p in (REPO / "conf").rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False,
                         **kw)  # type: ignore[call-overload]
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
def site(wheel: Path) -> Path:
    target = wheel.parent.parent / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q",
          "--target", str(target), str(wheel)])
    return target


def _installed_env(site: Path) -> dict[str, str]:
    """Only the installed copy of slurm_ml on the path (deps from this venv), no conf dir
    override, no DSN."""
    env = {k: v for k, v in os.environ.items()
           if k not in {"SLURM_ML_CONF_DIR", "PYTHONPATH", "SLURM_ML_DSN"}}
    return {**env, "PYTHONPATH": str(site), "SLURM_ML_DSN": ""}


def test_the_wheel_ships_every_asset_with_its_mode(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
    wanted = [*_conf_files(), *FILES]
    assert {"conf/slurm-ml.yaml", "conf/slurm-ml.conf.tmpl", "conf/examples/slurm-ml.yaml",
            "conf/systemd/slurm-ml-submitd.service.tmpl",
            "conf/systemd/slurm-ml-daemon.service.tmpl"} <= set(wanted)
    missing = [f for f in wanted if f"slurm_ml/_share/{f}" not in infos]
    assert not missing, f"not in {wheel.name}: {missing}"
    for f in SCRIPTS:
        mode = infos[f"slurm_ml/_share/{f}"].external_attr >> 16
        assert mode & stat.S_IXUSR, f"{f}: mode {mode:o} in the wheel"
    for f in wanted:  # byte for byte the checkout's
        with zipfile.ZipFile(wheel) as zf:
            assert zf.read(f"slurm_ml/_share/{f}") == (REPO / f).read_bytes(), f
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "slurm_ml").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= set(infos), sorted(modules - set(infos))
    assert "slurm_ml/store/migrations/0001_init.sql" in infos
    assert not [n for n in infos if n.startswith(("conf/", "tests/", "setup.py"))]


def test_an_installed_copy_resolves_and_installs_from_its_own_assets(
        site: Path, tmp_path: Path) -> None:
    shipped = site / "slurm_ml" / "_share"
    for f in SCRIPTS:
        assert (shipped / f).stat().st_mode & stat.S_IXUSR, f
    # Mark the installed shim and prolog: the diff must show the marked text.
    for f in ("job_submit/job_submit.lua", "prolog/slurm-ml-prolog"):
        with (shipped / f).open("a") as fh:
            fh.write(f"{MARKER}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _installed_env(site)

    probe = _run([sys.executable, "-c", (
        "import slurm_ml, slurm_ml.assets as a, slurm_ml.cli as c\n"
        "from slurm_ml.slurm import render\n"
        "print(slurm_ml.__file__); print(a.checkout_root())\n"
        "print(render.conf_dir()); print(render.shim_source()); print(c.DEFAULT_CONFIG)\n"
        f"for f in {FILES!r}: print(a.asset_path(*f.split('/')))\n")],
        cwd=elsewhere, env=env).stdout.splitlines()
    pkg, checkout, *paths = probe
    assert Path(pkg) == site / "slurm_ml" / "__init__.py"
    assert checkout == "None"
    assert paths == [str(shipped / "conf"), str(shipped / "job_submit" / "job_submit.lua"),
                     str(shipped / "conf" / "slurm-ml.yaml"), *(str(shipped / f) for f in FILES)]

    etc = make_conf_dir(tmp_path)
    res = _run([sys.executable, "-m", "slurm_ml.cli", "install",
                "--config", str(shipped / "conf" / "slurm-ml.yaml"),
                "--slurm-conf-dir", str(etc), "--no-systemd", "--dry-run", "--diff",
                "--no-accounts"], cwd=elsewhere, env=env)
    out = res.stdout
    for name in ("job_submit.lua", "slurm-ml.conf", "slurm-ml-prolog", "slurm-ml-epilog",
                 "slurm-ml-healthcheck"):
        assert f"+++ {etc}/{name}\n" in out, name
    assert f"+{MARKER}" in out and out.count(f"+{MARKER}") == 2
    assert f"+Include {etc}/slurm-ml.conf" in out
    assert not (etc / "job_submit.lua").exists()  # a dry run


def test_from_the_checkout_assets_are_the_checkouts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_ML_CONF_DIR", raising=False)
    assert assets.checkout_root() == REPO
    assert render.conf_dir() == REPO / "conf"
    assert render.shim_source() == REPO / "job_submit" / "job_submit.lua"
    for f in FILES:
        assert assets.asset_path(*f.split("/")) == REPO / f
    from slurm_ml.cli import DEFAULT_CONFIG
    assert DEFAULT_CONFIG == REPO / "conf" / "slurm-ml.yaml"


def test_conf_dir_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_ML_CONF_DIR", str(tmp_path))
    assert assets.conf_dir() == tmp_path == render.conf_dir()
    # ... the conf dir only: the shim still comes from the checkout
    assert render.shim_source() == REPO / "job_submit" / "job_submit.lua"


def test_a_missing_asset_names_every_place_looked(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "share_root", lambda: tmp_path / "_share")
    with pytest.raises(assets.AssetNotFound) as err:
        assets.asset_path("prolog", "nope")
    assert err.value.tried == [REPO / "prolog" / "nope", tmp_path / "_share" / "prolog" / "nope"]
    assert str(REPO / "prolog" / "nope") in str(err.value)
    assert str(tmp_path / "_share" / "prolog" / "nope") in str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    # not strict: where it would be first (for defaults computed at import time)
    assert assets.asset_path("prolog", "nope", strict=False) == REPO / "prolog" / "nope"
    for bad in (("..", "etc"), ("/etc/passwd",), ()):
        with pytest.raises(ValueError):
            assets.asset_path(*bad)


def test_installed_layout_without_checkout_or_share_is_a_template_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_ML_CONF_DIR", raising=False)
    monkeypatch.setattr(assets, "checkout_root", lambda: None)
    monkeypatch.setattr(assets, "share_root", lambda: tmp_path / "_share")
    with pytest.raises(render.TemplateError, match="_share/conf"):
        render.conf_dir()
    with pytest.raises(render.TemplateError, match=re.escape("_share/job_submit/job_submit.lua")):
        render.shim_source()
    from slurm_ml.deploy import state
    from slurm_ml.deploy.errors import BadInput
    (tmp_path / "_share" / "job_submit").mkdir(parents=True)
    shutil.copy(REPO / "job_submit" / "job_submit.lua", tmp_path / "_share" / "job_submit")
    with pytest.raises(BadInput, match="_share/prolog/slurm-ml-prolog"):
        state.read_sources(templates=REPO / "conf")
