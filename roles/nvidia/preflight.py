"""Everything that can refuse a host, decided from facts before any change. Pure.

:func:`driver_preflight` returns the problems (each one stops the run; the deploy raises
``DeployError`` with all of them) and the warnings (printed). What each driver, GPU and kernel
fault means comes from the diagnosis library (rigup/diagnosis), so the deploy, the boot
units, rigup-nvidia-diagnose and testinfra say the same thing about it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rigup import diagnosis
from rigup.nvidia import (
    PowerLimitError,
    diagnose_driver,
    plan_power_limits,
    verify_interconnect,
)
from roles.nvidia.branches import driver_metapackage, switch_warnings
from roles.nvidia.kernel import KernelFlavour, installed_flavour, kernel_flavour, uname_flavour
from roles.nvidia.paths import BOOT_UNITS, PERSISTENCED

#: How a warning names a fault a reboot fixes: the run reboots the host, or (nvidia_driver_next_boot)
#: leaves it to the next boot. The deploy collects the warnings ending so as its reboot reasons.
REBOOT_NOTE = "(the run reboots the host for it)"
NEXT_BOOT_NOTE = "(the next boot loads it: nvidia_driver_next_boot, rigup does not reboot)"

#: Driver verdicts a converge itself resolves: nothing installed yet (it installs the driver).
_INSTALLED_BY_THE_RUN = ("driver-not-loaded/not-installed",)
#: With nvidia_driver_next_boot, the verdict of a host running another kernel than the one the
#: modules were installed for (a container runs its host's): booting the installed kernel loads
#: them.
_NEXT_KERNEL_LOADS = "driver-not-loaded/not-installed-for-kernel"


def driver_packages(data: Any, flavour: KernelFlavour | None) -> list[str]:
    """Packages of the chosen install path for ``nvidia_driver_branch`` and
    ``nvidia_driver_variant``.

    ubuntu: ``nvidia-driver-<b><suffix>`` + ``linux-modules-nvidia-<b><suffix>-<flavour>``
    (roles/nvidia/branches.py: suffix ``-open``, ``""`` closed, ``-server``, ``-server-open``;
    Canonical's prebuilt, signed modules for the kernel meta-package ``flavour``; the modules
    package provides ``nvidia-dkms-<b><suffix>``, so no DKMS — Ubuntu 26.04 archive, restricted,
    2026-12). nvidia-repo: ``nvidia-open`` held to the branch by an apt preference (NVIDIA Driver
    Installation Guide, Ubuntu, open kernel modules; the settings check allows only the open
    variant there).
    """
    branch = data.get("nvidia_driver_branch")
    variant = data.get("nvidia_driver_variant") or "open"
    if data.get("nvidia_install_path") == "ubuntu":
        modules = [flavour.modules_package(branch, variant)] if flavour else []
        return [driver_metapackage(branch, variant), *modules]
    return ["nvidia-open"]


def target_flavour(data: Any, kernel: str, packages: Mapping[str, str]) -> KernelFlavour | None:
    """The kernel flavour whose prebuilt modules the Ubuntu path installs: that of the running
    ``kernel`` (:func:`roles.nvidia.kernel.kernel_flavour`), or with ``nvidia_driver_next_boot``
    that of the installed kernel meta-package, booted next
    (:func:`roles.nvidia.kernel.installed_flavour`). ``packages``: the KernelPackages fact's."""
    if data.get("nvidia_driver_next_boot"):
        return installed_flavour(packages)
    return kernel_flavour(kernel, packages)


def reboot_reasons(warnings: list[str]) -> list[str]:
    """The warnings of :func:`driver_preflight` that name a fault a reboot fixes."""
    return [w for w in warnings if w.endswith((REBOOT_NOTE, NEXT_BOOT_NOTE))]


