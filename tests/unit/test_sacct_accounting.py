"""slurm.accounting on real sacct output of the dev cluster (22.05.8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ml.model import JobState
from slurm_ml.policy.admission.decision import read_record
from slurm_ml.slurm.accounting import cpu_seconds, parse_accounting, size_mb
from slurm_ml.slurm.errors import SlurmParseError

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "22.05"


def test_a_job_with_steps_is_one_row_with_nothing_gathered() -> None:
    rows = {a.job_id: a for a in parse_accounting((HERE / "sacct_jobs_accounting_p.txt").read_text())}
    assert sorted(rows) == [4617, 4618, 4619, 4620]  # array tasks by their own id
    a = rows[4617]
    assert (a.user, a.account, a.partition, a.state) == ("alice", "llm-pretrain", "gpu",
                                                         JobState.COMPLETED)
    assert (a.alloc_cpus, a.alloc_gpus, a.gpu_type, a.nodes) == (2, 2, "a100_80g", "gpu01")
    assert a.elapsed_s == 4 and a.start == 1796679340 and a.end == 1796679344
    assert a.req_mem_mb == 500 * 1024
    # jobacct_gather/none: TotalCPU 00:00:00 and no MaxRSS anywhere is "not measured"
    assert a.total_cpu_s is None and a.max_rss_mb is None
    assert read_record(a.admin_comment) == {"at": 1796679339, "min_runtime": 60,
                                            "qos": "alloc", "v": 1}


def test_the_admin_comment_sacctmgr_wrote_reads_back_through_its_backticks() -> None:
    rows = {a.job_id: a for a in parse_accounting((HERE / "sacct_jobs_accounting_p.txt").read_text())}
    assert "`" in rows[4619].admin_comment and '"' not in rows[4619].admin_comment
    assert read_record(rows[4619].admin_comment) == {"v": 1, "js": {"v": 1}}


def test_a_window_read_clips_elapsed_to_the_window() -> None:
    text = (HERE / "sacct_window_accounting_p.txt").read_text()
    rows = parse_accounting(text, window=(1796679342, 1796679343))
    assert rows and all(a.elapsed_s <= 1 for a in rows)
    assert {a.job_id for a in rows} >= {4617, 4619}


def test_a_pipe_in_the_admin_comment_stays_in_it() -> None:
    line = "7|j|u|a|p|COMPLETED|10|1|gres/gpu=1|n1|1|11|00:05.500|4000M|1024K|x|y|z"
    (a,) = parse_accounting(line + "\n7.0|s||a||COMPLETED|10|1|cpu=1|n1|1|11|00:05.500||2048K|")
    assert a.admin_comment == "x|y|z"
    assert a.total_cpu_s == 5.5 and a.max_rss_mb == 2 and a.req_mem_mb == 4000


def test_a_short_line_is_a_parse_error() -> None:
    with pytest.raises(SlurmParseError):
        parse_accounting("1|2|3")


@pytest.mark.parametrize(("text", "seconds"), [
    ("00:00:00", 0.0), ("01:02.500", 62.5), ("1:00:00", 3600.0), ("2-01:00:00", 176400.0),
    ("junk", None), ("", None)])
def test_cpu_seconds(text: str, seconds: float | None) -> None:
    assert cpu_seconds(text) == seconds


@pytest.mark.parametrize(("text", "mb"), [("500G", 512000), ("1024K", 1), ("4000Mn", 4000),
                                          ("", None), ("0", 0)])
def test_size_mb(text: str, mb: int | None) -> None:
    assert size_mb(text) == mb
