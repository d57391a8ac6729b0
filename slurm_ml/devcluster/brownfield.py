"""The dev cluster's "existing site": what a Slurm site has before slurm-ml arrives.

Accounts and users outside the budget tree (``physics``, with its own QOS list
``normal,long`` and user ``eve``, whose default account it is), a QOS of the site's own
(``long``), a CPU-only node and partition (``cpu01``, ``cpu``) that slurm-ml does not
manage, and a maintenance reservation on that node. The accounts are made before
``slurm-ml install`` runs (install then sees a brownfield slurmdbd); the reservation
needs slurmctld, so it is made once slurmctld is up. Every step checks before it acts.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_ml.slurm.accounts import AccountsState, ensure_cluster, read_accounts
from slurm_ml.slurm.runner import SlurmRunner

Say = Callable[[str], None]

CPU_NODE = "cpu01"
CPU_PARTITION = "cpu"
CPU_NODE_CPUS = 16
CPU_NODE_MEMORY_MB = 64_000
SITE_QOS = "long"
SITE_ACCOUNT = "physics"
#: Unix users of the site's own accounts: user → default account
SITE_USERS = {"eve": SITE_ACCOUNT}
RESERVATION = "site_maint"


def site_lines(*, controller_host: str, node_addr: str, port: int) -> str:
    """slurm.conf lines for the CPU-only node and its partition (``${site_lines}``)."""
    return "\n".join([
        f"NodeName={CPU_NODE} NodeHostname={controller_host} NodeAddr={node_addr} "
        f"Port={port} CPUs={CPU_NODE_CPUS} RealMemory={CPU_NODE_MEMORY_MB} State=UNKNOWN",
        f"PartitionName={CPU_PARTITION} Nodes={CPU_NODE} Default=NO MaxTime=1440 State=UP "
        f"OverSubscribe=NO",
    ])


#: topology.conf: with topology/tree, a node that no switch lists is never runnable; one
#: switch above slurm-ml's spine and the CPU leaf keeps the tree single-rooted.
SITE_SWITCH_LINES = (f"SwitchName=cpuleaf Nodes={CPU_NODE}\n"
                     "SwitchName=site Switches=spine,cpuleaf")


def plan_site_accounts(cluster: str, state: AccountsState) -> list[list[str]]:
    """The sacctmgr commands that add what is missing of the site's own part."""
    qos_names, assocs = state.qos, state.assocs
    accounts = {a.account for a in assocs if not a.user}
    users = {(a.user, a.account) for a in assocs if a.user}
    cmds: list[list[str]] = []
    if SITE_QOS not in qos_names:
        cmds.append(["sacctmgr", "-i", "add", "qos", SITE_QOS])
        cmds.append(["sacctmgr", "-i", "modify", "qos", "where", f"name={SITE_QOS}", "set",
                     "Priority=10", "MaxWall=3-00:00:00"])
    if SITE_ACCOUNT not in accounts:
        cmds.append(["sacctmgr", "-i", "add", "account", SITE_ACCOUNT, f"cluster={cluster}",
                     f"description={SITE_ACCOUNT}", "organization=site",
                     f"qos=normal,{SITE_QOS}", "defaultqos=normal"])
    for user, account in SITE_USERS.items():
        if (user, account) not in users:
            cmds.append(["sacctmgr", "-i", "add", "user", user, f"account={account}",
                         f"cluster={cluster}", f"defaultaccount={account}"])
    return cmds


def ensure_site_accounts(run: SlurmRunner, cluster: str, say: Say) -> None:
    if ensure_cluster(run, cluster):
        say(f"      registered cluster {cluster} in slurmdbd")
    cmds = plan_site_accounts(cluster, read_accounts(run, cluster))
    for cmd in cmds:
        run(cmd)
    if cmds:
        say(f"      account {SITE_ACCOUNT} (QOS normal,{SITE_QOS}) and users "
            f"{', '.join(SITE_USERS)}: {len(cmds)} sacctmgr command(s)")


def ensure_reservation(run: SlurmRunner, say: Say) -> None:
    """A maintenance window on the CPU node a month from now (it blocks no GPU test)."""
    have = run(["scontrol", "-o", "show", "reservation"])
    if f"ReservationName={RESERVATION} " in have:
        return
    run(["scontrol", "create", "reservation", f"ReservationName={RESERVATION}",
         "StartTime=now+30days", "Duration=02:00:00", f"Nodes={CPU_NODE}", "Users=root",
         "Flags=MAINT"])
    say(f"      reservation {RESERVATION} on {CPU_NODE}")
