"""parse_sbatch: sbatch command lines and #SBATCH blocks → the job_desc fields of 22.05.

Every expected dict here is what job_submit.lua saw on slurmctld 22.05 when sbatch
22.05.8 submitted the same command line (captured with a probe job_submit.lua), and every
error row is one sbatch itself refused (shard rows: on a cluster with GresTypes=gpu,shard).
One row differs on purpose: a host file given to -w is not read.
"""

from __future__ import annotations

from typing import Any

import pytest

from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission.request import NO_MIN_RUNTIME
from slurm_ml.submitd.sbatch_args import (
    SbatchParseError,
    parse_sbatch,
    parse_time_minutes,
    per_node_gpu_options,
)
from slurm_ml.submitd.wire import INFINITE, JOB_FIELDS, normalize, to_request

PLAIN = "#!/bin/bash\necho hello\n"


def jobs(*argv: str, script: str | None = PLAIN) -> list[dict[str, Any]]:
    """The dicts for ``sbatch argv`` minus user_name, which every dict must carry."""
    out = []
    for job in parse_sbatch(argv, script, user="alice"):
        assert job.pop("user_name") == "alice"
        out.append(job)
    return out


def one(*argv: str, script: str | None = PLAIN) -> dict[str, Any]:
    (job,) = jobs(*argv, script=script)
    return job


def case(id_: str, *values: Any) -> Any:
    return pytest.param(*values, id=id_)


# ----------------------------------------------------------------------------- times

TIMES = [
    case("minutes", "90", 90),
    case("minutes:seconds", "1:30", 2),
    case("minutes:seconds exact", "2:00", 2),
    case("seconds over 59", "5:90", 7),
    case("leading zero", "01:02", 2),
    case("hours:minutes:seconds", "1:00:00", 60),
    case("one second rounds up", "0:0:1", 1),
    case("days-hours", "1-0", 1440),
    case("days-", "1-", 1440),
    case("days-hours:minutes", "1-2:30", 1590),
    case("days-hours:minutes:seconds", "1-2:30:15", 1591),
    case("days-h:m:s short", "1-2:3:4", 1564),
    case("zero is infinite", "0", INFINITE),
    case("all zero is infinite", "00:00:00", INFINITE),
    case("infinite", "infinite", INFINITE),
    case("UNLIMITED", "UNLIMITED", INFINITE),
    case("minus one", "-1", INFINITE),
]

BAD_TIMES = [
    case("word", "abc"),
    case("trailing colon", "1:"),
    case("leading colon", ":30"),
    case("four fields", "1:2:3:4"),
    case("decimal", "1.5"),
    case("leading space", " 10"),
    case("double dash", "1--2"),
    case("two days", "1-2-3"),
    case("dash colon", "1-2:"),
    case("too many after dash", "1-2:3:4:5"),
    case("empty", ""),
]


@pytest.mark.parametrize(("text", "minutes"), TIMES)
def test_time_limit_formats(text: str, minutes: int) -> None:
    assert one("-t", text, "job.sh")["time_limit"] == minutes
    assert one(f"--time-min={text}", "job.sh")["time_min"] == minutes
    assert parse_time_minutes(text) == minutes


@pytest.mark.parametrize("text", BAD_TIMES)
def test_bad_times_are_refused(text: str) -> None:
    assert parse_time_minutes(text) is None
    with pytest.raises(SbatchParseError, match="--time: invalid time"):
        parse_sbatch(["--time", text, "job.sh"], PLAIN, user="alice")
    with pytest.raises(SbatchParseError, match="--time-min: invalid time"):
        parse_sbatch([f"--time-min={text}", "job.sh"], PLAIN, user="alice")


# ----------------------------------------------------------------------------- options

