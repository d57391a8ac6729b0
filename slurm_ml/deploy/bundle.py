"""Render every file ``slurm-ml install`` writes, from the templates and slurm-ml.yaml (pure).

Files (all paths absolute; hooks default to the Slurm conf dir), each from a folder of
:mod:`slurm_ml.assets` (top-level in a checkout, under slurm_ml/ in a wheel):

* ``job_submit.lua``: the shim with its settings block filled (render.render_shim);
* ``slurm-ml.conf``: the slurm.conf include (conf/slurm-ml.conf.tmpl);
* ``slurm-ml.env``: what the hooks and the services read (mode 0600: it may hold the DSN);
* ``slurm-ml-prolog``, ``slurm-ml-epilog``, ``slurm-ml-healthcheck``: three copies of the
  one wrapper (prolog/slurm-ml-hook, which picks the hook by the name it is called
  under), with the env file's path filled in (HealthCheckProgram gets no SLURM_CONF to
  find it by);
* ``slurm-ml-submitd.service``, ``slurm-ml-daemon.service`` unless --no-systemd;
* ``slurm-ml.rules.yml``: Prometheus' recording and alerting rules
  (conf/prometheus/), as shipped, in the conf dir beside slurm-ml.conf or in
  --rules-dir. Prometheus' own config is the site's: the report says what to add to it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_ml.config import Config
from slurm_ml.deploy.errors import BadInput
from slurm_ml.deploy.slurmconf import settings
from slurm_ml.slurm import render

DEFAULT_SOCKET = "/run/slurm-ml/submitd.sock"
#: submitd's reply key, which the shim checks (slurm_ml/submitd/auth.py): systemd's
#: StateDirectory of the submitd unit, apart from the socket's RuntimeDirectory.
DEFAULT_KEY = "/var/lib/slurm-ml/submitd.key"
STATE_DIR = "/var/lib/slurm-ml"
INCLUDE_NAME = "slurm-ml.conf"
ENV_NAME = "slurm-ml.env"
HOOKS = {"prolog": "slurm-ml-prolog", "epilog": "slurm-ml-epilog",
         "healthcheck": "slurm-ml-healthcheck"}
#: The one wrapper script (:func:`slurm_ml.assets.asset_path` parts) that every name in
#: HOOKS is a copy of.
HOOK_SOURCE = ("prolog", "slurm-ml-hook")
UNITS = ("slurm-ml-submitd.service", "slurm-ml-daemon.service")
#: The Prometheus rules, under conf/prometheus/ and where install puts them.
RULES_NAME = "slurm-ml.rules.yml"


@dataclass(frozen=True, slots=True)
class InstallParams:
    """Where and how to install (everything not in slurm-ml.yaml)."""

    conf_dir: Path
    config_path: Path
    python: str
    systemd_dir: Path | None = Path("/etc/systemd/system")  # None: --no-systemd
    hook_dir: Path | None = None  # default: conf_dir
    rules_dir: Path | None = None  # the Prometheus rules; default: conf_dir
    submitd_socket: str = DEFAULT_SOCKET
    submitd_key: str = DEFAULT_KEY  # "": replies carry no key, the shim checks none
    dsn: str = ""
    # None: policy.reclaim.sample_interval_s (the zombie rule judges samples by it);
    # 0: HealthCheckProgram set, never run (tests run it themselves)
    health_check_interval_s: int | None = None
    prolog_epilog_timeout_s: int = 60  # above the wrappers' own limit
    hook_timeout_s: int = 50
    service_user: str = "slurm"  # SlurmUser: slurmctld must reach submitd's socket
    service_group: str = "slurm"
    extra_env: tuple[tuple[str, str], ...] = ()
    accounts: bool = True

    @property
    def hooks(self) -> Path:
        return self.hook_dir or self.conf_dir

    @property
    def rules_path(self) -> Path:
        return (self.rules_dir or self.conf_dir) / RULES_NAME

    @property
    def slurm_conf(self) -> Path:
        return self.conf_dir / "slurm.conf"

    @property
    def include_path(self) -> Path:
        return self.conf_dir / INCLUDE_NAME

    @property
    def include_line(self) -> str:
        return f"Include {self.include_path}"

    @property
    def env_path(self) -> Path:
        return self.conf_dir / ENV_NAME


@dataclass(frozen=True, slots=True)
class Sources:
    """The template texts (read by :func:`slurm_ml.deploy.state.read_sources`)."""

    include: str
    shim: str
    hook: str  # the wrapper, installed under each name in HOOKS
    units: Mapping[str, str]  # unit file name → template
    rules: str  # the Prometheus rules, installed as they are


@dataclass(frozen=True, slots=True)
class WantedFile:
    path: Path
    text: str
    mode: int


def _setting_line(name: str, text: str, value: str) -> str:
    out, n = re.subn(rf"^{name}=.*$", f"{name}={shlex.quote(value)}", text, count=1,
                     flags=re.MULTILINE)
    if n != 1:
        raise BadInput(f"hook script: settings line '{name}=...' is missing")
    return out


def include_values(cfg: Config, p: InstallParams) -> dict[str, str]:
    """Placeholders of conf/slurm-ml.conf.tmpl, list settings un-merged."""
    return {
        "include_path": str(p.include_path),
        "header": f"Installed from {p.config_path}.",
        "submitd_socket": p.submitd_socket,
        "job_submit_plugins": "lua",
        "prolog": str(p.hooks / HOOKS["prolog"]),
        "epilog": str(p.hooks / HOOKS["epilog"]),
        "prolog_flags": "Alloc",
        "prolog_epilog_timeout_s": str(p.prolog_epilog_timeout_s),
        "scheduler_parameters": f"nohold_on_prolog_fail,max_switch_wait="
                                f"{render.max_switch_wait_s(cfg)}",
        "health_check_program": str(p.hooks / HOOKS["healthcheck"]),
        "health_check_interval_s": str(cfg.policy.reclaim.sample_interval_s
                                       if p.health_check_interval_s is None
                                       else p.health_check_interval_s),
        # policy.priority_weights, checked against the SiteFactor bands by config check
        "priority_weight_fairshare": str(cfg.policy.priority_weights.fairshare),
        "priority_weight_age": str(cfg.policy.priority_weights.age),
        "priority_weight_job_size": str(cfg.policy.priority_weights.job_size),
        "priority_weight_partition": str(cfg.policy.priority_weights.partition),
        "priority_weight_qos": str(cfg.policy.priority_weights.qos),
        "accounting_tres": render.accounting_tres(cfg),
        "billing_weights": f'TRESBillingWeights="{render.billing_weights(cfg)}"',
    }


_PLACEHOLDER_OF = {"jobsubmitplugins": "job_submit_plugins", "prologflags": "prolog_flags",
                   "schedulerparameters": "scheduler_parameters",
                   "accountingstoragetres": "accounting_tres"}


def own_settings(cfg: Config, p: InstallParams, src: Sources) -> list[tuple[str, str]]:
    """The settings slurm-ml.conf makes, read back from the rendered template itself
    (the template is the one list of them)."""
    text = render.fill(src.include, include_values(cfg, p), name="slurm-ml.conf.tmpl")
    return [(s.key, s.value) for s in settings(text, INCLUDE_NAME)]


def render_include(cfg: Config, p: InstallParams, src: Sources,
                   merged: Sequence[tuple[str, str]]) -> str:
    """slurm-ml.conf with list settings merged with the admin's (slurmconf.resolve)."""
    values = include_values(cfg, p)
    for key, value in merged:
        name = _PLACEHOLDER_OF.get(key.casefold())
        if name:
            values[name] = value
    return render.fill(src.include, values, name="slurm-ml.conf.tmpl")


