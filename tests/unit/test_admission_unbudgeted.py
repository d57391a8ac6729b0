"""policy.admission.unbudgeted: GPU jobs of accounts outside the budget tree (issue 14).

``untouched`` (the default) leaves the job's QOS to Slurm; ``free`` runs it in QOS free,
which install then grants to every association. Either way the message names the account
the job runs under: its -A, else the user's default account in slurmdbd.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploy_helpers import make_conf_dir, params

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import Config, ConfigError, load_config, parse_config
from slurm_ml.deploy.install import FREE_GRANT_NOTE, install, uninstall
from slurm_ml.policy.admission import decide
from slurm_ml.policy.admission.cluster_view import cluster_view
from slurm_ml.policy.admission.state import AccountStanding, AdmissionState
from slurm_ml.slurm import accounts
from slurm_ml.slurm.errors import SlurmCommandError
from slurm_ml.slurm.fake import FakeSlurm
from slurm_ml.submitd.state import StateRefresher
from slurm_ml.submitd.wire import normalize, reply_for, to_request

DATA: dict[str, Any] = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
ONE_GPU = {"tres_per_node": "gres/gpu:1"}
STATE = AdmissionState(
    standing={"llm-pretrain": AccountStanding("llm-pretrain", exhausted=False, site_factor=700),
              "physics": AccountStanding("physics", exhausted=False, site_factor=9)},
    default_accounts={"eve": "physics", "root": "root", "alice": "detection"},
    loaded_at=NOW,
)


def config(mode: str | None) -> Config:
    data = copy.deepcopy(DATA)
    if mode is not None:
        data["policy"]["admission"]["unbudgeted"] = mode
    return parse_config(data, "test")


FREE, UNTOUCHED = config("free"), config("untouched")


def submit(job: Mapping[str, Any], cfg: Config, state: AdmissionState = STATE) -> dict[str, Any]:
    fields = normalize({**ONE_GPU, **job})
    req = to_request(fields)
    decision = decide(req, cfg, cluster_view(cfg), state, NOW)
    return reply_for(decision, fields, req, leaf_wait_s=600)


def record(reply: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(reply["set"]["admin_comment"].removeprefix("slurm-ml "))
    return out


def test_the_default_is_untouched_and_other_values_are_refused() -> None:
    assert config(None).policy.admission.unbudgeted == "untouched"
    assert load_config(DEFAULT_CONFIG).policy.admission.unbudgeted == "untouched"
    with pytest.raises(ConfigError, match="unbudgeted"):
        config("charge")


# ------------------------------------------------------------------- routing, both modes

#: (id, job_desc fields, the account the message names)
UNBUDGETED = [
    ("explicit-account", {"user_name": "alice", "account": "physics"}, "Account physics has"),
    ("default-account-from-slurmdbd", {"user_name": "eve"},
     "Account physics (your default account) has"),
    ("root-default-account", {"user_name": "root"}, "Account root (your default account) has"),
]


@pytest.mark.parametrize(("job", "names"), [c[1:] for c in UNBUDGETED],
                         ids=[c[0] for c in UNBUDGETED])
def test_untouched_keeps_the_qos_slurm_gives_and_names_the_account(
        job: dict[str, Any], names: str) -> None:
    reply = submit(job, UNTOUCHED)
    assert reply["action"] == "accept"
    assert "qos" not in reply["set"] and "site_factor" not in reply["set"]
    assert f"slurm-ml: {names} no GPU-time budget in slurm-ml" in reply["message"]
    assert "keeps its association's default QOS" in reply["message"]
    assert "(none)" not in reply["message"] and "QOS free" not in reply["message"]
    rec = record(reply)
    assert "qos" not in rec and "min_runtime" not in rec  # not routed


@pytest.mark.parametrize(("job", "names"), [c[1:] for c in UNBUDGETED],
                         ids=[c[0] for c in UNBUDGETED])
def test_free_routes_to_qos_free_and_names_the_account(job: dict[str, Any], names: str) -> None:
    reply = submit(job, FREE)
    assert reply["action"] == "accept"
    assert reply["set"]["qos"] == "free"
    assert f"slurm-ml: {names} no GPU-time budget, so the job runs in QOS free" \
        in reply["message"]
    assert record(reply)["min_runtime"] == 0


def test_untouched_keeps_the_users_own_qos_and_time_min() -> None:
    reply = submit({"user_name": "eve", "qos": "free", "time_min": 30}, UNTOUCHED)
    assert "keeps the QOS you chose (free)" in reply["message"]
    assert "qos" not in reply["set"] and "time_min" not in reply["set"]


def test_untouched_still_shapes_the_job() -> None:
    reply = submit({"user_name": "eve", "tres_per_node": "", "tres_per_job": "gres/gpu:16"},
                   UNTOUCHED)
    assert reply["action"] == "accept"
    assert reply["set"]["min_nodes"] == 2 and reply["set"].get("shared") == 0
    assert "qos" not in reply["set"]
    assert "Shaped to whole nodes" in reply["message"]
    assert "Account physics (your default account)" in reply["message"]


def test_a_budgeted_users_slurmdbd_default_account_is_the_one_charged() -> None:
    """alice's first account in the tree is llm-pretrain; slurmdbd says detection."""
    reply = submit({"user_name": "alice"}, UNTOUCHED)
    assert reply["set"]["qos"] == "alloc"
    assert "charged to detection" in reply["message"]
    without = submit({"user_name": "alice"}, UNTOUCHED, AdmissionState(loaded_at=NOW))
    assert "charged to llm-pretrain" in without["message"]


