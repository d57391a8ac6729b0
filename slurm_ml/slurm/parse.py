"""Pure parsers for what each Slurm version prints.

Each function takes the text a command printed and returns model values; no
I/O. They are tested on real captures from 22.05 and 24.11 in
``tests/fixtures/slurm/<version>/`` (see SOURCES.md there).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from slurm_ml.model import GpuRequest, Job, JobState, JobUsage, Node
from slurm_ml.slurm.errors import SlurmParseError
from slurm_ml.slurm.tres import gpu_type_of_gres, gpus_in_tres, parse_gpu_spec, parse_tres

NO_VAL = 4294967294
INFINITE = 4294967295
_NONE_TEXT = {"", "(null)", "N/A", "None", "Unknown", "(None)"}

# --------------------------------------------------------------- scontrol -o

_KEY = re.compile(r"(?:^|(?<=\s))([A-Za-z][A-Za-z0-9_:/.]*)=")


def parse_oneliner(line: str) -> dict[str, str]:
    """``scontrol show <x> -o`` line → {key: value}; values may contain spaces."""
    matches = list(_KEY.finditer(line))
    out: dict[str, str] = {}
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


def iter_oneliners(text: str) -> Iterator[dict[str, str]]:
    for line in text.splitlines():
        if line.strip() and "=" in line:
            yield parse_oneliner(line)


def _opt(value: str | None) -> str:
    return "" if value is None or value.strip() in _NONE_TEXT else value.strip()


def _int_or_none(value: str | None) -> int | None:
    v = _opt(value)
    return int(v) if v.lstrip("-").isdigit() else None


def parse_timelimit_min(text: str | None) -> int | None:
    """``UNLIMITED``/``Partition_Limit`` → None; ``1-02:03:04``/``02:03:00``/``45`` → minutes."""
    v = _opt(text)
    if not v or v.upper() in {"UNLIMITED", "PARTITION_LIMIT", "INFINITE", "NONE"}:
        return None
    days = 0
    if "-" in v:
        d, _, v = v.partition("-")
        days = int(d)
    parts = [int(p) for p in v.split(":")]
    if len(parts) == 1:
        h, m, s = 0, parts[0], 0
        if days:
            h, m = parts[0], 0
    elif len(parts) == 2:
        h, m, s = (parts[0], parts[1], 0) if days else (0, parts[0], parts[1])
    else:
        h, m, s = parts[0], parts[1], parts[2]
    return days * 1440 + h * 60 + m + (1 if s else 0)


def _gpus_from_fields(fields: Mapping[str, str]) -> tuple[GpuRequest, ...]:
    out: list[GpuRequest] = []
    for key, per in (("TresPerNode", "node"), ("TresPerJob", "job"),
                     ("TresPerTask", "task"), ("TresPerSocket", "socket")):
        out += parse_gpu_spec(_opt(fields.get(key)), per)
    return tuple(out)


def job_from_oneliner(f: Mapping[str, str]) -> Job:
    try:
        job_id = int(f["JobId"])
    except (KeyError, ValueError) as exc:
        raise SlurmParseError(f"scontrol job line without a JobId: {dict(f)!r}") from exc
    user = _opt(f.get("UserId")).split("(")[0]
    nodes = _opt(f.get("NodeList"))
    state = JobState.parse(_opt(f.get("JobState")))
    return Job(
        job_id=job_id,
        name=_opt(f.get("JobName")),
        user=user,
        account=_opt(f.get("Account")),
        partition=_opt(f.get("Partition")),
        qos=_opt(f.get("QOS")),
        state=state,
        reason=_opt(f.get("Reason")),
        nodes=nodes,
        num_nodes=_int_or_none(f.get("NumNodes", "").split("-")[0]) or 1,
        gpus=_gpus_from_fields(f),
        time_limit_min=parse_timelimit_min(f.get("TimeLimit")),
        time_min_min=parse_timelimit_min(f.get("TimeMin")),
        requeue=_opt(f.get("Requeue")) == "1",
        site_factor=None,
        priority=_int_or_none(f.get("Priority")),
        submit_time=None,
        start_time=None,
        features=_opt(f.get("Features")),
        comment=_opt(f.get("Comment")),
        admin_comment=_opt(f.get("AdminComment")),
        num_tasks=_int_or_none(f.get("NumTasks")),
        sockets_per_node=_int_or_none(f.get("Socks/Node")) or None,
        alloc_gpus=_oneliner_alloc_gpus(f, state, nodes),
    )


def _oneliner_alloc_gpus(f: Mapping[str, str], state: JobState, nodes: str) -> int | None:
    """23.02+ print ``AllocTRES``; 22.05 prints one ``TRES``, the allocation once there
    is one and the request before, so it counts only for a job that got nodes."""
    if "AllocTRES" in f:
        text = _opt(f.get("AllocTRES"))
    elif nodes:
        text = _opt(f.get("TRES"))
    else:
        return None
    return _alloc_gpus(state, text)


#: States in which what slurmctld lists as allocated is not (or no longer) the job's.
_UNALLOCATED = frozenset({JobState.PENDING, JobState.REQUEUED})


def _alloc_gpus(state: JobState, text: str) -> int | None:
    return None if state in _UNALLOCATED or not text else gpus_in_tres(text)


def parse_scontrol_jobs(text: str) -> list[Job]:
    """``scontrol show job -o`` → jobs (an empty queue prints "No jobs in the system")."""
    return [job_from_oneliner(f) for f in iter_oneliners(text) if "JobId" in f]


def split_node_state(state: str) -> tuple[str, frozenset[str]]:
    """``IDLE+DRAIN`` → ("IDLE", {"DRAIN"}); ``MIXED*`` → ("MIXED", {"NOT_RESPONDING"})."""
    s = state.strip().upper()
    flags: set[str] = set()
    if s.endswith("*"):
        flags.add("NOT_RESPONDING")
        s = s.rstrip("*")
    base, *rest = s.split("+")
    flags.update(rest)
    if base in {"DRAINED", "DRAINING", "DRAIN"}:
        flags.add("DRAIN")
        base = "IDLE" if base in {"DRAINED", "DRAIN"} else "MIXED"
    return base, frozenset(flags)


def node_from_oneliner(f: Mapping[str, str]) -> Node:
    try:
        name = f["NodeName"]
    except KeyError as exc:
        raise SlurmParseError(f"scontrol node line without NodeName: {dict(f)!r}") from exc
    base, flags = split_node_state(f.get("State", "UNKNOWN"))
    gres = _opt(f.get("Gres"))
    gpu_type, gpus = gpu_type_of_gres(gres)
    features = _opt(f.get("AvailableFeatures") or f.get("Features"))
    return Node(
        name=name,
        state=base,
        flags=flags,
        reason=_strip_reason_stamp(_opt(f.get("Reason"))),
        features=tuple(x for x in features.split(",") if x),
        gres=gres,
        gpus_total=gpus,
        gpu_type=gpu_type,
        cpus=_int_or_none(f.get("CPUTot")) or 0,
        real_memory_mb=_int_or_none(f.get("RealMemory")) or 0,
    )


def _strip_reason_stamp(reason: str) -> str:
    """scontrol appends ``[root@2026-11-30T12:00:00]``; the reason is what comes before."""
    return re.sub(r"\s*\[[^\[\]]*@[^\[\]]*\]\s*$", "", reason)


def parse_scontrol_nodes(text: str) -> list[Node]:
    return [node_from_oneliner(f) for f in iter_oneliners(text) if "NodeName" in f]


# ---------------------------------------------------------------- sacct -P

SACCT_FIELDS = ("JobID", "User", "Account", "QOS", "State", "ElapsedRaw", "AllocTRES",
                "Start", "End", "JobName", "Submit", "NodeList")


def parse_sacct_usage(text: str, window_start: int, window_end: int) -> list[JobUsage]:
    """``sacct -X -P -n --truncate -o <SACCT_FIELDS>`` with SLURM_TIME_FORMAT=%s.

    Seconds inside the window are recomputed from the (truncated) Start/End so
    that a still-running job is charged up to the window's end only.
    """
    out: list[JobUsage] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < len(SACCT_FIELDS) - 2:  # Submit, NodeList were added later: optional
            raise SlurmParseError(f"sacct line has {len(parts)} fields, want "
                                  f"{len(SACCT_FIELDS)}: {line!r}")
        jid, user, account, qos, state, _elapsed, tres, start, end = parts[:9]
        # Submit and NodeList are last: read them from the end so a "|" in JobName cannot
        # shift them. A line without NodeList ends in Submit, a number (or Unknown/None),
        # which no host list is.
        tail = parts[9:]
        nodes = ""
        if len(tail) >= 3 and not _is_time(tail[-1]):
            nodes = tail[-1]
            tail = tail[:-1]
        submit = tail[-1] if len(tail) >= 2 else None
        base_id = jid.split(".")[0]
        if not re.fullmatch(r"\d+(_\d+)?", base_id):
            continue  # steps, array ranges and het components are not charged twice
        start_s = _int_or_none(start)
        if start_s is None:
            continue  # never started: nothing allocated
        end_s = _int_or_none(end)
        lo = max(start_s, window_start)
        hi = min(end_s if end_s is not None else window_end, window_end)
        out.append(JobUsage(
            job_id=int(base_id.split("_")[0]),
            user=user,
            account=account,
            qos=qos,
            state=JobState.parse(state),
            elapsed_s=max(0, hi - lo),
            alloc_tres=parse_tres(tres),
            start=start_s,
            end=end_s,
            submit=_int_or_none(submit),
            nodes="" if nodes.startswith(("None", "(")) else nodes,
        ))
    return out


def _is_time(text: str) -> bool:
    """A sacct time field under SLURM_TIME_FORMAT=%s: epoch seconds or Unknown/None."""
    return text.isdigit() or text in ("", "Unknown", "None")


# ---------------------------------------------------------------- sprio

def parse_sprio_site(text: str) -> dict[int, int]:
    """``sprio -h -o "%i %S"`` → {job id: site factor}."""
    return {job: site for job, (site, _nice) in parse_sprio_site_nice(text).items()}


def parse_sprio_site_nice(text: str) -> dict[int, tuple[int, int]]:
    """``sprio -h -o "%i %S %N"`` → {job id: (site factor, nice)}; nice 0 when absent."""
    out: dict[int, tuple[int, int]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit() and _signed(parts[1]):
            nice = int(parts[2]) if len(parts) >= 3 and _signed(parts[2]) else 0
            out[int(parts[0])] = (int(parts[1]), nice)
    return out


def _signed(text: str) -> bool:
    return text.lstrip("-").isdigit()


# ---------------------------------------------------------------- runaway

def parse_runaway(text: str) -> list[int]:
    """Job ids in ``sacctmgr show runawayjobs`` output (any layout, -P or table)."""
    ids: list[int] = []
    for line in text.splitlines():
        if "|" in line:
            head = line.split("|")[0].strip()
        else:
            head = line.split()[0] if line.split() else ""
        if head.isdigit():
            ids.append(int(head))
    return ids


# ---------------------------------------------------------------- JSON

def load_json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(f"{what}: not JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise SlurmParseError(f"{what}: expected a JSON object")
    return data


def json_number(value: Any) -> int | None:
    """22.05 prints plain numbers; 23.02+ prints {"set", "infinite", "number"}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = int(value)
    return None if v in (NO_VAL, INFINITE) else v


