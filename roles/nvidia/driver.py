"""The NVIDIA driver deploy: refuse before any change, install and hold, reboot when needed,
verify after."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.server import Which
from pyinfra.operations import apt, files, python, server
from pyinfra.operations.util import any_changed

from roles.common.placed import directory_placed, file_placed, template_placed
from roles.nvidia.branches import HOLD_PREFIXES
from roles.nvidia.facts import (
    KernelPackages,
    NvidiaDriverState,
    NvidiaGpus,
    NvidiaInterconnect,
    NvidiaPackages,
    NvidiaPciGpus,
    SystemdUnits,
)
from roles.nvidia.operations import driver_held, driver_switched, refuse, report
from roles.nvidia.paths import BOOT_UNITS, FILES, NvidiaPaths
from roles.nvidia.preflight import (
    driver_packages,
    driver_preflight,
    kernel_hold,
    reboot_reasons,
    reboot_refusal,
    target_flavour,
)
from roles.nvidia.tools import NvidiaTools

#: The initramfs generator installed where the host has none: Ubuntu 26.04's default, the first of
#: linux-image-7.0.0-*-generic's Recommends (``dracut | linux-initramfs-tool``; `apt-cache depends`
#: in the resolute lab, 2026-12-02). dracut Conflicts with initramfs-tools, and both ship the
#: ``update-initramfs`` rigup runs, so a host with either keeps its own.
INITRAMFS_GENERATOR = "dracut"


@dataclass(frozen=True)
class DriverFacts:
    """What the driver deploy read of the host before any change: the driver state
    (NvidiaDriverState), the packages (NvidiaPackages), the kernel meta-packages
    (KernelPackages), and why a reboot is needed now (``reboot_reasons``; empty when none)."""

    state: dict
    packages: dict
    kernel_packages: dict
    reboot_reasons: list[str]


def preflight_or_refuse(settings, is_local: bool) -> DriverFacts:
    """Read the facts, run :func:`driver_preflight` and refuse a reboot that may not happen
    (``is_local``: the controller itself); raise ``DeployError`` listing every problem, before
    any change, else print the warnings and return the facts."""
    pci = host.get_fact(NvidiaPciGpus) or []
    state = host.get_fact(NvidiaDriverState) or {}
    packages = host.get_fact(NvidiaPackages) or {}
    smi = host.get_fact(NvidiaGpus)
    interconnect = host.get_fact(NvidiaInterconnect)
    kernel_packages = host.get_fact(KernelPackages) or {}
    units = host.get_fact(SystemdUnits, units=list(BOOT_UNITS)) or {}
    problems, warnings = driver_preflight(
        settings, pci, state, packages, smi, interconnect, kernel_packages, units
    )
    reasons = reboot_reasons(warnings)
    if state.get("reboot_required"):
        reasons.append("the system asks for a reboot (/var/run/reboot-required)")
    refusal = reboot_refusal(
        reasons,
        is_local=is_local,
        allowed=settings.nvidia_reboot_allowed,
        next_boot=settings.nvidia_driver_next_boot,
    )
    if refusal:
        problems.append(refusal)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise DeployError(f"NVIDIA layer on {host.name}: refused (nothing was changed):\n{lines}")
    for warning in warnings:
        logger.warning(f"[{host.name}] NVIDIA: {warning}")
    return DriverFacts(state, packages, kernel_packages, reasons)


def blacklist_nouveau() -> OperationMeta:
    """Blacklist nouveau and regenerate the initramfs when that changed; returns the
    regeneration (it makes a reboot needed)."""
    # The layer alone (deploys/nvidia.py) on a host whose lists predate the wanted branch finds
    # no package of it ("Unable to locate package nvidia-driver-595-open", a bare lab machine);
    # the same refresh as the base layer's, so a full converge refreshes once.
    apt.update(name="Refresh apt lists (at most daily)", cache_time=24 * 3600)
    prerequisites = ["pciutils", "mokutil", "kmod"]
    if not host.get_fact(Which, command="update-initramfs"):
        prerequisites.append(INITRAMFS_GENERATOR)  # a host with one keeps it: they conflict
    apt.packages(
        name=f"NVIDIA prerequisites ({', '.join(prerequisites)})",
        packages=prerequisites,
    )
    blacklist = file_placed(
        name="Blacklist nouveau",
        src=str(FILES / "blacklist-nouveau.conf"),
        dest="/etc/modprobe.d/rigup-blacklist-nouveau.conf",
        mode="644",
    )
    return server.shell(
        name="Regenerate the initramfs (nouveau blacklist changed)",
        commands=["update-initramfs -u -k all"],
        _if=blacklist.did_change,
    )


def nvidia_repository(settings, np: NvidiaPaths) -> None:
    """NVIDIA's CUDA repository (the ``nvidia-repo`` path): its keyring package, downloaded
    with its pinned sha256, and an apt preference holding it to ``nvidia_driver_branch``."""
    keyring = f"{np.cache}/{settings.nvidia_cuda_keyring_deb}"
    directory_placed(name=f"Directory {np.cache}", path=np.cache, mode="755")
    download = files.download(
        name=f"Download {settings.nvidia_cuda_keyring_deb} (sha256 pinned)",
        src=f"{settings.nvidia_cuda_repo_url}/{settings.nvidia_cuda_keyring_deb}",
        dest=keyring,
        sha256sum=settings.nvidia_cuda_keyring_sha256,
    )
    deb = apt.deb(name="Install cuda-keyring (NVIDIA's CUDA repository)", src=keyring)
    pin = template_placed(
        name=f"Hold NVIDIA's repository to driver branch {settings.nvidia_driver_branch}",
        src=str(FILES / "nvidia-driver-pin.j2"),
        dest="/etc/apt/preferences.d/rigup-nvidia-driver",
        mode="644",
        branch=settings.nvidia_driver_branch,
    )
    apt.update(
        name="Refresh apt lists (NVIDIA repository added)",
        _if=any_changed(download, deb, pin),
    )


@dataclass(frozen=True)
class _Either:
    """Two operations whose changes count as one (``did_change``): the driver's switch and its
    install."""

    first: OperationMeta
    second: OperationMeta

    def did_change(self) -> bool:
        return self.first.did_change() or self.second.did_change()


def install_and_hold(
    settings, wanted: list[str], held_kernel: tuple[str, ...]
) -> OperationMeta | _Either:
    """Install the driver packages ``wanted`` and hold them, with the kernel meta-packages
    ``held_kernel``, against apt and unattended upgrades; returns the install. On the Ubuntu
    path a host with another branch or variant installed gets it switched first
    (:func:`roles.nvidia.operations.driver_switched`: one apt transaction)."""
    switch = None
    if settings.nvidia_install_path == "ubuntu":
        switch = driver_switched(
            name=(
                f"Driver branch {settings.nvidia_driver_branch}, variant "
                f"{settings.nvidia_driver_variant} (another driver's packages removed)"
            ),
            wanted=wanted,
            branch=settings.nvidia_driver_branch,
            variant=settings.nvidia_driver_variant,
        )
    install = apt.packages(
        name=f"Driver {' + '.join(wanted)}",
        packages=wanted,
        no_recommends=True,
    )
    template_placed(
        name="Keep the driver and kernel out of unattended upgrades",
        src=str(FILES / "unattended-upgrades.j2"),
        dest="/etc/apt/apt.conf.d/51rigup-nvidia",
        mode="644",
        prefixes=HOLD_PREFIXES,
        kernel_packages=held_kernel,
    )
    driver_held(
        name="Hold the driver packages (apt-mark hold)",
        prefixes=HOLD_PREFIXES,
        extra=held_kernel,
    )
    return install if switch is None else _Either(install, switch)


def reboot_when_needed(settings, is_local: bool, needed: Callable[[], bool]) -> None:
    """Reboot when ``needed()`` says so at run time, or, on the controller itself
    (``is_local``) or with ``nvidia_reboot_allowed`` False, stop the run saying why."""
    if is_local or not settings.nvidia_reboot_allowed:
        who = "the controller itself (@local)" if is_local else "(nvidia_reboot_allowed = False)"
        python.call(
            name="Stop: a reboot is needed to load the driver",
            function=refuse,
            message=(
                "the driver was installed and needs a reboot; rigup does not reboot "
                f"{who}: reboot, then run again"
            ),
            _if=needed,
        )
        return
    server.reboot(
        name="Reboot to load the NVIDIA driver",
        delay=5,
        interval=10,
        reboot_timeout=settings.nvidia_reboot_timeout_s,
        _if=needed,
    )


@deploy("NVIDIA driver")
def nvidia_driver(settings, tools: NvidiaTools) -> bool:
    """Install and hold the driver of ``nvidia_install_path``/``nvidia_driver_branch``,
    blacklist nouveau, reboot when the driver needs it, verify it after (rigup-nvidia-diagnose).

    With ``nvidia_driver_next_boot`` the driver is installed for the kernel the host boots next
    (the installed kernel meta-package's), also where no GPUs are declared, and a needed reboot
    is printed, never taken (the lab: a container runs its host's kernel).

    Returns whether this run plans the driver (False on a host that declares no GPUs and has no
    ``nvidia_driver_next_boot``). Raises ``DeployError`` before any change for every problem
    :func:`driver_preflight` finds.
    """
    np = NvidiaPaths.from_data(settings)
    next_boot = settings.nvidia_driver_next_boot
    if settings.nvidia_gpu_count == 0 and not next_boot:
        logger.info(f"[{host.name}] NVIDIA driver: the host declares no GPUs; nothing to install")
        return False
    is_local = host.name.startswith("@local")
    facts = preflight_or_refuse(settings, is_local)
    kernel = facts.state.get("kernel", "")
    flavour = target_flavour(settings, kernel, facts.kernel_packages.get("packages") or {})
    wanted = driver_packages(settings, flavour)

    initramfs = blacklist_nouveau()
    if settings.nvidia_install_path == "nvidia-repo":
        nvidia_repository(settings, np)
    install = install_and_hold(settings, wanted, kernel_hold(settings, flavour))

    # A reboot can only be needed for a reason known now, or because this run installs the driver
    # or blacklists nouveau; a converged host gets no reboot operation at all.
    static = bool(facts.reboot_reasons)
    installed = facts.packages.get("installed", {})
    install_pending = any(pkg not in installed for pkg in wanted)
    blacklist_pending = facts.state.get("nouveau_blacklisted") is not True
    if next_boot:
        _report_next_boot(
            facts.reboot_reasons, install, initramfs, pending=install_pending or blacklist_pending
        )
        return True
    if not (static or install_pending or blacklist_pending):
        return True
    reboot_when_needed(
        settings, is_local, lambda: static or install.did_change() or initramfs.did_change()
    )
    changed = any_changed(install, initramfs, *tools.changed("rigup-nvidia-diagnose"))
    # exit 1 is a warning (e.g. an Xid of a crashed program in this boot's kernel log)
    server.shell(
        name="Driver loaded and consistent (rigup-nvidia-diagnose)",
        commands=[f"{np.bin}/rigup-nvidia-diagnose || test $? -eq 1"],
        _if=lambda: static or changed(),
    )
    return True


def _report_next_boot(reasons: list[str], install, initramfs, *, pending: bool) -> None:
    """The reboot decision of an ``nvidia_driver_next_boot`` host, shown and never taken: the
    reasons known now are printed while planning (a converged host plans no operation for
    them); a driver or initramfs this run changes is reported by an operation when it does."""
    boot = "the host boots the installed kernel next and loads the driver then"
    if reasons:
        logger.warning(
            f"[{host.name}] NVIDIA: a reboot is needed ({'; '.join(reasons)}); not taken: "
            f"nvidia_driver_next_boot ({boot})"
        )
    elif pending:
        python.call(
            name="Reboot needed to load the driver (not taken: nvidia_driver_next_boot)",
            function=report,
            message=(
                f"[{host.name}] NVIDIA: the driver or the initramfs changed, a reboot is needed "
                f"to load the driver; not taken: nvidia_driver_next_boot ({boot})"
            ),
            _if=any_changed(install, initramfs),
        )