OPTIONS = [
    # --- forms: --opt=value, --opt value, -X value, -Xvalue, unique prefix, bundles
    case("account long =", ("--account=ml", "job.sh"), {"account": "ml"}),
    case("account long space", ("--account", "ml", "job.sh"), {"account": "ml"}),
    case("account short", ("-A", "ml", "job.sh"), {"account": "ml"}),
    case("account short glued", ("-Aml", "job.sh"), {"account": "ml"}),
    case("long prefix", ("--part=cpu", "job.sh"), {"partition": "cpu"}),
    case("long prefix space", ("--part", "cpu", "job.sh"), {"partition": "cpu"}),
    case("bundled flags then value", ("-Hvp", "gpu", "job.sh"), {"partition": "gpu"}),
    case("double dash ends options", ("-p", "cpu", "--", "job.sh"), {"partition": "cpu"}),
    case("last one wins", ("-p", "a", "-p", "b", "-J", "x", "-J", "y", "job.sh"),
         {"partition": "b", "name": "y"}),
    case("args after the script are the script's",
         ("-p", "gpu", "job.sh", "-p", "cpu", "--bogus"), {"partition": "gpu"}),
    # --- string fields, verbatim
    case("partition list", ("-p", "gpu,cpu", "job.sh"), {"partition": "gpu,cpu"}),
    case("partition empty", ("-p", "", "job.sh"), {"partition": ""}),
    case("qos", ("-q", "high", "job.sh"), {"qos": "high"}),
    case("qos long", ("--qos=high", "job.sh"), {"qos": "high"}),
    case("job name", ("-J", "train run", "job.sh"), {"name": "train run"}),
    case("job name long", ("--job-name=t", "job.sh"), {"name": "t"}),
    case("comment", ("--comment", "gpu_mem=30G x", "job.sh"), {"comment": "gpu_mem=30G x"}),
    case("comment empty", ("--comment=", "job.sh"), {"comment": ""}),
    case("constraint", ("-C", "a100&nvlink", "job.sh"), {"features": "a100&nvlink"}),
    case("constraint long", ("--constraint=[a|b]*2", "job.sh"), {"features": "[a|b]*2"}),
    case("array", ("--array=0-3%2", "job.sh"), {"array_inx": "0-3%2"}),
    case("array short", ("-a", "1,2", "job.sh"), {"array_inx": "1,2"}),
    # --- nodes and tasks
    case("nodes", ("-N", "2", "job.sh"), {"min_nodes": 2, "max_nodes": 2}),
    case("nodes range", ("--nodes=2-4", "job.sh"), {"min_nodes": 2, "max_nodes": 4}),
    case("nodes zero", ("-N", "0", "job.sh"), {"min_nodes": 0}),
    case("nodes k suffix", ("-N", "1k", "job.sh"), {"min_nodes": 1024, "max_nodes": 1024}),
    case("ntasks", ("-n", "4", "job.sh"), {"num_tasks": 4}),
    case("ntasks long", ("--ntasks=4", "job.sh"), {"num_tasks": 4}),
    case("ntasks-per-node with -n", ("--ntasks-per-node=2", "-n", "4", "job.sh"),
         {"num_tasks": 4, "ntasks_per_node": 2}),
    case("old --tasks-per-node", ("--tasks-per-node=2", "-n", "4", "job.sh"),
         {"num_tasks": 4, "ntasks_per_node": 2}),
    # --- requeue, exclusive, switches
    case("requeue", ("--requeue", "job.sh"), {"requeue": 1}),
    case("no-requeue", ("--no-requeue", "job.sh"), {"requeue": 0}),
    case("requeue last wins", ("--requeue", "--no-requeue", "job.sh"), {"requeue": 0}),
    case("exclusive", ("--exclusive", "job.sh"), {"shared": 0}),
    case("exclusive=", ("--exclusive=", "job.sh"), {"shared": 0}),
    case("exclusive=exclusive", ("--exclusive=EXCLUSIVE", "job.sh"), {"shared": 0}),
    case("exclusive=user", ("--exclusive=user", "job.sh"), {"shared": 2}),
    case("exclusive=mcs", ("--exclusive=mcs", "job.sh"), {"shared": 3}),
    case("exclusive=oversubscribe", ("--exclusive=oversubscribe", "job.sh"), {"shared": 1}),
    case("oversubscribe", ("--oversubscribe", "job.sh"), {"shared": 1}),
    case("oversubscribe short", ("-s", "job.sh"), {"shared": 1}),
    case("exclusive then -s", ("--exclusive", "-s", "job.sh"), {"shared": 1}),
    case("-s then exclusive", ("-s", "--exclusive", "job.sh"), {"shared": 0}),
    case("switches", ("--switches=2", "job.sh"), {"req_switch": 2}),
    case("switches@mm:ss", ("--switches=1@10:00", "job.sh"),
         {"req_switch": 1, "wait4switch": 600}),
    case("switches@minutes", ("--switches=1@5", "job.sh"), {"req_switch": 1, "wait4switch": 300}),
    case("switches@h:m:s", ("--switches=2@1:00:00", "job.sh"),
         {"req_switch": 2, "wait4switch": 3600}),
    case("switches@days", ("--switches=1@1-0", "job.sh"), {"req_switch": 1, "wait4switch": 86400}),
    case("switches@0", ("--switches=1@0", "job.sh"), {"req_switch": 1, "wait4switch": 0}),
    case("switches@infinite dropped", ("--switches=1@infinite", "job.sh"), {"req_switch": 1}),
    case("switches@garbage dropped", ("--switches=1@abc", "job.sh"), {"req_switch": 1}),
    # --- optional arguments are attached only; flags never take the next word
    case("nice=5", ("--nice=5", "-p", "gpu", "job.sh"), {"partition": "gpu"}),
    case("no-kill=off", ("--no-kill=off", "-p", "gpu", "job.sh"), {"partition": "gpu"}),
    case("-koff", ("-koff", "-p", "gpu", "job.sh"), {"partition": "gpu"}),
    case("flags", ("--hold", "-H", "--parsable", "-vv", "--test-only", "--spread-job",
                   "--use-min-nodes", "--contiguous", "--overcommit", "-O", "--no-kill",
                   "-k", "--reboot", "-W", "--wait", "--ignore-pbs", "--propagate",
                   "--get-user-env", "--nice", "-p", "gpu", "job.sh"), {"partition": "gpu"}),
    case("ignored options with values",
         ("-o", "out.txt", "-e", "err.txt", "--mail-type", "END", "--mail-user=a@b", "--begin", "now+1hour", "-D", "/tmp",
          "--dependency", "afterok:1", "-d", "singleton", "--export", "ALL",
          "-L", "lic:1", "-x", "n1",
          "--reservation", "r", "--gres-flags", "enforce-binding", "--signal", "B:USR1@60",
          "--wckey", "w", "--licenses=a", "-i", "in", "--open-mode", "append",
          "--prefer", "a100", "--priority", "5", "--tmp", "1G",
          "--gpu-bind", "closest", "--gpu-freq", "high", "--cpu-freq", "high",
          "--acctg-freq", "task=30", "--profile", "all", "--kill-on-invalid-dep", "yes",
          "-p", "gpu", "job.sh"), {"partition": "gpu"}),
    # CPUs and memory reach job_desc as Slurm's fields (memory in MB)
    case("cpus and memory per node",
         ("-c", "8", "--mem", "4G", "--mincpus", "16", "job.sh"),
         {"cpus_per_task": 8, "min_mem_per_node": 4096, "pn_min_cpus": 16}),
    case("whole-node memory", ("--mem=0", "job.sh"), {"min_mem_per_node": 0}),
    case("per-gpu cpus and memory",
         ("--gpus=2", "--cpus-per-gpu", "4", "--mem-per-gpu=100G", "job.sh"),
         {"tres_per_job": "gres:gpu:2", "cpus_per_tres": "gres:gpu:4",
          "mem_per_tres": "gres:gpu:102400"}),
    case("memory per cpu, in default MB", ("--mem-per-cpu=2000", "job.sh"),
         {"min_mem_per_cpu": 2000}),
    case("memory in T and K", ("--mem=1T", "job.sh"), {"min_mem_per_node": 1048576}),
]


