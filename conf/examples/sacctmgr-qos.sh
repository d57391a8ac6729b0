#!/bin/bash
# slurm-ml's QOS and the account tree of conf/examples/slurm-ml.yaml, as sacctmgr
# commands for slurmdbd. Run it as a Slurm administrator where sacctmgr reaches slurmdbd.
#
# Generated from slurm-ml.yaml by slurm_ml/slurm/accounts.py (default_qos_specs,
# plan_accounts): the commands `slurm-ml install` runs against an empty slurmdbd.
# Do not edit; regenerate with
#   SLURM_ML_REGEN_EXAMPLES=1 .venv/bin/pytest tests/unit/test_conf_examples.py
#
#   cluster    ClusterName, registered in slurmdbd
#   QOS free   unallocated work, uncharged and requeued: UsageFactor=0 PreemptMode=requeue GraceTime=30 Priority=0
#   QOS alloc  budgeted work, may preempt free: UsageFactor=1 Preempt=free PreemptExemptTime=08:00:00 Priority=100
#                PreemptExemptTime = policy.contracts.min_runtime_cap_min
#   accounts   budgets.org > programs > projects, each allowed both QOS (default alloc)
#   users      budgets...users, default account = the first project that lists them
#
# Safe to re-run: an add of something that exists is reported by sacctmgr ("Nothing
# new added") and skipped; the QOS settings are re-applied. Exit 1 if anything else failed.
set -u
failed=0

step() {
    printf '+ %s\n' "$*"
    local out rc
    out="$("$@" 2>&1)"
    rc=$?
    [ -n "$out" ] && printf '%s\n' "$out"
    if [ "$rc" -ne 0 ] && ! grep -q 'Nothing new added' <<<"$out"; then
        failed=1
    fi
    return 0
}

step sacctmgr -i add cluster mlcluster
step sacctmgr -i add qos free
step sacctmgr -i modify qos where name=free set UsageFactor=0 PreemptMode=requeue GraceTime=30 Priority=0
step sacctmgr -i add qos alloc
step sacctmgr -i modify qos where name=alloc set UsageFactor=1 Preempt=free PreemptExemptTime=08:00:00 Priority=100
step sacctmgr -i add account research cluster=mlcluster description=research organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account llm cluster=mlcluster parent=research description=llm organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account llm-pretrain cluster=mlcluster parent=llm description=llm-pretrain organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account llm-alignment cluster=mlcluster parent=llm description=llm-alignment organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account vision cluster=mlcluster parent=research description=vision organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account perception cluster=mlcluster parent=vision description=perception organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account generative cluster=mlcluster parent=vision description=generative organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account science cluster=mlcluster parent=research description=science organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account climate cluster=mlcluster parent=science description=climate organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add account protein cluster=mlcluster parent=science description=protein organization=research qos=alloc,free defaultqos=alloc
step sacctmgr -i add user alice account=llm-pretrain cluster=mlcluster defaultaccount=llm-pretrain qos=alloc,free defaultqos=alloc
step sacctmgr -i add user alice account=llm-alignment cluster=mlcluster qos=alloc,free defaultqos=alloc
step sacctmgr -i add user bob account=llm-pretrain cluster=mlcluster defaultaccount=llm-pretrain qos=alloc,free defaultqos=alloc
step sacctmgr -i add user carol account=llm-alignment cluster=mlcluster defaultaccount=llm-alignment qos=alloc,free defaultqos=alloc
step sacctmgr -i add user dave account=perception cluster=mlcluster defaultaccount=perception qos=alloc,free defaultqos=alloc
step sacctmgr -i add user erin account=perception cluster=mlcluster defaultaccount=perception qos=alloc,free defaultqos=alloc
step sacctmgr -i add user frank account=generative cluster=mlcluster defaultaccount=generative qos=alloc,free defaultqos=alloc
step sacctmgr -i add user grace account=climate cluster=mlcluster defaultaccount=climate qos=alloc,free defaultqos=alloc
step sacctmgr -i add user heidi account=protein cluster=mlcluster defaultaccount=protein qos=alloc,free defaultqos=alloc

exit "$failed"
