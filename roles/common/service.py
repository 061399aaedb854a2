"""What every rigup GPU service role does the same way: its service account, and whether its unit
runs on this host (vLLM, VoxCPM2, ...). Call these inside a ``@deploy``."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.operations import files, server, systemd


def gpu_start_blocker(gpus: int, has_driver: bool) -> str | None:
    """Why a GPU service cannot start on a host, or None when it can.

    ``gpus``: the ``nvidia_gpu_count`` the inventory declares; ``has_driver``: ``nvidia-smi`` is
    on PATH (the NVIDIA driver is installed).
    """
    if gpus == 0:
        return "this host declares no NVIDIA GPUs (nvidia_gpu_count = 0)"
    if not has_driver:
        return (
            f"it declares {gpus} GPU(s) but has no NVIDIA driver (no nvidia-smi on PATH, and "
            "this run does not install it)"
        )
    return None


def has_nvidia_driver(gpus: int) -> bool:
    """The NVIDIA driver is there for GPU services: ``nvidia-smi`` is on PATH, or this run's
    NVIDIA deploy installs it (roles.nvidia.driver_usable; asked only of hosts that declare
    GPUs)."""
    from roles.nvidia import driver_usable  # roles.nvidia imports roles.common

    return driver_usable(gpus)


def service_account(user: str, home: str, comment: str) -> None:
    """System user ``user`` (no login, group ``video`` for /dev/nvidia*) with its home ``home``
    (0750) and ``home/tmp`` (0700), both owned by it."""
    server.user(
        name=f"Service user {user}",
        user=user,
        system=True,
        home=home,
        shell="/usr/sbin/nologin",
        groups=["video"],
        comment=comment,
    )
    files.directory(name=f"Directory {home}", path=home, user=user, group=user, mode="750")
    files.directory(
        name=f"Directory {home}/tmp", path=f"{home}/tmp", user=user, group=user, mode="700"
    )


def unit_state(
    unit: str, component: str, blocker: str | None, restart_if, installed: str = "installed"
) -> None:
    """Hold ``unit`` enabled and running, restarted when ``restart_if`` fires (a pyinfra
    ``any_changed(...)`` condition); or, when ``blocker`` says why it cannot run, installed but
    stopped and disabled, with a warning "<component>: <blocker>: <unit> is <installed> but not
    started" (``installed``: what the role did instead, e.g. "installed and checked")."""
    if blocker is None:
        systemd.service(
            name=f"{unit} enabled and running", service=unit, running=True, enabled=True
        )
        systemd.service(
            name=f"Restart {unit} (its inputs changed)",
            service=unit,
            running=True,
            restarted=True,
            _if=restart_if,
        )
        return
    logger.warning(
        f"[{host.name}] {component}: {blocker}: {unit} is {installed} but not started "
        "(kept stopped and disabled)."
    )
    systemd.service(
        name=f"{unit} installed, not started (no GPUs or no driver)",
        service=unit,
        running=False,
        enabled=False,
    )
