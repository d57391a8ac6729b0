"""A real runaway job in the running dev cluster, for integration tests.

A runaway job is a record slurmdbd holds as running (no end time) for a job slurmctld does
not know, e.g. after a controller crash lost the job's end. Nothing a test can do through
Slurm's own commands produces one without killing slurmctld, so the *injection is
synthetic setup*: :func:`inject_runaway` copies the row of a finished job in the cluster's
MariaDB job table (``<ClusterName>_job_table``) with ``INSERT ... SELECT`` over every
column but the auto-increment key, giving the copy a job id slurmctld never hands out
(above MaxJobId), state JOB_RUNNING, a start in the recent past and no end. slurmctld is
not restarted and no daemon is touched.

*Detection and the fix are real*: ``sacctmgr show runawayjobs`` compares slurmdbd's
running records with slurmctld's job list, and ``sacctmgr -i show runawayjobs`` makes
slurmdbd end the record (state COMPLETED, end = the latest of start, eligible and submit
time) and re-roll usage. Tests see the effect through sacct.

The database is reached with the accounting storage credentials of the ``slurmdbd.conf``
next to ``$SLURM_CONF`` (StorageHost/Port/User/Pass/Loc), with the ``mariadb`` client.
:func:`runaway_job` deletes the row it made on exit, fixed or not.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from slurm_ml import proc
from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.protocol import SubmitRequest
from slurm_ml.slurm.runner import SlurmRunner

__all__ = ["AcctDb", "RunawayJob", "inject_runaway", "remove_runaway", "runaway_job"]

#: slurm.h ``enum job_states``: JOB_PENDING 0, JOB_RUNNING 1, JOB_SUSPENDED 2, JOB_COMPLETE 3.
JOB_RUNNING = 1
JOB_COMPLETE = 3
#: Columns the copy sets itself; every other column is copied from the finished job.
_SET = ("job_db_inx", "id_job", "state", "time_submit", "time_eligible", "time_start",
        "time_end", "mod_time")


@dataclass(frozen=True)
class AcctDb:
    """slurmdbd's MariaDB as its slurmdbd.conf names it, and the cluster's job table."""

    host: str
    port: int
    user: str
    password: str
    database: str
    cluster: str

    @classmethod
    def of(cls, slurm_conf: str | Path) -> AcctDb:
        conf = _keyvalues((Path(slurm_conf).parent / "slurmdbd.conf").read_text())
        cluster = _slurm_config(slurm_conf)["ClusterName"]
        if not re.fullmatch(r"[A-Za-z0-9_]+", cluster):
            raise ValueError(f"unexpected ClusterName {cluster!r}")
        return cls(host=conf.get("StorageHost", "localhost"),
                   port=int(conf.get("StoragePort", "3306")), user=conf["StorageUser"],
                   password=conf.get("StoragePass", ""),
                   database=conf.get("StorageLoc", "slurm_acct_db"), cluster=cluster)

    @property
    def job_table(self) -> str:
        return f"`{self.cluster}_job_table`"

    def query(self, sql: str) -> list[list[str]]:
        """Rows of tab-separated output (``mariadb -N -B``); the password goes by env."""
        out = proc.run(
            ["mariadb", "--no-defaults", "-h", self.host, "-P", str(self.port), "-u", self.user,
             "-D", self.database, "-N", "-B", "-e", sql],
            env={"MYSQL_PWD": self.password}, timeout_s=60).stdout
        return [line.split("\t") for line in out.splitlines() if line]


@dataclass(frozen=True)
class RunawayJob:
    job_id: int
    db_inx: int  # the copy's job_db_inx: what cleanup deletes
    start: int  # time_start of the copy (epoch seconds)
    template: int  # the finished job it was copied from
    db: AcctDb


def inject_runaway(slurm_conf: str | Path, *, started_ago_s: int = 600,
                   user: str = "alice") -> RunawayJob:
    """Copy a finished job's row into a running record slurmctld does not know (see the
    module doc). Without any finished job in the database, runs a short one as ``user``."""
    db = AcctDb.of(slurm_conf)
    template = _finished_job(db) or _run_one(slurm_conf, db, user)
    job_id = _unused_job_id(db, slurm_conf)
    now = int(time.time())
    start = now - started_ago_s
    cols = [r[0] for r in db.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() "
        f"AND table_name = '{db.cluster}_job_table' ORDER BY ordinal_position")]
    copied = ", ".join(f"`{c}`" for c in cols if c not in _SET)
    [[inx]] = db.query(
        f"INSERT INTO {db.job_table} ({copied}, id_job, state, time_submit, time_eligible, "
        f"time_start, time_end, mod_time) SELECT {copied}, {job_id}, {JOB_RUNNING}, "
        f"{start - 60}, {start - 60}, {start}, 0, {now} FROM {db.job_table} "
        f"WHERE job_db_inx = {template}; SELECT LAST_INSERT_ID()")
    return RunawayJob(job_id=job_id, db_inx=int(inx), start=start, template=template, db=db)


def remove_runaway(job: RunawayJob) -> int:
    """Delete the injected row (fixed or not); how many rows went (0 or 1)."""
    [[n]] = job.db.query(f"DELETE FROM {job.db.job_table} WHERE job_db_inx = {job.db_inx} "
                         f"AND id_job = {job.job_id}; SELECT ROW_COUNT()")
    return int(n)


@contextmanager
def runaway_job(slurm_conf: str | Path, *, started_ago_s: int = 600,
                user: str = "alice") -> Iterator[RunawayJob]:
    """:func:`inject_runaway`, and its row deleted afterwards whatever happened."""
    job = inject_runaway(slurm_conf, started_ago_s=started_ago_s, user=user)
    try:
        yield job
    finally:
        remove_runaway(job)


def _finished_job(db: AcctDb) -> int | None:
    rows = db.query(f"SELECT job_db_inx FROM {db.job_table} WHERE deleted = 0 "
                    f"AND state = {JOB_COMPLETE} AND time_start > 0 AND time_end >= time_start "
                    "ORDER BY job_db_inx DESC LIMIT 1")
    return int(rows[0][0]) if rows else None


def _run_one(slurm_conf: str | Path, db: AcctDb, user: str) -> int:
    slurm = CliSlurm(SlurmRunner(env={"SLURM_CONF": str(slurm_conf)}, timeout_s=60))
    slurm.submit(SubmitRequest(user=user, name="runaway-template", command="true",
                               time_limit="1"))
    deadline = time.monotonic() + 120
    while (inx := _finished_job(db)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError("no finished job reached the accounting database in 120 s")
        time.sleep(1)
    return inx


def _unused_job_id(db: AcctDb, slurm_conf: str | Path) -> int:
    """Above MaxJobId, where slurmctld never assigns, and above every earlier copy."""
    max_id = int(_slurm_config(slurm_conf).get("MaxJobId", "67043328"))
    [[top]] = db.query(f"SELECT COALESCE(MAX(id_job), 0) FROM {db.job_table} "
                       f"WHERE id_job > {max_id}")
    return max(max_id, int(top)) + 1


def _slurm_config(slurm_conf: str | Path) -> dict[str, str]:
    run = SlurmRunner(env={"SLURM_CONF": str(slurm_conf)})
    return _keyvalues(run(["scontrol", "show", "config"]))


def _keyvalues(text: str) -> dict[str, str]:
    """``Key=value`` (slurmdbd.conf) and ``Key = value`` (scontrol show config) lines."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.lstrip().startswith("#"):
            out[key.strip()] = value.strip()
    return out
