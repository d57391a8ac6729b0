"""sprio rows as PriorityParts: real captures of 22.05 and 24.11, and priority_parts() through
a scripted runner (CliSlurm) and the fake."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.slurm.client import CliSlurm
from slurm_ml.slurm.errors import SlurmCommandError, SlurmParseError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.slurm.priority import SPRIO_FORMAT, PriorityParts, parse_sprio, pick_parts
from slurm_ml.slurm.protocol import SubmitRequest
from slurm_ml.slurm.runner import SlurmRunner

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"

# `sprio -o "%i|%r|%Y|%S|%A|%B|%F|%J|%P|%Q|%N|%T"` (SPRIO_FORMAT) on the 22.05 dev cluster
# (slurm-wlm 22.05.8, 2026-11-30), stdout unedited: job 67959 (alice, -p gpu,debug
# --nice=50) pending in two partitions, 67960 (carol) with SiteFactor=-300; both waited
# for a node a third job held.
SPRIO_O_2205 = """\
JOBID|PARTITION|PRIORITY|SITE|AGE|ASSOC|FAIRSHARE|JOBSIZE|PARTITION|QOS|NICE|TRES
67959|gpu|966|0|0|0|17|0|0|1000|50|
67959|debug|966|0|0|0|17|0|0|1000|50|
67960|gpu|750|-300|0|0|50|0|0|1000|0|
"""
# The same sprio for a job it has no row for (held, dependent, unknown): exit 0.
SPRIO_NONE_2205 = "Unable to find jobs matching user/id(s) specified\n"


def read(version: str, name: str) -> str:
    return (FIX / version / name).read_text()


def header_2411() -> str:
    return read("24.11", "sprio_l.txt").splitlines()[0]


GPU250 = (("cpu", 0.0), ("gres/gpu", 250.0))
GPU125 = (("cpu", 0.0), ("gres/gpu", 125.0))


@pytest.mark.parametrize(("text", "header", "want"), [
    pytest.param(read("22.05", "sprio_l.txt"), None, [
        PriorityParts(16, "gpu", 1100, 0, fairshare=100, qos=1000),
        PriorityParts(17, "gpu", 1100, 0, fairshare=100, qos=1000),
        PriorityParts(19, "gpu", 100, 0, fairshare=100),
    ], id="22.05-l"),
    pytest.param(read("24.11", "sprio_l.txt"), None, [
        PriorityParts(13, "gpu", 8776, 500, fairshare=5000, job_size=27, partition_factor=1000,
                      qos=2000, tres=GPU250),
        PriorityParts(15, "gpu", 8151, 0, fairshare=5000, job_size=27, partition_factor=1000,
                      qos=2000, tres=GPU125),
    ], id="24.11-l-account-and-qosname-columns"),
    pytest.param(read("24.11", "sprio_l_h.txt"), header_2411(), [
        PriorityParts(13, "gpu", 8776, 500, fairshare=5000, job_size=27, partition_factor=1000,
                      qos=2000, tres=GPU250),
        PriorityParts(15, "gpu", 8151, 0, fairshare=5000, job_size=27, partition_factor=1000,
                      qos=2000, tres=GPU125),
    ], id="24.11-l-h-with-the-header-given"),
    pytest.param(SPRIO_O_2205, None, [
        PriorityParts(67959, "gpu", 966, 0, fairshare=17, qos=1000, nice=50),
        PriorityParts(67959, "debug", 966, 0, fairshare=17, qos=1000, nice=50),
        PriorityParts(67960, "gpu", 750, -300, fairshare=50, qos=1000),
    ], id="22.05-o-format-two-partitions-negative-site"),
    pytest.param(SPRIO_NONE_2205, None, [], id="22.05-no-such-job"),
    pytest.param(read("24.11", "sprio_l_h.txt"), None, [], id="headerless-without-a-header"),
    pytest.param("", None, [], id="empty"),
])
def test_parse_sprio(text: str, header: str | None, want: list[PriorityParts]) -> None:
    assert parse_sprio(text, header) == want


@pytest.mark.parametrize(("text", "job", "want"), [
    pytest.param(SPRIO_O_2205, 67959, (67959, "gpu", 966), id="first-of-equal-partitions"),
    pytest.param(SPRIO_O_2205, 67960, (67960, "gpu", 750), id="one-row"),
    pytest.param(SPRIO_O_2205.replace("67959|debug|966", "67959|debug|999"), 67959,
                 (67959, "debug", 999), id="highest-priority-partition"),
    pytest.param(SPRIO_O_2205, 1, None, id="not-listed"),
])
def test_pick_parts(text: str, job: int, want: tuple[int, str, int] | None) -> None:
    got = pick_parts(parse_sprio(text), job)
    assert (None if got is None else (got.job_id, got.partition, got.priority)) == want


@pytest.mark.parametrize(("parts", "total"), [
    pytest.param(PriorityParts(16, "gpu", 1100, 0, fairshare=100, qos=1000), 1100,
                 id="22.05-exact"),
    pytest.param(PriorityParts(67960, "gpu", 750, -300, fairshare=50, qos=1000), 750,
                 id="negative-site"),
    pytest.param(PriorityParts(67959, "gpu", 966, 0, fairshare=17, qos=1000, nice=50), 967,
                 id="nice-subtracts-sprio-rounds"),
    pytest.param(PriorityParts(13, "gpu", 8776, 500, fairshare=5000, job_size=27,
                               partition_factor=1000, qos=2000, tres=GPU250), 8777,
                 id="24.11-tres-counts"),
])
def test_factor_sum_is_the_priority_up_to_rounding(parts: PriorityParts, total: int) -> None:
    assert parts.factor_sum == total
    assert abs(parts.factor_sum - parts.priority) <= 2


@pytest.mark.parametrize("text", [
    pytest.param("JOBID|PARTITION|PRIORITY\nx|gpu|5\n", id="job-id-not-a-number"),
    pytest.param("JOBID|PARTITION|PRIORITY\n5|gpu|high\n", id="priority-not-a-number"),
    pytest.param("JOBID|PARTITION|PRIORITY\n5|gpu|\n", id="priority-missing"),
    pytest.param("JOBID|PARTITION|SITE\n5|gpu|0\n", id="no-priority-column"),
])
def test_malformed_sprio_is_a_named_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sprio(text)


@given(st.text())
def test_parse_sprio_fails_only_with_a_parse_error(text: str) -> None:
    try:
        rows = parse_sprio(text)
    except SlurmParseError:
        return
    assert all(isinstance(r, PriorityParts) for r in rows)


# ------------------------------------------------------------ CliSlurm


@dataclass(frozen=True)
class Scripted(SlurmRunner):
    """Answers every command with ``out`` (or raises ``err``) and logs the argv."""

    out: str = ""
    err: SlurmCommandError | None = None
    log: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], *, timeout_s: float | None = None,
                 input_text: str | None = None) -> str:
        self.log.append(tuple(argv))
        if self.err is not None:
            raise self.err
        return self.out


def test_cli_priority_parts_asks_sprio_for_the_one_job() -> None:
    run = Scripted(out=SPRIO_O_2205)
    parts = CliSlurm(run).priority_parts(67960)
    assert parts == PriorityParts(67960, "gpu", 750, -300, fairshare=50, qos=1000)
    assert run.log == [("sprio", "--jobs=67960", "-o", SPRIO_FORMAT)]


@pytest.mark.parametrize("run", [
    pytest.param(Scripted(out=SPRIO_NONE_2205), id="22.05-message-on-stdout"),
    pytest.param(Scripted(err=SlurmCommandError(("sprio",), 1, "Invalid job id specified")),
                 id="an-error-exit-naming-the-job"),
])
def test_cli_priority_parts_none_when_not_listed(run: Scripted) -> None:
    assert CliSlurm(run).priority_parts(5) is None


def test_cli_priority_parts_other_errors_propagate() -> None:
    run = Scripted(err=SlurmCommandError(("sprio",), 1, "Unable to contact slurm controller"))
    with pytest.raises(SlurmCommandError, match="contact"):
        CliSlurm(run).priority_parts(5)


# ---------------------------------------------------------------- fake


@pytest.mark.parametrize(("reason", "listed"), [
    pytest.param("Priority", True, id="waiting-for-priority"),
    pytest.param("Resources", True, id="waiting-for-resources"),
    pytest.param("JobHeldUser", False, id="held"),
    pytest.param("Dependency", False, id="dependency"),
    pytest.param("BeginTime", False, id="requeued-begin-time"),
])
def test_fake_priority_parts_like_sprio(reason: str, listed: bool) -> None:
    s = FakeSlurm()
    jid = s.submit(SubmitRequest(user="alice"))
    s.pend(jid, reason=reason)
    s.set_job(jid, site_factor=4000, nice=100)
    s.factors[jid] = {"fairshare": 50, "qos": 1000}
    got = s.priority_parts(jid)
    if not listed:
        assert got is None
        return
    assert got == PriorityParts(jid, "gpu", 4950, 4000, fairshare=50, qos=1000, nice=100)


def test_fake_priority_parts_none_for_running_and_unknown() -> None:
    s = FakeSlurm()
    jid = s.submit(SubmitRequest(user="alice"))
    s.start(jid, "gpu01", at=10)
    assert s.priority_parts(jid) is None and s.priority_parts(999) is None
    assert s.calls.count(("sprio", f"--jobs={jid}")) == 1