@pytest.mark.parametrize(("argv", "expected"), OPTIONS)
def test_options(argv: tuple[str, ...], expected: dict[str, Any]) -> None:
    want = {"name": "job.sh", **expected}
    assert one(*argv) == {key: want[key] for key in JOB_FIELDS if key in want}


def test_keys_follow_job_fields_and_user_id_is_optional() -> None:
    (job,) = parse_sbatch(["-A", "ml", "-t", "5", "job.sh"], PLAIN, user="bob", user_id=1234)
    assert list(job) == ["user_name", "user_id", "account", "time_limit", "name"]
    assert job["user_id"] == 1234
    (job,) = parse_sbatch(["job.sh"], PLAIN, user="bob")
    assert job == {"user_name": "bob", "name": "job.sh"}


# ----------------------------------------------------------------------------- GPUs

GPUS = [
    case("gres typed", ("--gres=gpu:a100:2",),
         {"tres_per_node": "gres:gpu:a100:2", "gres": "gres:gpu:a100:2"}),
    case("gres bare gpu", ("--gres=gpu",), {"tres_per_node": "gres:gpu", "gres": "gres:gpu"}),
    case("gres shard", ("--gres=shard:2",), {"tres_per_node": "gres:shard:2",
                                            "gres": "gres:shard:2"}),
    case("gres list keeps every item", ("--gres=shard:1,shard:2",),
         {"tres_per_node": "gres:shard:1,gres:shard:2", "gres": "gres:shard:1,gres:shard:2"}),
    case("zero GPUs beside a shard", ("--gres=gpu:0,shard:1",),
         {"tres_per_node": "gres:gpu:0,gres:shard:1", "gres": "gres:gpu:0,gres:shard:1"}),
    case("gres two types", ("--gres=gpu:a100:1,gpu:v100:1",),
         {"tres_per_node": "gres:gpu:a100:1,gres:gpu:v100:1",
          "gres": "gres:gpu:a100:1,gres:gpu:v100:1"}),
    case("gres prefix not doubled", ("--gres=gres:gpu:1",),
         {"tres_per_node": "gres:gpu:1", "gres": "gres:gpu:1"}),
    case("gres last wins", ("--gres=gpu:2", "--gres=gpu:4"),
         {"tres_per_node": "gres:gpu:4", "gres": "gres:gpu:4"}),
    case("gres none", ("--gres=none",), {}),
    case("gres NONE", ("--gres=NONE",), {}),
    case("gpus", ("--gpus=4",), {"tres_per_job": "gres:gpu:4"}),
    case("-G N", ("-G", "4"), {"tres_per_job": "gres:gpu:4"}),
    case("-GN", ("-G4",), {"tres_per_job": "gres:gpu:4"}),
    case("gpus typed", ("--gpus=a100:2",), {"tres_per_job": "gres:gpu:a100:2"}),
    case("gpus list", ("--gpus=a100:2,v100:1",),
         {"tres_per_job": "gres:gpu:a100:2,gres:gpu:v100:1"}),
    case("gpus empty list", ("--gpus=,",), {}),
    case("gpus zero", ("--gpus=0",), {"tres_per_job": "gres:gpu:0"}),
    case("gpus-per-node", ("--gpus-per-node=a100:2",),
         {"tres_per_node": "gres:gpu:a100:2", "gres": "gres:gpu:a100:2"}),
    case("gres and gpus-per-node join", ("--gres=gpu:2", "--gpus-per-node=1"),
         {"tres_per_node": "gres:gpu:1,gres:gpu:2", "gres": "gres:gpu:1,gres:gpu:2"}),
    case("gpus-per-task", ("--gpus-per-task=1", "-n", "2"),
         {"tres_per_task": "gres:gpu:1", "num_tasks": 2}),
    case("gpus-per-socket", ("--gpus-per-socket=1", "--sockets-per-node=2"),
         {"tres_per_socket": "gres:gpu:1"}),
    # sbatch's own GRES check fills in tasks and nodes
    case("gpus / gpus-per-task → tasks", ("--gpus=a100:4", "--gpus-per-task=a100:2"),
         {"tres_per_job": "gres:gpu:a100:4", "tres_per_task": "gres:gpu:a100:2",
          "num_tasks": 2}),
    case("gpus / gres → nodes", ("--gpus=4", "--gres=gpu:2"),
         {"tres_per_node": "gres:gpu:2", "gres": "gres:gpu:2", "tres_per_job": "gres:gpu:4",
          "min_nodes": 2, "max_nodes": 2}),
    case("gpus cap the node range", ("-N", "1-8", "--gpus=4"),
         {"tres_per_job": "gres:gpu:4", "min_nodes": 1, "max_nodes": 4}),
    case("gpus-per-node / gpus-per-task → ntasks-per-node",
         ("--gpus-per-task=2", "-n", "2", "--gpus-per-node=2"),
         {"tres_per_node": "gres:gpu:2", "gres": "gres:gpu:2", "tres_per_task": "gres:gpu:2",
          "num_tasks": 2, "ntasks_per_node": 1}),
    case("gpus-per-task counts one task per fixed node", ("-N", "3", "--gpus-per-task=1"),
         {"tres_per_task": "gres:gpu:1", "min_nodes": 3, "max_nodes": 3, "num_tasks": 3}),
    case("ntasks-per-gpu × gpus", ("--ntasks-per-gpu=2", "--gpus=3"),
         {"tres_per_job": "gres:gpu:3", "num_tasks": 6}),
    case("ntasks-per-gpu overrides -n", ("--ntasks-per-gpu=2", "--gpus=3", "-n", "5"),
         {"tres_per_job": "gres:gpu:3", "num_tasks": 6}),
    case("ntasks-per-gpu × gpus-per-node × nodes",
         ("--ntasks-per-gpu=2", "--gpus-per-node=2", "-N", "2"),
         {"tres_per_node": "gres:gpu:2", "gres": "gres:gpu:2", "min_nodes": 2,
          "max_nodes": 2, "num_tasks": 8}),
    case("ntasks-per-gpu one gpu per fixed node", ("-N", "2", "--ntasks-per-gpu=2"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 4}),
]


