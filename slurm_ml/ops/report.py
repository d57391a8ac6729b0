"""What operators read: ``budget status`` rows and ``why JOBID`` answers (pure).

Both take values the CLI gathered (a ``FairShare``, GPU stats, a job, its decisions) and
return plain dicts for ``--json`` plus the text a person reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slurm_ml.model import Job, JobState
from slurm_ml.policy.admission import RECORD_PREFIX, read_record
from slurm_ml.policy.fairshare import FairShare, Standing
from slurm_ml.policy.fairshare.lane import Lane
from slurm_ml.policy.pending import ExcludedPending, Wait, reason_entry
from slurm_ml.policy.reclaim import ZombieStatus
from slurm_ml.policy.refunds import Refund
from slurm_ml.policy.repairs import NodeRepair
from slurm_ml.store.records import JobGpuStats, ReconcilerDecision


def _num(x: float | None, digits: int = 2) -> float | None:
    if x is None or math.isinf(x) or math.isnan(x):
        return None
    return round(x, digits)


def utilisation_by_account(stats: Sequence[JobGpuStats]) -> dict[str, float]:
    """Mean GPU utilisation per account, weighted by each GPU's run time (epilog stats)."""
    weight: dict[str, float] = {}
    total: dict[str, float] = {}
    for s in stats:
        hours = ((s.ended_at - s.started_at).total_seconds() / 3600) if s.started_at else 0.0
        w = max(hours, 1e-6)
        weight[s.account] = weight.get(s.account, 0.0) + w
        total[s.account] = total.get(s.account, 0.0) + w * s.mean_util_pct
    return {a: total[a] / weight[a] for a in weight}


def _util_of(s: Standing, util: Mapping[str, float], fair: FairShare) -> float | None:
    if s.kind == "project":
        return util.get(s.account)
    if s.kind == "user":
        return None
    # a program or the org: weighted by the delivered hours of its projects
    kids = [c for c in fair.standings if c.kind == "project" and c.path[:len(s.path)] == s.path]
    num = sum(util[c.account] * c.delivered for c in kids if c.account in util)
    den = sum(c.delivered for c in kids if c.account in util)
    return num / den if den > 0 else None


def _excluded_of(s: Standing, by_assoc: Mapping[tuple[str, str], Sequence[ExcludedPending]],
                 projects: Mapping[tuple[str, ...], str]) -> dict[str, float]:
    """Billing GPUs pending but not demand under a tree node, per Slurm reason code."""
    if s.kind == "user":
        mine = list(by_assoc.get((s.account, s.user or ""), ()))
    else:  # a project, a program or the org: the accounts of the projects under it
        under = {a for p, a in projects.items() if p[:len(s.path)] == s.path}
        mine = [e for (acct, _u), rows in by_assoc.items() if acct in under for e in rows]
    out: dict[str, float] = {}
    for e in mine:
        out[e.reason] = out.get(e.reason, 0.0) + e.billing_gpus
    return {k: round(v, 2) for k, v in sorted(out.items())}


def _refunded_of(s: Standing, refunds: Sequence[Refund],
                 projects: Mapping[tuple[str, ...], str]) -> tuple[float, float]:
    """(GPU-hours, billing GPU-hours) refunded under a tree node (fault refunds)."""
    if s.kind == "user":
        mine = [r for r in refunds if (r.account, r.user) == (s.account, s.user)]
    else:
        under = {a for p, a in projects.items() if p[:len(s.path)] == s.path}
        mine = [r for r in refunds if r.account in under]
    return sum(r.gpu_hours for r in mine), sum(r.billing_gpu_hours for r in mine)


