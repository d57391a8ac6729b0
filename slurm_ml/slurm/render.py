"""Render the site's slurm.conf, gres.conf, topology.conf and slurmdbd.conf from templates.

The templates are the dev and compose cluster's (``devcluster/templates/`` of the
checkout, or ``$SLURM_ML_CONF_DIR``); this module only fills their ``${placeholders}``.
The few generated blocks (node, partition, GRES and switch lines) are derived from
slurm-ml.yaml so that the cluster and the policy can never disagree about GPU types or
topology.

These are the *site* files (cluster, ports, paths, nodes, partitions). Everything
slurm-ml itself adds to Slurm (the job_submit shim, hooks, the ``slurm-ml.conf``
include, billing weights) is written by ``slurm-ml install`` (``slurm_ml.deploy``),
which reuses :func:`fill`, :func:`render_shim` and the helpers below.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ClusterShell.NodeSet import NodeSet

from slurm_ml import assets
from slurm_ml.config import Config

TEMPLATES = ("slurm.conf", "gres.conf", "topology.conf", "slurmdbd.conf")

# Slurm stores the billing TRES as an integer, so a weight of 0.8 on one GPU
# would bill 0. Weights are scaled: billing = BILLING_SCALE x weighted GPUs.
BILLING_SCALE = 100


class TemplateError(Exception):
    """A template is missing or names a placeholder we do not provide."""


@dataclass(frozen=True, slots=True)
class SiteParams:
    """Where and how this cluster runs: everything not in slurm-ml.yaml."""

    controller_host: str
    state_dir: str
    run_dir: str
    log_dir: str
    gpu_dev_dir: str
    auth_info: str = ""
    slurm_user: str = "slurm"
    slurmctld_port: int = 6817
    slurmd_port: int = 6818
    slurmdbd_port: int = 6819
    dbd_host: str = "localhost"
    node_addr: str = ""  # non-empty: every node runs on this host (multiple-slurmd)
    node_port_base: int = 0  # non-zero: node i listens on node_port_base + i
    mysql_host: str = "127.0.0.1"  # slurmdbd's MariaDB (another host under compose)
    mysql_port: int = 3306
    mysql_user: str = "slurm"
    mysql_password: str = ""
    mysql_db: str = "slurm_acct_db"
    first_job_id: int = 0  # non-zero: FirstJobId (two dev clusters on one host never share ids)
    scheduler_extra: str = ""  # the site's SchedulerParameters, e.g. "bf_interval=5"
    site_lines: str = ""  # the site's own node/partition lines slurm-ml does not manage
    site_switch_lines: str = ""  # topology.conf lines for those nodes (topology/tree needs them)
    header: str = "Do not edit by hand: re-render instead."


def conf_dir() -> Path:
    """The directory holding the site templates: ``$SLURM_ML_CONF_DIR``, else the
    checkout's ``devcluster/templates`` (:mod:`slurm_ml.assets`)."""
    try:
        return assets.conf_dir()
    except assets.AssetNotFound as exc:
        raise TemplateError(str(exc)) from exc


def shim_source() -> Path:
    """The job_submit.lua shim shipped with slurm-ml (``job_submit/``)."""
    try:
        return assets.asset_path("job_submit", "job_submit.lua")
    except assets.AssetNotFound as exc:
        raise TemplateError(str(exc)) from exc


_SHIM_SETTINGS = ("SOCKET_PATH", "AUTH_KEY_PATH", "TIMEOUT_MS", "BREAKER_FAILURES",
                  "BREAKER_COOLDOWN_S")


def _lua_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_shim(text: str, cfg: Config, submitd_socket: str, key_file: str = "") -> str:
    """The shim with its settings block filled from slurm-ml.yaml, submitd's socket and
    the reply key it checks (empty: none)."""
    adm = cfg.policy.admission
    values = {
        "SOCKET_PATH": _lua_string(submitd_socket),
        "AUTH_KEY_PATH": _lua_string(key_file),
        "TIMEOUT_MS": str(adm.socket_timeout_ms),
        "BREAKER_FAILURES": str(adm.breaker_failures),
        "BREAKER_COOLDOWN_S": f"{adm.breaker_cooldown_s:g}",
    }
    for name in _SHIM_SETTINGS:
        line = f"local {name} = {values[name]}".replace("\\", "\\\\")  # literal for re
        text, n = re.subn(rf"^local {name} = .*$", line, text, count=1, flags=re.MULTILINE)
        if n != 1:
            raise TemplateError(f"job_submit.lua: settings line 'local {name} = ...' is missing")
    return text


def max_switch_wait_s(cfg: Config) -> int:
    """SchedulerParameters=max_switch_wait: caps every job's --switches wait (default 300)."""
    return max(300, int(cfg.policy.admission.leaf_switch_wait_min * 60))