@pytest.mark.parametrize(("argv", "expected"), GPUS)
def test_gpu_options(argv: tuple[str, ...], expected: dict[str, Any]) -> None:
    assert one(*argv, "job.sh") == {**expected, "name": "job.sh"}


# ----------------------------------------------------------------------------- derived

DERIVED = [
    case("ntasks-per-node × nodes", ("-N", "2", "--ntasks-per-node=4"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 8, "ntasks_per_node": 4}),
    case("ntasks-per-node alone counts one node", ("--ntasks-per-node=2",),
         {"num_tasks": 2, "ntasks_per_node": 2}),
    case("ntasks-per-node with a node range", ("-N", "2-4", "--ntasks-per-node=2"),
         {"min_nodes": 2, "max_nodes": 4, "ntasks_per_node": 2}),
    case("ntasks-per-node with -N 0", ("-N", "0", "--ntasks-per-node=2"),
         {"min_nodes": 0, "num_tasks": 0, "ntasks_per_node": 2}),
    case("explicit -n wins", ("-N", "2", "--ntasks-per-node=4", "-n", "3"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 3, "ntasks_per_node": 4}),
    case("-n caps max nodes", ("-N", "2-4", "-n", "3"),
         {"min_nodes": 2, "max_nodes": 3, "num_tasks": 3}),
    case("-n below min nodes", ("-N", "3", "-n", "1"),
         {"min_nodes": 1, "max_nodes": 1, "num_tasks": 1}),
    case("nodelist sets min nodes", ("-w", "n[1-2],n4",), {"min_nodes": 3}),
    case("nodelist repeats count once", ("-w", "n1,n1",), {"min_nodes": 1}),
    case("nodelist zero padded", ("--nodelist=gpu[01-03]",), {"min_nodes": 3}),
    case("nodelist and more nodes", ("-w", "n[1-3]", "-N", "5"),
         {"min_nodes": 5, "max_nodes": 5}),
    case("nodelist and -n", ("-w", "n[1-3]", "-n", "2"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 2}),
    # sbatch reads a host file (a "/" in -w) for its length; a pure parser cannot
    case("nodelist file is not read", ("-w", "./hosts"), {}),
    case("-B sockets", ("-B", "2",), {"num_tasks": 2}),
    case("-B sockets:cores", ("-B", "2:3",), {"num_tasks": 6}),
    case("-B with nodes", ("-B", "2:3:2", "-N", "2"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 24}),
    case("-B placeholder", ("-B", "*:4", "-N", "2"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 8}),
    case("-B clears what it leaves out", ("--threads-per-core=2", "-B", "*:2"),
         {"num_tasks": 2}),
    case("-B range takes the minimum", ("-B", "2-4:1", "-N", "1"),
         {"min_nodes": 1, "max_nodes": 1, "num_tasks": 2}),
    case("sockets-per-node without nodes", ("--sockets-per-node=2",), {}),
    case("cores-per-socket", ("-N", "2", "--cores-per-socket=4"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 8}),
    case("threads-per-core", ("-N", "2", "--threads-per-core=2"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 4}),
    case("hint nomultithread", ("-N", "2", "--hint=nomultithread"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 2}),
    case("hint multithread", ("-N", "2", "--hint=multithread"),
         {"min_nodes": 2, "max_nodes": 2}),
    case("hint replaces sockets", ("-N", "2", "--sockets-per-node=2", "--hint=memory_bound"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 2}),
    case("hint ignored with threads", ("-N", "2", "--hint=nomultithread",
                                       "--threads-per-core=2"),
         {"min_nodes": 2, "max_nodes": 2, "num_tasks": 4}),
    case("hint ignored with -B", ("-B", "*:2", "--hint=compute_bound"), {"num_tasks": 2}),
    case("arbitrary counts the node list", ("-m", "arbitrary", "-w", "n1,n1,n2"),
         {"min_nodes": 2, "num_tasks": 2}),
]


@pytest.mark.parametrize(("argv", "expected"), DERIVED)
def test_derived_tasks_and_nodes(argv: tuple[str, ...], expected: dict[str, Any]) -> None:
    assert one(*argv, "job.sh") == {**expected, "name": "job.sh"}


# ----------------------------------------------------------------------------- errors

