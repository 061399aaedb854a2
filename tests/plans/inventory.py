"""A pyinfra inventory of one @fake host answering like the scenario named by RIGUP_PLAN_SCENARIO
(see tests/plans/scenarios.py). Used by tests/plans/test_plans.py with
`pyinfra tests/plans/inventory.py deploys/full.py --group-data inventory/group_data --dry --json`.
"""

import os

from tests.plans.scenarios import SCENARIOS

_name = os.environ.get("RIGUP_PLAN_SCENARIO", "fresh_rig")
_responses, _overrides = SCENARIOS[_name]()

plan = [
    (
        f"@fake/{_name}",
        {"fake_delay": 0, "fake_delay_jitter": 0, "fake_responses": _responses, **_overrides},
    )
]
