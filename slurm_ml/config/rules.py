"""Rules that span several knobs, checked once every section has parsed. Pure.

Priority ordering. Slurm's priority/multifactor gives a pending job

    priority = SiteFactor + qos x Q + age x A + fairshare x F + job_size x J
               + partition x P - nice

with each factor Q, A, F, J, P in [0, 1] and the weights from ``policy.priority_weights``.
QOS ``alloc`` has Priority 100, the highest, so Q = 1; QOS ``free`` has 0, so Q = 0. The
reconciler ranks the associations (project, user) with pending jobs 1..N and gives rank
k the band ``b(k) = top - (k - 1) x step``, ``top = max(site_factor_max, N x step)``
(:func:`slurm_ml.policy.fairshare.band`). A job's SiteFactor adds back its nice, takes
off at most ``nice_range`` and adds ``short_job_boost`` to short work
(:func:`~slurm_ml.policy.fairshare.job_site_factor`). So, before the QOS term, a job of
band b with nice >= 0 lies in [b - nice_range, b + short_job_boost + others] (a negative
nice is an admin's deliberate boost), ``others`` being the most the age, fairshare, job
size and partition terms add: the sum of their weights.

* No job crosses into another band: the lowest of band k must stay above the highest of
  band k + 1, ``b(k) - nice_range > b(k) - step + short_job_boost + others``, that is

      nice_range + short_job_boost + others < site_factor_step.

  (With ``others = 0`` this is the short-job rule, reported on its own path first.)
* Every alloc job above every free job. The highest a free job reaches before QOS is
  ``top + short_job_boost + others``; the lowest alloc job is one with no SiteFactor yet
  (0 until the reconciler pushes its band: its account had no standing when admission
  stamped it, or its user is outside the tree), at ``qos``. N is at most the number of
  associations in ``budgets``, so

      max(site_factor_max, associations x site_factor_step) + short_job_boost + others < qos.

  In particular a band count times the step that reaches ``qos`` is refused.

  Two things this rule cannot see. An alloc job with no SiteFactor yet that a user
  ``--nice``-d sits at ``qos - nice``: the reconciler adds the nice back only once it
  pushes a band, a cycle later. And Q = 1 holds only while ``alloc``'s Priority (100) is
  the highest of the site's QOS: Slurm divides by the highest, so a site QOS above 100
  shrinks every alloc job's QOS term. Neither is in slurm-ml.yaml to check.

Minimum runtime. ``policy.admission.default_min_runtime_min`` is at most
``policy.contracts.min_runtime_cap_min`` (both minutes): a larger default would be cut
to the cap on every job anyway.

Zombie coverage. ``policy.reclaim.zombie_heartbeat_s`` is at least three
``sample_interval_s``: a verdict needs samples no more than two intervals apart over the
whole heartbeat, and a shorter heartbeat would rest on two or three readings.
"""

from __future__ import annotations

from slurm_ml.config.errors import ConfigIssue
from slurm_ml.config.schema import PolicyConfig
from slurm_ml.model import BudgetTree

__all__ = ["associations", "policy_issues"]


def associations(budgets: BudgetTree) -> int:
    """The (project account, user) pairs of the tree: the most bands there can be."""
    return sum(len(proj.users) for prog in budgets.programs for proj in prog.projects)


def policy_issues(policy: PolicyConfig, budgets: BudgetTree | None) -> list[ConfigIssue]:
    """Every cross-knob rule ``policy`` breaks (the QOS rule only once ``budgets`` parsed)."""
    fs, w = policy.fairshare, policy.priority_weights
    issues: list[ConfigIssue] = []
    if fs.short_job_boost + fs.nice_range >= fs.site_factor_step:
        issues.append(ConfigIssue(
            "policy.fairshare.short_job_boost",
            f"short_job_boost + nice_range ({fs.short_job_boost} + {fs.nice_range}) must stay "
            f"below site_factor_step ({fs.site_factor_step}), or a short job could overtake "
            "a higher-ranked team's work"))
    else:
        spread = fs.nice_range + fs.short_job_boost + w.others()
        if spread >= fs.site_factor_step:
            issues.append(ConfigIssue(
                "policy.fairshare.site_factor_step",
                f"{fs.site_factor_step} lets age and fair share reorder the bands: a job moves "
                f"up to nice_range + short_job_boost + the priority_weights age, fairshare, "
                f"job_size and partition ({fs.nice_range} + {fs.short_job_boost} + {w.age} "
                f"+ {w.fairshare} + {w.job_size} + {w.partition} = {spread}) inside its "
                f"band, so the step must be above {spread}; raise site_factor_step or lower "
                "those"))
    if budgets is not None:
        n = associations(budgets)
        highest = fs.top_band(n) + fs.short_job_boost + w.others()
        if highest >= w.qos:
            issues.append(ConfigIssue(
                "policy.priority_weights.qos",
                f"{w.qos} does not keep QOS alloc above every band: a free job can reach "
                f"max(site_factor_max {fs.site_factor_max}, {n} associations in budgets x "
                f"site_factor_step {fs.site_factor_step}) + short_job_boost "
                f"{fs.short_job_boost} + age, fairshare, job_size and partition weights "
                f"{w.others()} = {highest} before QOS, an alloc job with no SiteFactor yet "
                f"only qos; raise qos above {highest} or lower site_factor_step or "
                "site_factor_max"))
    cap = policy.contracts.min_runtime_cap_min
    default = policy.admission.default_min_runtime_min
    if default > cap:
        issues.append(ConfigIssue(
            "policy.admission.default_min_runtime_min",
            f"{default} min is above policy.contracts.min_runtime_cap_min ({cap} min), so "
            "every job would be cut to the cap; lower the default or raise the cap"))
    rc = policy.reclaim
    if rc.zombie_heartbeat_s < 3 * rc.sample_interval_s:
        issues.append(ConfigIssue(
            "policy.reclaim.zombie_heartbeat_s",
            f"{rc.zombie_heartbeat_s:g} s is shorter than three sample intervals (3 x "
            f"policy.reclaim.sample_interval_s {rc.sample_interval_s} s = "
            f"{3 * rc.sample_interval_s} s), so a zombie verdict would rest on two or three "
            "GPU readings; raise zombie_heartbeat_s or sample more often (lower "
            "sample_interval_s and reinstall, which sets HealthCheckInterval)"))
    return issues