def test_no_default_account_known_says_so_not_none() -> None:
    for cfg in (FREE, UNTOUCHED):
        reply = submit({"user_name": "mallory"}, cfg, AdmissionState(loaded_at=NOW))
        assert "Your default account (slurm-ml could not read it)" in reply["message"]
        assert "(none)" not in reply["message"]


# ------------------------------------------------------------ default accounts in submitd


def test_parse_default_accounts() -> None:
    text = "alice|llm-pretrain\nroot|root\neve|physics\nnobody|\n\n"
    assert accounts.parse_default_accounts(text) == {
        "alice": "llm-pretrain", "root": "root", "eve": "physics"}


class _FailingSlurm(FakeSlurm):
    fail = False

    def default_accounts(self) -> dict[str, str]:
        if self.fail:
            raise SlurmCommandError(("sacctmgr",), 1, "slurmdbd down")
        return super().default_accounts()


def test_the_refresher_reads_default_accounts_and_keeps_them_when_sacctmgr_fails() -> None:
    slurm = _FailingSlurm()
    slurm.user_default_accounts = {"eve": "physics"}
    ref = StateRefresher(None, UNTOUCHED, slurm=slurm)
    ref.refresh_once()
    assert ref.current.default_accounts == {"eve": "physics"}
    slurm.fail = True
    ref.refresh_once()
    assert ref.current.default_accounts == {"eve": "physics"}
    assert "slurmdbd down" in (ref.slurm_error or "")
    slurm.fail = False
    slurm.user_default_accounts = {"eve": "chem"}
    ref.refresh_once()
    assert ref.current.default_accounts == {"eve": "chem"} and ref.slurm_error is None


# ------------------------------------------------------------------- install: the grant

#: A brownfield slurmdbd: root inherits nothing, physics inherits root's list, chem and
#: eve have lists of their own; the tree accounts are already there.
ASSOCS = """root|||normal
root||root|normal
physics|root||normal
physics||eve|long,normal
chem|root||long,normal
ml|root||alloc,free
llm-pretrain|nlp||alloc,free
"""


def test_plan_qos_grant_covers_root_and_associations_with_their_own_list() -> None:
    cmds = accounts.plan_qos_grant("slurmml", accounts.parse_assocs(ASSOCS))
    assert [shlex.join(c) for c in cmds] == [
        "sacctmgr -i modify account where name=root cluster=slurmml set qos+=free",
        "sacctmgr -i modify user where name=eve account=physics cluster=slurmml set qos+=free",
        "sacctmgr -i modify account where name=chem cluster=slurmml set qos+=free",
    ]
    granted = ASSOCS.replace("normal\n", "free,normal\n")
    assert accounts.plan_qos_grant("slurmml", accounts.parse_assocs(granted)) == []


class _Sacctmgr:
    """Answers install's three reads; records every command."""

    def __init__(self, assocs: str = ASSOCS) -> None:
        self.assocs = assocs
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], **_kw: object) -> str:
        self.calls.append(list(argv))
        if argv[:5] == ["sacctmgr", "-n", "-P", "show", "cluster"]:
            return "slurmml\n"
        if argv[:5] == ["sacctmgr", "-n", "-P", "show", "qos"]:
            return "normal|1|cluster|00:00:00|0||00:00:00\n"
        if argv[:5] == ["sacctmgr", "-n", "-P", "show", "assoc"]:
            return self.assocs
        return ""


def _cfg_file(tmp_path: Path, mode: str) -> Path:
    data = copy.deepcopy(DATA)
    data["policy"]["admission"]["unbudgeted"] = mode
    path = tmp_path / f"slurm-ml-{mode}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("mode", ["free", "untouched"])
def test_install_plans_and_shows_the_free_grant_only_in_free_mode(
        tmp_path: Path, mode: str) -> None:
    etc = make_conf_dir(tmp_path)
    path = _cfg_file(tmp_path, mode)
    run = _Sacctmgr()
    out = install(load_config(path), params(tmp_path, etc, accounts=True, config_path=path),
                  run=run, dry_run=True)  # type: ignore[arg-type]
    grant = "sacctmgr -i modify account where name=root cluster=slurmml set qos+=free"
    for diff in (False, True):
        text = out.render(diff=diff)
        assert (grant in text) == (mode == "free")
        assert (FREE_GRANT_NOTE in text) == (mode == "free")
    assert all(c[3] == "show" for c in run.calls)  # a dry run changes nothing
    if mode == "free":
        real = install(load_config(path),
                       params(tmp_path, etc, accounts=True, config_path=path), run=run)  # type: ignore[arg-type]
        assert grant.split() in run.calls
        assert real.accounts.applied


def test_uninstall_prints_how_to_undo_the_grant(tmp_path: Path) -> None:
    etc = make_conf_dir(tmp_path)
    path = _cfg_file(tmp_path, "free")
    install(load_config(path), params(tmp_path, etc, config_path=path))
    text = uninstall(etc, cfg=load_config(path)).render(diff=False)
    assert "sacctmgr -i modify account where name=root cluster=slurmml set qos-=free" in text
    assert "undo it with the first command below" in text