def budget_rows(fair: FairShare, util: Mapping[str, float],
                excluded: Sequence[ExcludedPending] = (),
                refunds: Sequence[Refund] = ()) -> list[dict[str, Any]]:
    """One row per tree node, depth-first, with the numbers ``budget status`` shows.
    ``pending_gpus`` is the demand counted; ``excluded_pending_gpus`` the pending billing
    GPUs that wait for something other than GPUs (per reason in ``excluded_pending``);
    ``refunded_gpu_hours`` the hours of runs a slurm-ml drain ended, not in delivered."""
    projects = {s.path: s.account for s in fair.standings if s.kind == "project"}
    by_assoc: dict[tuple[str, str], list[ExcludedPending]] = {}
    for e in excluded:
        by_assoc.setdefault((e.account, e.user), []).append(e)
    rows = []
    for s in fair.standings:
        ex = _excluded_of(s, by_assoc, projects) if by_assoc else {}
        rows.append({
            "path": "/".join(s.path), "kind": s.kind, "account": s.account, "user": s.user,
            "budget_share": _num(s.budget_share, 4), "owed_gpu_hours": _num(s.owed),
            "delivered_gpu_hours": _num(s.delivered), "ratio": _num(s.ratio, 3),
            "pending_gpus": _num(s.pending_gpus), "allocated_gpu_hours": _num(s.delivered),
            "unallocated_gpu_hours": _num(s.unallocated), "demand_gpu_hours": _num(s.demand),
            "level_fs": _num(s.level_fs, 4), "rank": s.rank, "site_factor": s.site_factor,
            "mean_gpu_util_pct": _num(_util_of(s, util, fair), 1),
            "excluded_pending_gpus": _num(sum(ex.values())), "excluded_pending": ex,
            "running_gpus": _num(s.running_gpus), "entitled_gpus": _num(s.entitled_gpus),
            "entitlement_first": s.kind == "project" and s.account in fair.entitlement_first,
        })
        hours, billing = _refunded_of(s, refunds, projects) if refunds else (0.0, 0.0)
        rows[-1]["refunded_gpu_hours"] = _num(hours)
        rows[-1]["refunded_billing_gpu_hours"] = _num(billing)
    return rows


def ranking(fair: FairShare) -> list[dict[str, Any]]:
    """Associations with pending work in scheduling order (rank 1 first)."""
    ranked = [s for s in fair.standings if s.kind == "user" and s.rank is not None]
    ranked.sort(key=lambda s: (s.rank or 0, s.account, s.user or ""))
    return [{"rank": s.rank, "account": s.account, "user": s.user, "site_factor": s.site_factor,
             "ratio": _num(s.ratio, 3)} for s in ranked]


def budget_json(fair: FairShare, util: Mapping[str, float],
                excluded: Sequence[ExcludedPending] = (),
                refunds: Sequence[Refund] = (),
                store_error: str | None = None) -> dict[str, Any]:
    """``excluded``: pending jobs that are not demand (``views.excluded_pending``);
    ``refunds``: runs a slurm-ml drain ended, left uncharged (``views.run_refunds``).
    ``store_error``: why the database was not read; what it holds (GPU utilisation,
    refunds) is then null, not zero or empty."""
    out = _budget_json(fair, util, excluded, refunds)
    out["store_error"] = store_error
    if store_error is not None:
        out["refunds"] = None
        for row in out["nodes"]:
            row["mean_gpu_util_pct"] = None
            row["refunded_gpu_hours"] = row["refunded_billing_gpu_hours"] = None
    return out


def _budget_json(fair: FairShare, util: Mapping[str, float],
                 excluded: Sequence[ExcludedPending],
                 refunds: Sequence[Refund]) -> dict[str, Any]:
    return {"window_start": fair.window_start, "window_end": fair.window_end,
            "capacity_billing_gpus": fair.capacity,
            "entitlement_first": sorted(fair.entitlement_first),
            "nodes": budget_rows(fair, util, excluded, refunds), "ranking": ranking(fair),
            "refunds": [{"job_id": r.job_id, "account": r.account, "user": r.user,
                         "start": r.start, "end": r.end, "state": r.state.value,
                         "route": r.route, "gpu_hours": _num(r.gpu_hours),
                         "billing_gpu_hours": _num(r.billing_gpu_hours),
                         "drain": {"key": r.drain.key, "node": r.drain.node,
                                   "at": r.drain.at, "hook": r.drain.hook,
                                   "job_id": r.drain.job_id,
                                   "findings": list(r.drain.checks)},
                         "why": r.why} for r in refunds],
            "excluded_pending": [
                {"account": e.account, "user": e.user, "reason": e.reason,
                 "wait": e.wait.value, "jobs": e.jobs, "gpus": e.gpus,
                 "billing_gpus": _num(e.billing_gpus)} for e in excluded]}


