"""Trace loaders on the real data kit (counts, known rows, published figures) and on
small broken files (every error names file:line and what is wrong)."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from slurm_ml.sim.traces import (
    NO_THROUGHPUT,
    ZERO_DURATION,
    ZERO_GPUS,
    Trace,
    TraceError,
    default_data_dir,
    load_calibration,
    load_chronus,
    load_gavel,
    load_philly,
    load_pollux_workload,
    load_tiresias,
    load_trace,
    load_vc_nodes,
    parse_spec,
)
from slurm_ml.sim.workload import LARGE, SMALL

DATA = Path(__file__).resolve().parents[2] / "slurm_ml" / "data"
TRACES = DATA / "traces"
PHILLY = TRACES / "pollux_philly" / "philly.csv"
GAVEL = TRACES / "gavel_philly_msr"
EPOCH_2017_09_04_103041 = 1_504_521_041.0  # 2017-09-04 10:30:41 on a UTC clock
DAY = 86_400.0


@pytest.fixture(scope="module")
def philly() -> Trace:
    return load_philly(PHILLY)


@pytest.fixture(scope="module")
def chronus() -> Trace:
    return load_trace("chronus")


# --------------------------------------------------------------------------- real traces

# (spec, data rows, jobs, skipped, span_s, teams)
REAL = [
    ("philly", 82_247, 82_247, {}, 9_408_690.0, 15),
    ("gavel", 15_264, 13_716, {NO_THROUGHPUT: 1_548}, 10_817_570.0, 15),
    ("gavel?fallback=nearest", 15_264, 15_264, {}, 10_817_570.0, 15),
    ("chronus", 30_940, 30_756, {ZERO_GPUS: 184}, 20_150.0, 11),
    ("tiresias", 60, 60, {}, 1_779.0, 1),
    ("pollux?duration_s=3600", 160, 160, {}, 27_695.0 - 107.0, 1),
]


@pytest.mark.parametrize("case", REAL, ids=[case[0] for case in REAL])
def test_real_trace_counts(
    case: tuple[str, int, int, dict[str, int], float, int], philly: Trace, chronus: Trace
) -> None:
    spec, rows, jobs, skipped, span, teams = case
    trace = {"philly": philly, "chronus": chronus}.get(spec) or load_trace(spec)
    assert (trace.rows, len(trace.jobs), dict(trace.skipped)) == (rows, jobs, skipped)
    assert trace.rows == len(trace.jobs) + sum(trace.skipped.values())
    assert trace.span_s == span
    assert len(trace.teams) == teams
    assert trace.jobs[0].submit_s == 0.0  # rebased
    submits = [job.submit_s for job in trace.jobs]
    assert submits == sorted(submits)
    assert len({job.job_id for job in trace.jobs}) == len(trace.jobs)


def test_philly_span_and_known_rows(philly: Trace) -> None:
    assert philly.epoch_s == EPOCH_2017_09_04_103041
    assert philly.epoch_s + philly.span_s == EPOCH_2017_09_04_103041 + 108 * DAY + 77_490
    assert philly.source == str(PHILLY)
    assert "2017-09-04 10:30:41 .. 2017-12-22 08:02:11" in philly.description
    by_id = {job.job_id: job for job in philly.jobs}
    # job_id = the data row's number; submit_s = timestamp - 2017-09-04 10:30:41.
    first_row, last_row = by_id[1], by_id[82_247]
    assert (first_row.team, first_row.user, first_row.gpus, first_row.duration_s) == (
        "11cb48", "vc_11cb48", 1, 66.0)
    assert first_row.submit_s == 34 * DAY + 20 * 3600 + 31 * 60 + 14  # 2017-10-09 07:01:55
    assert (last_row.team, last_row.gpus, last_row.duration_s) == ("6c71a0", 1, 1896.0)
    assert last_row.submit_s == 64 * DAY + 21 * 3600 + 2 * 60 + 29  # 2017-11-08 07:33:10
    earliest = philly.jobs[0]  # row 31567: 2017-09-04 10:30:41, 2240194 s, 8 GPUs, 7f04ca
    assert (earliest.job_id, earliest.team, earliest.gpus, earliest.duration_s) == (
        31_567, "7f04ca", 8, 2_240_194.0)


def test_philly_distributions_match_sources_md(philly: Trace) -> None:
    gpus = Counter(job.gpus for job in philly.jobs)
    assert gpus == {1: 76_627, 2: 1_818, 4: 1_870, 8: 1_643, 12: 7, 16: 199, 24: 7, 32: 67,
                    64: 6, 128: 3}
    per_vc = Counter(job.team for job in philly.jobs)
    assert per_vc == {"6214e9": 41_226, "11cb48": 16_091, "6c71a0": 9_953, "b436b2": 7_423,
                      "103959": 1_934, "ee9e8c": 1_511, "0e4a51": 1_435, "ed69ec": 1_137,
                      "7f04ca": 723, "2869ce": 422, "e13805": 374, "23dbec": 8, "51b7ef": 4,
                      "925e2b": 3, "795a4c": 3}
    durations = [job.duration_s for job in philly.jobs]
    assert (min(durations), max(durations), statistics.median(durations)) == (
        1.0, 4_628_226.0, 1_144.0)
    kinds = Counter(job.kind for job in philly.jobs)
    assert kinds == {SMALL: 82_247 - 289, LARGE: 289}  # > 8 GPUs = more than one node
    assert {job.user for job in philly.jobs} == {f"vc_{vc}" for vc in per_vc}


# Per VC file of seed=0: jobs, span in hours (to SOURCES.md's precision), jobs with no
# throughput key, GPU mix.
GAVEL_VCS = [
    ("0e4a51", 1181, 2045, 197, {1: 436, 2: 226, 4: 451, 8: 68}),
    ("103959", 986, 2197, 125, {1: 500, 2: 40, 4: 446}),
    ("11cb48", 2000, 2444, 181, {1: 1559, 2: 81, 4: 257, 8: 23, 16: 69, 24: 2, 32: 8, 64: 1}),
    ("23dbec", 9, 52, 1, {1: 2, 8: 7}),
    ("2869ce", 533, 2261, 179, {1: 65, 2: 6, 4: 11, 8: 379, 16: 2, 32: 70}),
    ("51b7ef", 18, 840, 1, {1: 3, 4: 2, 8: 13}),
    ("6214e9", 2000, 1162, 15, {1: 1928, 2: 27, 4: 32, 8: 13}),
    ("6c71a0", 2000, 720, 63, {1: 1798, 2: 6, 4: 41, 8: 150, 16: 4, 32: 1}),
    ("795a4c", 3, 0.9, 0, {1: 3}),
    ("7f04ca", 972, 3005, 183, {1: 394, 2: 2, 4: 234, 8: 311, 16: 24, 32: 7}),
    ("925e2b", 4, 3.4, 1, {1: 1, 8: 3}),
    ("b436b2", 2000, 756, 126, {1: 1632, 2: 23, 4: 133, 8: 172, 16: 39, 24: 1}),
    ("e13805", 607, 2352, 103, {1: 233, 2: 5, 4: 116, 8: 234, 12: 6, 16: 11, 24: 2}),
    ("ed69ec", 951, 1821, 0, {1: 951}),
    ("ee9e8c", 2000, 1252, 373, {1: 975, 2: 47, 4: 321, 7: 2, 8: 543, 16: 106, 20: 1, 32: 5}),
]


@pytest.mark.parametrize(("vc", "jobs", "span_h", "no_key", "mix"), GAVEL_VCS)
def test_gavel_per_vc_files_match_sources_md(
    vc: str, jobs: int, span_h: float, no_key: int, mix: dict[int, int]
) -> None:
    every = load_gavel(GAVEL / "seed=0" / f"{vc}.trace", fallback="nearest")
    assert len(every.jobs) == jobs
    assert Counter(job.gpus for job in every.jobs) == mix
    assert abs(every.span_s / 3600 - span_h) < (0.1 if span_h < 10 else 1)
    assert {job.team for job in every.jobs} == {vc}
    keyed = load_gavel(GAVEL / "seed=0" / f"{vc}.trace")
    assert dict(keyed.skipped) == ({NO_THROUGHPUT: no_key} if no_key else {})


def test_gavel_duration_is_steps_over_isolated_throughput() -> None:
    trace = load_gavel(GAVEL / "seed=0" / "ee9e8c.trace")
    thr = json.loads((GAVEL / "simulation_throughputs.json").read_text())
    # line 1: Transformer (batch size 128), 15486530 steps, arrival 0, 1 GPU
    first = trace.jobs[0]
    assert (first.job_id, first.gpus, first.submit_s) == (1, 1, 0.0)
    assert first.duration_s == 15_486_530 / thr["v100"]["('Transformer (batch size 128)', 1)"]["null"]
    k80 = load_gavel(GAVEL / "seed=0" / "ee9e8c.trace", worker="k80")
    assert k80.jobs[0].duration_s > first.duration_s  # a K80 is slower
    seed1 = load_trace(f"gavel:{GAVEL / 'seed=1'}")
    assert seed1.teams == ("2869ce", "e13805")


def test_gavel_nearest_fallback_uses_largest_measured_gpu_count(tmp_path: Path) -> None:
    trace_file = tmp_path / "abc123.trace"
    trace_file.write_text("A3C\tcmd\t-n\t0\t1000\t5.0\t4\nA3C\tcmd\t-n\t0\t1000\t0\t1\n")
    thr = tmp_path / "simulation_throughputs.json"
    thr.write_text(json.dumps({"v100": {"('A3C', 1)": {"null": 10.0}}}))
    skip = load_gavel(trace_file)
    assert [job.gpus for job in skip.jobs] == [1]
    assert dict(skip.skipped) == {NO_THROUGHPUT: 1}
    nearest = load_gavel(trace_file, fallback="nearest")
    assert [(job.job_id, job.gpus, job.duration_s, job.submit_s) for job in nearest.jobs] == [
        (2, 1, 100.0, 0.0), (1, 4, 100.0, 5.0)]
    assert nearest.teams == ("abc123",)


def test_chronus_known_row(chronus: Trace) -> None:
    trace = chronus
    job0 = next(job for job in trace.jobs if job.job_id == 0)
    # 0,vc_6214e9,1,8555,5049,vgg16,747,...: first submit is 1 s, so 8555 -> 8554
    assert (job0.team, job0.user, job0.gpus, job0.duration_s, job0.submit_s) == (
        "6214e9", "vc_6214e9", 1, 747.0, 8554.0)
    assert set(trace.teams) == set(load_vc_nodes(TRACES / "helios_calib" / "philly_vc.csv"))


def test_tiresias_and_pollux_known_rows() -> None:
    tiresias = load_tiresias(TRACES / "tiresias" / "60_job.csv", gpus_per_node=4)
    job1 = next(job for job in tiresias.jobs if job.job_id == 1)  # 1,8,30,133,vgg11,147,23
    assert (job1.team, job1.user, job1.gpus, job1.submit_s, job1.duration_s, job1.kind) == (
        "tiresias", "tiresias", 8, 30.0, 147.0, LARGE)
    pollux = load_pollux_workload(
        TRACES / "pollux_workloads" / "workload-1.csv",
        {"cifar10": 600, "ncf": 300, "deepspeech2": 7200, "bert": 3600, "imagenet": 86400,
         "yolov3": 14400},
    )
    first = pollux.jobs[0]  # row 1: cifar10-0,107,cifar10,6,2048
    assert (first.job_id, first.gpus, first.duration_s, first.submit_s) == (1, 6, 600.0, 0.0)
    assert pollux.epoch_s == 107.0
    by_fn = load_pollux_workload(
        TRACES / "pollux_workloads" / "workload-1.csv", lambda app, gpus, batch: batch / gpus)
    assert by_fn.jobs[0].duration_s == 2048 / 6


@pytest.mark.parametrize("n", range(1, 9))
def test_every_pollux_workload_loads(n: int) -> None:
    trace = load_pollux_workload(TRACES / "pollux_workloads" / f"workload-{n}.csv", 60.0)
    assert (trace.rows, len(trace.jobs)) == (160, 160)
    assert trace.span_s < 8 * 3600


# --------------------------------------------------------------------------- calibration

CALIBRATION = [
    # id, mean GPU-job queue s, median queue s, avg GPUs, median GPUs, max GPUs
    ("Philly", 3760.604, 189.0, 1.928, 1.0, 128.0),
    ("Seren", 445.984, 1.0, 5.68, 1.0, 1024.0),
    ("Kalos", 214.179, 17.0, 26.77, 1.0, 1024.0),
    ("Helios", 862.047, 0.0, 3.716, 1.0, 2048.0),
    ("PAI", 401.742, 9.0, 0.683, 0.5, 8.0),
]


@pytest.mark.parametrize("case", CALIBRATION, ids=[case[0] for case in CALIBRATION])
def test_calibration_figures(case: tuple[str, float, float, float, float, float]) -> None:
    name, avg_q, med_q, avg_g, med_g, max_g = case
    figures = load_calibration(TRACES / "acme_calib" / "cluster_summary.csv")
    assert list(figures) == ["Seren", "Kalos", "Philly", "Helios", "PAI"]
    got = figures[name]
    assert (got.avg_queue_s, got.median_queue_s) == (avg_q, med_q)
    assert (got.avg_gpus, got.median_gpus, got.max_gpus) == (avg_g, med_g, max_g)


def test_calibration_philly_details_and_empty_cells() -> None:
    figures = load_calibration(TRACES / "acme_calib" / "cluster_summary.csv")
    philly = figures["Philly"]
    assert (philly.gpu_jobs, philly.avg_run_s, philly.median_run_s) == (112_956, 18_006.055, 874.0)
    assert philly.values["avg_que_time_cpu"] is None  # empty cell: not published
    assert figures["PAI"].values["complete_rate_gpu"] is None


def test_vc_nodes() -> None:
    nodes = load_vc_nodes(TRACES / "helios_calib" / "philly_vc.csv")
    assert nodes == {"6214e9": 64, "7f04ca": 32, "11cb48": 16, "b436b2": 64, "ee9e8c": 64,
                     "e13805": 16, "6c71a0": 32, "2869ce": 16, "ed69ec": 8, "103959": 8,
                     "0e4a51": 32}
    assert sum(nodes.values()) == 352


# --------------------------------------------------------------------------- specs


def test_default_data_dir_is_the_packaged_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_ML_DATA_DIR", raising=False)
    assert default_data_dir() == DATA.resolve()


def test_data_dir_env_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "traces" / "pollux_philly"
    home.mkdir(parents=True)
    (home / "philly.csv").write_text(
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 00:00:10,5.0,2,10.0,abc\n")
    monkeypatch.setenv("SLURM_ML_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path
    trace = load_trace("philly")
    assert (len(trace.jobs), trace.source) == (1, str(home / "philly.csv"))


def test_spec_with_path_and_options(tmp_path: Path) -> None:
    kind, path, options = parse_spec("Gavel:/x/seed=1?fallback=nearest&worker=p100")
    assert (kind, path, options) == ("gavel", Path("/x/seed=1"),
                                     {"fallback": "nearest", "worker": "p100"})
    tiresias = TRACES / "tiresias" / "60_job.csv"
    trace = load_trace(f"tiresias:{tiresias}?gpus_per_node=4&team=ab")
    assert Counter(job.kind for job in trace.jobs) == {SMALL: 50, LARGE: 10}  # the 8-GPU jobs
    assert trace.teams == ("ab",)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("alibaba", "unknown kind 'alibaba' (known: philly, gavel, chronus, tiresias, pollux, slurmdb)"),
        ("philly:", "empty path after 'philly:'"),
        ("philly?worker=v100", "unknown option 'worker' for philly (known: gpus_per_node)"),
        ("gavel?fallback=guess", "fallback='guess' (known: skip, nearest)"),
        ("gavel?worker=tpu", "no worker type 'tpu' (known: k80, k80_unconsolidated, p100"),
        ("tiresias?gpus_per_node=0", "gpus_per_node must be > 0"),
        ("tiresias?gpus_per_node=x", "gpus_per_node='x' is not a number"),
        ("pollux", "Pollux workloads have no run-time column"),
        ("pollux?duration_s", "option 'duration_s' is not KEY=VALUE"),
        ("philly:/no/such/file.csv", "/no/such/file.csv: no such file"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(TraceError) as err:
        load_trace(spec)
    assert message in str(err.value)


# --------------------------------------------------------------------------- bad files

PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster\n"
GOOD = "2017-10-01 00:00:10,5.0,2,10.0,abc\n"


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("timestamp,duration,num_gpus,gpu_time\n" + GOOD, 1,
         "missing column(s) cluster (header has: timestamp, duration, num_gpus, gpu_time)"),
        (PHILLY_HEAD + GOOD + "2017-10-01 00:00:11,abc,1,5.0,abc\n", 3,
         "duration is not a number: 'abc'"),
        (PHILLY_HEAD + "2017-10-01 00:00:11,5.0,-1,-5.0,abc\n", 2,
         "negative GPU count in num_gpus: '-1'"),
        (PHILLY_HEAD + "2017-10-01 00:00:11,5.0,2.5,12.5,abc\n", 2,
         "num_gpus must be a whole number, got '2.5'"),
        (PHILLY_HEAD + "2017-13-01 00:00:11,5.0,1,5.0,abc\n", 2,
         "timestamp is not a 'YYYY-MM-DD HH:MM:SS' time: '2017-13-01 00:00:11'"),
        (PHILLY_HEAD + "2017-10-01T00:00:11,5.0,1,5.0,abc\n", 2,
         "timestamp is not a 'YYYY-MM-DD HH:MM:SS' time"),
        (PHILLY_HEAD + "2017-10-01 00:00:11,-5.0,1,-5.0,abc\n", 2,
         "duration must be >= 0, got '-5.0'"),
        (PHILLY_HEAD + "2017-10-01 00:00:11,nan,1,5.0,abc\n", 2,
         "duration is not a finite number: 'nan'"),
        (PHILLY_HEAD + "2017-10-01 00:00:11,5.0,2,5.0,abc\n", 2,
         "gpu_time 5 != duration 5 x num_gpus 2"),
        (PHILLY_HEAD + "2017-10-01 00:00:11,5.0,1,5.0\n", 2, "expected 5 fields, got 4"),
        (PHILLY_HEAD + GOOD + "2017-10-01 00:00:11,5.0,1,5.0,\n", 3, "cluster is empty"),
        ("", 1, "empty file, expected a header row"),
    ],
)
def test_bad_philly_files(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as err:
        load_philly(path)
    assert str(err.value) == f"{path}:{line}: {message}" or str(err.value).startswith(
        f"{path}:{line}: {message}")
    assert isinstance(err.value, ValueError)


def test_unusable_philly_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    path = _write(tmp_path, PHILLY_HEAD + "2017-10-01 00:00:11,5.0,0,0.0,abc\n" + GOOD
                  + "2017-10-01 00:00:12,0.0,4,0.0,abc\n\n")
    trace = load_philly(path)
    assert dict(trace.skipped) == {ZERO_DURATION: 1, ZERO_GPUS: 1}
    assert (trace.rows, len(trace.jobs), trace.jobs[0].job_id) == (3, 1, 2)


Loader = Callable[[Path], Trace]


def _pollux(path: Path) -> Trace:
    return load_pollux_workload(path, {"cifar10": 60.0})


@pytest.mark.parametrize(
    ("loader", "text", "line", "message"),
    [
        (load_chronus, "job_id,user,num_gpu,submit_time\n1,vc_a,1,0\n", 1,
         "missing column(s) duration"),
        (load_chronus, "job_id,user,num_gpu,submit_time,duration\n1,vc_a,1,-3,10\n", 2,
         "submit_time must be >= 0, got '-3'"),
        (load_chronus, "job_id,user,num_gpu,submit_time,duration\n1,vc_a,1,0,10\n1,vc_b,1,0,10\n",
         3, "job id 1 already used on line 2"),
        (load_tiresias, "job_id,num_gpu,submit_time,duration\r\n0,-2,0,10\r\n", 2,
         "negative GPU count in num_gpu: '-2'"),
        (load_tiresias, "job_id,num_gpu,submit_time,duration\n0,1,zero,10\n", 2,
         "submit_time is not a number: 'zero'"),
        (_pollux, "name,time,application,num_replicas,batch_size\na-0,5,bert,1,32\n", 2,
         "no duration given for application 'bert'"),
        (_pollux, "name,time,application,batch_size\na-0,5,cifar10,32\n", 1,
         "missing column(s) num_replicas"),
        (load_vc_nodes, "vc,node num\nabc,0\n", 2, "VC 'abc' has 0 nodes"),
        (load_vc_nodes, "vc,node num\nabc,4\nabc,8\n", 3, "VC 'abc' appears twice"),
        (load_vc_nodes, "vc,nodes\nabc,4\n", 1, "missing column(s) node num"),
        (load_calibration, "id,avg_que_time_gpu\nX,1\n", 1, "missing column(s) gpu_job_num"),
    ],
)
def test_bad_other_files(
    tmp_path: Path, loader: Callable[[Path], object], text: str, line: int, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(TraceError) as err:
        loader(path)
    assert str(err.value).startswith(f"{path}:{line}: {message}")


def test_bad_calibration_number(tmp_path: Path) -> None:
    header = (TRACES / "acme_calib" / "cluster_summary.csv").read_text().splitlines()[0]
    columns = header.split(",")
    row = ["Philly"] + ["1"] * (len(columns) - 1)
    row[columns.index("avg_que_time_gpu")] = "soon"
    path = _write(tmp_path, header + "\n" + ",".join(row) + "\n")
    with pytest.raises(TraceError, match=r"t\.csv:2: avg_que_time_gpu is not a number: 'soon'"):
        load_calibration(path)


@pytest.mark.parametrize(
    ("line", "lineno", "message"),
    [
        ("A3C\tcmd\t-n\t0\t1000\t0\n", 1, "expected 7 TAB-separated fields"),
        ("A3C\tcmd\t-n\t0\tmany\t0\t1\n", 1, "total_steps is not a number: 'many'"),
        ("A3C\tcmd\t-n\t0\t1000\t0\t-1\n", 1, "negative GPU count in scale_factor: '-1'"),
        ("\nA3C\tcmd\t-n\t0\t1000\t-4\t1\n", 2, "arrival_time must be >= 0, got '-4'"),
    ],
)
def test_bad_gavel_files(tmp_path: Path, line: str, lineno: int, message: str) -> None:
    path = _write(tmp_path, line, "vc1.trace")
    (tmp_path / "simulation_throughputs.json").write_text(
        json.dumps({"v100": {"('A3C', 1)": {"null": 10.0}}}))
    with pytest.raises(TraceError) as err:
        load_gavel(path)
    assert str(err.value).startswith(f"{path}:{lineno}: {message}")


def test_gavel_missing_inputs(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no \*\.trace files in this directory"):
        load_gavel(tmp_path)
    path = _write(tmp_path, "A3C\tcmd\t-n\t0\t1000\t0\t1\n", "vc1.trace")
    with pytest.raises(TraceError, match=r"no simulation_throughputs\.json in its directory"):
        load_gavel(path)
    bad = _write(tmp_path, "{", "thr.json")
    with pytest.raises(TraceError, match=r"thr\.json: not readable JSON"):
        load_gavel(path, throughputs=bad)
    (tmp_path / "thr.json").write_text(json.dumps({"v100": {"A3C-1": {"null": 1.0}}}))
    with pytest.raises(TraceError, match="key 'A3C-1' is not"):
        load_gavel(path, throughputs=bad)
    with pytest.raises(ValueError, match="fallback must be one of skip, nearest"):
        load_gavel(path, fallback="guess")
