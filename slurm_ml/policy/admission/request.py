"""What admission decides on: one job (or het component) as submitted, already parsed.

The Lua shim sends raw ``job_desc`` fields; ``slurm_ml.submitd.wire`` turns them into a
``JobRequest`` (so the Slurm-version quirks stay at the edge), and ``submit-check``
builds the same fields from sbatch options. Policy only ever sees this type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from slurm_ml.gres import slurm_gpu_total
from slurm_ml.model import GpuRequest

#: ``--time-min=0`` reaches job_submit as INFINITE on 22.05 (Slurm reads "0" as "no
#: limit") and slurmctld then rejects it; wire maps both spellings to 0.
NO_MIN_RUNTIME = 0


@dataclass(frozen=True, slots=True)
class JobRequest:
    """One submission (or one het component / update) in slurm-ml's terms."""

    user: str
    name: str = ""
    account: str | None = None
    partitions: tuple[str, ...] = ()  # empty = the default partition
    qos: str | None = None
    gpus: tuple[GpuRequest, ...] = ()
    features: str = ""  # --constraint expression, verbatim
    min_nodes: int | None = None
    max_nodes: int | None = None
    num_tasks: int | None = None
    ntasks_per_node: int | None = None
    time_limit_min: int | None = None
    time_min_min: int | None = None  # None = not given; 0 = "no protected runtime"
    requeue: bool | None = None  # None = cluster default (JobRequeue=1)
    comment: str = ""
    array: str | None = None
    het_offset: int | None = None
    exclusive: bool | None = None
    switches: int | None = None
    job_id: int | None = None  # set for updates of an existing job
    # what decides whether a node can hold the job besides its GPUs (None = not given)
    cpus_per_task: int | None = None
    cpus_per_gpu: int | None = None
    min_cpus: int | None = None  # the whole job (sbatch: tasks x CPUs per task)
    pn_min_cpus: int | None = None  # per node (--mincpus)
    mem_per_node_mb: int | None = None  # --mem; 0 = all of each node's memory
    mem_per_cpu_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    ntasks_per_gpu: int | None = None
    #: how the GPUs per node were written, "--gres" or "--gpus-per-node" (both reach
    #: job_desc as tres_per_node); None: not known. Only advice reads it.
    gpu_option: str | None = None
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def is_gpu(self) -> bool:
        return any(g.count > 0 for g in self.gpus)

    @property
    def typed_gpus(self) -> frozenset[str]:
        return frozenset(g.gpu_type for g in self.gpus if g.gpu_type)

    def total_gpus(self) -> int | None:
        """GPUs the whole job asks for, or None when it cannot be known (per socket).

        Counted as Slurm counts them: the per-job, per-node, per-socket and per-task
        counts of one GRES (name and type) are one record, and the first of those that
        is set decides the total: ``--gpus`` (per job), else ``--gpus-per-node`` times
        the nodes, else per socket, else ``--gpus-per-task`` times the tasks
        (src/interfaces/gres_select_util.c, ``gres_select_util_job_min_tasks``, 22.05
        and 24.11; sbatch already refuses counts that disagree). So ``-N1
        --gpus-per-node=8 --gpus-per-task=1`` is 8 GPUs, not 16. Different GPU types
        are different records and add up.
        """
        return slurm_gpu_total(((g.gpu_type, g.per, g.count) for g in self.gpus),
                               nodes=self.min_nodes or 1, tasks=self.num_tasks or 1,
                               sockets_per_node=None)

_KEY = re.compile(r"(?:^|[\s,;])(?P<key>[A-Za-z_][\w]*)(?:=(?P<value>[^\s,;]*))?")


def comment_keys(comment: str) -> dict[str, str]:
    """``gpu_mem=30G allow_fragment`` → {"gpu_mem": "30G", "allow_fragment": ""}.

    Keys are matched case-insensitively; the rest of a comment is the user's own.
    """
    return {m["key"].lower(): m["value"] or "" for m in _KEY.finditer(comment or "")}


_MEM = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]?)(?:I?B)?$", re.IGNORECASE)
_TO_GB = {"": 1.0, "K": 1 / 1024**2, "M": 1 / 1024, "G": 1.0, "T": 1024.0}


class BadCommentKey(ValueError):
    """A slurm-ml key in --comment that cannot be read, e.g. ``gpu_mem=lots``."""


def gpu_mem_gb(comment: str) -> float | None:
    """The ``gpu_mem=<N>G`` need in a comment, in GB; a bare number means GB."""
    raw = comment_keys(comment).get("gpu_mem")
    if raw is None:
        return None
    m = _MEM.match(raw.strip())
    if not m or float(m["num"]) <= 0:
        raise BadCommentKey(
            f"gpu_mem={raw!r} in --comment is not a GPU memory size; write it like gpu_mem=30G"
        )
    return float(m["num"]) * _TO_GB[m["unit"].upper()]


#: ``parallel=`` values: how a multi-GPU job spreads its work, which decides whether its
#: GPUs must share NVLink
DATA, TENSOR = "data", "tensor"
PARALLEL_KINDS = (DATA, TENSOR)


def comment_value(comment: str, key: str) -> str | None:
    """The value written as ``key=value`` in a comment ("" for ``key=``), else None.

    Unlike :func:`comment_keys`, a bare word is no key here: a key named by a common
    word (``parallel``) must not turn the user's own text into a rejection.
    """
    found = None
    for m in _KEY.finditer(comment or ""):
        if m["key"].lower() == key and m["value"] is not None:
            found = m["value"]
    return found


def parallelism(comment: str) -> str | None:
    """The ``parallel=data|tensor`` key of a comment, lower-cased; None when not given.

    ``data``: each GPU holds a whole copy of the model and the GPUs exchange only
    gradients once a step, which PCIe carries, so the job may run on GPUs without NVLink.
    ``tensor``: the GPUs split the model and exchange activations within every layer,
    which needs NVLink. The researcher knows which; admission cannot see it.
    """
    raw = comment_value(comment, "parallel")
    if raw is None:
        return None
    kind = raw.strip().lower()
    if kind not in PARALLEL_KINDS:
        raise BadCommentKey(
            f"parallel={raw!r} in --comment is neither data nor tensor, so slurm-ml cannot "
            f"tell whether the job's GPUs need NVLink; write parallel=data if each GPU "
            f"holds a whole copy of the model (GPUs without NVLink may run it), "
            f"parallel=tensor if the GPUs split the model (NVLink kept), or leave the "
            f"key out")
    return kind
