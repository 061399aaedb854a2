"""Helpers shared by the boot-unit deploys (roles/nvidia/power.py, roles/nvidia/nvlink.py): a
JSON configuration file, a oneshot enabled and re-run on change, a unit held back where GPU
services may not run."""

from __future__ import annotations

import json
from io import StringIO

from pyinfra import host, logger
from pyinfra.operations import systemd

from roles.common.placed import file_placed
from roles.nvidia.layer import hold_back_reason


def json_config(name: str, dest: str, values: dict):
    """Put ``values`` as indented JSON at ``dest`` (0644); returns the operation."""
    return file_placed(
        name=name, src=StringIO(json.dumps(values, indent=2) + "\n"), dest=dest, mode="644"
    )


def boot_unit(unit: str, state: str, restart_name: str, restart_if) -> None:
    """Enable and start ``unit`` (operation "<unit> <state>"), and restart it, not just start
    it, when ``restart_if`` fires: a oneshot re-applies its settings only when it runs again."""
    systemd.service(name=f"{unit} {state}", service=unit, running=True, enabled=True)
    systemd.service(name=restart_name, service=unit, running=True, restarted=True, _if=restart_if)


def held_back(unit: str, gpus: int) -> None:
    why = hold_back_reason(gpus, False)
    logger.warning(f"[{host.name}] {unit}: {why}: installed, not started.")
    systemd.service(
        name=f"{unit} installed, not started (no GPUs or no driver)",
        service=unit,
        running=False,
        enabled=False,
    )
