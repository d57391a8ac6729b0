"""tests/compose/: the docker compose cluster, where a Docker engine answers."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compose: needs a Docker engine and `docker compose` (skipped where none answers)",
    )
