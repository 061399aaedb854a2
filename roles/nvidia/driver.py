"""The NVIDIA driver deploy: refuse before any change, install and hold, reboot when needed,
verify after."""

from __future__ import annotations

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.facts.server import Which
from pyinfra.operations import apt, files, python, server
from pyinfra.operations.util import any_changed

from roles.nvidia.facts import (
    KernelPackages,
    NvidiaDriverState,
    NvidiaGpus,
    NvidiaInterconnect,
    NvidiaPackages,
    NvidiaPciGpus,
    SystemdUnits,
)
from roles.nvidia.operations import driver_held, refuse, report
from roles.nvidia.paths import BOOT_UNITS, FILES, NvidiaPaths
from roles.nvidia.preflight import (
    HOLD_PREFIXES,
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
    is_local = host.name.startswith("@local")
    reasons = reboot_reasons(warnings)
    if state.get("reboot_required"):
        reasons.append("the system asks for a reboot (/var/run/reboot-required)")
    refusal = reboot_refusal(
        reasons, is_local=is_local, allowed=settings.nvidia_reboot_allowed, next_boot=next_boot
    )
    if refusal:
        problems.append(refusal)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise DeployError(f"NVIDIA layer on {host.name}: refused (nothing was changed):\n{lines}")
    for warning in warnings:
        logger.warning(f"[{host.name}] NVIDIA: {warning}")

    flavour = target_flavour(
        settings, state.get("kernel", ""), kernel_packages.get("packages") or {}
    )
    wanted = driver_packages(settings, flavour)
    held_kernel = kernel_hold(settings, flavour)

    prerequisites = ["pciutils", "mokutil", "kmod"]
    if not host.get_fact(Which, command="update-initramfs"):
        prerequisites.append(INITRAMFS_GENERATOR)  # a host with one keeps it: they conflict
    apt.packages(
        name=f"NVIDIA prerequisites ({', '.join(prerequisites)})",
        packages=prerequisites,
    )
    blacklist = files.put(
        name="Blacklist nouveau",
        src=str(FILES / "blacklist-nouveau.conf"),
        dest="/etc/modprobe.d/rigup-blacklist-nouveau.conf",
        mode="644",
    )
    initramfs = server.shell(
        name="Regenerate the initramfs (nouveau blacklist changed)",
        commands=["update-initramfs -u -k all"],
        _if=blacklist.did_change,
    )

    if settings.nvidia_install_path == "nvidia-repo":
        keyring = f"{np.cache}/{settings.nvidia_cuda_keyring_deb}"
        files.directory(name=f"Directory {np.cache}", path=np.cache, mode="755")
        download = files.download(
            name=f"Download {settings.nvidia_cuda_keyring_deb} (sha256 pinned)",
            src=f"{settings.nvidia_cuda_repo_url}/{settings.nvidia_cuda_keyring_deb}",
            dest=keyring,
            sha256sum=settings.nvidia_cuda_keyring_sha256,
        )
        deb = apt.deb(name="Install cuda-keyring (NVIDIA's CUDA repository)", src=keyring)
        pin = files.template(
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

    install = apt.packages(
        name=f"Driver {' + '.join(wanted)}",
        packages=wanted,
        no_recommends=True,
    )
    files.template(
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

    # A reboot can only be needed for a reason known now, or because this run installs the driver
    # or blacklists nouveau; a converged host gets no reboot operation at all.
    static = bool(reasons)
    installed = packages.get("installed", {})
    install_pending = any(pkg not in installed for pkg in wanted)
    blacklist_pending = state.get("nouveau_blacklisted") is not True
    if next_boot:
        _report_next_boot(reasons, install, initramfs, pending=install_pending or blacklist_pending)
        return True
    if not (static or install_pending or blacklist_pending):
        return True

    def reboot_needed() -> bool:
        return static or install.did_change() or initramfs.did_change()

    if is_local or not settings.nvidia_reboot_allowed:
        python.call(
            name="Stop: a reboot is needed to load the driver",
            function=refuse,
            message=(
                "the driver was installed and needs a reboot; rigup does not reboot "
                + (
                    "the controller itself (@local)"
                    if is_local
                    else "(nvidia_reboot_allowed = False)"
                )
                + ": reboot, then run again"
            ),
            _if=reboot_needed,
        )
    else:
        server.reboot(
            name="Reboot to load the NVIDIA driver",
            delay=5,
            interval=10,
            reboot_timeout=settings.nvidia_reboot_timeout_s,
            _if=reboot_needed,
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
