"""Partial run of one component: `pyinfra inventory/rig.py deploys/modes.py` (mode targets,
`rigup-mode`, the boot mode; starts a mode when none is running)."""

from roles.modes import modes

modes()
