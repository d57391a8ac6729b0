"""docker-compose.yml, devcluster/Dockerfile and the container roles, checked without Docker.

* the compose file against the official compose-spec JSON schema (the copy
  check-jsonschema vendors from compose-spec/compose-spec, schema/compose-spec.json,
  Apache-2.0: see its builtin_schemas/vendor/licenses/LICENSE.compose-spec);
* what the schema cannot see: one image for every service, references between
  services, volumes and networks, the shared paths the roles expect, one service per
  node of devcluster/compose/slurm-ml.yaml;
* every `slurm-ml ...` command line (compose commands and healthchecks on top of the
  Dockerfile's ENTRYPOINT, and those the roles run) parses with the real click CLI;
* the Dockerfile: a small instruction parser, the base image, the apt packages;
* the init role, run for real into a temporary directory (render.py + `slurm-ml install`).

tests/compose/test_compose_up.py brings the cluster up where a Docker engine answers.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import jsonschema
import pytest
import yaml

from slurm_ml import assets
from slurm_ml.cli import compose as cli_compose
from slurm_ml.cli import main
from slurm_ml.config import load_config
from slurm_ml.devcluster import compose, platform
from slurm_ml.store.dsn import dsn_warnings

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "devcluster" / "Dockerfile"
COMPOSE_CONFIG = REPO / "devcluster" / "compose" / "slurm-ml.yaml"
IMAGE = "slurm-ml:dev"


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())  # YAML anchors and << merges resolved
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return spec["services"]


# ------------------------------------------------------------------ schema


def compose_schema() -> dict[str, Any]:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads((vendor / "compose-spec.json").read_text())
    assert schema.get("title") == "Compose Specification"
    return schema


def schema_errors(doc: Any) -> list[str]:
    schema = compose_schema()
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    validator = validator_cls(schema, format_checker=validator_cls.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
            for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))]


def test_compose_file_is_valid_against_the_compose_spec(spec: dict[str, Any]) -> None:
    assert schema_errors(spec) == []


@pytest.mark.parametrize("breakage", [
    lambda d: d["services"]["slurmctld"].update(depends_onn={}),
    lambda d: d["services"]["gpu01"].update(depends_on={"init": {"condition": "whenever"}}),
    lambda d: d.update(volumes=["slurm-etc"]),
])
def test_the_schema_check_does_catch_mistakes(spec: dict[str, Any], breakage: Any) -> None:
    broken = copy.deepcopy(spec)
    breakage(broken)
    assert schema_errors(broken)


# --------------------------------------------------------------- semantics


def role_of(svc: dict[str, Any]) -> str:
    return str(svc["command"][0])


def test_every_service_runs_the_one_image(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert svc.get("image") == IMAGE, name
        assert svc.get("build") == {"context": ".", "dockerfile": "devcluster/Dockerfile",
                                    "network": "host"}, name
        assert "entrypoint" not in svc, f"{name}: the Dockerfile's ENTRYPOINT is the one"
        assert role_of(svc) in compose.ROLES, name
    assert (REPO / "devcluster" / "Dockerfile").is_file()


def test_every_role_has_a_service(services: dict[str, dict[str, Any]]) -> None:
    assert {role_of(s) for s in services.values()} == set(compose.ROLES)


def test_references_are_defined(spec: dict[str, Any]) -> None:
    services = spec["services"]
    volumes = set(spec.get("volumes") or {})
    networks = set(spec.get("networks") or {})
    used_volumes: set[str] = set()
    for name, svc in services.items():
        for dep, how in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on undefined {dep}"
            assert dep != name
            condition = how["condition"]
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health"
            elif condition == "service_completed_successfully":
                assert services[dep].get("restart") == "no", dep
        for net in svc.get("networks") or []:
            assert net in networks, f"{name}: undefined network {net}"
        for target, source in _mounts(svc).items():
            assert target.startswith("/"), f"{name}: {target}"
            if source.startswith("./"):
                assert (REPO / source).exists(), f"{name}: bind mount of missing {source}"
                continue
            assert source in volumes, f"{name}: undefined volume {source}"
            used_volumes.add(source)
    assert used_volumes == volumes, "every declared volume is used"


def _start_order(services: dict[str, dict[str, Any]]) -> list[str]:
    order: list[str] = []
    todo = dict(services)
    while todo:
        ready = [n for n, s in todo.items() if set(s.get("depends_on") or {}) <= set(order)]
        assert ready, f"depends_on has a cycle among {sorted(todo)}"
        order += sorted(ready)
        for n in ready:
            del todo[n]
    return order


def test_start_order(services: dict[str, dict[str, Any]]) -> None:
    order = _start_order(services)
    assert order[0] == "init"

    def before(a: str, b: str) -> bool:
        return order.index(a) < order.index(b)

    roles = {role_of(s): n for n, s in services.items()}
    # slurmdbd before slurmctld (accounts), submitd before slurmctld (the first sbatch
    # already goes through admission), slurmctld before the reconciler. The nodes start
    # with slurmctld, not after it: it resolves every node name as it starts, and a node
    # with no container yet cost two minutes of DNS retries each (a real compose run).
    assert before(roles["mariadb"], roles["dbd"])
    assert before(roles["dbd"], roles["ctld"])
    assert before(roles["submitd"], roles["ctld"])
    assert before(roles["postgres"], roles["submitd"])
    nodes = [n for n, s in services.items() if role_of(s) == "node"]
    assert nodes and all(services[n]["depends_on"] == {
        "init": {"condition": "service_completed_successfully"}} for n in nodes)
    assert before(roles["ctld"], roles["daemon"])


def interpolate(text: str) -> str:
    """Compose's ``${VAR:-default}`` / ``${VAR-default}`` / ``${VAR}`` with VAR unset."""
    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", text)


