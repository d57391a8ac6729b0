"""Make slurmdbd's QOS and account tree match slurm-ml.yaml, idempotently.

``plan_*`` are pure: they compare what sacctmgr reports with what the config
wants and return the sacctmgr commands to run (only the ones that change
something, when the current QOS settings are known). ``read_accounts`` is the I/O
before them; ``slurm-ml install`` shows the plan as a diff before it runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from slurm_ml.model import ALLOC_QOS, FREE_QOS, BudgetTree
from slurm_ml.slurm.runner import SlurmRunner


@dataclass(frozen=True, slots=True)
class QosSpec:
    name: str
    settings: tuple[tuple[str, str], ...]  # sacctmgr "set" options, in order


def default_qos_specs(
    min_runtime_cap_min: int = 480, grace_time_s: int = 30
) -> list[QosSpec]:
    """QOS ``alloc`` (charged, protected, preempts ``free``) and ``free`` (uncharged, requeued).

    ``min_runtime_cap_min``: policy.contracts.min_runtime_cap_min, alloc's PreemptExemptTime;
    ``grace_time_s``: policy.contracts.free_grace_s, free's GraceTime.
    """
    exempt_h, exempt_m = divmod(min_runtime_cap_min, 60)
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
                ("PreemptExemptTime", f"{exempt_h:02d}:{exempt_m:02d}:00"),
                ("Priority", "100"),
            ),
        ),
    ]


@dataclass(frozen=True, slots=True)
class Assoc:
    account: str
    parent: str
    user: str  # "" for an account association
    qos: tuple[str, ...] | None = None  # the QOS it may use; None = not read


#: ``sacctmgr show assoc format=...`` for :func:`parse_assocs`.
ASSOC_FORMAT = "format=Account,ParentName,User,QOS"


def parse_assocs(text: str) -> list[Assoc]:
    """Parse ``sacctmgr -n -P show assoc format=Account,ParentName,User[,QOS]``."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < 3:
            continue
        qos = tuple(q for q in parts[3].split(",") if q) if len(parts) > 3 else None
        out.append(Assoc(parts[0], parts[1], parts[2], qos))
    return out


def parse_default_accounts(text: str) -> dict[str, str]:
    """Parse ``sacctmgr -n -P show user format=User,DefaultAccount`` → {user: account}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        user, _, account = line.strip().partition("|")
        if user and account:
            out[user] = account.split("|")[0]
    return out


def modify_qos_list(cluster: str, qos: str, op: str, *, account: str,
                    user: str | None = None) -> list[str]:
    """``sacctmgr modify`` adding (``op`` ``+``) or removing (``-``) ``qos`` in the QOS list
    of an account's association, or of ``user``'s association under it."""
    where = (["user", "where", f"name={user}", f"account={account}"] if user
             else ["account", "where", f"name={account}"])
    return ["sacctmgr", "-i", "modify", *where, f"cluster={cluster}", "set", f"qos{op}={qos}"]


def grant_root_qos(cluster: str, qos: str = FREE_QOS) -> list[str]:
    """Add ``qos`` to the root association: every association that inherits its QOS list
    (one created without ``qos=``) gets it. One with a QOS list of its own does not."""
    return modify_qos_list(cluster, qos, "+", account="root")


def revoke_root_qos(cluster: str, qos: str = FREE_QOS) -> list[str]:
    """The undo of :func:`grant_root_qos`."""
    return modify_qos_list(cluster, qos, "-", account="root")


def plan_qos_grant(cluster: str, existing: Sequence[Assoc],
                   qos: str = FREE_QOS) -> list[list[str]]:
    """Let every association use ``qos`` (policy.admission.unbudgeted: free).

    Slurm (checked on 22.05): ``qos+=`` on root reaches the associations that inherit
    root's QOS list, not those with a list of their own (``qos=normal,long``), so each of
    those gets its own ``qos+=``. An association counts as having its own list when its
    list differs from its parent's; a list of its own equal to its parent's is not seen
    here, and is found by the next ``slurm-ml install`` (the list then still lacks it).
    Associations whose QOS list was not read, or that have it, are left alone.
    """
    by_account = {a.account: a for a in existing if not a.user}
    root = by_account.get("root")
    cmds: list[list[str]] = []
    if root is not None and root.qos is not None and qos not in root.qos:
        cmds.append(grant_root_qos(cluster, qos))
    for a in existing:
        if a.qos is None or qos in a.qos or (a.account == "root" and not a.user):
            continue
        parent = by_account.get(a.account if a.user else a.parent)
        if parent is not None and parent.qos is not None and set(parent.qos) == set(a.qos):
            continue  # inherits (from root, in the end): the root grant reaches it
        cmds.append(modify_qos_list(cluster, qos, "+", account=a.account, user=a.user or None))
    return cmds


#: The QOS fields slurm-ml sets, in ``sacctmgr show qos format=...`` order.
QOS_FIELDS = ("UsageFactor", "PreemptMode", "GraceTime", "Priority", "Preempt",
              "PreemptExemptTime")


def parse_qos(text: str) -> dict[str, dict[str, str]]:
    """Parse ``sacctmgr -n -P show qos format=Name,<QOS_FIELDS>`` → {name: {field: value}}."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if not line.strip() or len(parts) < 1 + len(QOS_FIELDS):
            continue
        out[parts[0]] = dict(zip(QOS_FIELDS, parts[1:], strict=False))
    return out


