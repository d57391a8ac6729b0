"""Make slurmdbd's QOS and account tree match slurm-ml.yaml, idempotently.

``plan_*`` are pure: they compare what sacctmgr reports with what the config
wants and return the sacctmgr commands to run. ``ensure_account_tree`` reads,
plans and applies, so running it twice changes nothing the second time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slurm_ml.model import ALLOC_QOS, FREE_QOS, BudgetTree
from slurm_ml.slurm.runner import SlurmRunner


@dataclass(frozen=True, slots=True)
class QosSpec:
    name: str
    settings: tuple[tuple[str, str], ...]  # sacctmgr "set" options, in order


def default_qos_specs(
    min_runtime_cap_hours: float = 8, grace_time_s: int = 120
) -> list[QosSpec]:
    """QOS ``alloc`` (charged, protected, preempts ``free``) and ``free`` (uncharged, requeued)."""
    return [
        QosSpec(
            FREE_QOS,
            (
                ("UsageFactor", "0"),
                ("PreemptMode", "requeue"),
                ("GraceTime", str(grace_time_s)),
                ("Priority", "0"),
            ),
        ),
        QosSpec(
            ALLOC_QOS,
            (
                ("UsageFactor", "1"),
                ("Preempt", FREE_QOS),
                ("PreemptExemptTime", f"{int(min_runtime_cap_hours):02d}:00:00"),
                ("Priority", "100"),
            ),
        ),
    ]


@dataclass(frozen=True, slots=True)
class Assoc:
    account: str
    parent: str
    user: str  # "" for an account association


def parse_assocs(text: str) -> list[Assoc]:
    """Parse ``sacctmgr -n -P show assoc format=Account,ParentName,User``."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 3:
            continue
        out.append(Assoc(parts[0], parts[1], parts[2]))
    return out


def plan_qos(existing: Sequence[str], specs: Sequence[QosSpec]) -> list[list[str]]:
    cmds: list[list[str]] = []
    for spec in specs:
        if spec.name not in existing:
            cmds.append(["sacctmgr", "-i", "add", "qos", spec.name])
        sets = [f"{k}={v}" for k, v in spec.settings]
        cmds.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={spec.name}", "set", *sets])
    return cmds


def plan_tree(
    cluster: str, tree: BudgetTree, existing: Sequence[Assoc], qos: str = f"{ALLOC_QOS},{FREE_QOS}"
) -> list[list[str]]:
    """sacctmgr commands that add the accounts and user associations that are missing."""
    have_accounts = {a.account for a in existing if not a.user}
    have_users = {(a.user, a.account) for a in existing if a.user}
    cmds: list[list[str]] = []
    for name, parent in tree.accounts():
        if name in have_accounts:
            continue
        cmd = ["sacctmgr", "-i", "add", "account", name, f"cluster={cluster}"]
        cmd += [f"parent={parent}"] if parent else []
        cmd += [f"description={name}", f"organization={tree.org}"]
        cmd += [f"qos={qos}", f"defaultqos={ALLOC_QOS}"]
        cmds.append(cmd)
    for user, accounts in tree.user_accounts().items():
        for i, account in enumerate(accounts):
            if (user, account) in have_users:
                continue
            cmd = ["sacctmgr", "-i", "add", "user", user, f"account={account}"]
            cmd += [f"cluster={cluster}"]
            if i == 0:
                cmd.append(f"defaultaccount={account}")
            cmd += [f"qos={qos}", f"defaultqos={ALLOC_QOS}"]
            cmds.append(cmd)
    return cmds


def ensure_cluster(run: SlurmRunner, cluster: str) -> bool:
    """Register ``cluster`` in slurmdbd; True when it was added."""
    names = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"]).split()
    if cluster in names:
        return False
    run(["sacctmgr", "-i", "add", "cluster", cluster])
    return True


def ensure_account_tree(
    run: SlurmRunner, cluster: str, tree: BudgetTree, qos_specs: Sequence[QosSpec]
) -> list[list[str]]:
    """Bring QOS and associations in line with ``tree``; return the commands that ran."""
    existing_qos = run(["sacctmgr", "-n", "-P", "show", "qos", "format=Name"]).split()
    assoc_text = run(
        ["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={cluster}",
         "format=Account,ParentName,User"]
    )
    cmds = plan_qos(existing_qos, qos_specs) + plan_tree(cluster, tree, parse_assocs(assoc_text))
    for cmd in cmds:
        run(cmd)
    return cmds