def kernel_hold(data: Any, flavour: KernelFlavour | None) -> tuple[str, ...]:
    """Kernel meta-packages held with the driver: those of the running kernel's flavour, on the
    Ubuntu path only (DKMS rebuilds for any kernel)."""
    if data.get("nvidia_install_path") != "ubuntu" or flavour is None:
        return ()
    return flavour.metapackages


def masked_units(units: Mapping[str, Mapping[str, str]]) -> list[str]:
    """A problem for each unit the layer starts that is masked (``systemctl mask``): starting
    it would fail half-way through the run, after the driver and toolkit steps."""
    problems = []
    for unit in BOOT_UNITS:
        state = units.get(unit) or {}
        load, file_state = state.get("LoadState", ""), state.get("UnitFileState", "")
        if load == "masked" or file_state.startswith("masked"):
            name = unit.removesuffix(".service")
            purpose = (
                " (it sets persistence mode at boot, and rigup-gpu-power wants it)"
                if unit == PERSISTENCED
                else ""
            )
            problems.append(
                f"{unit} is masked (UnitFileState={file_state or 'masked'}): "
                f"rigup enables and starts it{purpose}; run `systemctl unmask {name}`, then "
                "converge again"
            )
    return problems


def compute_capability_problems(data: Any, gpus: list) -> list[str]:
    """The declared ``nvidia_gpu_compute_capability`` against what the driver reports
    (``compute_cap``): the KV cache dtype check relies on it."""
    declared = data.get("nvidia_gpu_compute_capability")
    if not declared:
        return []
    wrong = [g for g in gpus if g.compute_capability and g.compute_capability != str(declared)]
    if not wrong:
        return []
    seen = ", ".join(f"GPU {g.index} ({g.name}) {g.compute_capability}" for g in wrong)
    return [
        f"nvidia_gpu_compute_capability is {declared} but nvidia-smi reports {seen}: set "
        f'nvidia_gpu_compute_capability = "{wrong[0].compute_capability}" (it decides which KV '
        "cache dtypes the GPUs can run)"
    ]


#: What one group of guards found: ``(problems, warnings)``.
Findings = tuple[list[str], list[str]]


def pci_count_problems(pci: list[dict], declared: int) -> list[str]:
    """The GPUs on the PCI bus (NvidiaPciGpus) against ``nvidia_gpu_count``."""
    if len(pci) == declared:
        return []
    found = ", ".join(g["address"] for g in pci) or "none"
    return [
        f"{len(pci)} NVIDIA GPU(s) on the PCI bus ({found}) but the inventory declares "
        f"{declared} (nvidia_gpu_count): a missing card is a seating, riser or power-cable "
        "problem (check `lspci -d 10de:`); otherwise correct nvidia_gpu_count"
    ]


def install_path_problems(
    packages: dict, path: str, branch: Any, variant: str = "open"
) -> list[str]:
    """The driver packages on the host (NvidiaPackages) against ``nvidia_install_path``: both
    install paths mixed, or the other path than the setting's. (Another branch or variant of the
    Ubuntu path is switched by the run: :func:`roles.nvidia.branches.switch_warnings`.)"""
    problems = []
    installed = packages.get("installed", {})
    ubuntu_markers = sorted(n for n in installed if n.startswith("linux-modules-nvidia-"))
    repo_markers = sorted(packages.get("nvidia_repo_sources", [])) + (
        ["cuda-keyring"] if "cuda-keyring" in installed else []
    )
    if ubuntu_markers and repo_markers:
        problems.append(
            "both driver install paths are on this host (Ubuntu's prebuilt modules: "
            f"{', '.join(ubuntu_markers)}; NVIDIA's CUDA repository: {', '.join(repo_markers)}): "
            "mixed packages cause driver/library mismatches. Keep one: for the Ubuntu path "
            "`apt purge cuda-keyring` and remove the NVIDIA source files, `apt update`, reinstall "
            f"{driver_metapackage(branch, variant)}; for the NVIDIA path "
            "`apt purge 'linux-modules-nvidia-*'`"
        )
    elif path == "ubuntu" and repo_markers:
        problems.append(
            f"nvidia_install_path is 'ubuntu' but this host uses NVIDIA's CUDA repository "
            f"({', '.join(repo_markers)}): set nvidia_install_path = 'nvidia-repo', or remove "
            "that repository (`apt purge cuda-keyring`, its source files, the NVIDIA packages) first"
        )
    elif path == "nvidia-repo" and ubuntu_markers:
        problems.append(
            "nvidia_install_path is 'nvidia-repo' but this host has Ubuntu's prebuilt NVIDIA "
            f"modules ({', '.join(ubuntu_markers)}): set nvidia_install_path = 'ubuntu', or "
            "`apt purge 'linux-modules-nvidia-*' 'nvidia-driver-*'` first"
        )
    return problems