ERRORS = [
    case("unknown long option", ("--bogus", "job.sh"), "unrecognized option '--bogus'"),
    case("unknown short option", ("-X", "job.sh"), "invalid option -- 'X'"),
    case("ambiguous prefix", ("--exclu", "job.sh"),
         "option '--exclu' is ambiguous; possibilities: '--exclude' '--exclusive'"),
    case("missing value long", ("--time",), "option '--time' requires an argument"),
    case("missing value short", ("-t",), "option '-t' requires an argument"),
    case("missing value bundled", ("-Hp",), "option '-p' requires an argument"),
    case("flag given a value", ("--hold=x", "job.sh"), "option '--hold' doesn't allow"),
    case("requeue given a value", ("--requeue=1", "job.sh"), "option '--requeue' doesn't"),
    case("ntasks zero", ("-n", "0", "job.sh"), "-n: invalid number '0'"),
    case("ntasks word", ("--ntasks=x", "job.sh"), "--ntasks: invalid number 'x'"),
    case("ntasks-per-node zero", ("--ntasks-per-node=0", "job.sh"), "--ntasks-per-node"),
    case("nodes word", ("-N", "abc", "job.sh"), "-N: 'abc' is not a valid node count"),
    case("nodes list", ("-N", "2,4", "job.sh"), "not a valid node count"),
    case("nodes open range", ("-N", "2-", "job.sh"), "not a valid node count"),
    case("nodes backwards", ("--nodes=4-2", "job.sh"), "--nodes: maximum node count 2"),
    case("nodelist over nodes", ("-w", "n[1-3]", "-N", "2", "job.sh"), "invalid number of nodes"),
    case("switches zero", ("--switches=0", "job.sh"), "--switches: invalid number '0'"),
    case("switches word", ("--switches=x@5", "job.sh"), "--switches: invalid number 'x'"),
    case("exclusive value", ("--exclusive=foo", "job.sh"), "--exclusive: invalid value 'foo'"),
    case("no-kill value", ("--no-kill=foo", "job.sh"), "--no-kill: invalid value 'foo'"),
    case("-B value", ("-B", "x", "job.sh"), "-B: invalid number 'x'"),
    case("hint value", ("-N", "2", "--hint=foo", "job.sh"), "--hint: unrecognized hint 'foo'"),
    case("time", ("-t", "1.5", "job.sh"), "-t: invalid time '1.5'"),
    case("wrap with a script", ("--wrap=hostname", "job.sh"), "--wrap and a script"),
    case("mem and mem-per-cpu", ("--mem=1G", "--mem-per-cpu=1G", "job.sh"),
         "--mem and --mem-per-cpu exclude each other"),
    case("mem-per-cpu and mem-per-gpu, het", ("--mem-per-cpu=1G", ":", "--mem-per-gpu=1G",
                                             "job.sh"), "exclude each other"),
    case("verbose and quiet", ("-v", ":", "-Q", "job.sh"), "-v/--verbose and -Q/--quiet"),
    case("help", ("--help",), "--help only prints information"),
    case("version", ("-V",), "-V only prints information"),
    case("gres syntax", ("--gres=gpu=2", "job.sh"), "--gres/--gpus-per-node: invalid generic"),
    case("gpus syntax", ("--gpus=a100:2:3", "job.sh"), "--gpus: invalid generic"),
    case("gpus-per-task without tasks", ("--gpus-per-task=1", "job.sh"),
         "--gpus-per-task needs --gpus or -n/--ntasks"),
    case("gpus-per-task with a node range", ("-N", "2-4", "--gpus-per-task=1", "job.sh"),
         "--gpus-per-task needs"),
    case("gpus-per-task with -c", ("-N", "2", "-c", "2", "--gpus-per-task=1", "job.sh"),
         "--gpus-per-task needs"),
    case("gpus not a multiple of per-task", ("--gpus=3", "--gpus-per-task=2", "job.sh"),
         "not a multiple of its per-task count"),
    case("gpus per task disagree with -n", ("--gpus=4", "--gpus-per-task=2", "-n", "3", "job.sh"),
         "mean 2 tasks, not 3"),
    case("gpu and shard in one job", ("--gres=gpu:2,shard:1", "job.sh"),
         "GPUs and shard (slices of GPUs) cannot be asked for in one job"),
    case("gpus and a shard", ("--gpus=1", "--gres=shard:1", "job.sh"), "GPUs and shard"),
    case("typed and untyped gpus", ("--gres=gpu:a100:2", "--gpus=4", "job.sh"),
         "both with and without a type"),
    case("gpus fewer than nodes", ("-N", "3", "--gpus=2", "job.sh"), "less than the 3 nodes"),
    case("gpus not a multiple of per-node", ("--gpus=3", "--gres=gpu:2", "job.sh"),
         "not a multiple of its per-node count"),
    case("gpus below per-node", ("--gpus=1", "--gres=gpu:2", "job.sh"), "--gpus must be >="),
    case("per-task above per-node", ("--gpus-per-node=1", "--gpus-per-task=2", "-n", "1",
                                     "job.sh"), "per task is more than"),
    case("gpus-per-socket without sockets", ("--gpus-per-socket=1", "job.sh"),
         "--gpus-per-socket needs --sockets-per-node"),
    case("per-socket disagrees with sockets",
         ("--gpus-per-node=2", "--gpus-per-socket=1", "--sockets-per-node=1", "job.sh"),
         "need 2 sockets, not --sockets-per-node=1"),
    case("ntasks-per-gpu and gpus-per-task",
         ("--ntasks-per-gpu=2", "--gpus-per-task=1", "--gpus=2", "job.sh"),
         "--gpus-per-task and --ntasks-per-gpu exclude each other"),
    case("ntasks-per-gpu and ntasks-per-node",
         ("--ntasks-per-gpu=2", "--ntasks-per-node=1", "--gpus=2", "job.sh"),
         "--ntasks-per-node and --ntasks-per-gpu"),
    case("ntasks-per-gpu alone", ("--ntasks-per-gpu=2", "job.sh"), "--ntasks-per-gpu needs"),
    case("ntasks not a multiple of ntasks-per-gpu", ("-n", "3", "--ntasks-per-gpu=2", "job.sh"),
         "must be a multiple of --ntasks-per-gpu"),
    case("arbitrary without a node list", ("-m", "arbitrary", "job.sh"),
         "-m arbitrary needs a node list"),
    case("het: ntasks-per-gpu in one component, gpus-per-task in another",
         ("--gpus-per-task=1", "-n", "2", ":", "--ntasks-per-gpu=1", "--gpus=1", "job.sh"),
         "exclude each other"),
]


