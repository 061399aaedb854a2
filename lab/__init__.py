"""rigup's lab machine: a booted Debian systemd-nspawn container reached over SSH on a loopback
port, so pyinfra deploys and pytest-testinfra tests run against it exactly like a real rig.

Use ``python -m lab {up,stop,destroy,status,ssh,push}`` or :class:`lab.machine.LabMachine`.
"""

from lab.machine import LabConfig, LabError, LabMachine

__all__ = ["LabConfig", "LabError", "LabMachine"]