def _seconds(value: str) -> float | None:
    """``[D-]HH:MM:SS``, ``MM:SS`` or plain seconds → seconds (None if unreadable)."""
    days, _, rest = value.rpartition("-")
    try:
        parts = [float(x) for x in rest.split(":")]
        total = 0.0
        for i, part in enumerate(reversed(parts)):
            total += part * float(60**i)
        return total + (float(days) * 86400 if days else 0.0)
    except ValueError:
        return None


def _same_qos_value(name: str, have: str, want: str) -> bool:
    if name in ("GraceTime", "PreemptExemptTime"):
        return _seconds(have) == _seconds(want)
    if name in ("UsageFactor", "Priority"):
        try:
            return float(have) == float(want)
        except ValueError:
            return False
    if name == "Preempt":
        return set(filter(None, have.split(","))) == set(filter(None, want.split(",")))
    return have.casefold() == want.casefold()


def plan_qos(
    existing: Sequence[str] | Mapping[str, Mapping[str, str]], specs: Sequence[QosSpec]
) -> list[list[str]]:
    """Add missing QOS and set their options. Given current settings (a mapping from
    :func:`parse_qos`), only options that differ are set; given bare names, all are."""
    cmds: list[list[str]] = []
    for spec in specs:
        current = existing.get(spec.name) if isinstance(existing, Mapping) else None
        if spec.name not in existing:
            cmds.append(["sacctmgr", "-i", "add", "qos", spec.name])
        todo = [(k, v) for k, v in spec.settings
                if current is None or k not in current or not _same_qos_value(k, current[k], v)]
        if todo:
            sets = [f"{k}={v}" for k, v in todo]
            cmds.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={spec.name}",
                         "set", *sets])
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


def plan_cluster(cluster: str, existing: Sequence[str]) -> list[list[str]]:
    """Register ``cluster`` in slurmdbd when it is not there yet."""
    return [] if cluster in existing else [["sacctmgr", "-i", "add", "cluster", cluster]]


@dataclass(frozen=True, slots=True)
class AccountsState:
    """What slurmdbd holds now (empty when it could not be read: ``error`` says why)."""

    clusters: tuple[str, ...] = ()
    qos: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    assocs: tuple[Assoc, ...] = ()
    error: str = ""

    @property
    def reachable(self) -> bool:
        return not self.error


def plan_accounts(
    state: AccountsState, cluster: str, tree: BudgetTree, qos_specs: Sequence[QosSpec],
    *, grant_free: bool = False,
) -> list[list[str]]:
    """Every sacctmgr command that brings slurmdbd in line (the full creation plan when
    ``state`` is empty). ``grant_free``: every association may use QOS free
    (:func:`plan_qos_grant`; with no state read, the root grant alone)."""
    cmds = (plan_cluster(cluster, state.clusters) + plan_qos(state.qos, qos_specs)
            + plan_tree(cluster, tree, state.assocs))
    if grant_free:
        cmds += (plan_qos_grant(cluster, state.assocs) if state.assocs
                 else [grant_root_qos(cluster)])
    return cmds


def read_accounts(run: SlurmRunner, cluster: str) -> AccountsState:
    """Read clusters, QOS and associations; a SlurmError propagates (caller decides)."""
    clusters = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"]).split()
    qos = parse_qos(run(["sacctmgr", "-n", "-P", "show", "qos",
                         "format=Name," + ",".join(QOS_FIELDS)]))
    assocs = parse_assocs(run(["sacctmgr", "-n", "-P", "show", "assoc", f"cluster={cluster}",
                               ASSOC_FORMAT]))
    return AccountsState(tuple(clusters), qos, tuple(assocs))


def ensure_cluster(run: SlurmRunner, cluster: str) -> bool:
    """Register ``cluster`` in slurmdbd; True when it was added."""
    names = run(["sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster"]).split()
    if cluster in names:
        return False
    run(["sacctmgr", "-i", "add", "cluster", cluster])
    return True


def removal_commands(cluster: str, tree: BudgetTree, qos: Sequence[str]) -> list[list[str]]:
    """The sacctmgr commands that would delete slurm-ml's associations, accounts and QOS.
    Never run by slurm-ml: deleting them drops the usage history slurmdbd keeps for them."""
    cmds: list[list[str]] = []
    for user, accounts in tree.user_accounts().items():
        for account in accounts:
            cmds.append(["sacctmgr", "-i", "delete", "user", f"name={user}",
                         f"account={account}", f"cluster={cluster}"])
    for name, _parent in reversed(list(tree.accounts())):
        cmds.append(["sacctmgr", "-i", "delete", "account", f"name={name}",
                     f"cluster={cluster}"])
    if qos:
        cmds.append(["sacctmgr", "-i", "delete", "qos", f"name={','.join(qos)}"])
    return cmds
