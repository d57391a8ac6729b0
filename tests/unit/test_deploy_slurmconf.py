"""The pure slurm.conf reading and editing under install, and the settings-aware QOS plan."""

from __future__ import annotations

from deploy_helpers import cfg
from hypothesis import given
from hypothesis import strategies as st

from slurm_ml.deploy import slurmconf
from slurm_ml.model import BudgetTree
from slurm_ml.slurm import accounts

PARTS = ("PartitionName=gpu Nodes=n[1-2] Default=YES  # the GPUs\n"
         "PartitionName=cpu Nodes=c[1-9]\n")


def test_settings_skip_records_comments_and_keep_line_numbers() -> None:
    text = ("# PreemptType=preempt/none\nPreemptType=preempt/qos # why\n"
            "NodeName=n1 CPUs=4\nSchedulerParameters=\"bf_interval=5\"\nInclude x.conf\n")
    got = [(s.key, s.value, s.line) for s in slurmconf.settings(text, "s.conf")]
    assert got == [("PreemptType", "preempt/qos", 2),
                   ("SchedulerParameters", "bf_interval=5", 4)]
    assert slurmconf.includes(text) == ["x.conf"]


def test_resolve_conflicts_duplicates_and_merges() -> None:
    admin = slurmconf.settings("preempttype=PREEMPT/QOS\nPriorityWeightAge=1000\n"
                               "PrologFlags=Contain,X11\n", "/etc/slurm/slurm.conf")
    ours = [("PreemptType", "preempt/qos"), ("PriorityWeightAge", "100"),
            ("PrologFlags", "Alloc"), ("JobRequeue", "1")]
    res = slurmconf.resolve(ours, admin)
    assert dict(res.values) == {"PreemptType": "preempt/qos", "PriorityWeightAge": "100",
                                "PrologFlags": "Contain,X11,Alloc", "JobRequeue": "1"}
    [c] = res.conflicts
    assert c.key == "PriorityWeightAge" and c.theirs.line == 2
    assert c.describe().startswith("/etc/slurm/slurm.conf:2: PriorityWeightAge=1000")
    assert len(res.notes) == 2  # same PreemptType (case-insensitive), merged PrologFlags


def test_partition_plan_appends_weights_before_a_comment() -> None:
    plan = slurmconf.plan_partitions(PARTS, "s", ["gpu"], "GRES/gpu=1")
    [e] = plan.edits
    assert e.after == ('PartitionName=gpu Nodes=n[1-2] Default=YES '
                       'TRESBillingWeights="GRES/gpu=1"  # the GPUs')
    assert plan.missing == () and plan.conflicts == ()
    assert slurmconf.plan_partitions(PARTS, "s", ["gpu", "big"], "w").missing == ("big",)


@given(st.lists(st.sampled_from(["A=1", "# c", "", "PartitionName=gpu Nodes=n1",
                                 "PartitionName=cpu Nodes=c1 TRESBillingWeights=CPU=1",
                                 "Include other.conf"]), max_size=8),
       st.booleans())
def test_apply_then_revert_is_the_identity(lines: list[str], final_newline: bool) -> None:
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    plan = slurmconf.plan_partitions(text, "s", ["gpu", "cpu"], "GRES/gpu=2")
    inc = "Include /etc/slurm/slurm-ml.conf"
    after, added = slurmconf.apply_edits(text, inc, plan.edits)
    assert after.endswith(inc + "\n")
    back = slurmconf.revert_edits(after, slurmconf.ConfEdits(inc, added, plan.edits))
    assert back.text == text and back.not_found == ()


def test_revert_reports_a_line_changed_since() -> None:
    inc = "Include /x/slurm-ml.conf"
    edits = slurmconf.ConfEdits(inc, False, (slurmconf.LineEdit("P=a", "P=a W=1"),))
    back = slurmconf.revert_edits("P=a W=2\n" + inc + "\n", edits)
    assert back.text == "P=a W=2\n" and back.not_found == ("P=a W=1",)


def test_qos_plan_sets_only_what_differs() -> None:
    specs = accounts.default_qos_specs(480, 120)
    live = accounts.parse_qos("normal|1.000000|cluster|00:00:00|0||\n"
                              "free|0.000000|requeue|00:02:00|0||\n"
                              "alloc|1.000000|cluster|00:00:00|100|free|08:00:00\n")
    assert accounts.plan_qos(live, specs) == []
    live["alloc"] = {**live["alloc"], "PreemptExemptTime": "04:00:00"}
    assert accounts.plan_qos(live, specs) == [
        ["sacctmgr", "-i", "modify", "qos", "where", "name=alloc", "set",
         "PreemptExemptTime=08:00:00"]]
    state = accounts.AccountsState(error="sacctmgr: connection refused")
    assert not state.reachable
    assert ["sacctmgr", "-i", "add", "cluster", "c"] in accounts.plan_accounts(
        state, "c", _tree(), specs)


def _tree() -> BudgetTree:
    return cfg().budgets
