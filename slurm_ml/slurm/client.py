"""CliSlurm: the real Slurm boundary, through the Slurm command-line tools.

pyslurm cannot be installed for the Slurm versions we run (docs/design.md), so
every call is a CLI through :class:`SlurmRunner`: JSON where the version has
it, ``scontrol -o`` one-liners otherwise.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from slurm_ml.config.schema import signal_name
from slurm_ml.model import Job, JobAccounting, JobState, JobUsage, Node
from slurm_ml.slurm import parse
from slurm_ml.slurm.accounting import ACCOUNTING_FIELDS, parse_accounting
from slurm_ml.slurm.accounts import parse_default_accounts
from slurm_ml.slurm.batching import site_factor_scripts
from slurm_ml.slurm.errors import SlurmCommandError, SlurmParseError
from slurm_ml.slurm.priority import SPRIO_FORMAT, PriorityParts, parse_sprio, pick_parts
from slurm_ml.slurm.protocol import ArrayRequest, JobSignal, SubmitRequest
from slurm_ml.slurm.runner import SlurmRunner
from slurm_ml.slurm.version import SlurmVersion

log = logging.getLogger(__name__)

# Messages scontrol prints for a job that ended between our read and our write:
# not an error for a batch update, the job simply no longer needs a value.
_GONE = ("Invalid job id", "Job has already finished", "already completing or completed")
# What sprio says for a job it has no row for (22.05 prints the first on stdout, exit 0).
_NOT_LISTED = ("Unable to find jobs", "Invalid job id")


#: What list_jobs runs (real-capture replays answer it).
LIST_JOBS_ARGV = ("squeue", "--json", "--states=all")

class CliSlurm:
    """Talks to slurmctld and slurmdbd through squeue/scontrol/sacct/sacctmgr/sprio."""

    def __init__(self, run: SlurmRunner | None = None, *, batch_size: int = 100) -> None:
        self.run = run or SlurmRunner()
        self.batch_size = batch_size
        self._version: SlurmVersion | None = None

    def version(self) -> SlurmVersion:
        if self._version is None:
            self._version = SlurmVersion.parse(self.run(["sinfo", "--version"]))
        return self._version

    # -------------------------------------------------------------- jobs
    def submit(self, req: SubmitRequest) -> int:
        argv = ["sbatch", "--parsable", f"--job-name={req.name}", f"--nodes={req.nodes}"]
        opts = {
            "--account": req.account, "--partition": req.partition, "--qos": req.qos,
            "--gres": req.gres, "--gpus": req.gpus, "--time": req.time_limit,
            "--time-min": req.time_min, "--constraint": req.constraint,
            "--comment": req.comment, "--chdir": req.workdir,
            "--ntasks": str(req.ntasks) if req.ntasks else None,
        }
        argv += [f"{k}={v}" for k, v in opts.items() if v is not None]
        if req.requeue is not None:
            argv.append("--requeue" if req.requeue else "--no-requeue")
        if req.hold:
            argv.append("--hold")
        argv += ["--output=/dev/null", "--wrap", req.command]
        if req.user != "root":
            argv = ["runuser", "-u", req.user, "--", *argv]
        out = self.run(argv).strip()
        try:
            return int(out.split(";")[0])
        except ValueError as exc:
            raise SlurmParseError(f"sbatch --parsable printed {out!r}") from exc

    def submit_array(self, req: ArrayRequest) -> int:
        """``sbatch --array=LIST --wrap COMMAND`` as the calling user."""
        if not req.indices:
            raise ValueError("a job array needs at least one index")
        argv = ["sbatch", "--parsable", f"--array={array_spec(req.indices)}",
                f"--job-name={req.name}", f"--output={req.output}"]
        opts = {"--partition": req.partition, "--account": req.account,
                "--time": req.time_limit, "--chdir": req.workdir}
        argv += [f"{k}={v}" for k, v in opts.items() if v is not None]
        out = self.run([*argv, "--wrap", req.command]).strip()
        try:
            return int(out.split(";")[0])
        except ValueError as exc:
            raise SlurmParseError(f"sbatch --parsable printed {out!r}") from exc

    def array_tasks(self, job_id: int) -> dict[int, str]:
        """``squeue -r -j ID -t all``: every task still in slurmctld's memory, pending ones
        one per line; {} once the array is purged (squeue: invalid job id)."""
        try:
            out = self.run(["squeue", "-h", "-r", "-t", "all", f"--jobs={job_id}",
                            "-o", "%i|%T"])
        except SlurmCommandError as exc:
            if "Invalid job id" in exc.stderr:
                return {}
            raise
        return parse_array_tasks(out, job_id)

    def list_jobs(
        self,
        *,
        states: Collection[JobState] | None = None,
        job_ids: Collection[int] | None = None,
        users: Collection[str] | None = None,
    ) -> list[Job]:
        """Jobs slurmctld knows, filtered here (22.05's squeue --json ignores filters).

        ``--states=all``: 24.11's squeue --json applies squeue's default state filter and
        leaves out jobs that ended but are still within MinJobAge, which the daemon must
        see (a job its checkpoint signal killed is requeued from FAILED); 22.05 ignores
        the flag with --json and lists them anyway."""
        jobs = parse.parse_squeue_json(self.run(list(LIST_JOBS_ARGV)))
        jobs = self._fill_site_factor(jobs)
        if states is not None:
            jobs = [j for j in jobs if j.state in states]
        if job_ids is not None:
            wanted = set(job_ids)
            jobs = [j for j in jobs if j.job_id in wanted]
        if users is not None:
            jobs = [j for j in jobs if j.user in users]
        return jobs

    def _fill_site_factor(self, jobs: list[Job]) -> list[Job]:
        """squeue JSON lacks site_factor (22.05 and 24.11) and 22.05's lacks nice: take both
        from sprio for the pending jobs it lists."""
        if all(j.site_factor is not None or j.state != JobState.PENDING for j in jobs):
            return jobs
        prio = parse.parse_sprio_site_nice(self.run(["sprio", "-h", "-o", "%i %S %N"]))
        out = []
        for j in jobs:
            got = prio.get(j.job_id)
            out.append(j if got is None else replace(j, site_factor=got[0], nice=got[1]))
        return out

    def site_factors(self) -> dict[int, int]:
        """SiteFactor of every pending job, as ``sprio`` shows it."""
        return parse.parse_sprio_site(self.run(["sprio", "-h", "-o", "%i %S"]))

    def priority_parts(self, job_id: int) -> PriorityParts | None:
        """``sprio --jobs=ID -o SPRIO_FORMAT``: the job's row (its best partition's)."""
        try:
            out = self.run(["sprio", f"--jobs={job_id}", "-o", SPRIO_FORMAT])
        except SlurmCommandError as exc:
            if any(m in exc.stderr for m in _NOT_LISTED):
                return None
            raise
        return pick_parts(parse_sprio(out), job_id)

    def set_site_factor(self, factors: Mapping[int, int]) -> int:
        """Set SiteFactor for many jobs; returns how many scontrol processes it took.

        Jobs sharing a value go in one ``update JobId=a,b,c SiteFactor=N`` line,
        and up to ``batch_size`` jobs' lines are fed to one scontrol on stdin.
        """
        scripts = site_factor_scripts(factors, self.batch_size)
        for lines in scripts:
            self._scontrol_script(lines)
        return len(scripts)

    def _scontrol_script(self, lines: list[str]) -> None:
        argv = ["scontrol"]
        try:
            self.run(argv, input_text="\n".join([*lines, "quit", ""]))
        except SlurmCommandError as exc:
            real = [ln for ln in exc.stderr.splitlines() if not any(g in ln for g in _GONE)]
            if real:
                raise
            log.info("site_factor_update skipped_ended_jobs=%d", len(exc.stderr.splitlines()))

    def requeue(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self.run(["scontrol", "requeue", ",".join(map(str, job_ids))])

    def cancel(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self.run(["scancel", *map(str, job_ids)])

    def signal_job(self, job_id: int, signal: str, *, target: str = "batch") -> None:
        """``scancel --signal=SIG [--batch|--full] ID``; exit 1 for an unknown or ended job."""
        flag = {"batch": ["--batch"], "full": ["--full"], "steps": []}[target]
        self.run(["scancel", f"--signal={signal}", *flag, str(job_id)])

    def job_signal(self, job_id: int) -> JobSignal | None:
        """From ``scontrol write batch_script ID -`` (root or the job's owner may read it)."""
        try:
            script = self.run(["scontrol", "write", "batch_script", str(job_id), "-"])
        except SlurmCommandError as exc:
            log.info("job=%d event=batch_script_unreadable error=%s", job_id, exc)
            return None
        return parse_sbatch_signal(script)

    def release(self, job_ids: Sequence[int]) -> None:
        if job_ids:
            self.run(["scontrol", "release", ",".join(map(str, job_ids))])

    # ------------------------------------------------------------- nodes
    def list_nodes(self) -> list[Node]:
        return parse.parse_scontrol_nodes(self.run(["scontrol", "-o", "show", "node"]))

    def drain_node(self, node: str, reason: str) -> None:
        self.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])

    def resume_node(self, node: str) -> None:
        self.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"])

    # ---------------------------------------------------------- slurmdbd
    def job_usage(self, start: int, end: int) -> list[JobUsage]:
        """Allocations of every job that overlapped [start, end), clipped to it.

        ``--duplicates``: a requeued job keeps one record per run under the same id, and
        every run's GPU time counts (without it sacct shows only the newest run).
        """
        text = self._sacct(start, end)
        return parse.parse_sacct_usage(text, start, end)

    def _sacct(self, start: int, end: int) -> str:
        return self._sacct_env(120)(
            ["sacct", "-a", "-X", "-P", "-n", "--truncate", "--duplicates",
             f"--starttime={_sacct_time(start)}", f"--endtime={_sacct_time(end)}",
             f"--format={','.join(parse.SACCT_FIELDS)}"]
        )

    def job_accounting(self, job_id: int) -> JobAccounting | None:
        """``sacct -j``: the job's newest run with its steps folded in (slurmdbd keeps it
        after slurmctld forgets the job)."""
        text = self._sacct_env()(["sacct", "-P", "-n", f"--jobs={job_id}",
                                  f"--format={','.join(ACCOUNTING_FIELDS)}"])
        rows = [a for a in parse_accounting(text) if a.job_id == job_id]
        return rows[-1] if rows else None

    def accounted_jobs(self, start: int, end: int) -> list[JobAccounting]:
        """Every job allocation that overlapped [start, end), elapsed clipped to it."""
        text = self._sacct_env(120)(
            ["sacct", "-a", "-X", "-P", "-n", "--truncate",
             f"--starttime={_sacct_time(start)}", f"--endtime={_sacct_time(end)}",
             f"--format={','.join(ACCOUNTING_FIELDS)}"])
        return parse_accounting(text, window=(start, end))

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        """Replace the AdminComment slurmdbd holds for the job. The only way once the job
        has ended: slurmctld refuses ``scontrol update`` then ("Job has already finished",
        22.05.8), and its own copy is written to slurmdbd when the job completes, so a
        value set before that is lost. sacctmgr turns every double quote into a backtick
        (see ``read_record``)."""
        self.run(["sacctmgr", "-i", "modify", "job", "where", f"jobid={job_id}", "set",
                  f"AdminComment={text}"])

    def _sacct_env(self, min_timeout_s: float = 0) -> SlurmRunner:
        return SlurmRunner(env={**self.run.env, "SLURM_TIME_FORMAT": "%s"},
                           timeout_s=max(self.run.timeout_s, min_timeout_s))

    def list_runaway_jobs(self) -> list[int]:
        out = self.run(["sacctmgr", "-n", "-P", "show", "runawayjobs"], input_text="N\n")
        return parse.parse_runaway(out)

    def fix_runaway_jobs(self) -> list[int]:
        ids = self.list_runaway_jobs()
        if ids:
            self.run(["sacctmgr", "-i", "show", "runawayjobs"])
        return ids

    def default_accounts(self) -> dict[str, str]:
        return parse_default_accounts(
            self.run(["sacctmgr", "-n", "-P", "show", "user", "format=User,DefaultAccount"]))


