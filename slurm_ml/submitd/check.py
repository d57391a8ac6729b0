"""``slurm-ml submit-check``: what admission would do with an sbatch line, without submitting.

It builds the same job_desc fields the shim would send (``sbatch_args``) and runs them
through the same ``PolicyServer`` path, so the answer is the one sbatch would get.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_ml.submitd.sbatch_args import parse_sbatch, per_node_gpu_options
from slurm_ml.submitd.server import PolicyServer
from slurm_ml.submitd.wire import GPU_OPTION, NO_VAL


@dataclass(frozen=True, slots=True)
class ComponentVerdict:
    component: int
    action: str  # accept | reject | error
    changes: dict[str, Any] = field(default_factory=dict)
    message: str = ""
    code: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"component": self.component, "action": self.action, "set": self.changes,
                "message": self.message, "code": self.code}


def check(server: PolicyServer, argv: Sequence[str], script: str | None, *, user: str,
          user_id: int | None = None, account: str | None = None) -> list[ComponentVerdict]:
    """One verdict per het component (raises SbatchParseError on bad sbatch options)."""
    out = []
    options = per_node_gpu_options(argv, script, user=user)
    for i, job in enumerate(parse_sbatch(argv, script, user=user, user_id=user_id)):
        if account and "account" not in job:
            job["account"] = account
        if options[i] is not None:  # so that advice names the option the user wrote
            job[GPU_OPTION] = options[i]
        reply = server.handle_line(json.dumps({"v": 1, "op": "submit", "uid": user_id,
                                               "job": job}))
        out.append(ComponentVerdict(
            component=i, action=str(reply.get("action")), changes=reply.get("set", {}),
            message=str(reply.get("message") or reply.get("error") or ""),
            code=int(reply.get("code", 0) or 0)))
    return out


def describe(verdicts: Sequence[ComponentVerdict]) -> str:
    """Human summary: what changes, what the researcher would read."""
    lines = []
    for v in verdicts:
        head = f"component {v.component}: " if len(verdicts) > 1 else ""
        if v.action == "reject":
            lines.append(f"{head}REJECTED (Slurm error {v.code})")
        elif v.action == "accept" and v.changes:
            lines.append(f"{head}accepted, rewritten:")
            lines += [f"  {k} cleared" if val == NO_VAL else f"  {k} = {val!r}"
                      for k, val in v.changes.items()]
        elif v.action == "accept":
            lines.append(f"{head}accepted unchanged")
        else:
            lines.append(f"{head}submitd could not decide ({v.action}); the job would pass "
                         f"unchanged")
        if v.message:
            lines.append(f"  {v.message}")
    return "\n".join(lines)