def _mounts(svc: dict[str, Any]) -> dict[str, str]:
    """target -> source (short syntax, interpolated as with nothing set)."""
    out = {}
    for vol in svc.get("volumes") or []:
        parts = interpolate(str(vol)).split(":")
        out[parts[1]] = parts[0]
    return out


def test_shared_paths_are_where_the_roles_expect_them(services: dict[str, dict[str, Any]]
                                                      ) -> None:
    lay = compose.layout()
    by_role: dict[str, list[dict[str, Any]]] = {}
    for svc in services.values():
        by_role.setdefault(role_of(svc), []).append(svc)
    etc_sources = set()
    for name, svc in services.items():
        m = _mounts(svc)
        assert m.get(str(compose.CONFIG_PATH)) == "./devcluster/compose/slurm-ml.yaml", name
        assert str(svc["volumes"][0]).endswith(":ro"), f"{name}: the config is read-only"
        etc_sources.add(m.get(str(compose.SLURM_ETC)))
        assert svc["environment"]["SLURM_ML_CONFIG"] == str(compose.CONFIG_PATH)
    assert len(etc_sources) == 1 and None not in etc_sources, "one shared /etc/slurm"
    # the socket job_submit.lua asks: the same volume in slurmctld and submitd
    (ctld,), (submitd,) = by_role["ctld"], by_role["submitd"]
    run = str(lay.submitd_socket.parent)
    assert _mounts(ctld)[run] == _mounts(submitd)[run]
    assert lay.submitd_socket == compose.SHARED_RUN / "submitd.sock"
    # state that must survive a restart
    assert str(lay.root / "ctld") in _mounts(ctld)
    assert str(lay.mysql) in _mounts(by_role["mariadb"][0])
    assert str(lay.pg) in _mounts(by_role["postgres"][0])
    # researchers' homes: where they submit and where their jobs run
    homes = {_mounts(s).get("/home") for s in [ctld, *by_role["node"]]}
    assert len(homes) == 1 and None not in homes


def test_host_names_are_the_ones_slurm_conf_names(services: dict[str, dict[str, Any]]) -> None:
    hosts = {role_of(s): s.get("hostname") for s in services.values()
             if role_of(s) != "node"}
    assert hosts["ctld"] == compose.HOSTS.ctld  # SlurmctldHost
    assert hosts["dbd"] == compose.HOSTS.dbd  # DbdHost, AccountingStorageHost
    assert hosts["mariadb"] == compose.HOSTS.mariadb  # StorageHost
    assert hosts["postgres"] == compose.HOSTS.postgres  # the DSN's host