def env_text(p: InstallParams) -> str:
    values = {
        "SLURM_CONF": str(p.slurm_conf),
        "SLURM_ML_PYTHON": p.python,
        "SLURM_ML_CONFIG": str(p.config_path),
        "SLURM_ML_SUBMITD_SOCKET": p.submitd_socket,
        "SLURM_ML_HOOK_TIMEOUT": str(p.hook_timeout_s),
    }
    if p.submitd_key:  # a submitd started by hand from this file answers with the key
        values["SLURM_ML_SUBMITD_KEY_FILE"] = p.submitd_key
    if p.dsn:
        values["SLURM_ML_DSN"] = p.dsn
    values.update(dict(p.extra_env))
    body = "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())
    return ("# slurm-ml settings read by its Slurm hooks (Prolog, Epilog, HealthCheckProgram)\n"
            "# and systemd units. Written by `slurm-ml install`; shell and systemd\n"
            "# EnvironmentFile syntax.\n" + body)


def parse_env_text(text: str, source: str = "<env file>") -> dict[str, str]:
    """The variables of an env file as :func:`env_text` writes it (``VAR=value`` lines,
    values shell-quoted, ``#`` comments), so that a process can be started with the
    file's settings in its environment rather than on its command line."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, eq, value = line.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise BadInput(f"{source}:{n}: not a VAR=value line: {raw!r}")
        try:
            words = shlex.split(value, comments=True)
        except ValueError as exc:
            raise BadInput(f"{source}:{n}: {exc}: {raw!r}") from exc
        if len(words) > 1:
            raise BadInput(f"{source}:{n}: a value of several words must be quoted: {raw!r}")
        out[name] = words[0] if words else ""
    return out


#: The units' RuntimeDirectory (both share it): a socket elsewhere needs ReadWritePaths.
RUN_DIR = "/run/slurm-ml"


def _socket_lines(socket: str, in_run_dir: str) -> str:
    """``in_run_dir`` for a socket in ``RUN_DIR``, else its directory made writable."""
    socket_dir = str(Path(socket).parent)
    return in_run_dir if socket_dir == RUN_DIR else f"ReadWritePaths={socket_dir}"


def unit_values(cfg: Config, p: InstallParams) -> dict[str, str]:
    return {
        "service_user": p.service_user,
        "service_group": p.service_group,
        "env_file": str(p.env_path),
        "python": p.python,
        "config": str(p.config_path),
        "submitd_socket": p.submitd_socket,
        "submitd_rw_line": _socket_lines(
            p.submitd_socket, "# Nothing else is writable: the socket is in RuntimeDirectory."),
        "submitd_key_args": f" --key-file {p.submitd_key}" if p.submitd_key else "",
        "submitd_key_lines": _key_lines(p.submitd_key),
        "spool_dir": str(cfg.store.spool_dir),
        "wake_rw_lines": _wake_rw_lines(cfg.daemon.wake_socket),
    }


def _key_lines(key: str) -> str:
    """The submitd unit's lines for its reply key: /var/lib/slurm-ml as StateDirectory
    (submitd makes the key there on its first start), or the key's own directory made
    writable."""
    if not key:
        return "# No reply key: the shim applies any answer on the socket."
    if str(Path(key).parent) == STATE_DIR:
        return ("# The reply key the shim checks; submitd makes it on its first start.\n"
                "StateDirectory=slurm-ml\nStateDirectoryMode=0750")
    return f"ReadWritePaths={Path(key).parent}"


def _wake_rw_lines(wake_socket: str) -> str:
    """The daemon unit's lines for its wake socket (``daemon.wake_socket``): the shared
    /run/slurm-ml, kept across restarts (submitd's socket is there too), or the
    socket's own directory made writable."""
    if not wake_socket:
        return "# No wake socket (daemon.wake_socket is empty)."
    return _socket_lines(wake_socket,
                         "# /run/slurm-ml, shared with submitd: the wake socket submitd sends "
                         "to.\nRuntimeDirectory=slurm-ml\nRuntimeDirectoryMode=0750\n"
                         "RuntimeDirectoryPreserve=yes")


def render_files(cfg: Config, p: InstallParams, src: Sources,
                 merged: Sequence[tuple[str, str]]) -> list[WantedFile]:
    """Every file install writes, in the order it writes them."""
    env = str(p.env_path)
    files = [
        WantedFile(p.conf_dir / "job_submit.lua",
                   render.render_shim(src.shim, cfg, p.submitd_socket, p.submitd_key),
                   0o644),
        WantedFile(p.env_path, env_text(p), 0o600),
        *(WantedFile(p.hooks / HOOKS[hook],
                     _setting_line("INSTALLED_ENV_FILE", src.hook, env), 0o755)
          for hook in ("prolog", "epilog", "healthcheck")),
        WantedFile(p.include_path, render_include(cfg, p, src, merged), 0o644),
        WantedFile(p.rules_path, src.rules, 0o644),
    ]
    if p.systemd_dir is not None:
        values = unit_values(cfg, p)
        for name in UNITS:
            text = render.fill(src.units[name], values, name=f"{name}.tmpl")
            files.append(WantedFile(p.systemd_dir / name, text, 0o644))
    return files
