"""rigup-doctor's boot section: how the previous boot ended (a kernel panic is
invisible after the reboot otherwise). systemd 259's own journal of a clean stop and of a
machine whose init was killed, captured on the lab machine (tests/fixtures/boot/README.md)."""

from __future__ import annotations

from rigup import diagnosis, doctor
from tests.captures import FIXTURES


def text(name: str) -> str:
    return (FIXTURES / "boot" / name).read_text()


def runner_for(previous: str, kernel: str = "-- No entries --\n", crash: str = "", code: int = 0):
    def run(argv: list[str]) -> tuple[int, str]:
        if argv == doctor.boot.PREVIOUS_BOOT:
            return code, previous
        if argv == doctor.boot.PREVIOUS_KERNEL:
            return 0, kernel
        if argv == doctor.boot.CRASH_FILES:
            return 1, crash
        raise AssertionError(argv)

    return run


def test_a_clean_shutdown_is_ok():
    (v,) = doctor.check_boot({}, runner_for(text("lab-previous-boot-clean.txt"))).verdicts
    assert (
        v.id == "boot/clean" and v.what == "the previous boot ended cleanly (2026-12-03 08:45:12)"
    )


def test_a_boot_that_stops_without_a_shutdown_is_named_with_what_it_left():
    run = runner_for(
        text("lab-previous-boot-unclean.txt"), crash=text("crash-kdump-tools-no-dump.txt")
    )
    section = doctor.check_boot({}, run)
    (v,) = section.verdicts
    assert v.id == "boot/unclean" and v.severity == diagnosis.WARN
    assert v.what == (
        "the previous boot did not end cleanly: its journal stops at 2026-12-03 08:45:24 "
        "without a shutdown"
    )
    assert "no crash dump in /var/crash or pstore" in v.why  # kexec_cmd and kdump_lock are not one
    assert "#1211" in v.why and "nvidia-driver-580-server" in v.fix and "kdump-tools" in v.fix
    assert section.facts["crash_files"] == []


def test_a_kernel_crash_names_its_last_kernel_line_and_dump():
    run = runner_for(
        text("lab-previous-boot-unclean.txt"),
        kernel=text("klog-previous-boot-panic.txt"),
        crash=text("crash-kdump-dump.txt"),
    )
    (v,) = doctor.check_boot({}, run).verdicts
    assert v.id == "boot/kernel-crash" and v.severity == diagnosis.WARN
    assert (
        "its last kernel line: 2026-06-20T14:09:47+00:00 rig kernel: Kernel panic - not syncing"
        in v.why
    )
    assert "/var/crash/202606201409/dump.202606201409" in v.why
    assert "nvidia-open 580.159.03" in v.why  # the kernel lines name nvidia: #1211 is named
    assert v.evidence[-1] == "/var/crash/202606201409/dump.202606201409"


def test_no_previous_boot_is_ok_and_the_doctor_runs_the_section_first():
    run = runner_for(text("lab-no-previous-boot.txt"), code=1)
    (v,) = doctor.check_boot({}, run).verdicts
    assert v.id == "boot/first" and v.severity == diagnosis.OK
    assert doctor.SECTIONS[0] == "boot"
    sections = doctor.doctor({"doctor": {"window_s": 0}}, run, only=("boot",), window_s=0)
    assert [s.name for s in sections] == ["boot"]
