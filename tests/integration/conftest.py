"""Fixtures the dev-cluster modules share (tests/conftest.py has the cluster's own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from node_restore import cancel_until_gone


@pytest.fixture
def jobs(slurm_conf: str) -> Iterator[list[int]]:
    """The ids of the jobs a test submits: cancelled after it, until squeue lists none
    (a module that needs more defines its own ``jobs``)."""
    ids: list[int] = []
    yield ids
    cancel_until_gone(ids)