def test_one_service_per_node_of_the_config(services: dict[str, dict[str, Any]]) -> None:
    cfg = load_config(COMPOSE_CONFIG)
    nodes = {n: s for n, s in services.items() if role_of(s) == "node"}
    assert sorted(s["hostname"] for s in nodes.values()) == cfg.all_nodes()
    for name, svc in nodes.items():
        assert svc["command"] == ["node", "--node", svc["hostname"]], name
        assert name == svc["hostname"]  # the compose DNS name is the Slurm NodeAddr
        assert str(compose.GPU_DATA) in _mounts(svc)


def test_healthchecks_ask_the_role_itself(services: dict[str, dict[str, Any]]) -> None:
    entry = dockerfile_entrypoint()
    for name, svc in services.items():
        if role_of(svc) == "init":
            assert "healthcheck" not in svc
            continue
        test = svc["healthcheck"]["test"]
        assert test[0] == "CMD", name
        assert test[1:len(entry) + 1] == entry, f"{name}: the healthcheck runs the entry point"
        assert test[len(entry) + 1:] == [*svc["command"], "--check"], name


# ------------------------------------------------------------ CLI parsing


def parse(args: list[str]) -> list[str]:
    """Parse ``slurm-ml ARGS`` as the real CLI does, running nothing; the command path.
    A bad command or option raises click's UsageError."""
    ctx = main.make_context("slurm-ml", list(args))
    cmd: click.Command = main
    path = ["slurm-ml"]
    while isinstance(cmd, click.Group):
        protected = getattr(ctx, "_protected_args", None)
        rest = [*(ctx.protected_args if protected is None else protected), *ctx.args]
        name, sub, rest = cmd.resolve_command(ctx, rest)
        assert sub is not None and name is not None
        ctx = sub.make_context(name, rest, parent=ctx)
        cmd = sub
        path.append(name)
    return path


def test_interpolate() -> None:
    assert interpolate("${A:-./x}:/y:ro") == "./x:/y:ro"
    assert interpolate("${A}/b ${C-d}") == "/b d"


def test_parse_refuses_what_the_cli_refuses() -> None:
    assert parse(["devcluster", "container", "ctld"]) == ["slurm-ml", "devcluster", "container"]
    with pytest.raises(click.UsageError):
        parse(["devcluster", "container", "nosuchrole"])
    with pytest.raises(click.UsageError):
        parse(["install", "--no-such-option"])
    with pytest.raises(click.UsageError):
        parse(["devcluster", "nosuchcommand"])


def _slurm_ml_args(argv: list[str]) -> list[str]:
    assert Path(argv[0]).name == "slurm-ml", argv
    return argv[1:]


def test_every_compose_command_parses(services: dict[str, dict[str, Any]]) -> None:
    entry = dockerfile_entrypoint()
    for name, svc in services.items():
        argv = [*entry, *svc["command"]]
        assert parse(_slurm_ml_args(argv)) == ["slurm-ml", "devcluster", "container"], name
        check = svc.get("healthcheck", {}).get("test", ["CMD", *argv])[1:]
        parse(_slurm_ml_args(check))


def test_the_commands_the_roles_run_parse() -> None:
    lay = compose.layout()
    cfg = compose.CONFIG_PATH
    install = compose.install_args(cfg, lay, accounts=False, env={"SLURM_ML_X": "1"})
    assert parse(install) == ["slurm-ml", "install"]
    assert "--no-accounts" in install and "--no-systemd" in install
    assert parse(compose.install_args(cfg, lay, accounts=True)) == ["slurm-ml", "install"]
    assert parse(compose.submitd_args(cfg, lay)) == ["slurm-ml", "submitd"]
    assert parse(compose.daemon_args(cfg)) == ["slurm-ml", "daemon"]
    argv = compose.cli("submitd")
    assert argv[1:3] == ["-m", "slurm_ml.cli"]


def test_the_cli_spells_out_the_roles_without_importing_them() -> None:
    assert cli_compose.ROLES == compose.ROLES
    assert cli_compose.CONFIG_PATH == compose.CONFIG_PATH


# -------------------------------------------------------------- Dockerfile


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        word, _, args = full.partition(" ")
        out.append((word.upper(), args.strip()))
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def dockerfile_entrypoint() -> list[str]:
    entry = [a for i, a in dockerfile_instructions(DOCKERFILE.read_text()) if i == "ENTRYPOINT"]
    assert len(entry) == 1
    argv = json.loads(entry[0])  # exec form: signals reach the process
    assert isinstance(argv, list)
    return [str(a) for a in argv]


