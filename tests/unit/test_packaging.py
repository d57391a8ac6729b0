"""A wheel of slurm-ml carries every file `slurm-ml install` reads (the checkout's top-level
job_submit/, prolog/ and conf/, which pyproject.toml maps into the package as
slurm_ml/job_submit/, slurm_ml/prolog/ and slurm_ml/conf/) and the simulator's traces
(slurm_ml/data/), each byte for byte the checkout's, and a copy installed into a fresh
virtualenv outside the repository simulates and installs from its own files, with no
checkout in sight. Plus slurm_ml.assets in-process.

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
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from deploy_helpers import make_conf_dir

from slurm_ml import assets
from slurm_ml.slurm import render

REPO = Path(__file__).resolve().parents[2]
#: The executables slurm-ml deploys, relative to the checkout's top level.
SCRIPTS = ("prolog/slurm-ml-hook", "prolog/gpu-selfcheck")
#: Files in the shipped folders that the wheel leaves out: the example site's config,
#: which an admin copies from the repository (docs/admin.md).
NOT_SHIPPED = ("conf/examples/",)
MARKER = "-- slurm-ml test: this is the installed copy"


def _shipped() -> dict[str, str]:
    """Every non-Python file the wheel must carry, by its name in the wheel, with its path
    in the checkout: what git tracks under slurm_ml/, and under the top-level folders of
    slurm_ml.assets (at slurm_ml/<folder>/ in the wheel)."""
    out = _run(["git", "ls-files", "slurm_ml", *assets.FOLDERS], cwd=REPO).stdout.split()
    return {(f if f.startswith("slurm_ml/") else f"slurm_ml/{f}"): f for f in sorted(out)
            if not f.endswith(".py") and not f.startswith(NOT_SHIPPED)}


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


def test_pyproject_maps_each_asset_folder_and_lists_every_package() -> None:
    """Without building: the setuptools mapping is the one slurm_ml.assets reads, and the
    package list (written out, since find() cannot name the mapped folders) misses none."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {f"slurm_ml.{f}": f for f in assets.FOLDERS}
    assert tool["package-dir"] == mapped
    for folder in assets.FOLDERS:
        assert (REPO / folder).is_dir() and not (REPO / "slurm_ml" / folder).exists()
    packages = {".".join(p.parent.relative_to(REPO).parts)
                for p in (REPO / "slurm_ml").rglob("__init__.py")}
    assert sorted(tool["packages"]) == sorted(packages | set(mapped))
    assert set(tool["package-data"]) == {"slurm_ml", *mapped}