def accounting_tres(cfg: Config) -> str:
    """AccountingStorageTRES: GPUs in total and per type (budgets are per GPU type)."""
    return ",".join(["gres/gpu", *(f"gres/gpu:{name}" for name in sorted(cfg.gpu_types))])


def billing_weights(cfg: Config) -> str:
    """TRESBillingWeights: only GPUs are billed, each type by its weight (x BILLING_SCALE)."""
    parts = ["CPU=0", "Mem=0"]
    parts += [f"GRES/gpu:{n}={t.billing_weight * BILLING_SCALE:g}"
              for n, t in sorted(cfg.gpu_types.items())]
    return ",".join(parts)


def node_lines(cfg: Config, site: SiteParams) -> str:
    lines: list[str] = []
    index = 0
    for nc in cfg.node_classes:
        for node in NodeSet(nc.nodes):
            fields = [f"NodeName={node}"]
            if site.node_addr:
                fields += [f"NodeHostname={site.controller_host}", f"NodeAddr={site.node_addr}"]
            if site.node_port_base:
                fields.append(f"Port={site.node_port_base + index}")
            fields += [
                f"CPUs={nc.cpus}",
                f"RealMemory={nc.memory_mb}",
                f"Gres=gpu:{nc.gpu_type}:{nc.gpus_per_node}",
                f"Features={','.join(nc.features)}",
                "State=UNKNOWN",
            ]
            lines.append(" ".join(fields))
            index += 1
    return "\n".join(lines)


def partition_lines(cfg: Config) -> str:
    """One line per partition; ``slurm-ml install`` adds their TRESBillingWeights."""
    lines = []
    for p in cfg.cluster.partitions:
        lines.append(
            f"PartitionName={p.name} Nodes={p.nodes} Default={'YES' if p.default else 'NO'} "
            f"MaxTime={p.max_time_min} State=UP OverSubscribe=NO"
        )
    return "\n".join(lines)


def gres_lines(cfg: Config, site: SiteParams) -> str:
    lines = []
    for nc in cfg.node_classes:
        last = nc.gpus_per_node - 1
        files = f"{site.gpu_dev_dir}/nvidia[0-{last}]" if last else f"{site.gpu_dev_dir}/nvidia0"
        lines.append(f"NodeName={nc.nodes} Name=gpu Type={nc.gpu_type} File={files}")
    return "\n".join(lines)


def switch_lines(cfg: Config) -> str:
    leaves: dict[str, NodeSet] = {}
    for nc in cfg.node_classes:
        leaves.setdefault(nc.leaf_switch, NodeSet()).update(NodeSet(nc.nodes))
    lines = [f"SwitchName={leaf} Nodes={nodes}" for leaf, nodes in leaves.items()]
    lines.append(f"SwitchName=spine Switches={','.join(leaves)}")
    return "\n".join(lines)


def _values(cfg: Config, site: SiteParams) -> dict[str, str]:
    values = {k: str(v) for k, v in asdict(site).items()}
    values.update(
        cluster_name=cfg.cluster.name,
        accounting_tres=accounting_tres(cfg),
        node_lines=node_lines(cfg, site),
        partition_lines=partition_lines(cfg),
        gres_lines=gres_lines(cfg, site),
        switch_lines=switch_lines(cfg),
        scheduler_line=(
            f"SchedulerParameters={site.scheduler_extra}"
            if site.scheduler_extra
            else "#SchedulerParameters= (slurm-ml install adds its own)"
        ),
        first_job_id_line=(
            f"FirstJobId={site.first_job_id}" if site.first_job_id
            else "#FirstJobId= (Slurm's default, 1)"
        ),
    )
    return values


def fill(template: str, values: Mapping[str, str], *, name: str = "<template>") -> str:
    """Fill ``${placeholders}``; an unknown or malformed one is a TemplateError."""
    try:
        return string.Template(template).substitute(values)
    except (KeyError, ValueError) as exc:
        raise TemplateError(f"{name}: unknown or malformed placeholder {exc}") from exc


def read_template(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read template: {exc.strerror}") from exc


def render_text(template: str, cfg: Config, site: SiteParams, *, name: str = "<template>") -> str:
    """Fill one site template's placeholders; an unknown placeholder is a TemplateError."""
    return fill(template, _values(cfg, site), name=name)


def render_all(cfg: Config, site: SiteParams, templates: Path | None = None) -> dict[str, str]:
    """Render every template in ``templates`` (default :func:`conf_dir`) → {file name: text}."""
    base = templates or conf_dir()
    out: dict[str, str] = {}
    for name in TEMPLATES:
        path = base / f"{name}.tmpl"
        out[name] = render_text(read_template(path), cfg, site, name=str(path))
    return out
