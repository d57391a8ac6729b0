"""From findings to a verdict: the worst severity and a Slurm drain reason."""

from __future__ import annotations

from collections.abc import Iterable

from slurm_ml.health.checks.findings import Finding, Severity, sort_findings
from slurm_ml.policy.quarantine import OWNED_PREFIX, clean_reason

#: Every drain reason slurm-ml writes starts with this; only such drains are ever resumed
#: automatically (docs/design.md; NHC's "NHC:" convention, research §6).
PREFIX = OWNED_PREFIX + " "


def worst(findings: Iterable[Finding]) -> Severity | None:
    """The worst severity among the findings, None when there are none."""
    return min((f.severity for f in findings), key=lambda s: s.rank, default=None)


def clean(text: str) -> str:
    """Text made safe for a drain reason (see ``policy.quarantine.clean_reason``)."""
    return clean_reason(text)


def drain_reason(findings: Iterable[Finding], limit: int = 99) -> str:
    """"slurm-ml: nvlink.active_links gpu6 (0/12 active) +2 more", at most ``limit``
    characters, naming the worst finding (the first drain finding in check order).

    The check id and GPU always survive; the parenthetical detail is cut first, then the
    "+N more" count. Raises ValueError when there are no findings.
    """
    ordered = sort_findings(list(findings))
    if not ordered:
        raise ValueError("no findings: nothing to drain for")
    if limit < len(PREFIX) + 10:
        raise ValueError(f"limit {limit} is too short for a drain reason")
    first = ordered[0]
    head = PREFIX + clean(first.check_id) + ("" if first.gpu is None else f" gpu{first.gpu}")
    same = [f for f in ordered[1:] if f.severity.drains] if first.severity.drains else []
    more = f" +{len(same)} more" if same else ""
    detail = clean(first.detail)
    room = limit - len(head) - len(more) - len(" ()")
    if detail and room >= 4:
        if len(detail) > room:
            detail = detail[:room - 3].rstrip() + "..."
        head += f" ({detail})"
    if len(head) + len(more) <= limit:
        head += more
    return head[:limit].rstrip()
