"""Builders for the daemon tests: the example config, its nodes, jobs and a contended
world on the stateful fakes."""


from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from builders import slurm_node

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, parse_config
from slurm_ml.daemon.loop import Daemon
from slurm_ml.model import GpuRequest, Job, JobState, JobUsage, Node
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.store.fake import FakeStore
from slurm_ml.store.leader import FakeLeaderLock, FakeLockTable

EXAMPLE = DEFAULT_CONFIG
NOW = 1_800_000_000
HOUR = 3600


def config(**policy: dict[str, Any]) -> Config:
    data = yaml.safe_load(EXAMPLE.read_text())
    pol = data["policy"]
    # Requeue at once: the signal-and-grace path has its own tests (test_apply_signal,
    # test_requeue_checkpoint).
    pol["contracts"].update(preempt_after_wait_s=0, preempt_cap_fraction=0.5,
                            requeue_grace_s=0)
    pol["fast_lane"].update(requeue_grace_s=0)
    for section, knobs in policy.items():
        pol[section].update(knobs)
    return parse_config(copy.deepcopy(data))


CFG = config()


def nodes(cfg: Config = CFG) -> list[Node]:
    out = []
    for name in cfg.all_nodes():
        nc = cfg.node_class_of(name)
        assert nc is not None
        out.append(slurm_node(name, features=nc.features,
                              gres=f"gpu:{nc.gpu_type}:{nc.gpus_per_node}",
                              gpus=nc.gpus_per_node, gpu_type=nc.gpu_type, cpus=nc.cpus,
                              memory_mb=nc.memory_mb))
    return out


def job(job_id: int, user: str, account: str, *, gpus: int = 4, gtype: str = "v100",
        state: JobState = JobState.PENDING, qos: str = "alloc", nodes: str = "",
        start: int | None = None, requeue: bool = True, time_min: int | None = 1,
        submit: int = NOW - HOUR, site: int | None = 0, reason: str = "Resources",
        **more: Any) -> Job:
    return Job(job_id=job_id, name=f"j{job_id}", user=user, account=account, partition="gpu",
               qos=qos, state=state, reason=reason if state == JobState.PENDING else "None",
               nodes=nodes, num_nodes=1, gpus=(GpuRequest(gpus, "node", gtype),),
               time_limit_min=600, time_min_min=time_min, requeue=requeue, site_factor=site,
               priority=1000, submit_time=submit, start_time=start, **more)


def usage(job_id: int, user: str, account: str, *, gpus: int, gtype: str, start: int,
          end: int | None, qos: str = "alloc") -> JobUsage:
    return JobUsage(job_id=job_id, user=user, account=account, qos=qos,
                    state=JobState.RUNNING if end is None else JobState.COMPLETED,
                    elapsed_s=0, alloc_tres={"gres/gpu": gpus, f"gres/gpu:{gtype}": gpus},
                    start=start, end=end, submit=start)


def world() -> FakeSlurm:
    """nlp's alice holds both v100 nodes (one job resumable) and has held them for hours;
    vision's dave and nlp's alice each wait for a v100 node."""
    slurm = FakeSlurm(nodes(), batch_size=CFG.slurm.scontrol_batch_size)
    slurm.add_job(job(1, "alice", "llm-pretrain", state=JobState.RUNNING, nodes="gpu05",
                      start=NOW - 5 * HOUR, requeue=True))
    slurm.add_job(job(2, "alice", "llm-pretrain", state=JobState.RUNNING, nodes="gpu06",
                      start=NOW - 5 * HOUR, requeue=False))
    for i, name in enumerate(("gpu01", "gpu02", "gpu03", "gpu04")):
        gtype = CFG.gpu_type_of_node(name)
        assert gtype is not None
        slurm.add_job(job(10 + i, "bob", "llm-pretrain", gpus=8, gtype=gtype.name,
                          state=JobState.RUNNING, nodes=name, start=NOW - 5 * HOUR,
                          requeue=False))
    slurm.add_job(job(20, "dave", "detection", submit=NOW - 2 * HOUR))
    slurm.add_job(job(21, "alice", "llm-pretrain", submit=NOW - 2 * HOUR))
    for jid in (1, 2, *range(10, 14)):
        j = slurm.jobs[jid]
        assert j.start_time is not None
        gtype = CFG.gpu_type_of_node(j.nodes)
        assert gtype is not None
        slurm.usage.append(usage(jid, j.user, j.account, gpus=j.total_gpus, gtype=gtype.name,
                                 start=j.start_time, end=None))
    return slurm


def daemon(slurm: FakeSlurm, store: FakeStore, table: FakeLockTable | None = None, *,
           cfg: Config = CFG, dry_run: bool = False, clock: Callable[[], float] = lambda: NOW,
           config_path: Path | None = None) -> Daemon:
    lock = FakeLeaderLock(table or FakeLockTable(), CFG.daemon.lock_key)
    return Daemon(cfg, slurm=slurm, store=store, lock=lock, dry_run=dry_run, clock=clock,
                  config_path=config_path)


def mutations(slurm: FakeSlurm) -> list[tuple[str, ...]]:
    return [c for c in slurm.calls
            if c[:2] in {("scontrol", "update"), ("scontrol", "requeue")}
            or c[:1] == ("scancel",) or "update" in c]


