"""install/uninstall when things go wrong: a run cut short, a managed line edited by the
admin, secrets in what install prints and keeps, lines Slurm would join."""

from __future__ import annotations

from pathlib import Path

import pytest
from deploy_helpers import cfg, make_conf_dir, params, snapshot

from slurm_ml.deploy import apply as deploy_apply
from slurm_ml.deploy.errors import BadInput, FileFailed
from slurm_ml.deploy.install import install, uninstall
from slurm_ml.deploy.manifest import MANIFEST_NAME
from slurm_ml.deploy.plan import Action


def test_the_manifest_is_private_and_diffs_hide_the_dsn_password(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    dry = install(cfg(), params(tmp_path, etc), dry_run=True).render(diff=True)
    assert "postgresql://u:***@db/slurmml" in dry and "u:p@" not in dry
    install(cfg(), params(tmp_path, etc))
    assert (etc / MANIFEST_NAME).stat().st_mode & 0o777 == 0o600  # it hashes the env file
    assert "u:p@db" in (etc / "slurm-ml.env").read_text()  # the file itself keeps it


def test_a_run_cut_short_is_finished_by_the_next_install_and_undone_by_uninstall(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = make_conf_dir(tmp_path)
    before = snapshot(tmp_path)
    real = deploy_apply._apply_one
    done: list[Path] = []

    def disk_full_on_the_fourth(a: Action) -> None:
        if len(done) == 3:
            raise OSError(28, "No space left on device")
        real(a)
        done.append(a.path)

    monkeypatch.setattr(deploy_apply, "_apply_one", disk_full_on_the_fourth)
    with pytest.raises(FileFailed):
        install(cfg(), params(tmp_path, etc))
    monkeypatch.setattr(deploy_apply, "_apply_one", real)
    assert (etc / MANIFEST_NAME).exists()  # written first: what was written is on record
    # uninstall right away removes what the cut-short run wrote
    assert uninstall(etc).exit_code == 0
    assert snapshot(tmp_path) == before
    # and a cut-short run followed by install again finishes, then uninstalls cleanly
    monkeypatch.setattr(deploy_apply, "_apply_one", disk_full_on_the_fourth)
    done.clear()
    with pytest.raises(FileFailed):
        install(cfg(), params(tmp_path, etc))
    monkeypatch.setattr(deploy_apply, "_apply_one", real)
    again = install(cfg(), params(tmp_path, etc))
    assert again.exit_code == 0 and not again.changes.refusals
    assert install(cfg(), params(tmp_path, etc)).changes.actions == ()
    assert uninstall(etc).exit_code == 0
    assert snapshot(tmp_path) == before


def test_an_update_cut_short_is_still_installs_own_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    newer = params(tmp_path, etc, dsn="postgresql://u:p@db2/slurmml")  # changes the env file

    def fail(_a: Action) -> None:
        raise OSError(5, "I/O error")

    monkeypatch.setattr(deploy_apply, "_apply_one", fail)
    with pytest.raises(FileFailed):
        install(cfg(), newer)
    monkeypatch.undo()
    # the env file still has the old content: not a local change, no refusal
    out = install(cfg(), newer)
    assert out.exit_code == 0 and not out.changes.refusals
    assert "db2" in (etc / "slurm-ml.env").read_text()


def test_reinstall_refuses_when_a_managed_partition_line_was_edited(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    install(cfg(), params(tmp_path, etc))
    conf = etc / "slurm.conf"
    lines = conf.read_text().split("\n")
    i = next(n for n, line in enumerate(lines) if line.startswith("PartitionName=gpu "))
    lines[i] += " MaxTime=7-0"
    conf.write_text("\n".join(lines))
    out = install(cfg(), params(tmp_path, etc))
    assert out.exit_code == 1
    assert any("changed locally since" in r for r in out.changes.refusals)
    assert conf.read_text().count("MaxTime=7-0") == 1  # refused: nothing changed
    # uninstall refuses too, rather than leaving slurm-ml's weights behind silently
    assert uninstall(etc).exit_code == 1


def test_a_managed_partition_line_continued_with_a_backslash_is_refused(
        tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    conf = etc / "slurm.conf"
    text = conf.read_text().replace("PartitionName=gpu ", "PartitionName=gpu \\\n    ", 1)
    conf.write_text(text)
    with pytest.raises(BadInput, match=r"slurm.conf:\d+: PartitionName=gpu continues"):
        install(cfg(), params(tmp_path, etc), dry_run=True)