def array_spec(indices: Collection[int]) -> str:
    """sbatch's ``--array`` list: ``0-2,5,7-8`` for {0, 1, 2, 5, 7, 8}."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(indices)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_array_tasks(text: str, job_id: int) -> dict[int, str]:
    """``squeue -o %i|%T`` lines of array ``job_id``: ``ID_3|RUNNING`` (and a pending
    ``ID_[4-6%2]|PENDING`` squeue did not expand) -> index -> state."""
    out: dict[int, str] = {}
    prefix = f"{job_id}_"
    for line in text.splitlines():
        jid, _, state = line.strip().partition("|")
        if not jid.startswith(prefix):
            continue
        spec = jid[len(prefix):].strip("[]").split("%")[0]
        state = state.split()[0] if state.split() else "UNKNOWN"
        for part in spec.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise SlurmParseError(f"squeue printed array task {jid!r}")
            for i in range(int(lo), int(hi or lo) + 1):
                out[i] = state
    return out


def _sacct_time(epoch: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


_SIGNAL_SPEC = re.compile(r"^(?:(?P<flags>[RB]+):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<at>\d+))?$")


def parse_signal_spec(spec: str) -> JobSignal | None:
    """sbatch's ``[{R|B}:]SIG[@TIME]``; None when it is not one."""
    m = _SIGNAL_SPEC.match(spec.strip())
    if m is None:
        return None
    sig = signal_name(m["sig"])
    if sig is None:
        return None
    target = "batch" if "B" in (m["flags"] or "") else "steps"
    return JobSignal(sig, target, int(m["at"]) if m["at"] else None)


def parse_sbatch_signal(script: str) -> JobSignal | None:
    """The last ``--signal`` of a batch script's ``#SBATCH`` lines, read as sbatch does:
    up to the first line that is neither blank, a comment nor the ``#!`` line."""
    found: JobSignal | None = None
    for line in script.splitlines():
        text = line.strip()
        if not text or (text.startswith("#") and not text.startswith("#SBATCH")):
            continue
        if not text.startswith("#SBATCH"):
            break
        try:
            words = shlex.split(text[len("#SBATCH"):], comments=True)
        except ValueError:
            continue
        for i, word in enumerate(words):
            if word.startswith("--signal="):
                found = parse_signal_spec(word.removeprefix("--signal=")) or found
            elif word == "--signal" and i + 1 < len(words):
                found = parse_signal_spec(words[i + 1]) or found
    return found