def _cell(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def budget_text(data: Mapping[str, Any]) -> str:
    start = datetime.fromtimestamp(data["window_start"]).strftime("%Y-%m-%d %H:%M")
    end = datetime.fromtimestamp(data["window_end"]).strftime("%Y-%m-%d %H:%M")
    head = (f"Budget window {start} .. {end}; capacity {data['capacity_billing_gpus']:.1f} "
            f"billing GPUs. GPU-hours are billing-weighted.")
    cols = ("node", "share", "owed", "delivered", "del/owed", "pending", "not-demand",
            "unalloc", "refunded", "util%", "rank")
    rows = []
    for r in data["nodes"]:
        depth = r["path"].count("/")
        name = "  " * depth + (r["user"] or r["account"])
        rows.append((name, _cell(r["budget_share"] and r["budget_share"] * 100, "{:.1f}%"),
                     _cell(r["owed_gpu_hours"]), _cell(r["delivered_gpu_hours"]),
                     _cell(r["ratio"], "{:.2f}"), _cell(r["pending_gpus"], "{:.0f}"),
                     _cell(r.get("excluded_pending_gpus") or None, "{:.0f}"),
                     _cell(r["unallocated_gpu_hours"]),
                     _cell(r.get("refunded_billing_gpu_hours") or None),
                     _cell(r["mean_gpu_util_pct"]),
                     _cell(r["rank"], "{}")))
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                             for i, (c, w) in enumerate(zip(cols, widths, strict=True)))]
    for row in rows:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    under = [r for r in data["nodes"] if r["kind"] == "project" and r["ratio"] is not None
             and r["ratio"] < 0.95 and (r["pending_gpus"] or 0) > 0]
    idle = [r for r in data["nodes"] if r["kind"] == "project"
            and r["mean_gpu_util_pct"] is not None and r["mean_gpu_util_pct"] < 25]
    first = set(data.get("entitlement_first") or ())
    for r in under:
        after = ("" if not first or r["account"] in first else
                 " after those of projects below their entitlement now")
        lines.append(f"note: {r['account']} got {r['ratio']:.0%} of what it is owed and has "
                     f"work pending: its jobs rank first{after}.")
    for r in data["nodes"]:
        if r.get("entitlement_first") and (r["pending_gpus"] or 0) > 0:
            lines.append(f"note: {r['account']} runs {r['running_gpus']:.1f} of its "
                         f"{r['entitled_gpus']:.1f} entitled billing GPUs and has work "
                         f"pending: it ranks ahead of every allocation at or above its "
                         f"entitlement, and its allocated jobs may reclaim GPUs those "
                         f"above theirs borrowed (contracts.reclaim_entitlement).")
    for r in idle:
        lines.append(f"note: {r['account']} used its GPUs at {r['mean_gpu_util_pct']:.0f}% on "
                     f"average: allocated but mostly idle.")
    for r in data["nodes"]:
        if r["kind"] == "project" and r.get("excluded_pending"):
            why = ", ".join(f"{k} {v:.0f}" for k, v in r["excluded_pending"].items())
            lines.append(f"note: {r['account']} has {r['excluded_pending_gpus']:.0f} billing "
                         f"GPUs pending that are not demand ({why}): they wait for a hold, "
                         f"a dependency, a begin time, a limit or unavailable nodes, not for "
                         f"GPUs, so they are neither owed nor ranked. Release or fix them "
                         f"to count.")
    for f in data.get("refunds") or []:
        lines.append(f"note: refund to {f['account']}: {f['why']} (a fault of the "
                     f"hardware, not the team's).")
    if data.get("store_error"):
        lines.append(f"Database not read ({data['store_error']}): GPU utilisation and "
                     f"refunds are unknown, so delivered may include runs that a slurm-ml "
                     f"drain ended, which are refunded once the database can be read.")
    return "\n".join(lines)


# ---------------------------------------------------------------- why JOBID


def admission_record(job: Job | None) -> dict[str, Any] | None:
    """The decision submitd left in AdminComment (``slurm-ml {json}``), if any."""
    if job is None:
        return None
    record = read_record(job.admin_comment)
    if record is None and job.admin_comment.startswith(RECORD_PREFIX):
        return {"raw": job.admin_comment}
    return record


def zombie_json(status: ZombieStatus | None) -> dict[str, Any] | None:
    """The zombie rule's view of a running job for ``why``, coverage evidence included."""
    if status is None:
        return None
    c, span = status.coverage, status.span
    return {
        "state": status.state, "text": status.text,
        "idle_s": None if span is None else span.idle_s,
        "mem_mb": None if span is None else span.mem_mb,
        "coverage": None if c is None else {
            "window_s": c.window_s, "max_gap_s": c.max_gap_s, "gpus": c.gpus,
            "sampled": list(c.sampled), "covered_s": c.covered_s,
            "largest_gap_s": c.largest_gap_s, "worst_gpu": c.worst_gpu,
            "problems": list(c.problems)}}


