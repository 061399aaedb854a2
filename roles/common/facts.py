"""Facts shared by rigup's roles. Each ``process()`` is pure and tested on captured output."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from pyinfra.api import FactBase

from rigup.units import changed_since

#: Seconds uv waits for a lock (its cache, a venv, a Python install directory) held by another
#: process before it gives up: a cache lock fails the run with uv's "Could not acquire lock ...
#: Timeout (300s) when waiting for lock on `<path>`" (measured in the lab; a venv lock uv only
#: warns about). Only root can hold them: rigup keeps the lock files 0600 and the cache 0700.
UV_LOCK_TIMEOUT_S = 300


def uv_env(cache_dir: str, tmp_dir: str, sources: str = "") -> str:
    """Environment prefix for every uv command rigup runs: its wheel cache, temp files off the
    tmpfs /tmp, the system's CA store (UV_SYSTEM_CERTS: uv otherwise trusts only its bundled
    roots, which fails behind a TLS-inspecting proxy; measured in the lab), no Python downloads,
    a bounded wait for uv's locks (:data:`UV_LOCK_TIMEOUT_S`), and where packages come from
    (``sources``: :meth:`roles.common.uv.PackageSources.uv_env`)."""
    env = (
        f"UV_CACHE_DIR={shlex.quote(cache_dir)} TMPDIR={shlex.quote(tmp_dir)} "
        "UV_SYSTEM_CERTS=1 UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1 "
        f"UV_LOCK_TIMEOUT={UV_LOCK_TIMEOUT_S}"
    )
    return f"{env} {sources}" if sources else env


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
        sources: str = "",
    ) -> str:
        prefix = uv_env(cache_dir, tmp_dir, sources)
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


#: the file in a venv where rigup records the :func:`venv_fingerprint` of its last sync
SYNCED_STAMP = ".rigup-synced"
#: how rigup syncs a venv, part of its fingerprint: ``uv pip sync --compile-bytecode``. A
#: service runs as its own user, who cannot write ``__pycache__`` into the root-owned venv, so
#: without compiled files every start compiles every module it imports again. Measured on the
#: lab (Python 3.14, vLLM 0.22.1's CPU build, 2 cores, 2026-12-03): importing vLLM's API
#: server, engine core and CPU worker took 16.8 s of CPU without them and 5.6 s with them, in
#: each of the four processes a tensor-parallel-2 start runs; compiling the venv took 31.6 s once.
SYNC_FORM = "compile-bytecode"


def venv_fingerprint(venv: str, lock: str, uv: str) -> str:
    """Shell pipeline printing the sha256 (hex) of everything ``uv pip sync --dry-run`` reads
    to decide that the venv ``venv`` matches ``lock``: the lock's bytes, the venv's
    ``pyvenv.cfg`` (its interpreter), uv's version, and each installed distribution's
    ``.dist-info`` name (name and version) with its ``WHEEL`` (tags) and ``direct_url.json``.
    uv does not re-hash installed files either, so equal fingerprints mean uv's answer is
    unchanged. The pipeline starts with :data:`SYNC_FORM` (how rigup syncs: bytecode compiled),
    so a venv synced another way is synced again."""
    v, q_lock, q_uv = shlex.quote(venv), shlex.quote(lock), shlex.quote(uv)
    return (  # two cat processes for all distributions: 193 of them in vLLM's venv
        f"( echo {SYNC_FORM}; sha256sum < {q_lock}; cat {v}/pyvenv.cfg; {q_uv} --version; "
        f"cd {v}/lib/python*/site-packages && printf '%s\\n' *.dist-info && "
        "cat *.dist-info/WHEEL; cat *.dist-info/direct_url.json ) 2>/dev/null "
        "| sha256sum | cut -d' ' -f1"
    )


class VenvSynced(FactBase):
    """Whether the venv at ``venv`` is as rigup's last sync left it against ``lock``: True
    when the fingerprint recorded in ``<venv>/.rigup-synced`` by that sync equals
    :func:`venv_fingerprint` now. One round trip of ``cat`` and ``sha256sum`` instead of
    uv's dry run (measured in the lab: 1.2 to 1.5 s each for vLLM's 193 packages on 2 shared
    cores, benchmarks/rerun.py)."""

    def default(self) -> bool:
        return False

    def command(self, venv: str, lock: str, uv: str) -> str:
        stamp = shlex.quote(f"{venv}/{SYNCED_STAMP}")
        return (
            f'echo "stamp $(cat {stamp} 2>/dev/null)"; '
            f'echo "now $( {venv_fingerprint(venv, lock, uv)} )"'
        )

    def process(self, output: list[str]) -> bool:
        values = dict(line.split(" ", 1) for line in output if " " in line)
        stamp = values.get("stamp", "").strip()
        return bool(stamp) and stamp == values.get("now", "").strip()


class Account(FactBase):
    """A local account as ``server.user`` compares it, in one command (pyinfra's ``Users``
    fact lists every account with a process per user: 0.4 s in the lab):
    ``{"home": "/var/lib/vllm", "shell": "/usr/sbin/nologin", "comment": "...",
    "primary": "vllm", "groups": ["video"], "home_owner": "vllm:vllm"}`` (``groups``: the
    supplementary groups; ``home_owner``: ``user:group`` of the home directory, ``""`` when
    it is absent), or None when there is no such account."""

    def command(self, user: str, home: str) -> str:
        u, h = shlex.quote(user), shlex.quote(home)
        return (
            f"getent passwd {u} || {{ echo @absent; exit 0; }}; "
            f'echo "@primary $(id -gn {u})"; echo "@groups $(id -nG {u})"; '
            f"echo \"@home $(stat -c '%U:%G' {h} 2>/dev/null)\""
        )

    def process(self, output: list[str]) -> dict[str, Any] | None:
        if not output or output[0] == "@absent":
            return None
        fields = output[0].split(":")
        if len(fields) < 7:
            return None
        tagged = dict(line.split(" ", 1) if " " in line else (line, "") for line in output[1:])
        primary = tagged.get("@primary", "").strip()
        groups = [g for g in tagged.get("@groups", "").split() if g != primary]
        return {
            "comment": fields[4],
            "home": fields[5],
            "shell": fields[6],
            "primary": primary,
            "groups": sorted(groups),
            "home_owner": tagged.get("@home", "").strip(),
        }


class CheckStamp(FactBase):
    """What :func:`roles.common.operations.check_passes` compares, in one command: the first
    line of the stamp file (None when absent or empty) and the sha256 of each ``watch`` file
    (None when absent), in order: ``{"stamp": "5b1e...", "watch": ["9f86...", None]}``."""

    def command(self, stamp: str, watch: tuple[str, ...] = ()) -> str:
        q = shlex.quote(stamp)
        sums = "".join(
            f"echo \"@sha $(sha256sum < {shlex.quote(path)} 2>/dev/null | cut -d' ' -f1)\"; "
            for path in watch
        )
        return f'echo "@stamp $(head -n1 {q} 2>/dev/null)"; {sums}'.rstrip("; ")

    def process(self, output: list[str]) -> dict[str, Any]:
        stamp = None
        watch: list[str | None] = []
        for line in output:
            tag, _, value = line.partition(" ")
            if tag == "@stamp":
                stamp = value.strip() or None
            elif tag == "@sha":
                watch.append(value.strip() or None)
        return {"stamp": stamp, "watch": watch}


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


class UnitStartedBefore(FactBase):
    """What a running ``unit`` started with and what changed on disk since: ``{"need_reload":
    bool, "changed": [paths]}`` where ``changed`` are the ``paths`` (its unit file, environment
    file and the inputs its role tracks) modified after its main process started
    (ExecMainStartTimestamp, seconds; modified in the same second does not count) and
    ``need_reload`` is systemd's NeedDaemonReload= (its unit changed without a daemon-reload).
    None when the unit is not running: a stopped unit starts with what is on disk. A converge
    interrupted between writing a unit's files and restarting it leaves it so."""

    def command(self, unit: str, paths: tuple[str, ...] = ()) -> str:
        show = (
            "systemctl show --timestamp=unix -p ActiveState -p SubState -p NeedDaemonReload "
            f"-p ExecMainStartTimestamp -- {shlex.quote(unit)} 2>/dev/null || true"
        )
        if not paths:
            return show
        quoted = " ".join(shlex.quote(p) for p in paths)
        return f"{show}; stat -L -c '%Y %n' {quoted} 2>/dev/null || true"

    def process(self, output: list[str]) -> dict[str, Any] | None:
        props = dict(line.split("=", 1) for line in output if "=" in line and line[:1].isalpha())
        if (props.get("ActiveState"), props.get("SubState")) != ("active", "running"):
            return None
        started = props.get("ExecMainStartTimestamp", "").lstrip("@")
        changed = changed_since("\n".join(output), int(started) if started.isdigit() else None)
        return {"need_reload": props.get("NeedDaemonReload") == "yes", "changed": changed}


