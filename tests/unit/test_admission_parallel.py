"""``parallel=data|tensor`` in --comment: the researcher's word on whether a multi-GPU
job needs NVLink, which decides whether capability matching may add PCIe types.

The end-to-end cases (job_desc in, reply out) are in ``test_admission_policy.py``;
these pin the rule itself, and that a job which does not say keeps today's behaviour.
"""

from __future__ import annotations

import itertools

import pytest

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.model import GpuRequest
from slurm_ml.policy.admission.capability import match, needs_nvlink
from slurm_ml.policy.admission.request import (
    BadCommentKey,
    JobRequest,
    comment_value,
    parallelism,
)
from slurm_ml.policy.admission.state import AdmissionState

CFG = load_config(DEFAULT_CONFIG)
TYPES = tuple(CFG.gpu_types)  # a100_80g, a100_40g (NVLink), v100 (PCIe)


@pytest.mark.parametrize(
    "comment,kind",
    [
        ("", None),
        ("parallel=data", "data"),
        ("parallel=tensor", "tensor"),
        ("PARALLEL=Tensor", "tensor"),
        ("gpu_mem=20G, parallel=data; run 7", "data"),
        ("parallel=tensor parallel=data", "data"),  # the last one counts, as for every key
        ("a parallel sweep", None),  # the word alone is the user's own text
        ("parallelism=data", None),
    ],
)
def test_parallelism_reads_the_key(comment: str, kind: str | None) -> None:
    assert parallelism(comment) == kind


@pytest.mark.parametrize(
    "comment", ["parallel=", "parallel=dp", "parallel=pipeline", "parallel=data+tensor"]
)
def test_a_bad_value_says_what_to_write(comment: str) -> None:
    with pytest.raises(BadCommentKey) as got:
        parallelism(comment)
    text = str(got.value)
    assert "in --comment is neither data nor tensor" in text
    assert "parallel=data" in text and "parallel=tensor" in text and "NVLink" in text


def test_comment_value_ignores_bare_words() -> None:
    assert comment_value("pin_gpu parallel", "parallel") is None
    assert comment_value("x parallel= y", "parallel") == ""
    assert comment_value("Parallel=data", "parallel") == "data"


@pytest.mark.parametrize("size", range(1, len(TYPES) + 1))
def test_without_the_key_nvlink_follows_the_requested_types(size: int) -> None:
    """The rule before the key existed: an NVLink type asked for keeps NVLink."""
    for requested in itertools.combinations(TYPES, size):
        want = any(CFG.gpu_types[t].nvlink_links > 0 for t in requested)
        assert needs_nvlink(None, set(requested), CFG.gpu_types) is want
        assert needs_nvlink("data", set(requested), CFG.gpu_types) is False
        assert needs_nvlink("tensor", set(requested), CFG.gpu_types) is True


def _acceptable(gpu_type: str, per_node: int, comment: str) -> tuple[str, ...]:
    req = JobRequest(
        user="bob",
        gpus=(GpuRequest(count=per_node, per="node", gpu_type=gpu_type),),
        comment=comment,
    )
    cap = match(
        req,
        None,
        gpu_types=CFG.gpu_types,
        feature_to_type={},
        state=AdmissionState(),
        margin_pct=10,
        gpus_per_node=per_node,
    )
    return cap.acceptable


@pytest.mark.parametrize("gpu_type", TYPES)
@pytest.mark.parametrize("per_node", [1, 2, 4, 8])
@pytest.mark.parametrize("need", ["gpu_mem=20G", "gpu_mem=35G", "gpu_mem=60G"])
def test_tensor_or_nothing_said_widen_alike_except_pcie_requests(
    gpu_type: str, per_node: int, need: str
) -> None:
    """parallel=tensor on an NVLink type is what a job that says nothing already gets;
    parallel=data may add PCIe types, and only on several GPUs per node."""
    plain = _acceptable(gpu_type, per_node, need)
    data = _acceptable(gpu_type, per_node, f"{need} parallel=data")
    tensor = _acceptable(gpu_type, per_node, f"{need} parallel=tensor")
    if CFG.gpu_types[gpu_type].nvlink_links > 0:
        assert tensor == plain
    assert set(plain) <= set(data)
    if per_node == 1:
        assert data == plain == tensor
    else:
        assert all(CFG.gpu_types[t].nvlink_links > 0 for t in set(tensor) - {gpu_type})


def test_data_parallel_adds_v100_only_where_the_need_fits() -> None:
    assert "v100" not in _acceptable("a100_80g", 4, "gpu_mem=20G")
    assert "v100" in _acceptable("a100_80g", 4, "gpu_mem=20G parallel=data")
    # 30 GB plus the 10% margin is more than a 32 GB V100 holds
    assert "v100" not in _acceptable("a100_80g", 4, "gpu_mem=30G parallel=data")
