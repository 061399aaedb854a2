"""Plan fixtures shared by the plan test modules."""

from __future__ import annotations

import pytest

from tests.plans.test_plans import plan


@pytest.fixture(scope="module")
def fresh_rig():
    """The dry plan of deploys/full.py on a fresh rig (parsed ``--json`` output)."""
    rc, parsed, err = plan("fresh_rig")
    assert rc == 0, err
    return parsed