def unit_is_up(state: dict[str, str]) -> bool:
    """True for a long-running unit that is up: ``active`` and ``running``. A unit that is
    ``activating`` (starting, or waiting to be restarted after a crash: ``auto-restart``),
    ``failed`` or ``inactive`` is down."""
    return state.get("active") == "active" and state.get("sub") == "running"


class ListeningSockets(FactBase):
    """TCP sockets listening on the host, with the processes holding them and their units:
    ``[{"address": "127.0.0.1", "port": 2222, "processes": [{"name": "sshd", "pid": 512,
    "unit": "ssh.service"}]}]`` from ``ss -Hltnp`` and each process's ``/proc/<pid>/cgroup``.
    ``processes`` is empty for a socket of a process this host cannot see (another container
    sharing its network). None when ``ss`` (iproute2) is not installed."""

    def command(self) -> str:
        return (
            "if ! command -v ss >/dev/null 2>&1; then echo @no-ss; exit 0; fi; "
            "ss -Hltnp; echo @cgroups; "
            "for pid in $(ss -Hltnp | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do "
            'echo "$pid $(tail -n1 /proc/$pid/cgroup 2>/dev/null)"; done'
        )

    def process(self, output: list[str]) -> list[dict] | None:
        if "@no-ss" in output:
            return None
        split = output.index("@cgroups") if "@cgroups" in output else len(output)
        units: dict[int, str] = {}
        for line in output[split + 1 :]:
            pid, _, cgroup = line.strip().partition(" ")
            leaf = cgroup.rsplit("/", 1)[-1]
            if pid.isdigit() and leaf.endswith((".service", ".scope")):
                units[int(pid)] = leaf
        sockets = []
        for line in output[:split]:
            words = line.split()
            if len(words) < 4 or ":" not in words[3]:
                continue
            address, _, port = words[3].rpartition(":")
            if not port.isdigit():
                continue
            address = address.strip("[]").split("%", 1)[0]
            processes = [
                {"name": name, "pid": int(pid), "unit": units.get(int(pid), "")}
                for name, pid in re.findall(r'\("([^"]*)",pid=(\d+)', line)
            ]
            sockets.append({"address": address, "port": int(port), "processes": processes})
        return sockets


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
