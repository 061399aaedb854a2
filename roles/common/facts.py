"""Facts shared by rigup's roles. Each ``process()`` is pure and tested on captured output."""

from __future__ import annotations

import json
import shlex
from typing import Any

from pyinfra.api import FactBase


def uv_env(cache_dir: str, tmp_dir: str) -> str:
    """Environment prefix for every uv command rigup runs: its wheel cache, temp files off the
    tmpfs /tmp, the system's CA store (UV_SYSTEM_CERTS: uv otherwise trusts only its bundled
    roots, which fails behind a TLS-inspecting proxy; measured in the lab), no Python downloads."""
    return (
        f"UV_CACHE_DIR={shlex.quote(cache_dir)} TMPDIR={shlex.quote(tmp_dir)} "
        "UV_SYSTEM_CERTS=1 UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1"
    )


class UvVersion(FactBase):
    """Version of the uv binary at ``path``: ``"0.13.9"``, or None when it is absent/broken.

    Reads ``uv --version`` (output shape: ``uv 0.13.9 (x86_64-unknown-linux-gnu)``).
    """

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"! test -x {q} || {q} --version 2>/dev/null || true"

    def process(self, output: list[str]) -> str | None:
        for line in output:
            parts = line.split()
            if len(parts) >= 2 and parts[0] == "uv":
                return parts[1]
        return None


class UvSyncPending(FactBase):
    """What ``uv pip sync`` would change in a venv to match a locked requirements file.

    Returns None when the venv has no interpreter yet, else a list of pending changes as uv prints
    them (``["- setuptools==81.0.0", "+ setuptools==80.10.2"]``); ``[]`` means the venv matches
    the lock exactly. Runs ``uv pip sync --dry-run`` (measured: 0.4 s for vLLM's 193 packages).
    A lock that uv cannot read on the host is an error the caller reports (``["!error: ..."]``).
    ``mislabelled``: distributions whose wheel's own WHEEL file names other tags than its file
    name, so uv takes the installed copy for one built for another platform and plans to
    reinstall the same version at every sync (``~ name==version``); that reinstall is not a
    difference from the lock and is left out.
    """

    def command(
        self,
        uv: str,
        python: str,
        lock: str,
        cache_dir: str,
        tmp_dir: str,
        mislabelled: tuple[str, ...] = (),
    ) -> str:
        prefix = uv_env(cache_dir, tmp_dir)
        tolerate = "".join(f"echo '@mislabelled {shlex.quote(name)}'; " for name in mislabelled)
        return (
            f"{tolerate}if ! test -x {shlex.quote(python)}; then echo '@no-venv'; "
            f"elif ! test -f {shlex.quote(lock)}; then echo '@no-lock'; "
            f"else {prefix} {shlex.quote(uv)} pip sync --dry-run --require-hashes --no-progress "
            f"--python {shlex.quote(python)} {shlex.quote(lock)} 2>&1 || echo '@error'; fi"
        )

    def process(self, output: list[str]) -> list[str] | None:
        lines = [line.rstrip() for line in output]
        if "@no-venv" in lines:
            return None
        if "@no-lock" in lines:
            return ["+ (lock file not installed yet)"]
        mislabelled = tuple(
            x.split(" ", 1)[1] + "==" for x in lines if x.startswith("@mislabelled ")
        )
        lines = [x for x in lines if not x.startswith("@mislabelled ")]
        if "@error" in lines:
            return ["!error: " + " | ".join(x for x in lines if x and x != "@error")[-800:]]
        return [
            line.strip()
            for line in lines
            if line.startswith((" + ", " - ", " ~ "))
            and not (line.startswith(" ~ ") and line[3:].startswith(mislabelled))
        ]


class JsonFile(FactBase):
    """Parsed JSON content of a file on the host, or None when the file does not exist.

    Raises ``ValueError`` (from ``process``) when the file exists but is not valid JSON.
    """

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"if test -f {q}; then cat {q}; else echo '@absent'; fi"

    def process(self, output: list[str]) -> Any:
        if output == ["@absent"]:
            return None
        return json.loads("\n".join(output))


class DirectoryInventory(FactBase):
    """Regular files under a directory with their sizes in bytes: ``{"rel/path": size}``.

    None when the directory does not exist. Used to compare a placed model with its source
    without hashing gigabytes on every run.
    """

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"if test -d {q}; then echo '@present'; cd {q} && find . -type f -printf '%s %P\\n'; "
            "else echo '@absent'; fi"
        )

    def process(self, output: list[str]) -> dict[str, int] | None:
        if not output or output[0] != "@present":
            return None
        files: dict[str, int] = {}
        for line in output[1:]:
            size, _, rel = line.partition(" ")
            if rel:
                files[rel] = int(size)
        return files


class UnitState(FactBase):
    """``{"active": "activating", "sub": "auto-restart"}``: systemd's ActiveState and SubState
    of ``unit`` (``systemctl show``); ``{"active": "inactive", "sub": "dead"}`` for a unit
    systemd does not know."""

    def command(self, unit: str) -> str:
        return f"systemctl show -p ActiveState -p SubState {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, str]:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "active": values.get("ActiveState") or "inactive",
            "sub": values.get("SubState") or "dead",
        }


def unit_is_up(state: dict[str, str]) -> bool:
    """True for a long-running unit that is up: ``active`` and ``running``. A unit that is
    ``activating`` (starting, or waiting to be restarted after a crash: ``auto-restart``),
    ``failed`` or ``inactive`` is down."""
    return state.get("active") == "active" and state.get("sub") == "running"


class AllowedCpus(FactBase):
    """The CPUs processes on the host may run on, as the kernel lists them
    (``Cpus_allowed_list`` of /proc/self/status: ``"0-1"``, ``"0-3,8"``)."""

    def command(self) -> str:
        return "awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status"

    def process(self, output: list[str]) -> str | None:
        values = [line.strip() for line in output if line.strip()]
        return values[-1] if values else None


class VenvDistributions(FactBase):
    """Names of the distributions installed in the venv at ``venv`` (normalised: lower case,
    ``-`` for ``_``), read from its ``*.dist-info`` directories; None when there is no venv."""

    def command(self, venv: str) -> str:
        q = shlex.quote(venv)
        return (
            f"test -d {q}/lib || {{ echo @absent; exit 0; }}; "
            f"for d in {q}/lib/python*/site-packages/*.dist-info; do "
            'test -d "$d" && basename "$d"; done'
        )

    def process(self, output: list[str]) -> list[str] | None:
        if output[:1] == ["@absent"]:
            return None
        names = []
        for line in output:
            stem = line.strip().removesuffix(".dist-info")
            if stem:
                names.append(stem.rsplit("-", 1)[0].lower().replace("_", "-"))
        return sorted(set(names))
