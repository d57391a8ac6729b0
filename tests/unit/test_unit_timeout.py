"""Unit tests run under a 30 s timeout (tests/conftest.py), not pyproject's 300 s."""

from __future__ import annotations

import pytest

#: tests/conftest.py's UNIT_TIMEOUT_S (a module named conftest is ambiguous to import:
#: tests/integration has one too)
UNIT_TIMEOUT_S = 30


def test_a_unit_test_gets_the_unit_timeout(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("timeout")
    assert mark is not None and mark.args == (UNIT_TIMEOUT_S,)


@pytest.mark.timeout(45)
def test_a_test_with_its_own_timeout_keeps_it(request: pytest.FixtureRequest) -> None:
    mark = request.node.get_closest_marker("timeout")
    assert mark is not None and mark.args == (45,)