@pytest.mark.parametrize(("argv", "message"), ERRORS)
def test_sbatch_refuses(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(SbatchParseError) as err:
        parse_sbatch(argv, PLAIN, user="alice")
    assert message in str(err.value)


# ----------------------------------------------------------------------------- script

SCRIPT = """#!/bin/bash
#SBATCH -p gpu -t 60
#SBATCH --account=acctA   # a trailing comment
#SBATCH -J "my job" --comment='a b'
   # an indented comment

#SBATCH --gres=gpu:a100:2
srun hostname
#SBATCH -q never-read
"""

SCRIPTS = [
    case("directives", SCRIPT, (),
         {"account": "acctA", "partition": "gpu", "tres_per_node": "gres:gpu:a100:2",
          "gres": "gres:gpu:a100:2", "time_limit": 60, "name": "my job", "comment": "a b"}),
    case("command line overrides", SCRIPT, ("-p", "cpu", "-J", "cli", "--gres=none"),
         {"account": "acctA", "partition": "cpu", "time_limit": 60, "name": "cli",
          "comment": "a b"}),
    case("indented #SBATCH is a comment", "#!/bin/sh\n  #SBATCH -p cpu\n#SBATCH -t 5\n", (),
         {"time_limit": 5}),
    case("lower case #sbatch is a comment", "#!/bin/sh\n#sbatch -p cpu\n#SBATCH -t 5\n", (),
         {"time_limit": 5}),
    case("#SLURM still works", "#!/bin/sh\n#SLURM -A old\n", (), {"account": "old"}),
    case("tab and no space after #SBATCH", "#!/bin/sh\n#SBATCH\t-p gpu\n#SBATCH-t 7\n", (),
         {"partition": "gpu", "time_limit": 7}),
    case("escaped quote", '#!/bin/sh\n#SBATCH --comment=a\\"b\n', (), {"comment": 'a"b'}),
    case("hash inside quotes", '#!/bin/sh\n#SBATCH -C "a#b"\n', (), {"features": "a#b"}),
    case("hash ends the word", "#!/bin/sh\n#SBATCH -C a#b -p x\n", (), {"features": "a"}),
    case("time-min 0 in script", "#!/bin/sh\n#SBATCH --time-min=0\n", (),
         {"time_min": INFINITE}),
    case("a stray hetjob word ends the line",
         "#!/bin/sh\n#SBATCH -p gpu HETJOB -t 5\n#SBATCH --comment=c\n", (),
         {"partition": "gpu", "comment": "c"}),
    case("hetjob inside a word is just text", "#!/bin/sh\n#SBATCH -J myhetjobname\n", (),
         {"name": "myhetjobname"}),
    case("--wrap in a script is ignored", "#!/bin/sh\n#SBATCH -p gpu --wrap=foo\n", (),
         {"partition": "gpu"}),
]


@pytest.mark.parametrize(("script", "argv", "expected"), SCRIPTS)
def test_batch_script_directives(script: str, argv: tuple[str, ...],
                                 expected: dict[str, Any]) -> None:
    assert one(*argv, "job.sh", script=script) == {"name": "job.sh", **expected}


BAD_SCRIPTS = [
    case("not an option", "#!/bin/sh\n#SBATCHx -t 7\n", "line 2: invalid directive 'x'"),
    case("quoted hetjob is a word", '#!/bin/sh\n#SBATCH -p a\n#SBATCH "hetjob"\n',
         "line 3: invalid directive 'hetjob'"),
    case("backslash space does not join", "#!/bin/sh\n#SBATCH --comment=x\\ y\n",
         "invalid directive 'y'"),
    case("unmatched quote", '#!/bin/sh\n#SBATCH -J "open\n', 'line 2: unmatched "'),
    case("colon", "#!/bin/sh\n#SBATCH : -p x\n", "line 2: unexpected ':'"),
    case("bad value", "#!/bin/sh\n#SBATCH -t abc\n", "-t: invalid time 'abc'"),
    case("unknown option", "#!/bin/sh\n#SBATCH --bogus\n",
         "batch script: unrecognized option '--bogus'"),
    case("no shebang", "#SBATCH -p cpu\nhostname\n", "does not look like a batch script"),
    case("DOS line breaks", "#!/bin/sh\r\n#SBATCH -p gpu\r\n", "DOS line breaks"),
    case("empty", "", "the batch script is empty"),
    case("whitespace", "  \n\n", "only whitespace"),
]


@pytest.mark.parametrize(("script", "message"), BAD_SCRIPTS)
def test_bad_batch_scripts(script: str, message: str) -> None:
    with pytest.raises(SbatchParseError) as err:
        parse_sbatch(["job.sh"], script, user="alice")
    assert message in str(err.value)


# ----------------------------------------------------------------------------- names

NAMES = [
    case("script basename", ("dir/sub/train.sh",), PLAIN, "train.sh"),
    case("script with args", ("./train.sh", "--lr", "3"), PLAIN, "train.sh"),
    case("stdin", ("-p", "gpu"), PLAIN, "sbatch"),
    case("no script text", ("-p", "gpu", "train.sh"), None, "train.sh"),
    case("wrap", ("--wrap=hostname",), None, "wrap"),
    case("wrap space", ("--wrap", "echo hi"), None, "wrap"),
    case("wrap with -J", ("-J", "named", "--wrap", "echo x"), None, "named"),
    case("-J empty", ("-J", "", "train.sh"), PLAIN, ""),
]


@pytest.mark.parametrize(("argv", "script", "name"), NAMES)
def test_job_name_default(argv: tuple[str, ...], script: str | None, name: str) -> None:
    assert one(*argv, script=script)["name"] == name


def test_wrap_skips_the_script_text() -> None:
    assert one("--wrap=hostname", script="#!/bin/sh\n#SBATCH -p gpu\n") == {"name": "wrap"}


# ----------------------------------------------------------------------------- het jobs

HET_SCRIPT = """#!/bin/bash
#SBATCH -p gpu -A a1 -t 10 --gpus=2 -N 2 -J hj --requeue --exclusive -C f0 --switches=2
#SBATCH hetjob
#SBATCH -p cpu -n 4
#SBATCH packjob
#SBATCH -N 3
echo hi
"""

HET = [
    case("script components; shared options carry on", ("job.sh",), HET_SCRIPT, [
        {"account": "a1", "partition": "gpu", "tres_per_job": "gres:gpu:2", "features": "f0",
         "min_nodes": 2, "max_nodes": 2, "time_limit": 10, "requeue": 1, "name": "hj",
         "het_job_offset": 0, "shared": 0, "req_switch": 2},
        {"account": "a1", "partition": "cpu", "num_tasks": 4, "time_limit": 10, "requeue": 1,
         "name": "hj", "het_job_offset": 1},
        {"account": "a1", "min_nodes": 3, "max_nodes": 3, "time_limit": 10, "requeue": 1,
         "name": "hj", "het_job_offset": 2}]),
    case("one command line component applies to every script component",
         ("-A", "cli", "job.sh"), HET_SCRIPT, [
             {"account": "cli", "partition": "gpu", "tres_per_job": "gres:gpu:2",
              "features": "f0", "min_nodes": 2, "max_nodes": 2, "time_limit": 10,
              "requeue": 1, "name": "hj", "het_job_offset": 0, "shared": 0, "req_switch": 2},
             {"account": "cli", "partition": "cpu", "num_tasks": 4, "time_limit": 10,
              "requeue": 1, "name": "hj", "het_job_offset": 1},
             {"account": "cli", "min_nodes": 3, "max_nodes": 3, "time_limit": 10,
              "requeue": 1, "name": "hj", "het_job_offset": 2}]),
    case("last command line component repeats", ("-p", "gpu", ":", "-p", "cpu", "job.sh"),
         HET_SCRIPT, [
        {"account": "a1", "partition": "gpu", "tres_per_job": "gres:gpu:2", "features": "f0",
         "min_nodes": 2, "max_nodes": 2, "time_limit": 10, "requeue": 1, "name": "hj",
         "het_job_offset": 0, "shared": 0, "req_switch": 2},
        {"account": "a1", "partition": "cpu", "num_tasks": 4, "time_limit": 10, "requeue": 1,
         "name": "hj", "het_job_offset": 1},
        {"account": "a1", "partition": "cpu", "min_nodes": 3, "max_nodes": 3, "time_limit": 10,
         "requeue": 1, "name": "hj", "het_job_offset": 2}]),
    case("colon components", ("-p", "gpu", "-A", "x", "-t", "30", "-G", "1", ":", "-p", "cpu",
                              "-n", "2", "job.sh"), PLAIN, [
        {"account": "x", "partition": "gpu", "tres_per_job": "gres:gpu:1", "time_limit": 30,
         "name": "job.sh", "het_job_offset": 0},
        {"account": "x", "partition": "cpu", "num_tasks": 2, "time_limit": 30,
         "name": "job.sh", "het_job_offset": 1}]),
    case("later components' shared options reach component 0",
         ("-p", "gpu", "-A", "x", ":", "-A", "y", "-q", "q2", ":", "-N", "2", "job.sh"), PLAIN, [
             {"account": "x", "partition": "gpu", "qos": "q2", "name": "job.sh",
              "het_job_offset": 0},
             {"account": "y", "qos": "q2", "name": "job.sh", "het_job_offset": 1},
             {"account": "y", "qos": "q2", "min_nodes": 2, "max_nodes": 2, "name": "job.sh",
              "het_job_offset": 2}]),
    case("per-component options reset",
         ("--gres=gpu:1", "--exclusive", "-N", "2", "-s", ":", "--gpus-per-node=2", "-n", "3",
          "job.sh"), PLAIN, [
             {"tres_per_node": "gres:gpu:1", "gres": "gres:gpu:1", "min_nodes": 2,
              "max_nodes": 2, "name": "job.sh", "het_job_offset": 0, "shared": 1},
             {"tres_per_node": "gres:gpu:2", "gres": "gres:gpu:2", "num_tasks": 3,
              "name": "job.sh", "het_job_offset": 1}]),
    case("script first, then the command line, per component",
         (":", "-A", "y", "job.sh"),
         "#!/bin/sh\n#SBATCH -A a1 -p gpu\n#SBATCH hetjob\n#SBATCH -n 2\n", [
             {"account": "a1", "partition": "gpu", "name": "job.sh", "het_job_offset": 0},
             {"account": "y", "num_tasks": 2, "name": "job.sh", "het_job_offset": 1}]),
    case("hint carries forward only", ("-N", "2", ":", "--hint=nomultithread", "-N", "2",
                                       ":", "-N", "2", "job.sh"), PLAIN, [
        {"min_nodes": 2, "max_nodes": 2, "name": "job.sh", "het_job_offset": 0},
        {"min_nodes": 2, "max_nodes": 2, "num_tasks": 2, "name": "job.sh", "het_job_offset": 1},
        {"min_nodes": 2, "max_nodes": 2, "num_tasks": 2, "name": "job.sh",
         "het_job_offset": 2}]),
    case("wrap", ("-p", "gpu", "--wrap=hostname", ":", "-p", "cpu"), None, [
        {"partition": "gpu", "name": "wrap", "het_job_offset": 0},
        {"partition": "cpu", "name": "wrap", "het_job_offset": 1}]),
]


@pytest.mark.parametrize(("argv", "script", "expected"), HET)
def test_het_jobs(argv: tuple[str, ...], script: str | None,
                  expected: list[dict[str, Any]]) -> None:
    assert jobs(*argv, script=script) == expected


def test_single_component_has_no_het_offset() -> None:
    assert "het_job_offset" not in one("-p", "gpu", "job.sh")


# ----------------------------------------------------------------------------- wire round trip

def test_round_trip_through_wire() -> None:
    script = ("#!/bin/bash\n#SBATCH -A proj --qos=high -p gpu,cpu -C a100\n"
              "#SBATCH --gpus-per-node=a100:4 -N 2 --ntasks-per-node=4\n")
    (job,) = parse_sbatch(["--time-min=0", "-t", "2-0", "--exclusive", "--requeue",
                           "--switches=1@10:00", "--comment", "gpu_mem=30G", "train.sh"],
                          script, user="alice", user_id=1001)
    req = to_request(normalize(job))
    assert req.user == "alice" and req.name == "train.sh"
    assert req.account == "proj" and req.qos == "high" and req.partitions == ("gpu", "cpu")
    assert req.gpus == (GpuRequest(4, "node", "a100"),)
    assert req.total_gpus() == 8
    assert (req.min_nodes, req.max_nodes, req.num_tasks, req.ntasks_per_node) == (2, 2, 8, 4)
    assert req.time_limit_min == 2880
    assert req.time_min_min == NO_MIN_RUNTIME == 0  # --time-min=0 arrives as INFINITE
    assert req.exclusive is True and req.requeue is True and req.switches == 1
    assert req.features == "a100" and req.comment == "gpu_mem=30G"
    assert req.het_offset is None


RT = [
    case("plain job", ("job.sh",), {"gpus": (), "exclusive": None, "time_min_min": None,
                                    "time_limit_min": None, "num_tasks": None}),
    case("unlimited time", ("-t", "infinite", "job.sh"), {"time_limit_min": None}),
    case("gpus per job", ("-G", "a100:2", "job.sh"), {"gpus": (GpuRequest(2, "job", "a100"),)}),
    case("gpus per task", ("--gpus=4", "--gpus-per-task=2", "job.sh"),
         {"gpus": (GpuRequest(4, "job", None), GpuRequest(2, "task", None)), "num_tasks": 2}),
    case("gres counted once", ("--gres=gpu:2", "-N", "3", "job.sh"),
         {"gpus": (GpuRequest(2, "node", None),), "min_nodes": 3}),
    case("oversubscribe is not exclusive", ("-s", "job.sh"), {"exclusive": False}),
    case("exclusive=user is not whole-node", ("--exclusive=user", "job.sh"),
         {"exclusive": False}),
    case("no-requeue", ("--no-requeue", "job.sh"), {"requeue": False}),
    case("time-min", ("--time-min=1:30", "job.sh"), {"time_min_min": 2}),
]


@pytest.mark.parametrize(("argv", "expected"), RT)
def test_round_trip_fields(argv: tuple[str, ...], expected: dict[str, Any]) -> None:
    (job,) = parse_sbatch(argv, PLAIN, user="alice")
    req = to_request(normalize(job))
    assert {key: getattr(req, key) for key in expected} == expected


def test_round_trip_het_offsets() -> None:
    reqs = [to_request(normalize(job)) for job in
            parse_sbatch(["-p", "gpu", "-G", "1", ":", "-p", "cpu", "job.sh"], PLAIN,
                         user="alice")]
    assert [(r.het_offset, r.partitions, r.total_gpus()) for r in reqs] == [
        (0, ("gpu",), 1), (1, ("cpu",), 0)]


@pytest.mark.parametrize(("argv", "script", "want"), [
    (["--gres=gpu:2"], None, "--gres"),
    (["--gpus-per-node=2"], None, "--gpus-per-node"),
    ([], "#!/bin/sh\n#SBATCH --gpus-per-node=a100_80g:2\n", "--gpus-per-node"),
    (["--gres=gpu:4"], "#!/bin/sh\n#SBATCH --gpus-per-node=2\n", "--gres"),  # CLI wins
    (["--gpus=4"], None, None),
])
def test_the_option_gpus_per_node_were_written_in_is_known(
        argv: list[str], script: str | None, want: str | None) -> None:
    """job_desc has both options in tres_per_node; advice names the one the user wrote."""
    line = [*argv, "--wrap", "true"] if script is None else [*argv, "job.sh"]
    assert per_node_gpu_options(line, script, user="bob") == [want]
