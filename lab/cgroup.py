"""Each lab machine in a cgroup2 directory of its own.

systemd-nspawn started with ``--register=no --keep-unit`` (the host need not run systemd) puts the
container's init in a ``payload`` group and itself in ``supervisor``, both below the cgroup it was
started in. Two machines started from the same cgroup therefore share ``/payload``: each sees the
other's units in ``systemd-cgls``, and same-named units (``vllm.service``) share one cgroup, so a
stop in one machine can reach the other's processes. The lab moves each nspawn, before it
executes, into ``<cgroup2 mount>/rigup-lab/<name>``, and boots the container on the unified
hierarchy (``SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1``, see systemd-nspawn(1), "Environment"): the
systemd of Ubuntu 26.04 (259) and of Debian forky refuses a cgroup v1 hierarchy ("Detected cgroup
v1 hierarchy at /sys/fs/cgroup/, which is no longer supported ... refusing execution").

Where the cgroup2 file system is mounted: ``/sys/fs/cgroup`` on a unified host (current Debian,
Ubuntu, CI runners), ``/sys/fs/cgroup/unified`` on a hybrid one (a Debian 12 container host
without systemd as PID 1, as the lab's own controller).

Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from lab.config import LabConfig, LabError

#: The directory below the cgroup2 mount holding one directory per lab machine.
LAB_CGROUP = "rigup-lab"
#: nspawn's switch to boot the container on the unified hierarchy (systemd-nspawn(1), ENVIRONMENT).
UNIFIED_ENV = {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}


def cgroup2_mount(mountinfo: str | None = None) -> Path | None:
    """Where the cgroup2 file system is mounted (``/sys/fs/cgroup`` preferred), or None.

    Args:
        mountinfo: text of ``/proc/self/mountinfo`` (read from /proc when None).
    """
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    found: list[Path] = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype = line.split(" - ", 1)[1].split()[0]
        if fstype == "cgroup2":
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found.append(Path(point))
    for preferred in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified")):
        if preferred in found:
            return preferred
    return found[0] if found else None


def machine_cgroup(cfg: LabConfig, mount: Path) -> Path:
    """The machine's own cgroup2 directory: ``<mount>/rigup-lab/<name>``."""
    return mount / LAB_CGROUP / cfg.name


def require_cgroup2(mountinfo: str | None = None) -> Path:
    """The cgroup2 mount the lab's machines are placed under.

    Raises:
        LabError: the host has no cgroup2 file system mounted (a cgroup v1-only host).
    """
    mount = cgroup2_mount(mountinfo)
    if mount is None:
        raise LabError(
            "no cgroup2 file system is mounted on this host: the lab boots each machine in a "
            "cgroup2 directory of its own, on the unified hierarchy that current systemd "
            "requires. Mount one (`mount -t cgroup2 none /sys/fs/cgroup/unified`) or use a host "
            "with cgroup v2 (the default of Debian 11+ and Ubuntu 21.10+)."
        )
    return mount


def prepare(path: Path) -> None:
    """Create the machine's cgroup ``path`` (and its parent).

    Raises:
        LabError: it holds processes already (another nspawn of the same name runs there), or
            the directory cannot be made.
    """
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LabError(f"cannot create the lab machine's cgroup {path}: {exc}") from exc
    busy = members(path)
    if busy:
        raise LabError(
            f"cgroup {path} already holds processes ({', '.join(map(str, busy[:5]))}): another "
            f"lab machine named {path.name!r} runs on this host. Choose another RIGUP_LAB_NAME "
            "or stop that machine first."
        )


def members(path: Path) -> list[int]:
    """PIDs in ``path`` and every cgroup below it (empty when it does not exist)."""
    pids: list[int] = []
    # os.walk skips what vanishes meanwhile: a running machine's groups come and go
    for parent, _dirs, _files in os.walk(path):
        with contextlib.suppress(OSError, ValueError):
            pids += [int(p) for p in Path(parent, "cgroup.procs").read_text().split()]
    return pids


def enter(path: Path) -> None:
    """Move the calling process into cgroup ``path`` (its children follow it).

    Meant as ``subprocess.Popen(preexec_fn=...)``: it runs in the child between fork and exec, so
    systemd-nspawn starts in the machine's own cgroup.
    """
    with open(path / "cgroup.procs", "w") as fh:
        fh.write(str(os.getpid()))


def remove(path: Path) -> None:
    """Remove the machine's cgroup ``path`` and the empty groups nspawn left below it (deepest
    first); a group that still holds processes is left in place."""
    for parent, _dirs, _files in os.walk(path, topdown=False):  # deepest first
        with contextlib.suppress(OSError):
            os.rmdir(parent)