def apt_packages(instructions: list[tuple[str, str]]) -> list[str]:
    packages: list[str] = []
    for word, args in instructions:
        if word != "RUN":
            continue
        for part in re.split(r"&&|;", args):
            tokens = shlex.split(part)
            while tokens and "=" in tokens[0]:  # VAR=value prefixes
                tokens.pop(0)
            if tokens[:2] == ["apt-get", "install"]:
                packages += [t for t in tokens[2:] if not t.startswith("-")]
    return packages


def test_the_dockerfile_parses() -> None:
    ins = dockerfile_instructions(DOCKERFILE.read_text())
    known = {"FROM", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "ARG", "ENTRYPOINT", "CMD",
             "LABEL", "USER", "EXPOSE", "VOLUME", "SHELL", "STOPSIGNAL", "HEALTHCHECK"}
    assert {i for i, _ in ins} <= known
    assert ins[0][0] == "FROM"


def test_the_base_is_debian_bookworm_pinned_by_name() -> None:
    froms = [a for i, a in dockerfile_instructions(DOCKERFILE.read_text()) if i == "FROM"]
    assert len(froms) == 1
    image = froms[0].split()[0]
    assert re.fullmatch(r"debian:bookworm(-slim|-\d{8}(-slim)?)?(@sha256:[0-9a-f]{64})?",
                        image), image
    assert "latest" not in image


def test_apt_packages_are_the_dev_clusters_or_explained() -> None:
    text = DOCKERFILE.read_text()
    packages = apt_packages(dockerfile_instructions(text))
    assert packages, "no apt-get install found"
    assert len(packages) == len(set(packages))
    dev = set(platform.DEBIAN_PACKAGES) | set(platform.OPTIONAL_PACKAGES)
    assert set(platform.DEBIAN_PACKAGES) <= set(packages), (
        "the image lacks packages the dev cluster installs: "
        f"{sorted(set(platform.DEBIAN_PACKAGES) - set(packages))}")
    unexplained = [p for p in packages if p not in dev
                   and not re.search(rf"^#\s+{re.escape(p)}:\s+\S", text, re.MULTILINE)]
    assert not unexplained, f"explain each in a '#   package: why' comment: {unexplained}"


def test_the_image_has_what_the_roles_expect() -> None:
    ins = dockerfile_instructions(DOCKERFILE.read_text())
    env = " ".join(a for i, a in ins if i == "ENV")
    assert f"SLURM_CONF={compose.SLURM_ETC / 'slurm.conf'}" in env
    assert f"SLURM_ML_CONFIG={compose.CONFIG_PATH}" in env
    entry = dockerfile_entrypoint()
    assert entry[1:] == ["devcluster", "container"]
    venv_bin = str(Path(entry[0]).parent)
    assert venv_bin in env, "the venv's bin on PATH (hooks run python -m slurm_ml.cli)"
    runs = " ".join(a for i, a in ins if i == "RUN")
    assert f"{Path(venv_bin).parent.name} " in runs or "venv" in runs


def test_copied_sources_exist_and_are_not_ignored() -> None:
    ignored = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for want in (".venv", ".devcluster", ".git"):
        assert want in ignored
    for word, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if word != "COPY":
            continue
        *sources, _dest = shlex.split(args)
        for src in sources:
            path = REPO / src
            assert path.exists(), f"COPY {src}: not in the repository"
            top = Path(src.rstrip("/")).parts[0]
            assert top not in ignored, f"COPY {src}: excluded by .dockerignore"


def test_the_image_has_every_file_slurm_ml_install_and_render_read() -> None:
    """The package, with the top-level folders pyproject.toml maps into it (job_submit/,
    prolog/, conf/; its data/ comes with it), and the dev cluster's templates, which
    SLURM_ML_CONF_DIR names."""
    copied = set()
    for word, args in dockerfile_instructions(DOCKERFILE.read_text()):
        if word == "COPY":
            copied |= {src.rstrip("/") for src in shlex.split(args)[:-1]}
    assert {"slurm_ml", *assets.FOLDERS, "devcluster/templates", "pyproject.toml"} <= copied, \
        copied
    env = " ".join(a for i, a in dockerfile_instructions(DOCKERFILE.read_text()) if i == "ENV")
    assert "SLURM_ML_CONF_DIR=/opt/slurm-ml/devcluster/templates" in env