def test_the_wheel_ships_every_asset_with_its_mode(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        wanted = _shipped()
        assert {"slurm_ml/conf/slurm-ml.yaml", "slurm_ml/conf/slurm-ml.conf.tmpl",
                "slurm_ml/job_submit/job_submit.lua", "slurm_ml/prolog/slurm-ml-hook",
                "slurm_ml/prolog/gpu-selfcheck",
                "slurm_ml/conf/systemd/slurm-ml-submitd.service.tmpl",
                "slurm_ml/conf/systemd/slurm-ml-daemon.service.tmpl",
                "slurm_ml/conf/prometheus/slurm-ml.rules.yml",
                "slurm_ml/conf/prometheus/slurm-ml.rules.test.yml",
                "slurm_ml/data/SOURCES.md",
                "slurm_ml/data/traces/pollux_philly/philly.csv"} <= set(wanted)
        missing = [f for f in wanted if f not in infos]
        assert not missing, f"not in {wheel.name}: {missing}"
        for f in SCRIPTS:
            mode = infos[f"slurm_ml/{f}"].external_attr >> 16
            assert mode & stat.S_IXUSR, f"{f}: mode {mode:o} in the wheel"
        for name, f in wanted.items():  # byte for byte the checkout's
            assert zf.read(name) == (REPO / f).read_bytes(), f
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "slurm_ml").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert modules <= set(infos), sorted(modules - set(infos))
    assert "slurm_ml/store/migrations/0001_init.sql" in infos
    # Nothing else of the package's: no stray file beside the shipped ones.
    data = {n for n in infos if n.startswith("slurm_ml/") and not n.endswith(".py")}
    assert data == set(wanted) | {"slurm_ml/py.typed"}, sorted(data ^ set(wanted))
    # Test and trial inputs stay out: the GPU captures (some copyleft), the dev cluster's
    # templates, the examples (the site example's too), the tests; and the top-level
    # folders exist only under slurm_ml/.
    assert not [n for n in infos if n.startswith((
        "data/", "devcluster/", "examples/", "tests/", *(f"{f}/" for f in assets.FOLDERS),
        *(f"slurm_ml/{f}" for f in NOT_SHIPPED)))]


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
    shipped = site / "slurm_ml"
    for f in SCRIPTS:
        assert (shipped / f).stat().st_mode & stat.S_IXUSR, f
    # Mark the installed shim and hook: the diff must show the marked text.
    for f in ("job_submit/job_submit.lua", "prolog/slurm-ml-hook"):
        with (shipped / f).open("a") as fh:
            fh.write(f"{MARKER}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _installed_env()
    python = str(venv / "bin" / "python")
    probe = _run([python, "-c", (
        "import slurm_ml, slurm_ml.assets as a\n"
        "from slurm_ml.slurm import render\n"
        "print(slurm_ml.__file__); print(a.checkout_root()); print(a.ROOT)\n"
        "print(render.shim_source()); print(a.DEFAULT_CONFIG)\n"
        "print(a.asset_path('prolog', 'slurm-ml-hook'))\n")],
                 cwd=elsewhere, env=env).stdout.splitlines()
    assert probe == [str(shipped / "__init__.py"), "None", str(shipped),
                     str(shipped / "job_submit" / "job_submit.lua"),
                     str(shipped / "conf" / "slurm-ml.yaml"),
                     str(shipped / "prolog" / "slurm-ml-hook")]

    etc = make_conf_dir(tmp_path)
    # The packaged default config, whose partitions the sample conf dir has.
    res = _run([str(venv / "bin" / "slurm-ml"), "install",
                "--config", str(shipped / "conf" / "slurm-ml.yaml"), "--slurm-conf-dir", str(etc),
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


def test_the_installed_gpu_selfcheck_imports_its_own_package(venv: Path,
                                                            tmp_path: Path) -> None:
    """slurm_ml/prolog/gpu-selfcheck puts site-packages (two levels up) on sys.path: under
    ``-S`` (no site-packages, no dependencies) it gets past ``import slurm_ml`` and stops
    at a third-party import. Then, with the venv's own path, it cross-checks a capture."""
    (site,) = (venv / "lib").glob("python3*/site-packages")
    script = str(site / "slurm_ml" / "prolog" / "gpu-selfcheck")
    python = str(venv / "bin" / "python")
    bare = _run([python, "-S", script], cwd=tmp_path, env=_installed_env(), check_rc=False)
    assert bare.returncode == 2, bare.stdout + bare.stderr
    assert bare.stdout.startswith("no NVML: cannot import the probe (No module named ")
    assert "'slurm_ml" not in bare.stdout
    capture = str(REPO / "data" / "gpu" / "smi-q" / "gpud_h100x8_535.161.08_q.txt")
    res = _run([python, script, "--json", "--fake-nvml", capture, "--smi-q", capture],
               cwd=tmp_path, env=_installed_env())
    assert json.loads(res.stdout)["ok"] is True


def test_an_installed_copy_has_no_dev_cluster_templates(venv: Path, tmp_path: Path) -> None:
    res = _run([str(venv / "bin" / "python"), "-c",
                "from slurm_ml.slurm import render\nrender.conf_dir()"],
               cwd=tmp_path, env=_installed_env(), check_rc=False)
    assert res.returncode == 1
    assert "the dev cluster's Slurm templates come with a source checkout" in res.stderr
    assert "SLURM_ML_CONF_DIR" in res.stderr


def test_from_the_checkout_assets_are_its_top_level_folders(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_ML_CONF_DIR", raising=False)
    assert assets.checkout_root() == REPO == assets.ROOT
    assert render.conf_dir() == REPO / "devcluster" / "templates"
    assert render.shim_source() == REPO / "job_submit" / "job_submit.lua"
    for f in SCRIPTS:
        assert assets.asset_path(*f.split("/")) == REPO / f
    assert assets.DEFAULT_CONFIG == REPO / "conf" / "slurm-ml.yaml"
    assert assets.asset_path("conf", "prometheus", "slurm-ml.rules.yml").is_file()


def test_conf_dir_env_overrides(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLURM_ML_CONF_DIR", str(tmp_path))
    assert assets.conf_dir() == tmp_path == render.conf_dir()
    # ... the dev cluster's templates only: the shim still comes from job_submit/
    assert render.shim_source() == REPO / "job_submit" / "job_submit.lua"


def test_a_missing_asset_names_where_it_looked(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "ROOT", tmp_path)
    with pytest.raises(assets.AssetNotFound) as err:
        assets.asset_path("prolog", "nope")
    assert err.value.tried == [tmp_path / "prolog" / "nope"]
    assert str(tmp_path / "prolog" / "nope") in str(err.value)
    assert "reinstall slurm-ml (a wheel ships it in slurm_ml/prolog/" in str(err.value)
    assert isinstance(err.value, FileNotFoundError)
    # not strict: where it would be (for defaults computed at import time)
    assert assets.asset_path("conf", "nope", strict=False) == tmp_path / "conf" / "nope"
    # only the shipped folders, and only inside them
    for bad in (("conf", "..", "etc"), ("conf", "/etc/passwd"), ("devcluster", "templates"),
                ("slurm_ml",), (".",), ("..",)):
        with pytest.raises(ValueError):
            assets.asset_path(*bad)


def test_a_package_without_its_assets_is_a_template_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(assets, "ROOT", tmp_path)
    with pytest.raises(render.TemplateError, match=re.escape("job_submit/job_submit.lua")):
        render.shim_source()
    from slurm_ml.deploy import state
    from slurm_ml.deploy.errors import BadInput
    (tmp_path / "job_submit").mkdir()
    shutil.copy(REPO / "job_submit" / "job_submit.lua", tmp_path / "job_submit")
    with pytest.raises(BadInput, match="prolog/slurm-ml-hook"):
        state.read_sources(templates=REPO / "conf")
