"""Fixtures the dev-cluster modules share (tests/conftest.py has the cluster's own)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from node_restore import cancel_until_gone

from slurm_ml.assets import DEFAULT_CONFIG
from slurm_ml.config import load_config
from slurm_ml.devcluster.cluster import DevCluster
from slurm_ml.devcluster.layout import Layout


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this folder needs the dev cluster, so every one is marked here: a
    module that forgot its ``pytestmark`` ran in the unit pass instead, where ``make
    unit`` has no cluster, and not in the integration pass."""
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="module")
def cluster(slurm_conf: str) -> DevCluster:
    """The running dev cluster with its default config (a module that needs another
    config defines its own ``cluster``)."""
    root = Path(os.environ["SLURM_ML_DEVCLUSTER"])
    return DevCluster(load_config(DEFAULT_CONFIG), Layout(root), say=lambda _m: None,
                      config_path=DEFAULT_CONFIG)


@pytest.fixture
def jobs(slurm_conf: str) -> Iterator[list[int]]:
    """The ids of the jobs a test submits: cancelled after it, until squeue lists none
    (a module that needs more defines its own ``jobs``)."""
    ids: list[int] = []
    yield ids
    cancel_until_gone(ids)
