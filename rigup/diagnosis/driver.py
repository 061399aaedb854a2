"""Signatures of the driver state (rigup.nvidia.parse_driver_state): why the NVIDIA kernel
module is not loaded, or not the one userspace expects; :func:`classify_driver_state`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature, Verdict, _compiled, by_id, classify_state
from .dkms import DKMS_CAUSES, classify_dkms
from .kernel_log import classify_kernel_log


def _kernel(s: Mapping[str, Any]) -> str:
    return s.get("kernel") or "the running kernel"


def _not_loaded(s: Mapping[str, Any]) -> bool:
    return not s.get("loaded")


def _nouveau_bound(s: Mapping[str, Any]) -> bool:
    return bool(s.get("nouveau_loaded")) or "nouveau" in (s.get("gpu_drivers") or [])


def _dkms_entries(s: Mapping[str, Any]) -> list[Any]:
    return [e for e in s.get("dkms") or [] if getattr(e, "module", "") == "nvidia"]


def _repo_path(s: Mapping[str, Any]) -> bool:
    path = s.get("install_path")
    if path:
        return path == "nvidia-repo"
    pkgs = s.get("packages") or []
    return bool(_dkms_entries(s)) or any(
        p.startswith(("nvidia-dkms-", "cuda-keyring", "nvidia-open")) for p in pkgs
    )


def _module_install_fix(s: Mapping[str, Any]) -> str:
    kernel = s.get("kernel") or "$(uname -r)"
    if _repo_path(s):
        return (
            f"build it for this kernel: `apt install linux-headers-{kernel}`, then `dkms "
            f"autoinstall -k {kernel}` (its errors: the make.log DKMS names), and reboot"
        )
    return (
        "install the prebuilt modules for this kernel (a converge installs "
        "linux-modules-nvidia-<branch>-open-<flavour> for the kernel meta-package it finds) and "
        "reboot"
    )


def _other_kernels(s: Mapping[str, Any]) -> str:
    others = [k for k in s.get("module_kernels") or {} if k != s.get("kernel")]
    return f" (it exists for {', '.join(sorted(others))})" if others else ""


def _match_nouveau(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not (_not_loaded(s) and _nouveau_bound(s)):
        return None
    bound = "nouveau" in (s.get("gpu_drivers") or [])
    return {"bound": " and bound to the GPUs" if bound else ""}


def _match_dkms_failed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or s.get("installed"):
        return None
    dkms = _dkms_entries(s)
    for_kernel = [e for e in dkms if e.kernel == s.get("kernel")]
    if not dkms or any(e.state == "installed" for e in for_kernel):
        return None
    details = [v for v in classify_dkms("\n".join(s.get("dkms_output") or [])) if _about(v, s)]
    version = dkms[0].version
    output = "\n".join(s.get("dkms_output") or [])
    named = _compiled(by_id("dkms-build-failed").context["log"]).search(output)
    logs = [named.group(1)] if named else []
    logs += [p for p in s.get("dkms_logs") or [] if f"/{version}/" in p]
    log = logs[0] if logs else f"/var/lib/dkms/nvidia/{version}/build/make.log"
    causes = "; ".join(f"{v.what} ({v.why})" for v in details if v.id != "dkms-build-failed")
    return {
        "version": version,
        "dkms_state": for_kernel[0].state if for_kernel else "not built",
        "log": log,
        "causes": causes or DKMS_CAUSES,
        "fixes": "; ".join(v.fix for v in details if v.id != "dkms-build-failed"),
        "evidence": tuple(line for v in details for line in v.evidence),
    }


def _about(v: Verdict, s: Mapping[str, Any]) -> bool:
    """A DKMS message about another kernel than the running one does not explain this one."""
    kernel = s.get("kernel") or ""
    return not any(re.search(r"\d+\.\d+\.\d+-\d+-\w+", e) and kernel not in e for e in v.evidence)


def _match_not_installed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or s.get("installed"):
        return None
    if not (s.get("userspace") or s.get("module_kernels") or _dkms_entries(s) or s.get("packages")):
        return None
    return {"fix": _module_install_fix(s), "others": _other_kernels(s)}


def _match_nothing_installed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or s.get("installed"):
        return None
    return {}


def _match_secure_boot(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or not s.get("installed") or s.get("secure_boot") is not True:
        return None
    rejected = [
        v
        for v in classify_kernel_log("\n".join(s.get("kernel_log") or []))
        if v.id == "module-rejected"
    ]
    signer = s.get("signer")
    if signer and not rejected:
        return None
    how = f"signed by '{signer}', a key the kernel does not trust" if signer else "not signed"
    evidence = tuple(line for v in rejected for line in v.evidence)
    return {"how": how, "evidence": evidence}


def _match_installed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or not s.get("installed"):
        return None
    return {"installed": s["installed"]}


def _match_mismatch(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loaded, userspace = s.get("loaded"), s.get("userspace")
    if loaded and userspace and loaded != userspace:
        return {"loaded": loaded, "userspace": userspace}
    return None


def _match_module_updated(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loaded, installed = s.get("loaded"), s.get("installed")
    if loaded and installed and installed != loaded and s.get("userspace") in (None, loaded):
        return {"loaded": loaded, "installed": installed}
    return None


def _match_nouveau_loaded(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if s.get("loaded") and _nouveau_bound(s):
        return {}
    return None


NOT_LOADED = "the NVIDIA kernel module is not loaded"

_DRIVER_STATE: list[Signature] = [
    Signature(
        id="driver-not-loaded/nouveau",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="nouveau (the open-source driver) is loaded{bound}",
        fix="blacklist it (/etc/modprobe.d/rigup-blacklist-nouveau.conf, written by a converge), "
        "regenerate the initramfs (`update-initramfs -u`) and reboot",
        matcher=_match_nouveau,
        reboot_fixes=True,
    ),
    Signature(
        id="driver-not-loaded/dkms-failed",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="the DKMS build of nvidia {version} failed for {kernel} ({dkms_state}): {causes}",
        fix="read {log}; {fixes}; then `dkms autoinstall -k {kernel}` and reboot",
        matcher=lambda s: (
            None if (m := _match_dkms_failed(s)) is None else {**m, "kernel": _kernel(s)}
        ),
        derive=lambda f: {"fixes": f.get("fixes") or "fix what it names"},
    ),
    Signature(
        id="driver-not-loaded/secure-boot",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="Secure Boot is enforced and the module for {kernel} is {how}: the kernel refuses it "
        "('Key was rejected by service')",
        fix="have DKMS sign the module with a Machine Owner Key and enroll it: "
        "`update-secureboot-policy --new-key` (if /var/lib/shim-signed/mok/MOK.der is missing), "
        "`dkms autoinstall -k {kernel}` (signs the rebuilt module), `mokutil --import "
        "/var/lib/shim-signed/mok/MOK.der` (choose a one-time password), reboot and enroll it in "
        "MokManager; or set nvidia_install_path = 'ubuntu' (Canonical's signed modules)",
        matcher=lambda s: (
            None if (m := _match_secure_boot(s)) is None else {**m, "kernel": _kernel(s)}
        ),
    ),
    Signature(
        id="driver-not-loaded/not-installed-for-kernel",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="no NVIDIA module is installed for the running kernel {kernel}{others}",
        fix="{fix}; or boot a kernel it is installed for",
        matcher=lambda s: (
            None if (m := _match_not_installed(s)) is None else {**m, "kernel": _kernel(s)}
        ),
    ),
    Signature(
        id="driver-not-loaded/not-installed",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="no NVIDIA driver is installed",
        fix="converge with deploys/nvidia.py",
        matcher=_match_nothing_installed,
    ),
    Signature(
        id="driver-not-loaded/installed-not-loaded",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="the NVIDIA driver {installed} is installed for {kernel} but not loaded (installed "
        "since the last boot, or its loading failed)",
        fix="reboot; if it stays unloaded, `modprobe nvidia` and `journalctl -k | grep -iE "
        "'nvrm|nvidia'` show why",
        matcher=lambda s: (
            None if (m := _match_installed(s)) is None else {**m, "kernel": _kernel(s)}
        ),
        reboot_fixes=True,
    ),
    Signature(
        id="driver-library-mismatch",
        source="driver-state",
        severity=FAIL,
        what="the loaded NVIDIA kernel module and the userspace libraries differ",
        why="the module is {loaded}, the libraries {userspace} (nvidia-smi: 'Driver/library "
        "version mismatch'): an upgrade replaced them under the running module",
        fix="reboot to load the module that matches the libraries; rigup holds the driver "
        "packages so that it does not recur",
        matcher=_match_mismatch,
        reboot_fixes=True,
    ),
    Signature(
        id="module-updated",
        source="driver-state",
        severity=WARN,
        what="a newer NVIDIA module is installed than the one loaded",
        why="the module on disk is {installed}, {loaded} is loaded",
        fix="reboot to load the installed module",
        matcher=_match_module_updated,
        reboot_fixes=True,
    ),
    Signature(
        id="driver-ok",
        source="driver-state",
        severity=OK,
        what="NVIDIA driver {loaded} loaded ({flavour}), libraries {userspace}",
        why="the kernel module and the userspace libraries agree; Secure Boot: {secure_boot}",
        fix="nothing to do",
        matcher=lambda s: (
            {
                "loaded": s["loaded"],
                "userspace": s["userspace"],
                "flavour": s.get("module_flavour") or "kernel " + _kernel(s),
                "secure_boot": s.get("secure_boot_state") or "unknown",
            }
            if s.get("loaded") and s.get("loaded") == s.get("userspace")
            else None
        ),
    ),
    Signature(
        id="nouveau-loaded",
        source="driver-state",
        severity=WARN,
        what="nouveau (the open-source driver) is loaded beside the NVIDIA driver",
        why="it can grab a GPU at the next boot",
        fix="blacklist it (a converge writes /etc/modprobe.d/rigup-blacklist-nouveau.conf), "
        "`update-initramfs -u`, reboot",
        matcher=_match_nouveau_loaded,
        reboot_fixes=True,
    ),
]


def classify_driver_state(state: Mapping[str, Any]) -> list[Verdict]:
    """Diagnose the driver from its state (rigup.nvidia.parse_driver_state, plus the optional
    ``gpu_drivers``: the kernel driver bound to each NVIDIA GPU on the PCI bus; ``install_path``;
    ``kernel_log`` lines; ``dkms_output`` lines). A driver that is not loaded is ONE verdict,
    ``driver-not-loaded/<cause>``, with the first cause found, in this order: nouveau bound, DKMS
    build failed, blocked by Secure Boot, not installed for this kernel, nothing installed,
    installed but not loaded (a reboot loads it). Faults only: ``classify_state("driver-state",
    state)`` also gives the healthy driver's summary (``driver-ok``)."""
    return [v for v in classify_state("driver-state", state) if v.severity != OK]
