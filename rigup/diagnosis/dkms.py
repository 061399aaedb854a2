"""Signatures of DKMS builds and of Secure Boot (mokutil --sb-state, the EFI variables):
:func:`classify_dkms` and :func:`secure_boot`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .core import (
    FAIL,
    OK,
    WARN,
    Signature,
    Verdict,
    by_id,
    classify_lines,
    clean_lines,
    first_match,
    verdict,
)

DKMS_CAUSES = (
    "the usual causes: the headers of the running kernel are missing "
    "(`apt install linux-headers-$(uname -r)`), or the compiler differs from the one the kernel "
    "was built with (the log says 'the compiler differs'; install that gcc), or the driver does "
    "not support this kernel yet"
)

_DKMS: list[Signature] = [
    Signature(
        id="dkms-headers-missing",
        source="dkms",
        severity=FAIL,
        what="the kernel headers for {kernel} are missing",
        why="DKMS builds the NVIDIA module against them and cannot without",
        fix="`apt install linux-headers-{kernel}`",
        pattern=r"Your kernel headers for kernel (?P<kernel>\S+) cannot be found",
        reference="dkms: 'Error! Your kernel headers for kernel X cannot be found at "
        "/lib/modules/X/build or /lib/modules/X/source.'",
    ),
    Signature(
        id="dkms-compiler-mismatch",
        source="dkms",
        severity=FAIL,
        what="the compiler differs from the one the kernel was built with",
        why="the kernel was built by {built}; DKMS used {using}",
        fix="install the compiler named in 'The kernel was built by'",
        pattern=r"the compiler differs from the one used to build the kernel",
        context={
            "built": r"The kernel was built by:\s*(.+)",
            "using": r"You are using:\s*(.+)",
        },
        derive=lambda f: {"built": f.get("built", "another gcc"), "using": f.get("using", "?")},
        reference="kernel Makefile: 'warning: the compiler differs from the one used to build "
        "the kernel'",
    ),
    Signature(
        id="dkms-compiler-missing",
        source="dkms",
        severity=FAIL,
        what="the compiler {compiler} is missing",
        why="the kernel's build files call it and it is not installed",
        fix="`apt install {package}`",
        pattern=r"(?P<compiler>(?:[\w.-]+-)?gcc(?:-\d+)?): (?:not found|No such file or directory)",
        derive=lambda f: {"package": re.sub(r"^\w+-linux-gnu-", "", f.get("compiler", "gcc"))},
    ),
    Signature(
        id="dkms-kernel-unsupported",
        source="dkms",
        severity=FAIL,
        what="the NVIDIA driver does not support this kernel",
        why="its dkms.conf BUILD_EXCLUSIVE directive excludes the running kernel",
        fix="install a newer driver of the branch (`apt full-upgrade` after `apt-mark unhold`), "
        "or boot an older kernel",
        pattern=r"BUILD_EXCLUSIVE directive which does not match this kernel",
    ),
    Signature(
        id="dkms-build-failed",
        source="dkms",
        severity=FAIL,
        what="the DKMS build of the NVIDIA module failed for {kernel}",
        why="'Bad return status for module build on kernel: {kernel}'; the compiler's errors are "
        "in {log}; " + DKMS_CAUSES,
        fix="read {log}, fix what it names, then `dkms autoinstall -k {kernel}` and reboot",
        pattern=r"Bad return status for module build on kernel:?\s*(?P<kernel>[^\s(]+)",
        context={"log": r"Consult (\S+make\.log)"},
        derive=lambda f: {"log": f.get("log") or "/var/lib/dkms/nvidia/<version>/build/make.log"},
        reference="dkms: 'Error! Bad return status for module build on kernel: X (x86_64)' / "
        "'Consult /var/lib/dkms/nvidia/V/build/make.log for more information.'",
    ),
]


def classify_dkms(text: str | None) -> list[Verdict]:
    """What DKMS (and the make.log it names) says about a failed build."""
    return classify_lines("dkms", text)[0]


# --- Secure Boot (mokutil --sb-state) -------------------------------------------------------------

_MOKUTIL: list[Signature] = [
    Signature(
        id="secure-boot/shim-validation-disabled",
        source="mokutil",
        severity=OK,
        what="Secure Boot is on in the firmware but not enforced",
        why="'SecureBoot validation is disabled in shim' (mokutil --disable-validation): shim "
        "and the kernel load unsigned modules",
        fix="nothing to do for the driver; `mokutil --enable-validation` turns enforcement back "
        "on, and then DKMS-built modules need an enrolled Machine Owner Key",
        pattern=r"SecureBoot validation is disabled in shim",
        value=False,
        reference="mokutil.c: prints it after 'SecureBoot enabled' when MokSBStateRT is set",
    ),
    Signature(
        id="secure-boot/setup-mode",
        source="mokutil",
        severity=OK,
        what="Secure Boot is not enforced: the firmware is in Setup Mode",
        why="'Platform is in Setup Mode': no platform key is enrolled, so nothing is verified",
        fix="nothing to do for the driver; enrolling firmware keys later turns Secure Boot on, "
        "and then DKMS-built modules need an enrolled Machine Owner Key",
        pattern=r"Platform is in Setup Mode",
        value=False,
        reference="mokutil.c: 'SecureBoot disabled' + 'Platform is in Setup Mode'",
    ),
    Signature(
        id="secure-boot/enforced",
        source="mokutil",
        severity=OK,
        what="Secure Boot is enforced",
        why="'SecureBoot enabled': the kernel loads only modules signed by a trusted key",
        fix="the Ubuntu install path's modules are signed; DKMS-built modules need an enrolled "
        "Machine Owner Key",
        pattern=r"^SecureBoot enabled",
        value=True,
    ),
    Signature(
        id="secure-boot/disabled",
        source="mokutil",
        severity=OK,
        what="Secure Boot is off",
        why="'SecureBoot disabled'",
        fix="nothing to do",
        pattern=r"^SecureBoot disabled",
        value=False,
    ),
    Signature(
        id="secure-boot/no-efi",
        source="mokutil",
        severity=OK,
        what="Secure Boot is not possible: the system booted without UEFI",
        why="'EFI variables are not supported on this system' (legacy BIOS boot)",
        fix="nothing to do",
        pattern=r"EFI variables are not supported on this system",
        value=False,
    ),
    Signature(
        id="secure-boot/unsupported",
        source="mokutil",
        severity=OK,
        what="Secure Boot is not supported by this firmware",
        why="'This system doesn't support Secure Boot'",
        fix="nothing to do",
        pattern=r"This system doesn't support Secure Boot",
        value=False,
    ),
    Signature(
        id="secure-boot/unknown",
        source="mokutil",
        severity=WARN,
        what="the Secure Boot state could not be read",
        why="mokutil answered: {answer}",
        fix="check the firmware settings; with Secure Boot on, DKMS-built modules need an "
        "enrolled Machine Owner Key",
        pattern=r"(?P<answer>Cannot determine secure boot state.*|.*mokutil: (?:command )?not found.*)",
        value=None,
    ),
]


@dataclass(frozen=True)
class SecureBoot:
    """What :func:`secure_boot` found: ``enforced`` True / False / None (unknown), and why."""

    enforced: bool | None
    verdict: Verdict

    @property
    def state(self) -> str:
        return self.verdict.cause


_EFIVARS_NOTE = "read from the EFI variables (mokutil gave no answer)"


def secure_boot(
    mokutil: str | None,
    *,
    efi: bool | None = None,
    sb_var: int | None = None,
    setup_var: int | None = None,
    moksbstate: bool | None = None,
) -> SecureBoot:
    """Read the whole output of ``mokutil --sb-state`` (a later line qualifies the first:
    validation disabled in shim, setup mode). When mokutil is missing or says nothing useful,
    the EFI variables decide as mokutil itself does: no /sys/firmware/efi = legacy boot; the
    SecureBoot variable's last byte, SetupMode, and shim's MokSBStateRT."""
    found = first_match("mokutil", mokutil)
    if found is None or found.value is None:
        if efi is False:
            v = verdict(by_id("secure-boot/no-efi"), {}, ("no /sys/firmware/efi",))
            why = "no /sys/firmware/efi: the system booted without UEFI (legacy BIOS boot)"
            return SecureBoot(False, Verdict(**{**v.__dict__, "why": why}))
        if sb_var is not None:
            evidence = (f"SecureBoot={sb_var} SetupMode={setup_var} MokSBStateRT={moksbstate}",)
            if sb_var == 1 and not setup_var:
                sig = (
                    "secure-boot/shim-validation-disabled" if moksbstate else "secure-boot/enforced"
                )
            elif setup_var:
                sig = "secure-boot/setup-mode"
            else:
                sig = "secure-boot/disabled"
            v = verdict(by_id(sig), {}, evidence)
            v = Verdict(**{**v.__dict__, "why": f"{v.why} ({_EFIVARS_NOTE})"})
            return SecureBoot(v.value, v)
    if found is None:
        answer = " ".join(clean_lines(mokutil)) or "nothing"
        found = verdict(by_id("secure-boot/unknown"), {"answer": answer}, clean_lines(mokutil))
    return SecureBoot(found.value, found)
