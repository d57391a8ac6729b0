"""Every ``SLURM_ML_*`` environment variable slurm-ml reads, in one table, and :func:`env`,
the one function Python code reads them through.

The hook wrapper (``prolog/slurm-ml-hook``) is bash and reads its own variables
itself; they are declared here all the same, so that this table is the whole list.
``docs/admin.md`` lists them from :data:`VARS` (its section "Environment variables" is
:func:`markdown`, and a unit test keeps the two equal).

Variables that only tests set or read are not settings and are not here: a test hands
what it needs to the code it drives (a constructor argument, a hook), never through a
variable the product reads.

A leaf: stdlib only, importable from every layer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["VARS", "EnvVar", "UndeclaredEnvVar", "declared", "env", "markdown"]


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One variable: its name, what it sets, and what applies when it is unset."""

    name: str
    meaning: str
    default: str


#: The variables, most used first. Unset and blank are the same: the default applies.
VARS: tuple[EnvVar, ...] = (
    EnvVar("SLURM_ML_CONFIG",
           "slurm-ml.yaml when `--config` is not given, for the Slurm hooks (`health "
           "prolog`, `epilog`, `periodic`), `quarantine`, `daemon`, `budget status`, "
           "`why`, `sim`, `submitd`, `submit-check`, `db migrate` (for `store.dsn`) and "
           "`devcluster container`; `slurm-ml install` writes it into slurm-ml.env "
           "(root-only: set it for researchers too, for example in `/etc/profile.d`, so "
           "that `submit-check` checks against the site's config; without it, it says it "
           "uses the packaged one). `health check` and the other `devcluster` commands "
           "take only `--config`",
           "`conf/slurm-ml.yaml` shipped in the package (the dev cluster's)"),
    EnvVar("SLURM_ML_DSN",
           "PostgreSQL DSN of slurm-ml's store, for submitd, the daemon, the hooks, "
           "`db migrate`, `budget status` and `install`; put it here or in slurm-ml.env, "
           "never on a command line, where `ps` shows it",
           "`store.dsn`; with neither, submitd and the hooks run without a database (the "
           "hooks spool) and the daemon refuses to start"),
    EnvVar("SLURM_ML_SUBMITD_SOCKET",
           "Unix socket `submitd` listens on and `submitd-ctl` asks (`--socket` wins); "
           "install writes it into slurm-ml.env",
           "`/run/slurm-ml/submitd.sock`"),
    EnvVar("SLURM_ML_SUBMITD_KEY_FILE",
           "the reply key `submitd` puts in every answer and the job_submit shim checks "
           "(`--key-file` wins; made there if absent, mode 0640); install sets it in the "
           "submitd unit and the shim",
           "none: replies carry no key (a shim that has a key path drops them)"),
    EnvVar("SLURM_ML_SPOOL_DIR",
           "where the hooks spool their writes while PostgreSQL is unreachable",
           "`store.spool_dir`"),
    EnvVar("SLURM_ML_STATE_DIR",
           "where the prolog keeps each job's GPU baseline for its epilog",
           "`/run/slurm-ml`"),
    EnvVar("SLURM_ML_SHM_DIR",
           "the directory the epilog checks for a job's leftover shared memory; `%n` "
           "becomes the node name",
           "`/dev/shm`"),
    EnvVar("SLURM_ML_ENV_FILE",
           "hook wrapper: the env file (shell `VAR=value` lines) read first",
           "the file install wrote (its path is filled into the wrapper), else "
           "`slurm-ml.env` next to `$SLURM_CONF`, else `/etc/slurm-ml/slurm-ml.env`"),
    EnvVar("SLURM_ML_PYTHON",
           "hook wrapper: the python with slurm-ml installed; install writes it into "
           "slurm-ml.env",
           "the checkout's `.venv/bin/python`, else `python3`"),
    EnvVar("SLURM_ML_HOOK_TIMEOUT",
           "hook wrapper: seconds after which the prolog or epilog is killed (keep "
           "PrologEpilogTimeout above it)",
           "`50`"),
    EnvVar("SLURM_ML_HEALTHCHECK_TIMEOUT",
           "hook wrapper: the same limit for HealthCheckProgram (slurmd kills it at 60 s)",
           "`50`"),
    EnvVar("SLURM_ML_HOOK_LOG",
           "hook wrapper: a file the hooks append their output to",
           "syslog (tag `slurm-ml-<hook>`) when there is one, else stderr"),
    EnvVar("SLURM_ML_CONF_DIR",
           "the directory of the dev cluster's slurm.conf, gres.conf, topology.conf and "
           "slurmdbd.conf templates (the compose image sets it)",
           "`devcluster/templates/` of the checkout"),
    EnvVar("SLURM_ML_DATA_DIR",
           "the traces `slurm-ml sim` replays (same layout as the shipped ones)",
           "the traces shipped in the package (`slurm_ml/data/`)"),
    EnvVar("SLURM_ML_DEVCLUSTER",
           "dev cluster: its state directory (`devcluster env` exports it)",
           "`.devcluster/` in the current directory"),
    EnvVar("SLURM_ML_GPU_DATA",
           "dev and compose cluster: the real GPU captures the nodes replay",
           "the checkout's `data/gpu/` (compose: `/srv/slurm-ml/gpu-data`)"),
    EnvVar("SLURM_ML_REPLAY_DIR",
           "dev cluster: the hooks replay the GPU captures in `<dir>/<node>/` instead of "
           "asking NVML",
           "unset: NVML"),
    EnvVar("SLURM_ML_FAKE_GPU_DIR",
           "dev cluster: the fake GPU device files whose holders count as GPU processes",
           "unset: the processes the GPU probe reports"),
)

_BY_NAME = {var.name: var for var in VARS}


class UndeclaredEnvVar(LookupError):
    """A name that is not in :data:`VARS`: declare it there (and in docs/admin.md)."""


def declared(name: str) -> EnvVar:
    """The declaration of ``name``; :class:`UndeclaredEnvVar` if there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UndeclaredEnvVar(f"{name} is not declared in slurm_ml.envvars.VARS") from None


def env(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the declared variable ``name`` in ``environ`` (default: this process's
    environment), without surrounding white space; None when it is unset or blank.
    :class:`UndeclaredEnvVar` for a name not in :data:`VARS`."""
    declared(name)
    value = (os.environ if environ is None else environ).get(name, "").strip()
    return value or None


def markdown() -> str:
    """The table docs/admin.md shows, one row per variable."""
    rows = ["| variable | what it sets | unset |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.meaning} | {v.default} |" for v in VARS]
    return "\n".join(rows) + "\n"
