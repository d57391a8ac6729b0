"""``install`` and ``uninstall``: read the state, plan (pure), then apply unless dry run.

The CLI and ``slurm-ml devcluster up`` both call :func:`install`, so the dev cluster is
set up along the admin's path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from slurm_ml.config import Config
from slurm_ml.deploy import bundle, slurmconf, state
from slurm_ml.deploy.apply import apply
from slurm_ml.deploy.bundle import InstallParams, Sources
from slurm_ml.deploy.errors import BadInput, SlurmUnreachable
from slurm_ml.deploy.manifest import Manifest, path_of
from slurm_ml.deploy.plan import (
    BACKUP_SUFFIX,
    ChangeSet,
    ConfPlan,
    plan_install,
    plan_uninstall,
)
from slurm_ml.deploy.report import AccountsReport, Outcome
from slurm_ml.model import ALLOC_QOS, FREE_QOS
from slurm_ml.slurm import accounts, render
from slurm_ml.slurm.errors import SlurmError
from slurm_ml.slurm.runner import SlurmRunner

Say = Callable[[str], None]

KEPT_ACCOUNTS = ("QOS and accounts are kept: deleting them drops the usage history "
                 "slurmdbd keeps for them. An admin who wants them gone runs:")


FREE_GRANT_NOTE = (f"policy.admission.unbudgeted is free: jobs of accounts outside the budget "
                   f"tree run in QOS {FREE_QOS}, so every association may use it (qos+= on "
                   f"root reaches those that inherit root's QOS list; each one with a list "
                   f"of its own gets its own qos+=). `slurm-ml uninstall` prints the undo.")
UNDO_GRANT_NOTE = (f"If install granted QOS {FREE_QOS} to every association "
                   f"(policy.admission.unbudgeted: free), undo it with the first command "
                   f"below; an association that got its own qos+={FREE_QOS} loses it when "
                   f"QOS {FREE_QOS} is deleted (the last command), or with "
                   f"`sacctmgr modify user|account where ... set qos-={FREE_QOS}`.")


def _quiet(_msg: str) -> None:
    return None


def _conf_plan(cfg: Config, p: InstallParams, conf_text: str, manifest: Manifest | None,
               conflicts: tuple[slurmconf.Conflict, ...]) -> ConfPlan:
    base = conf_text
    stale: tuple[str, ...] = ()
    if manifest is not None and manifest.slurm_conf is not None:
        reverted = slurmconf.revert_edits(conf_text, manifest.slurm_conf)
        base, stale = reverted.text, reverted.not_found
    names = [part.name for part in cfg.cluster.partitions]
    parts = slurmconf.plan_partitions(base, str(p.slurm_conf), names,
                                      render.billing_weights(cfg))
    if parts.missing:
        raise BadInput(
            f"{p.slurm_conf}: no PartitionName line for {', '.join(parts.missing)} "
            f"(cluster.partitions in the config); slurm-ml sets TRESBillingWeights on "
            f"the partitions it manages: add them first (slurm-ml's repository shows how "
            f"in devcluster/templates/slurm.conf.tmpl)")
    if p.include_line in base.split("\n"):
        raise BadInput(f"{p.slurm_conf} already has '{p.include_line}' but there is no "
                       f"install manifest: remove that line, then install again")
    after, newline_added = slurmconf.apply_edits(base, p.include_line, parts.edits)
    edits = slurmconf.ConfEdits(p.include_line, newline_added, parts.edits)
    return ConfPlan(p.slurm_conf, conf_text, after, edits, conflicts + parts.conflicts, stale)


def _accounts_plan(cfg: Config, run: SlurmRunner | None) -> AccountsReport:
    specs = accounts.default_qos_specs(cfg.policy.contracts.min_runtime_cap_min,
                                       cfg.policy.contracts.free_grace_s)
    try:
        if run is None:
            raise SlurmError("no Slurm runner given")
        st = accounts.read_accounts(run, cfg.cluster.name)
    except SlurmError as exc:
        st = accounts.AccountsState(error=str(exc))
    grant = cfg.policy.admission.unbudgeted == "free"
    cmds = accounts.plan_accounts(st, cfg.cluster.name, cfg.budgets, specs, grant_free=grant)
    granting = grant and any(c[-1] == f"qos+={FREE_QOS}" for c in cmds)
    note = FREE_GRANT_NOTE if granting else ""
    return AccountsReport(reachable=st.reachable, error=st.error,
                          commands=tuple(tuple(c) for c in cmds), note=note)


def next_steps(cfg: Config, p: InstallParams) -> tuple[str, ...]:
    steps = [f"copy {p.conf_dir} (slurm.conf, slurm-ml.conf, the hooks, slurm-ml.env) to "
             "every node, or run Slurm configless",
             "restart slurmctld (JobSubmitPlugins, PriorityType and PreemptType take a "
             "restart), then `scontrol reconfigure`",
             *prometheus_steps(cfg, p)]
    if p.systemd_dir is not None:
        steps.insert(0, "systemctl daemon-reload && systemctl enable --now "
                        "slurm-ml-submitd.service slurm-ml-daemon.service")
    return tuple(steps)


#: node_exporter's textfile directory as Debian's prometheus-node-exporter sets it.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"


def prometheus_steps(cfg: Config, p: InstallParams) -> list[str]:
    """What the site adds to its Prometheus (whose config is not slurm-ml's to edit): the
    rules file and the scrape jobs the rules' names go by (docs/operator.md, Metrics)."""
    jobs = []
    for job, port, addr in (("slurm-ml-daemon", cfg.daemon.metrics_port,
                             cfg.daemon.metrics_addr),
                            ("slurm-ml-submitd", cfg.submitd.metrics_port,
                             cfg.submitd.metrics_addr)):
        if not port:
            jobs.append(f"{job} (off: its metrics_port is 0)")
            continue
        local = " (it binds 127.0.0.1: set metrics_addr 0.0.0.0 for a Prometheus " \
                "elsewhere)" if addr.startswith("127.") else ""
        jobs.append(f"{job} on :{port} of each controller host{local}")
    jobs.append(f"node: node_exporter on each GPU node, --collector.textfile.directory="
                f"{TEXTFILE_DIR}")
    return [f"Prometheus: add `rule_files: [{p.rules_path}]` to prometheus.yml (copy the "
            f"file to the Prometheus host if it runs elsewhere), then reload it",
            "Prometheus: scrape jobs " + "; ".join(jobs)
            + " (docs/operator.md#metrics has the scrape config)"]


def install(cfg: Config, p: InstallParams, *, run: SlurmRunner | None = None,
            dry_run: bool = False, force: bool = False, say: Say = _quiet,
            sources: Sources | None = None) -> Outcome:
    """Plan and (unless ``dry_run`` or refused) apply an install. Raises BadInput (2) for
    a bad conf dir or template, SlurmUnreachable (3) when the accounts step cannot reach
    sacctmgr in a real run (before anything is changed)."""
    if not p.slurm_conf.is_file():
        raise BadInput(f"{p.slurm_conf} not found: slurm-ml adds to an existing Slurm "
                       f"configuration (--slurm-conf-dir)")
    say(f"slurm-ml install: planning for {p.conf_dir}")
    src = sources or state.read_sources()
    manifest = state.load_manifest(p.conf_dir)
    admin = state.admin_settings(p.slurm_conf, skip=p.include_path)
    resolution = slurmconf.resolve(bundle.own_settings(cfg, p, src), admin)
    files = bundle.render_files(cfg, p, src, resolution.values)
    conf_text = state.current(p.slurm_conf).text or ""
    conf = _conf_plan(cfg, p, conf_text, manifest, resolution.conflicts)
    paths: set[Path] = {p.slurm_conf}
    for f in files:
        paths |= {f.path, Path(str(f.path) + BACKUP_SUFFIX)}
    for key, rec in (manifest.files.items() if manifest else ()):
        paths.add(path_of(key, p.conf_dir))
        if rec.backup:
            paths.add(path_of(rec.backup, p.conf_dir))
    new_dirs = state.missing_dirs([d for d in (p.hooks, p.systemd_dir, p.rules_path.parent)
                                   if d is not None])
    current = state.read_current(sorted(p_ for p_ in paths
                                        if not any(p_.is_relative_to(d) for d in new_dirs)))
    changes = plan_install([(f.path, f.text, f.mode) for f in files], conf, current,
                           manifest, p.conf_dir, force=force, new_dirs=new_dirs,
                           config=str(p.config_path))
    changes = replace(changes, notes=changes.notes + resolution.notes)
    if p.accounts:
        say("slurm-ml install: reading QOS and associations (sacctmgr)")
        acc = _accounts_plan(cfg, run)
        if not acc.reachable and not dry_run and not changes.refusals:
            raise SlurmUnreachable(f"sacctmgr unreachable ({acc.error}); nothing was "
                                   f"changed. Start slurmdbd, or use --no-accounts")
    else:
        acc = AccountsReport(skipped=True)
    steps = next_steps(cfg, p)
    if dry_run or changes.refusals:
        return Outcome("install", changes, dry_run, False, acc, steps)
    if changes.changed:
        say(f"slurm-ml install: applying {len(changes.actions)} change(s)")
    apply(changes, p.conf_dir, say)
    if acc.commands:
        assert run is not None
        say(f"slurm-ml install: running {len(acc.commands)} sacctmgr command(s)")
        for cmd in acc.commands:
            try:
                run(list(cmd))
            except SlurmError as exc:
                raise SlurmUnreachable(f"{exc} (files are installed; re-run install to "
                                       f"finish the accounts)") from exc
        acc = AccountsReport(commands=acc.commands, applied=True)
    return Outcome("install", changes, dry_run, True, acc, steps)


def uninstall(conf_dir: Path, *, cfg: Config | None = None, dry_run: bool = False,
              force: bool = False, say: Say = _quiet) -> Outcome:
    """Remove what the manifest in ``conf_dir`` says install wrote, and undo its slurm.conf
    edits; QOS and accounts stay (the report lists the commands that would delete them)."""
    manifest = state.load_manifest(conf_dir)
    removal: tuple[tuple[str, ...], ...] = ()
    if cfg is not None:
        removal = tuple(tuple(c) for c in [
            accounts.revoke_root_qos(cfg.cluster.name),
            *accounts.removal_commands(cfg.cluster.name, cfg.budgets, [ALLOC_QOS, FREE_QOS])])
    note = KEPT_ACCOUNTS if cfg is None else f"{UNDO_GRANT_NOTE} {KEPT_ACCOUNTS}"
    acc = AccountsReport(skipped=True, commands=removal, note=note)
    if manifest is None:
        changes = ChangeSet(notes=(f"slurm-ml is not installed in {conf_dir} "
                                   f"(no {state.manifest_path(conf_dir).name})",))
        return Outcome("uninstall", changes, dry_run, False, acc)
    say(f"slurm-ml uninstall: planning for {conf_dir}")
    slurm_conf = conf_dir / "slurm.conf"
    paths: set[Path] = {slurm_conf}
    for key, rec in manifest.files.items():
        paths.add(path_of(key, conf_dir))
        if rec.backup:
            paths.add(path_of(rec.backup, conf_dir))
    current = state.read_current(sorted(paths))
    changes = plan_uninstall(manifest, current, conf_dir, slurm_conf, force=force)
    steps = ("systemctl disable --now slurm-ml-submitd.service slurm-ml-daemon.service "
             "(before uninstall), then systemctl daemon-reload",
             "restart slurmctld, then `scontrol reconfigure`")
    if dry_run or changes.refusals:
        return Outcome("uninstall", changes, dry_run, False, acc, steps)
    apply(changes, conf_dir, say)
    return Outcome("uninstall", changes, dry_run, True, acc, steps)


def site_part(slurm_conf: Path) -> str | None:
    """slurm.conf as it was before install edited it (None: no slurm.conf). Lets a tool
    that renders the site's slurm.conf (the dev cluster) tell a real change from ours."""
    text = state.current(slurm_conf).text
    if text is None:
        return None
    manifest = state.load_manifest(slurm_conf.parent)
    if manifest is None or manifest.slurm_conf is None:
        return text
    return slurmconf.revert_edits(text, manifest.slurm_conf).text