def kernel_problems(
    data: Any, path: str, kernel: str, kernel_packages: dict | None
) -> tuple[list[str], KernelFlavour | None]:
    """On the Ubuntu path, the kernel whose prebuilt modules are installed must be known:
    the running ``kernel``, an Ubuntu kernel tracked by an installed meta-package, or with
    ``nvidia_driver_next_boot`` the installed meta-package's (KernelPackages; None: not
    checked). Returns ``(problems, its flavour)``, the flavour None when it is unknown."""
    if path != "ubuntu":
        return [], None
    next_boot = bool(data.get("nvidia_driver_next_boot"))
    if not next_boot and kernel and uname_flavour(kernel) is None:
        return [
            f"the running kernel {kernel} is not an Ubuntu kernel (<version>-<abi>-<flavour>): "
            "Canonical's prebuilt NVIDIA modules exist only for Ubuntu's kernels. Boot an Ubuntu "
            "kernel (linux-generic), or use nvidia_install_path = 'nvidia-repo' (DKMS)"
        ], None
    if kernel_packages is None:
        return [], None
    flavour = target_flavour(data, kernel, kernel_packages.get("packages") or {})
    if flavour is not None:
        return [], flavour
    if next_boot:
        return [
            "nvidia_driver_next_boot installs the prebuilt NVIDIA modules for the kernel the "
            "host boots next, and no kernel meta-package is installed to say which "
            "(linux-generic, linux-generic-hwe-26.04, ...): install the one the host boots "
            "(`apt install linux-generic`), or use nvidia_install_path = 'nvidia-repo' (DKMS)"
        ], None
    return [
        "no installed kernel meta-package tracks the running kernel "
        f"{kernel or '(uname -r said nothing)'} "
        "(linux-generic, linux-generic-hwe-26.04, linux-lowlatency, linux-oem-26.04, "
        "...): Canonical's prebuilt NVIDIA modules follow one, so rigup installs the "
        "modules of its flavour. Install the meta-package of your kernel (Ubuntu "
        "Desktop: `apt install linux-generic-hwe-26.04`; server: linux-generic), or use "
        "nvidia_install_path = 'nvidia-repo' (DKMS)"
    ], None


def secure_boot_findings(state: dict, path: str) -> Findings:
    """Secure Boot (NvidiaDriverState) against the install path: DKMS's unsigned modules are
    refused unless a Machine Owner Key is enrolled or the driver already loads."""
    sb_state = state.get("secure_boot_state")
    signed = bool(state.get("loaded")) or state.get("mok_enrolled") is True
    if state.get("secure_boot") and path == "nvidia-repo" and not signed:
        return [
            "Secure Boot is enabled and the nvidia-repo path builds unsigned modules with DKMS, "
            "which the kernel rejects. Either set nvidia_install_path = 'ubuntu' (Canonical's "
            "signed prebuilt modules), or enroll a Machine Owner Key first: `update-secureboot-"
            "policy --new-key`, `mokutil --import /var/lib/shim-signed/mok/MOK.der` (choose a "
            "one-time password), reboot, enroll it in MokManager, then converge again"
        ], []
    if state.get("secure_boot") and path == "nvidia-repo":
        return [], [
            "note: Secure Boot is enforced; DKMS signs the NVIDIA modules with the enrolled "
            "Machine Owner Key (/var/lib/shim-signed/mok/MOK.der)"
        ]
    if sb_state in ("shim-validation-disabled", "setup-mode"):
        return [], [f"note: {state.get('secure_boot_note')}"]
    if sb_state == "unknown" and path == "nvidia-repo":
        return [], [f"{state.get('secure_boot_note')}"]
    return [], []


