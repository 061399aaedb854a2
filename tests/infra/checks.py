"""Checks every service role's testinfra module makes the same way (vLLM, VoxCPM2, ...).

Each asserts with a message that names the problem and the deploy that repairs it.
"""

from __future__ import annotations

import shlex

from roles.common.facts import uv_env
from roles.modes import UP
from roles.modes.budget import MODES
from roles.services import by_unit


def check_service_user(host, name: str, home: str, deploy: str) -> None:
    """``name`` is a system user without login whose home ``home`` is a 0750 directory it owns."""
    user = host.user(name)
    assert user.exists, f"service user {name} is missing: run {deploy}"
    assert user.uid != 0 and user.uid < 1000, f"{user.name} is not a system user (uid {user.uid})"
    assert user.shell in ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false"), user.shell
    assert user.home == home, f"{user.name}'s home is {user.home}, not {home}"
    d = host.file(home)
    assert d.is_directory and d.user == user.name and d.mode == 0o750, (
        f"{home} must be a 0750 directory owned by {user.name}: re-run {deploy}"
    )


def check_venv_matches_lock(host, paths, python: str, lock: str) -> None:
    """``uv pip sync --dry-run`` of ``lock`` against the venv of ``python`` plans nothing."""
    out = host.run(
        f"{uv_env(paths.uv_cache, paths.tmp)} {paths.uv} pip sync --dry-run "
        f"--require-hashes --python {python} {lock}"
    )
    drift = [
        line for line in (out.stdout + out.stderr).splitlines() if line.startswith((" + ", " - "))
    ]
    assert out.rc == 0 and not drift, f"venv differs from the lock: {drift or out.stderr}"


def check_unit_properties(host, unit: str, want: dict[str, str], deploy: str) -> None:
    """``systemctl show`` of ``unit`` has every property of ``want`` (hardening, restart)."""
    out = host.run(f"systemctl show {unit} " + " ".join(f"-p {k}" for k in want))
    got = dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)
    weaker = {k: got.get(k) for k, v in want.items() if got.get(k) != v}
    assert not weaker, f"{unit} hardening differs from rigup's unit: {weaker}; re-run {deploy}"


def env_file_values(host, path: str, group: str, deploy: str) -> dict[str, str]:
    """The ``NAME=value`` lines of a service's env file, after checking it is root:``group``
    0640 (not world-readable)."""
    f = host.file(path)
    assert f.exists, f"{path} is missing: re-run {deploy}"
    assert (f.user, f.group) == ("root", group), (
        f"{path} is owned by {f.user}:{f.group}, expected root:{group}"
    )
    assert f.mode == 0o640, f"{path} has mode {oct(f.mode)}: it must not be world-readable"
    return dict(
        x.split("=", 1) for x in f.content_string.splitlines() if x and not x.startswith("#")
    )


def explain(host, unit: str) -> str:
    """Why ``unit`` is not up, in the diagnosis library's words: ``rigup-explain`` on the host
    (what rigup-start prints when a start fails), for assertion messages."""
    out = host.run(f"/opt/rigup/bin/rigup-explain {unit}")
    return (
        out.stdout + out.stderr
    ).strip() or f"rigup-explain {unit} printed nothing (rc {out.rc})"


def active_mode_of(targets: dict[str, dict]) -> str | None:
    """The GPU mode (``"llm"``, ``"media"``) whose target is up in ``targets`` (what
    roles.modes.ModeTargets returns), or None when none or both are."""
    up = [mode for mode, target in MODES.items() if targets.get(target, {}).get("state") in UP]
    return up[0] if len(up) == 1 else None


def mode_skip_reason(unit: str, active_mode: str | None) -> str | None:
    """Why a check of ``unit`` serving cannot run now, or None when the host is in the mode
    ``unit`` serves in (its footprint's, roles/services.py): the other mode's services are stopped
    by design, so their serving checks skip with this reason instead of failing."""
    mode = by_unit(unit).mode
    if active_mode == mode:
        return None
    return (
        f"{unit} serves in the {mode} mode and this host is in "
        f"{f'the {active_mode} mode' if active_mode else 'no mode'}: `sudo rigup-mode {mode}` "
        "runs this check"
    )


def writable_by_every_user_command(roots: list[str]) -> str:
    """The ``find`` command that lists, under ``roots``, what every user can write: entries with
    the others' write bit (o+w) other than symlinks, one ``<octal mode> <owner> <path>`` line
    each. A directory others cannot enter (no o+x) is not descended (``-prune``): nothing in it
    is within other users' reach, whatever its own mode. That is how rigup keeps the files it
    cannot choose the mode of: uv makes its lock files 0666 and chmods them so (a umask does not
    help; measured with uv 0.13.9): the per-build ``uv-setuptools-<hash>.lock`` in TMPDIR
    (``rigup_tmp_dir``, a 0700 root directory) when it builds a source distribution, and its
    cache's locks (``uv_cache_dir``, 0700 root); the ``.lock`` of each venv, which others can
    reach, rigup holds at 0600 (roles.common.venv.uv_lock_private)."""
    quoted = " ".join(shlex.quote(root) for root in roots)
    return (
        f"find {quoted} -type d ! -perm -0001 -prune -o -perm -0002 ! -type l "
        "-printf '%m %u %p\\n' 2>/dev/null"
    )


def writable_by_every_user(host, roots: list[str]) -> list[str]:
    """``<mode> <owner> <path>`` of each entry under ``roots`` every user can write
    (:func:`writable_by_every_user_command`)."""
    return host.run(writable_by_every_user_command(roots)).stdout.splitlines()
