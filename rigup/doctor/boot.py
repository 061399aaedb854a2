"""rigup-doctor's boot section: how the previous boot ended (a kernel panic is invisible after
the reboot otherwise)."""

from __future__ import annotations

from typing import Any

from rigup import diagnosis

from .core import Runner, Section, run

#: the previous boot's last journal lines, its last kernel lines, the crash files
PREVIOUS_BOOT = ["journalctl", "-b", "-1", "-n", "30", "--no-pager", "-o", "short-iso"]
PREVIOUS_KERNEL = ["journalctl", "-k", "-b", "-1", "-n", "12", "--no-pager", "-o", "short-iso"]
CRASH_FILES = ["find", "/var/crash", "/var/lib/systemd/pstore", "-maxdepth", "2", "-type", "f"]


def _entries(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip() and not line.startswith("-- ")]


def boot_state(runner: Runner = run) -> dict[str, Any]:
    """What :func:`rigup.diagnosis.classify_boot` reads, through ``runner``: journalctl of the
    previous boot (exit 1 "No journal boot entry found for the specified boot" when there is
    none), its kernel lines, and the files in /var/crash and pstore."""
    code, out = runner(PREVIOUS_BOOT)
    lines = _entries(out) if code == 0 else []
    if not lines:
        return {"previous": False}
    _, kernel = runner(PREVIOUS_KERNEL)
    _, found = runner(CRASH_FILES)  # exit 1 when a directory is missing; its lines still count
    return {
        "previous": True,
        "clean": diagnosis.ended_cleanly(lines),
        "last_line": lines[-1],
        "kernel_tail": _entries(kernel),
        "crash_files": diagnosis.crash_files(
            line for line in found.splitlines() if not line.startswith("find:")
        ),
    }


def check_boot(cfg: dict, runner: Runner = run) -> Section:
    """How the previous boot ended: cleanly, or not (its journal stops without a shutdown), with
    its last kernel lines and crash files."""
    section = Section("boot")
    state = boot_state(runner)
    section.verdicts = diagnosis.classify_boot(state)
    section.facts = state
    return section