def driver_findings(driver: list, install_pending: bool, next_boot: bool = False) -> Findings:
    """The diagnosis library's verdicts on the driver state, less what this run resolves
    itself: the driver it installs, the modules of the kernel's flavour it installs
    (``install_pending``), a fault a reboot fixes (the run reboots: a warning; with
    ``next_boot``, nvidia_driver_next_boot, the next boot does, and so for modules installed for
    the kernel booted next only)."""
    problems, warnings = [], []
    for v in driver:
        if v.id in _INSTALLED_BY_THE_RUN:
            continue
        if v.id == "driver-not-loaded/not-installed-for-kernel" and install_pending:
            continue  # the run installs the modules of the kernel's flavour, then reboots
        if next_boot and (v.reboot_fixes or v.id == _NEXT_KERNEL_LOADS):
            warnings.append(f"{v} {NEXT_BOOT_NOTE}")
        elif v.reboot_fixes:
            warnings.append(f"{v} {REBOOT_NOTE}")
        elif v.severity == diagnosis.FAIL:
            problems.append(str(v))
        else:
            warnings.append(str(v))
    return problems, warnings


def smi_findings(smi: dict | None, driver: list, state: dict) -> tuple[list[str], list[str], bool]:
    """nvidia-smi's verdicts (NvidiaGpus) the driver state has not named already:
    ``(problems, warnings, lost)``, ``lost`` when a GPU fell off the bus (its count and NVLink
    are not checked then)."""
    problems, warnings = [], []
    explained = {v.kind for v in driver}
    lost = False
    for v in list((smi or {}).get("verdicts") or []):
        if v.kind in explained or (v.kind == "driver-not-loaded" and not state.get("loaded")):
            continue  # the driver state names it, with its cause
        if v.kind == "gpu-lost":
            lost = True
        if v.severity == diagnosis.FAIL:
            problems.append(str(v))
        elif v.severity == diagnosis.WARN:
            warnings.append(str(v))
    return problems, warnings, lost


def kernel_log_warnings(state: dict) -> list[str]:
    """The kernel log of this boot, classified, less what the driver state already names."""
    return [
        f"kernel log of this boot: {v}"
        for v in diagnosis.classify_kernel_log("\n".join(state.get("kernel_log") or []))
        if v.id not in ("module-rejected", "driver-library-mismatch")
    ]


def gpu_problems(data: Any, gpus: list, declared: int, lost: bool) -> list[str]:
    """The GPUs the driver sees against the inventory: their count (unless one was lost: its
    verdict says it), the power limit's range, the compute capability."""
    if not gpus:
        return []
    problems = []
    if len(gpus) != declared and not lost:
        problems.append(
            f"the driver sees {len(gpus)} GPU(s), the inventory declares {declared}: "
            "`nvidia-smi -L`; `journalctl -k | grep -i nvrm` shows GPUs the driver dropped"
        )
    try:
        plan_power_limits(gpus, data.get("nvidia_power_limit_w"))
    except PowerLimitError as exc:
        problems.append(f"nvidia_power_limit_w: {exc}")
    problems.extend(compute_capability_problems(data, gpus))
    return problems


