"""What every rigup GPU service role does the same way: its service account, and whether its unit
runs on this host (vLLM, VoxCPM2, ...). Call these inside a ``@deploy``."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.operations import files, server, systemd


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


def mode_unit_state(
    unit: str,
    component: str,
    blocker: str | None,
    target: str,
    mode: str,
    restart_if,
    relink_if=None,
    installed: str = "installed",
    hint: str = "",
) -> None:
    """State of a service that belongs to a GPU mode (roles/modes).

    Where it can run (``blocker`` None) the unit is enabled, i.e. linked into ``target``, and
    left to the mode to start: the modes deploy starts the boot mode when none runs, and
    ``rigup-mode`` switches. Here it is only restarted if it is running and ``restart_if`` fires
    (a pyinfra ``any_changed(...)``), and re-linked when ``relink_if`` fires (its [Install]
    section may have changed). Otherwise it is installed, stopped and disabled, and the run says
    why: "<component>: <blocker>: <unit> is <installed> but not started ... <hint>".
    """
    if blocker is None:
        systemd.service(
            name=f"{unit} enabled in {target} (runs in the {mode} mode)",
            service=unit,
            running=None,
            enabled=True,
        )
        if relink_if is not None:
            server.shell(
                name=f"Re-link {unit} into {target} (its [Install] section may have changed)",
                commands=[f"systemctl reenable {unit}"],
                _if=relink_if,
            )
        systemd.service(
            name=f"Restart {unit} if running (its inputs changed)",
            service=unit,
            running=None,
            restarted=True,
            _if=restart_if,
        )
        return
    logger.warning(
        f"[{host.name}] {component}: {blocker}: {unit} is {installed} but not started "
        f"(kept stopped and out of {target}{'; ' + hint if hint else ''})."
    )
    systemd.service(
        name=f"{unit} installed, not started (no GPUs or no driver)",
        service=unit,
        running=False,
        enabled=False,
    )