# ------------------------------------------------------------------ scripts


def shell_scripts() -> list[Path]:
    """The repository's bash: the dev cluster's, the example site's sacctmgr commands and
    the hook wrapper slurmd runs."""
    return [*sorted((REPO / "devcluster").rglob("*.sh")),
            *sorted((REPO / "conf" / "examples").glob("*.sh")), REPO / "prolog" / "slurm-ml-hook"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO)))
def test_shell_scripts_parse(script: Path) -> None:
    res = subprocess.run(["bash", "-n", str(script)], check=False, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


# --------------------------------------------------------------- the roles


@pytest.fixture
def role(tmp_path: Path) -> compose.Role:
    lay = compose.ComposeLayout(tmp_path / "state", compose.PORTS, tmp_path / "etc",
                                tmp_path / "run")
    return compose.Role(load_config(COMPOSE_CONFIG), COMPOSE_CONFIG, lay, say=lambda _m: None)


def test_rendered_files_name_the_compose_hosts(role: compose.Role) -> None:
    files = role.render()
    conf, dbd = files["slurm.conf"], files["slurmdbd.conf"]
    assert "SlurmctldHost=slurmctld\n" in conf
    assert "AccountingStorageHost=slurmdbd\n" in conf
    assert "NodeAddr" not in conf  # each node is its own host: its DNS name
    assert re.search(r"^NodeName=gpu01 CPUs=8 ", conf, re.MULTILINE)
    assert "DbdHost=slurmdbd\n" in dbd and "StorageHost=mariadb\n" in dbd
    assert f"StoragePass={role.cluster._secrets().mysql_password}\n" in dbd
    assert f"File={role.layout.dev}/nvidia[0-7]" in files["gres.conf"]


def test_dsn_points_at_the_postgres_service(role: compose.Role) -> None:
    assert re.fullmatch(r"postgresql://slurmml:[0-9a-f]+@postgres:5432/slurmml"
                        r"\?require_auth=scram-sha-256", role.dsn())
    assert dsn_warnings(role.dsn(), environ={}) == []
    # the one-host dev cluster's own form, on the same secrets
    assert role.cluster.dsn() == role.dsn().replace("@postgres:", "@127.0.0.1:")


def test_init_renders_and_installs_and_is_idempotent(role: compose.Role) -> None:
    """The init role for real, into a temporary /etc/slurm: render.py's site files, then
    `slurm-ml install --no-accounts` (job_submit.lua, hooks, the slurm-ml.conf include)."""
    role.init()
    etc = role.layout.etc
    first = {p.name: p.read_bytes() for p in etc.iterdir()}
    for name in ("slurm.conf", "gres.conf", "topology.conf", "slurmdbd.conf", "munge.key",
                 "secrets.json", "job_submit.lua", "slurm-ml.conf", "slurm-ml.env"):
        assert name in first, name
    conf = (etc / "slurm.conf").read_text()
    assert f"Include {etc / 'slurm-ml.conf'}" in conf
    shim = (etc / "job_submit.lua").read_text()
    assert f'local SOCKET_PATH = "{role.layout.submitd_socket}"' in shim
    env = (etc / "slurm-ml.env").read_text()
    assert f"SLURM_ML_REPLAY_DIR={role.layout.health}" in env
    assert f"SLURM_ML_DSN={shlex.quote(role.dsn())}" in env
    assert (etc / "munge.key").stat().st_mode & 0o777 == 0o400
    assert (etc / "slurmdbd.conf").stat().st_mode & 0o777 == 0o600
    role.init()  # a second `docker compose up`: nothing changes
    assert {p.name: p.read_bytes() for p in etc.iterdir()} == first


def test_a_node_not_in_the_config_is_refused(role: compose.Role) -> None:
    stranger = compose.Role(role.cfg, role.config_path, role.layout, node="gpu99")
    with pytest.raises(platform.DevClusterError, match="gpu99"):
        stranger.slurmd()


def test_check_says_no_when_nothing_runs(role: compose.Role) -> None:
    assert compose.check_role("init", role.cfg, role.config_path, lay=role.layout) is False
    assert compose.check_role("submitd", role.cfg, role.config_path, lay=role.layout) is False
