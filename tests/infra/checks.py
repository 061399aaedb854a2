"""Checks every service role's testinfra module makes the same way (vLLM, VoxCPM2, ...).

Each asserts with a message that names the problem and the deploy that repairs it.
"""

from __future__ import annotations

from roles.common.facts import uv_env


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
