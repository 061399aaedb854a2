"""What the lab does on the controller itself: processes (finding the running systemd-nspawn),
TCP ports, host tools and root, commands and chroot, and file system helpers that never cross
a mount point.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from lab.config import SSH_HOST, LabConfig, LabError
from lab.render import dropin_port

INSTALL_HINT = "apt-get install systemd-container debootstrap"


# --------------------------------------------------------------------------------------------
# processes


def _proc_state(pid: int) -> str | None:
    """One-letter state of ``pid`` from /proc (None if it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (a zombie child is reaped here)."""
    state = _proc_state(pid)
    if state is None:
        return False
    if state in ("Z", "X"):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def proc_cmdline(pid: int) -> list[str]:
    """The argument vector of process ``pid`` from /proc ([] if it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_nspawn_of(cmdline: Sequence[str], rootfs: Path) -> bool:
    """True if ``cmdline`` is a systemd-nspawn booting ``rootfs``."""
    if not cmdline or os.path.basename(cmdline[0]) != "systemd-nspawn":
        return False
    root = str(rootfs)
    args = list(cmdline[1:])
    for i, arg in enumerate(args):
        if arg in (f"--directory={root}", f"-D{root}"):
            return True
        if arg in ("-D", "--directory") and i + 1 < len(args) and args[i + 1] == root:
            return True
    return False


def proc_children(pid: int) -> list[int]:
    """PIDs of the direct children of process ``pid`` (all its threads' children)."""
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            kids += [int(k) for k in task.read_text().split()]
    return kids


# --------------------------------------------------------------------------------------------
# ports


def port_in_use(port: int, host: str = SSH_HOST) -> bool:
    """True if a TCP socket already holds ``host:port`` (bound or listening), by trying to bind it.

    SO_REUSEADDR is set so that connections lingering in TIME_WAIT do not count as "in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_taken_message(cfg: LabConfig, holder: str | None = None) -> str:
    """The error text for "the SSH port is held by something that is not this lab machine"."""
    who = f" (held by {holder})" if holder else ""
    free = next((p for p in range(2230, 2300) if not port_in_use(p)), 2230)
    return (
        f"TCP port {cfg.ssh_port} on {SSH_HOST} is already in use{who}, and not by lab machine "
        f"{cfg.name!r}: its sshd shares the host network and must listen there. Stop whatever "
        f"holds the port, or choose another port with RIGUP_LAB_SSH_PORT, e.g. "
        f"`RIGUP_LAB_SSH_PORT={free} .venv/bin/python -m lab up`, and export the same "
        "RIGUP_LAB_NAME and RIGUP_LAB_SSH_PORT for pyinfra and pytest (inventory/lab.py reads "
        "them)."
    )


def lab_machine_on_port(state_root: Path, port: int) -> str | None:
    """Name of a lab machine under ``state_root`` (e.g. /var/lib/rigup-lab) configured to listen
    on ``port``, or None: lets a port clash name the lab that holds it."""
    for dropin in sorted(state_root.glob("*/rootfs/etc/ssh/sshd_config.d/rigup-lab.conf")):
        try:
            if dropin_port(dropin.read_text()) == port:
                return dropin.parents[4].name
        except OSError:
            continue
    return None


def port_holder(port: int) -> str | None:
    """Best effort: ``"name (pid N)"`` of the process listening on TCP ``port``, else None."""
    if not shutil.which("ss"):
        return None
    try:
        out = subprocess.run(
            ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'users:\(\("([^"]+)",pid=(\d+)', out)
    return f"{match.group(1)} (pid {match.group(2)})" if match else None


# --------------------------------------------------------------------------------------------
# preflight


def find_tool(name: str) -> str | None:
    """Path of executable ``name`` on PATH or in the sbin directories (PATH may lack them)."""
    extra = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin"])
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + extra)


def check_tools(which: Callable[[str], str | None] = find_tool) -> None:
    """Check the host tools the lab needs.

    Raises:
        LabError: systemd-nspawn, debootstrap or the OpenSSH client tools are missing.
    """
    missing = [t for t in ("systemd-nspawn", "debootstrap") if not which(t)]
    if missing:
        raise LabError(
            f"{' and '.join(missing)} not found: the lab machine is a systemd-nspawn container "
            f"built with debootstrap. Install them with `{INSTALL_HINT}` and run again."
        )
    missing = [t for t in ("ssh", "ssh-keygen") if not which(t)]
    if missing:
        raise LabError(
            f"{' and '.join(missing)} not found: the lab machine is reached over SSH with a "
            "generated key. Install them with `apt-get install openssh-client` and run again."
        )


def check_root(euid: int | None = None) -> None:
    """Check that we run as root.

    Raises:
        LabError: not root (systemd-nspawn, debootstrap and chroot need it).
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise LabError(
            "the lab machine needs root: debootstrap, chroot and systemd-nspawn create and boot "
            "a container. Run it as root, e.g. `sudo .venv/bin/python -m lab up` "
            "(sudo -E keeps RIGUP_LAB_* settings)."
        )


# --------------------------------------------------------------------------------------------
# commands and files


def run(argv: list[str], what: str) -> None:
    """Run ``argv`` with its output captured.

    Raises:
        LabError: it exited non-zero; the message names ``what`` and ends with its output.
    """
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(
            f"{what} failed: `{shlex.join(argv)}` exited {proc.returncode}:\n"
            f"{(proc.stdout + proc.stderr).strip()[-2000:]}"
        )


def chroot(root: Path, argv: list[str]) -> None:
    """Run ``argv`` chrooted into ``root`` (see :func:`run`)."""
    run(["chroot", str(root), *argv], f"in {root}: {argv[0]}")


def rmtree(path: Path, *, unmount: bool = False) -> None:
    """Delete a tree without ever descending into a file system mounted inside it.

    Args:
        unmount: first lazily unmount what is mounted below ``path`` (a killed debootstrap
            leaves /proc and /sys mounted in its target).

    Raises:
        LabError: something is still mounted below ``path``.
    """
    mounts = mounts_under(path)
    if mounts and unmount:
        for mount in mounts:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        mounts = mounts_under(path)
    if mounts:
        raise LabError(
            f"refusing to delete {path}: file systems are still mounted there "
            f"({', '.join(map(str, mounts))}). Unmount them (`umount -R PATH`) and run again."
        )
    shutil.rmtree(path)


def nearest_existing(path: Path) -> Path:
    """``path`` made absolute, or its nearest parent that exists (where it would be created)."""
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` with ``text`` (mode ``mode``) in one rename: readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def mounts_under(path: Path, mountinfo: str | None = None) -> list[Path]:
    """Mount points at or below ``path``, deepest first (from /proc/self/mountinfo by default)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    base = Path(os.path.realpath(path))
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
        if point == base or base in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def machine_lock_path(cfg: LabConfig, run_lock: Path = Path("/run/lock")) -> Path:
    """Lock file that serializes up/stop/destroy of one machine: in /run/lock (cleared at boot),
    named after the machine and its state_dir, so destroy leaves nothing behind in state dirs."""
    digest = hashlib.sha256(str(cfg.state_dir).encode()).hexdigest()[:8]
    base = run_lock if run_lock.is_dir() else Path(tempfile.gettempdir())
    return base / f"rigup-lab-{cfg.name}-{digest}.lock"


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ("" when it cannot be read), escapes stripped."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return "\n".join(text.splitlines()[-lines:])
