"""Signatures of how the previous boot ended (source ``boot``): cleanly, or not (a kernel panic,
a hang, a power loss), read from its journal, its last kernel lines and the crash files;
:func:`classify_boot` and :func:`ended_cleanly`.

A panic is rarely written to disk, so the sign is what is missing: the previous boot's journal
stops in mid-life, without systemd's shutdown ("Reached target shutdown.target", "Shutting
down.", journald's "Journal stopped"). Captured from systemd 259 on the lab machine (Ubuntu
26.04): a clean stop and a kill of the machine's init (tests/fixtures/boot/). The NVIDIA case:
NVIDIA/open-gpu-kernel-modules#1211 (2026-06-20: Ubuntu 26.04, kernel 7.0.0-22, nvidia-open
580.159.03, NVLink, vLLM: a panic when the GPUs go idle after load, no Xid, /var/crash with only
kexec_cmd and kdump_lock; the closed nvidia-driver-580-server does not panic).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from .core import OK, WARN, Signature, Verdict, classify_state

#: systemd's and journald's last words in a boot that was shut down or rebooted
_CLEAN_END = re.compile(
    r"Journal stopped|Reached target (?:shutdown\.target|System Shutdown|reboot\.target|"
    r"poweroff\.target|halt\.target|kexec\.target)|systemd\[1\]: Shutting down\.|"
    r"reboot: (?:Restarting system|Power down)"
)
#: a kernel crash in the kernel log (panic, oops, BUG, a machine check)
_KERNEL_CRASH = re.compile(
    r"Kernel panic - not syncing|BUG: |Oops: |general protection fault|RIP: |Machine check|"
    r"watchdog: BUG: soft lockup|hard LOCKUP"
)
#: files kdump-tools keeps whether or not a dump was written (#1211: "0 bytes")
_NOT_A_DUMP = ("kexec_cmd", "kdump_lock")
#: an ISO time at the start of a ``journalctl -o short-iso`` line
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")

OPEN_MODULE_PANIC = (
    "on this stack NVIDIA/open-gpu-kernel-modules#1211 (Ubuntu 26.04, kernel 7.0, nvidia-open "
    "580.159.03 with NVLink and vLLM: a panic when the GPUs go idle after load, no Xid, no dump) "
    "ends a boot this way"
)


def ended_cleanly(lines: Iterable[str]) -> bool:
    """Whether a boot's last journal lines (``journalctl -b -1 -n N``) hold its shutdown."""
    return any(_CLEAN_END.search(line) for line in lines)


def crash_files(listing: Iterable[str]) -> list[str]:
    """The crash evidence among ``find`` lines of /var/crash and /var/lib/systemd/pstore: kdump
    dumps (``/var/crash/202606201409/dmesg.202606201409``), pstore records, apport reports;
    not kdump-tools' own ``kexec_cmd`` and ``kdump_lock``."""
    out = []
    for line in listing:
        line = line.strip()
        if line and not line.endswith(_NOT_A_DUMP) and "/" in line:
            out.append(line)
    return out


def _fields(s: Mapping[str, Any]) -> dict[str, Any]:
    last = str(s.get("last_line") or "")
    m = _ISO.match(last)
    kernel = [line for line in s.get("kernel_tail") or [] if line.strip()]
    crashes = list(s.get("crash_files") or [])
    nvidia = any("nvidia" in line.lower() or "NVRM" in line for line in kernel)
    return {
        "last_time": m.group(1).replace("T", " ") if m else "its last entry",
        "kernel_words": f"; its last kernel line: {kernel[-1]}"
        if kernel
        else "; its kernel log has no line about it (a panic is rarely written to disk)",
        "crash_words": f"; crash files: {', '.join(crashes[:4])}"
        if crashes
        else "; no crash dump in /var/crash or pstore",
        "nvidia_words": "; " + OPEN_MODULE_PANIC if nvidia or s.get("open_module") else "",
        "evidence": [last, *kernel[-3:], *crashes[:4]],
    }


def _unclean(crashed: bool):
    def match(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if not s.get("previous") or s.get("clean"):
            return None
        kernel = s.get("kernel_tail") or []
        dumps = any("/var/crash/" in f and "dump" in f.rsplit("/", 1)[-1] for f in
                    s.get("crash_files") or [])  # fmt: skip
        seen = dumps or any(_KERNEL_CRASH.search(line) for line in kernel)
        return _fields(s) if seen == crashed else None

    return match


_BOOT: list[Signature] = [
    Signature(
        id="boot/kernel-crash",
        source="boot",
        severity=WARN,
        what="the previous boot ended in a kernel crash (its journal stops at {last_time})",
        why="the kernel panicked or oopsed and the machine restarted{kernel_words}{crash_words}"
        "{nvidia_words}",
        fix="read `journalctl -k -b -1` and the dump (`sudo apt install kdump-tools` keeps one "
        "per crash); if it names nvidia and recurs when vLLM goes idle, the closed kernel module "
        "(nvidia-driver-580-server) is the known workaround of #1211",
        matcher=_unclean(True),
        reference="Linux kernel/panic.c ('Kernel panic - not syncing'); "
        "NVIDIA/open-gpu-kernel-modules#1211",
    ),
    Signature(
        id="boot/unclean",
        source="boot",
        severity=WARN,
        what="the previous boot did not end cleanly: its journal stops at {last_time} without a "
        "shutdown",
        why="a kernel panic, a hang (then a reset button) or a power loss ends a boot this way"
        "{kernel_words}{crash_words}; " + OPEN_MODULE_PANIC,
        fix="if it was not a power loss: read `journalctl -b -1 -n 100` and `journalctl -k -b "
        "-1`; to keep the next panic's log, `sudo apt install kdump-tools` (or pstore); if it "
        "recurs when vLLM goes idle after load, the closed kernel module "
        "(nvidia-driver-580-server) is the known workaround of #1211",
        matcher=_unclean(False),
        reference="systemd 259's shutdown lines, captured on the lab machine (tests/fixtures/"
        "boot/); NVIDIA/open-gpu-kernel-modules#1211",
    ),
    Signature(
        id="boot/clean",
        source="boot",
        severity=OK,
        what="the previous boot ended cleanly ({last_time})",
        why="its journal ends with the shutdown",
        fix="nothing to do",
        matcher=lambda s: _fields(s) if s.get("previous") and s.get("clean") else None,
    ),
    Signature(
        id="boot/first",
        source="boot",
        severity=OK,
        what="the journal holds no previous boot",
        why="the first boot since the journal began, or a journal kept in memory only "
        "(Storage=volatile)",
        fix="nothing to do",
        matcher=lambda s: {} if not s.get("previous") else None,
    ),
]


def classify_boot(state: Mapping[str, Any]) -> list[Verdict]:
    """How the previous boot ended: ``state`` holds ``previous`` (the journal has one),
    ``clean`` (:func:`ended_cleanly`), ``last_line`` (its last journal line, short-iso),
    ``kernel_tail`` (its last kernel lines) and ``crash_files`` (:func:`crash_files`)."""
    return classify_state("boot", state)