def interconnect_findings(data: Any, interconnect: dict | None, declared: int) -> Findings:
    """NVLink (NvidiaInterconnect) on a host of several GPUs the driver sees: unread or not
    verified is a problem with ``nvlink_required``, else a warning (vLLM runs over PCIe)."""
    if interconnect and interconnect.get("error"):
        text = f"NVLink could not be read ({interconnect['error']})"
        if data.get("nvlink_required"):
            return [
                f"{text} and nvlink_required is True: fix it, or set "
                "nvlink_required = False to run over PCIe"
            ], []
        return [], [f"{text}: vLLM runs over PCIe with P2P and custom all-reduce off"]
    if not interconnect:
        return [], []
    result = verify_interconnect(
        interconnect["links"],
        interconnect["topology"],
        interconnect["p2p"],
        gpu_count=declared,
        expected_links=data.get("nvlink_expected_links"),
    )
    if result.verified:
        return [], []
    text = "; ".join(result.problems)
    if data.get("nvlink_required"):
        return [
            f"NVLink is required (nvlink_required) and not verified: {text}. Fix the "
            "bridge, or set nvlink_required = False to run over PCIe"
        ], []
    return [], [
        f"NVLink not verified ({text}): vLLM runs over PCIe with P2P and custom all-reduce off"
    ]


def driver_preflight(
    data: Any,
    pci: list[dict],
    state: dict,
    packages: dict,
    smi: dict | None,
    interconnect: dict | None,
    kernel_packages: dict | None = None,
    units: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[list[str], list[str]]:
    """Decide, from facts, whether the NVIDIA layer may touch this host. Pure.

    Returns ``(problems, warnings)``, in the order of the guards: the PCI bus, the install path
    and branch, the kernel, Secure Boot, the driver, nvidia-smi, the kernel log, the GPUs,
    masked units, NVLink. Inputs are the facts NvidiaPciGpus, NvidiaDriverState, NvidiaPackages,
    NvidiaGpus, NvidiaInterconnect, KernelPackages and SystemdUnits (the last two may be None:
    not checked).
    """
    declared = data.get("nvidia_gpu_count")
    path = data.get("nvidia_install_path")
    problems = pci_count_problems(pci, declared)
    problems += install_path_problems(
        packages,
        path,
        data.get("nvidia_driver_branch"),
        data.get("nvidia_driver_variant") or "open",
    )
    kernel, flavour = kernel_problems(data, path, state.get("kernel") or "", kernel_packages)
    problems += kernel
    boot_problems, warnings = secure_boot_findings(state, path)
    problems += boot_problems
    warnings += switch_warnings(data, packages)

    installed = packages.get("installed", {})
    install_pending = any(pkg not in installed for pkg in driver_packages(data, flavour))
    driver = diagnose_driver(state, [g.get("driver") for g in pci], install_path=path)
    driver_problems, driver_warnings = driver_findings(
        driver, install_pending, bool(data.get("nvidia_driver_next_boot"))
    )
    smi_problems, smi_warnings, lost = smi_findings(smi, driver, state)
    problems += driver_problems + smi_problems
    warnings += driver_warnings + smi_warnings + kernel_log_warnings(state)

    gpus = (smi or {}).get("gpus") or []
    problems += gpu_problems(data, gpus, declared, lost)
    if declared and units is not None:
        problems += masked_units(units)
    if declared > 1 and gpus and not lost:
        link_problems, link_warnings = interconnect_findings(data, interconnect, declared)
        problems += link_problems
        warnings += link_warnings
    return problems, warnings


def reboot_refusal(
    reasons: list[str], *, is_local: bool, allowed: bool, next_boot: bool = False
) -> str | None:
    """The problem to report when a reboot is needed now but must not happen: the target is the
    controller itself (``@local``) or ``nvidia_reboot_allowed`` is False. None otherwise, and
    with ``next_boot`` (nvidia_driver_next_boot: the reboot is reported, never taken)."""
    if not reasons or next_boot or (allowed and not is_local):
        return None
    why = "it is the controller itself (@local)" if is_local else "nvidia_reboot_allowed is False"
    return (
        f"a reboot is needed ({'; '.join(reasons)}) and rigup will not reboot this host because "
        f"{why}: reboot it, then run again"
    )