def lane_json(job: Job | None, lane: Lane | None) -> dict[str, Any] | None:
    """Whether the job is (or started as) fast-lane work, and the lane's room now: a
    pending job by its SiteFactor (sprio lists only pending jobs), any job by the
    admission record that put it in the lane at submission."""
    if job is None or lane is None:
        return None
    waited = (job.start_time - job.submit_time
              if job.start_time and job.submit_time else None)
    record = admission_record(job) or {}
    member = (job.site_factor or 0) >= lane.site_factor or record.get("lane") == 1
    return {"member": member, "admitted_in_lane": record.get("lane") == 1,
            "site_factor": lane.site_factor, "held_gpus": sum(lane.held.values()),
            "cap_gpus": lane.cap, "account_gpus": lane.held.get(job.account, 0),
            "waited_s": waited}


#: why a pending job the daemon ranks may show Reason=None (docs/reconciler.md)
RERANKED_NONE = (
    "slurm-ml updates a pending job's SiteFactor whenever its budget rank moves, and "
    "Slurm shows the reason None from such an update until its scheduler next reaches "
    "the job (seconds on a short queue, until backfill gets there on a long one), so "
    "None here may only mean that. Ask again after the next scheduling pass.")


def pending_json(job: Job) -> dict[str, Any] | None:
    """What a pending job's Slurm reason means, and whether slurm-ml's own SiteFactor
    update may be why it reads None now; None for a job not pending."""
    if job.state != JobState.PENDING:
        return None
    entry = reason_entry(job.reason)
    reranked = entry.wait == Wait.UNEVALUATED and bool(job.site_factor)
    return {"reason": job.reason, "wait": entry.wait.value, "why": entry.why,
            "note": RERANKED_NONE if reranked else None}


def why_json(job_id: int, job: Job | None, parts: Mapping[str, Any] | None,
             fair: FairShare | None, decisions: Sequence[ReconcilerDecision], *,
             zombie: ZombieStatus | None = None,
             repairs: Sequence[NodeRepair] = (), lane: Lane | None = None,
             made_room: Sequence[ReconcilerDecision] = (),
             store_error: str | None = None) -> dict[str, Any]:
    """What ``slurm-ml why`` shows; ``made_room``: the requeues of other jobs made so
    that this one could start (``Store.requeues_for``). ``store_error``: why the
    database was not read; what it holds (history, made_room, repair) is then null,
    not empty: "nothing happened" and "unknown" must not read the same."""
    out: dict[str, Any] = {"job_id": job_id, "found": job is not None}
    out["lane"] = lane_json(job, lane)
    if job is not None:
        out["job"] = {"state": job.state.value, "reason": job.reason, "account": job.account,
                      "user": job.user, "qos": job.qos, "site_factor": job.site_factor,
                      "nice": job.nice, "priority": job.priority}
        out["pending"] = pending_json(job)
    out["priority"] = dict(parts) if parts is not None else None
    if fair is not None and job is not None:
        assoc = fair.association(job.account, job.user)
        acct = fair.account(job.account)
        out["budget"] = {
            "association": None if assoc is None else {
                "rank": assoc.rank, "site_factor": assoc.site_factor,
                "level_fs": _num(assoc.level_fs, 4), "delivered_gpu_hours": _num(assoc.delivered),
                "owed_gpu_hours": _num(assoc.owed), "ratio": _num(assoc.ratio, 3)},
            "account": None if acct is None else {
                "budget_share": _num(acct.budget_share, 4), "level_fs": _num(acct.level_fs, 4),
                "delivered_gpu_hours": _num(acct.delivered), "owed_gpu_hours": _num(acct.owed),
                "ratio": _num(acct.ratio, 3), "pending_gpus": _num(acct.pending_gpus),
                "running_gpus": _num(acct.running_gpus),
                "entitled_gpus": _num(acct.entitled_gpus),
                "entitlement_first": acct.account in fair.entitlement_first},
            "ranked_associations": sum(1 for s in fair.standings if s.rank is not None)}
    out["admission"] = admission_record(job)
    out["history"] = [{"at": d.decided_at.isoformat(), "kind": d.kind, "reason": d.reason,
                       "dry_run": d.dry_run, "details": d.details} for d in decisions]
    out["made_room"] = [{"at": d.decided_at.isoformat(), "kind": d.kind, "victim": d.job_id,
                         "reason": d.reason, "dry_run": d.dry_run} for d in made_room]
    out["zombie"] = zombie_json(zombie)
    out["repair"] = [{"node": r.node, "cause": r.cause, "why": r.why, "drained": r.drained,
                      "waits": [{"kind": w.kind, "until": w.until, "text": w.text}
                                for w in r.jobs]} for r in repairs]
    out["store_error"] = store_error
    if store_error is not None:
        out["history"] = out["made_room"] = out["repair"] = None
    return out