def _json_state(value: Any) -> str:
    """24.11 lists a state and its flags (["CANCELLED", "COMPLETING"]): a job still
    completing is COMPLETING, whatever it ended as (the daemon watches those)."""
    if isinstance(value, list):
        if "COMPLETING" in value:
            return "COMPLETING"
        return str(value[0]) if value else ""
    return str(value or "")


def job_from_json(j: Mapping[str, Any]) -> Job:
    gpus: list[GpuRequest] = []
    for key, per in (("tres_per_node", "node"), ("tres_per_job", "job"),
                     ("tres_per_task", "task"), ("tres_per_socket", "socket")):
        gpus += parse_gpu_spec(str(j.get(key) or ""), per)
    site = json_number(j.get("site_factor"))
    # 22.05 reports site_factor offset by NICE_OFFSET (2**31) in JSON.
    if site is not None and site >= 2**31 - 2**20:
        site -= 2**31
    requeue = j.get("requeue")
    flags = j.get("flags") or []
    state = JobState.parse(_json_state(j.get("job_state")))
    num_nodes = json_number(j.get("node_count")) or 1
    return Job(
        job_id=int(j["job_id"]),
        name=str(j.get("name") or ""),
        user=str(j.get("user_name") or ""),
        account=str(j.get("account") or ""),
        partition=str(j.get("partition") or ""),
        qos=str(j.get("qos") or ""),
        state=state,
        reason=str(j.get("state_reason") or ""),
        nodes=str(j.get("nodes") or ""),
        num_nodes=num_nodes,
        gpus=tuple(gpus),
        time_limit_min=json_number(j.get("time_limit")),
        time_min_min=json_number(j.get("time_minimum")) or None,
        requeue=bool(requeue) if requeue is not None else "REQUEUE" in str(flags),
        site_factor=site,
        priority=json_number(j.get("priority")),
        submit_time=json_number(j.get("submit_time")),
        start_time=json_number(j.get("start_time")),
        features=str(j.get("features") or ""),
        comment=str(j.get("comment") or ""),
        admin_comment=str(j.get("admin_comment") or ""),
        nice=_json_nice(j.get("nice")),
        end_time=json_number(j.get("end_time")) or None,
        batch=bool(j.get("batch_flag", True)),
        num_tasks=_json_tasks(j, num_nodes),
        sockets_per_node=json_number(j.get("sockets_per_node")) or None,
        alloc_gpus=_alloc_gpus(state, str(j.get("tres_alloc_str") or "")),
        preempt_time=json_number(j.get("preempt_time")) or None,
    )


def _json_tasks(j: Mapping[str, Any], num_nodes: int) -> int | None:
    """``tasks`` (null in 22.05 for a job cancelled before it started), else
    ``tasks_per_node`` x nodes; None when neither is set."""
    tasks = json_number(j.get("tasks"))
    if tasks:
        return tasks
    per_node = json_number(j.get("tasks_per_node"))
    return per_node * num_nodes if per_node else None


def _json_nice(value: Any) -> int:
    """22.05 prints null for nice; later versions a plain int."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def parse_squeue_json(text: str) -> list[Job]:
    data = load_json(text, "squeue --json")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue --json: no 'jobs' list")
    try:
        return [job_from_json(j) for j in jobs]
    except (KeyError, TypeError, ValueError) as exc:
        raise SlurmParseError(f"squeue --json: unexpected job shape ({exc!r})") from exc
