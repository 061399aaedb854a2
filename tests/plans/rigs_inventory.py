"""inventory/rigs.py on @fake hosts, for plans of a cluster without machines: the shipped group
data and hosts, each rig renamed ``@fake/<host>``, with the host data overrides of
``RIGUP_PLAN_RIGS`` (JSON ``{host: {key: value}}``, hosts as inventory/rigs.py names them)."""

import json
import os
import runpy
from pathlib import Path

_hosts, _group = runpy.run_path(str(Path(__file__).resolve().parents[2] / "inventory" / "rigs.py"))[
    "rigs"
]
_overrides = json.loads(os.environ.get("RIGUP_PLAN_RIGS", "{}"))

rigs = (
    [
        (
            f"@fake/{name}",
            {
                **{k: v for k, v in data.items() if not k.startswith("ssh_")},
                "fake_delay": 0,
                "fake_delay_jitter": 0,
                **_overrides.get(name, {}),
            },
        )
        for name, data in _hosts
    ],
    _group,
)