def why_text(data: Mapping[str, Any]) -> str:
    jid = data["job_id"]
    lines = []
    job = data.get("job")
    if job is None:
        lines.append(f"Job {jid} is not known to slurmctld (finished, or a wrong id); "
                     f"showing what slurm-ml recorded about it.")
    else:
        lines.append(f"Job {jid}: {job['state']} ({job['reason'] or 'no reason'}), user "
                     f"{job['user']}, account {job['account']}, QOS {job['qos']}.")
        pend = data.get("pending")
        if pend:
            lines.append(f"Waiting: {pend['why']}.")
            if pend["note"]:
                lines.append(pend["note"])
    prio = data.get("priority")
    if prio:
        parts = ", ".join(f"{k}={v}" for k, v in prio.items() if k not in ("job_id",))
        lines.append(f"Priority: {parts}")
    budget = data.get("budget")
    if budget and budget.get("association") and budget["association"]["rank"] is None:
        lines.append("SiteFactor: not ranked now (only associations with pending jobs are).")
    elif budget and budget.get("association"):
        a = budget["association"]
        lines.append(
            f"SiteFactor {a['site_factor']} = band of rank {a['rank']} of "
            f"{budget['ranked_associations']} associations with pending work (Fair Tree "
            f"over the window: delivered {a['delivered_gpu_hours']} of "
            f"{a['owed_gpu_hours']} owed GPU-hours).")
    if budget and budget.get("account"):
        b = budget["account"]
        ratio = "n/a" if b["ratio"] is None else f"{b['ratio']:.2f}"
        lines.append(f"Account {job['account'] if job else '?'}: budget share "
                     f"{(b['budget_share'] or 0) * 100:.1f}%, delivered "
                     f"{b['delivered_gpu_hours']} / owed {b['owed_gpu_hours']} GPU-hours "
                     f"(ratio {ratio}), {b['pending_gpus']} billing GPUs pending.")
        if b.get("entitlement_first"):
            lines.append(f"Entitlement first: it runs {b['running_gpus']:.1f} of its "
                         f"{b['entitled_gpus']:.1f} entitled billing GPUs now, so its jobs "
                         f"rank ahead of every account at or above its entitlement, and "
                         f"may have jobs of accounts above theirs requeued once past their "
                         f"protected runtime (only GPUs borrowed beyond an entitlement).")
    lane = data.get("lane")
    if lane and lane["member"]:
        started = ("" if lane["waited_s"] is None else
                   f" It started {lane['waited_s']} s after its submission.")
        lines.append(
            f"Fast lane: short work, so its SiteFactor ({lane['site_factor']} and up) puts it "
            f"ahead of every team's band, and Slurm preempts unallocated (QOS free) work to "
            f"start it; the lane holds {lane['held_gpus']} of its {lane['cap_gpus']} GPUs "
            f"now ({lane['account_gpus']} this account's).{started}")
    adm = data.get("admission")
    if adm:
        lines.append(f"Admission: {json.dumps(adm, sort_keys=True)}")
    else:
        lines.append("Admission: no slurm-ml record (submitted while submitd was away, or "
                     "not a GPU job).")
    zombie = data.get("zombie")
    if zombie:
        lines.append(f"Zombie check: {zombie['text']}")
    for r in data.get("repair") or []:  # repairs at the contract
        for w in r["waits"]:
            lines.append(f"Repair at the contract: {r['node']} {r['why']}: {w['text']}")
    for m in data.get("made_room") or []:
        tag = " (dry run: not done)" if m["dry_run"] else ""
        lines.append(f"Room made for it: {m['at']} {m['kind']} of job {m['victim']}{tag}: "
                     f"{m['reason']}")
    hist = data.get("history") or []
    if data.get("store_error"):
        lines.append(f"History unknown: the database could not be read "
                     f"({data['store_error']}), so requeues, cancels and warnings slurm-ml "
                     f"decided, room made for this job, repairs at the contract and the "
                     f"zombie check are not shown.")
    elif not hist:
        lines.append("No requeue, cancel or warning by slurm-ml.")
    for h in hist:
        tag = " (dry run: not done)" if h["dry_run"] else ""
        lines.append(f"{h['at']} {h['kind']}{tag}: {h['reason']}")
    return "\n".join(lines)
