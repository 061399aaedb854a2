"""rigup's lab machine: a booted Debian or Ubuntu systemd-nspawn container reached over SSH on a loopback
port, so pyinfra deploys and pytest-testinfra tests run against it exactly like a real rig.

Use ``python -m lab {up,stop,destroy,status,ssh,push}`` or :class:`lab.machine.LabMachine`
(configured by :class:`lab.config.LabConfig`).
"""

from lab.config import LabConfig, LabError
from lab.machine import LabMachine

__all__ = ["LabConfig", "LabError", "LabMachine"]
