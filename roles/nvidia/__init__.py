"""nvidia: driver + CUDA toolkit, persistence mode and power limit at boot, NVLink verification.

Settings: the ``nvidia_*``, ``nvlink_*`` and ``cuda_toolkit_version`` keys of
inventory/group_data/all.py, plus ``nvidia_gpu_count``. Parsers and checks of the tools' output
live in roles/nvidia/parsers.py, which is also installed on the host (as ``rigup_nvidia``) for
the boot-time units, so the deploy, the units and the tests read ``nvidia-smi`` the same way.

Everything that can refuse a host is checked while the run is prepared, before any change:
GPUs on the PCI bus vs ``nvidia_gpu_count``, both install paths on one host, an install path
other than the host's, Secure Boot with DKMS-built modules, another driver branch installed,
the power limit against each card's own min/max, a required NVLink that is degraded, and driver
failures a reboot does not fix (DKMS build failed, no module for the running kernel).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy, operation
from pyinfra.api.exceptions import DeployError, OperationError
from pyinfra.facts.server import Which
from pyinfra.operations import apt, files, python, server, systemd
from pyinfra.operations.util import any_changed

from roles.common.paths import Layout
from roles.common.venv import locked_venv
from roles.nvidia.facts import (
    KERNEL_METAPACKAGES,
    CudaToolkitHome,
    KernelMetapackages,
    NvidiaDriverState,
    NvidiaGpus,
    NvidiaInterconnect,
    NvidiaPackages,
    NvidiaPciGpus,
)
from roles.nvidia.parsers import (
    PowerLimitError,
    diagnose_driver,
    plan_power_limits,
    verify_interconnect,
)

FILES = Path(__file__).resolve().parents[2] / "files" / "nvidia"
POWER_UNIT = "rigup-gpu-power.service"
NVLINK_UNIT = "rigup-nvlink.service"
PERSISTENCED = "nvidia-persistenced.service"

#: Hosts (by name) whose driver this run installs: later deploys of the same run (vLLM) may
#: enable GPU services there although nvidia-smi was absent when the run was prepared.
DRIVER_PLANNED: set[str] = set()


@dataclass(frozen=True)
class NvidiaPaths:
    """Paths of the NVIDIA layer on the host (derived from rigup_prefix / rigup_etc_dir)."""

    root: str
    bin: str
    lib: str
    etc: str
    power_config: str
    nvlink_config: str
    interconnect_env: str
    cuda_root: str
    cuda_venv: str
    cuda_lock: str
    cuda_home: str
    cache: str

    @classmethod
    def from_data(cls, data: Any) -> NvidiaPaths:
        p = Layout.from_data(data)
        major_minor = ".".join(str(data.get("cuda_toolkit_version")).split(".")[:2])
        cuda_root = f"{p.prefix}/cuda-{major_minor}"
        return cls(
            root=f"{p.prefix}/nvidia",
            bin=f"{p.prefix}/nvidia/bin",
            lib=f"{p.prefix}/nvidia/lib",
            etc=f"{p.etc}/nvidia",
            power_config=f"{p.etc}/nvidia/gpu-power.json",
            nvlink_config=f"{p.etc}/nvidia/nvlink.json",
            interconnect_env="/run/rigup-nvlink/interconnect.env",
            cuda_root=cuda_root,
            cuda_venv=f"{cuda_root}/venv",
            cuda_lock=f"{cuda_root}/requirements.lock",
            cuda_home=f"{cuda_root}/home",
            cache=f"{p.state}/nvidia",
        )


def cuda_env(data: Any) -> dict[str, str]:
    """Environment that puts the pinned CUDA toolkit on PATH for a service user:
    ``{"CUDA_HOME": "/opt/rigup/cuda-13.0/home", "PATH": "<home>/bin:/usr/local/sbin:..."}``."""
    home = NvidiaPaths.from_data(data).cuda_home
    return {
        "CUDA_HOME": home,
        "PATH": f"{home}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }


_UBUNTU_KERNEL = re.compile(r"^\d+\.\d+\.\d+-\d+-([a-z][a-z0-9-]*)$")


def kernel_flavour(kernel: str) -> str | None:
    """Ubuntu kernel flavour of a ``uname -r`` (``7.0.0-44-generic`` -> ``generic``): Canonical's
    prebuilt-module metapackages exist per flavour. None for a kernel that is not shaped like
    Ubuntu's ``<version>-<abi>-<flavour>`` (a custom or foreign kernel: no prebuilt modules)."""
    m = _UBUNTU_KERNEL.match(kernel)
    return m.group(1) if m else None


def driver_packages(data: Any, kernel: str) -> list[str]:
    """Packages of the chosen install path for ``nvidia_driver_branch``.

    ubuntu: ``nvidia-driver-<b>-open`` + ``linux-modules-nvidia-<b>-open-<flavour>`` (Canonical's
    prebuilt, signed modules; the modules package provides ``nvidia-dkms-<b>-open``, so no DKMS —
    Ubuntu 26.04 archive, restricted, 2026-11). nvidia-repo: ``nvidia-open`` held to the branch by
    an apt preference (NVIDIA Driver Installation Guide, Ubuntu, open kernel modules).
    """
    branch = data.get("nvidia_driver_branch")
    if data.get("nvidia_install_path") == "ubuntu":
        return [
            f"nvidia-driver-{branch}-open",
            f"linux-modules-nvidia-{branch}-open-{kernel_flavour(kernel)}",
        ]
    return ["nvidia-open"]


#: Package name prefixes of the driver that rigup holds (the exact-version dependencies of
#: nvidia-driver-<b>-open), plus the kernel metapackages on the Ubuntu path: prebuilt modules
#: exist per kernel, so kernel and driver must move together, when you run rigup.
HOLD_PREFIXES = ("nvidia-", "libnvidia-", "linux-modules-nvidia-", "xserver-xorg-video-nvidia-")


def driver_preflight(
    data: Any,
    pci: list[dict],
    state: dict,
    packages: dict,
    smi: dict | None,
    interconnect: dict | None,
) -> tuple[list[str], list[str]]:
    """Decide, from facts, whether the NVIDIA layer may touch this host. Pure.

    Returns ``(problems, warnings)``: each problem stops the run before any change (the deploy
    raises ``DeployError`` with all of them); warnings are printed. Inputs are the facts
    NvidiaPciGpus, NvidiaDriverState, NvidiaPackages, NvidiaGpus and NvidiaInterconnect.
    """
    problems: list[str] = []
    warnings: list[str] = []
    declared = data.get("nvidia_gpu_count")
    branch = data.get("nvidia_driver_branch")
    path = data.get("nvidia_install_path")

    if len(pci) != declared:
        found = ", ".join(g["address"] for g in pci) or "none"
        problems.append(
            f"{len(pci)} NVIDIA GPU(s) on the PCI bus ({found}) but the inventory declares "
            f"{declared} (nvidia_gpu_count): a missing card is a seating, riser or power-cable "
            "problem (check `lspci -d 10de:`); otherwise correct nvidia_gpu_count"
        )

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
            f"nvidia-driver-{branch}-open; for the NVIDIA path `apt purge 'linux-modules-nvidia-*'`"
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

    other = sorted(
        n
        for n in installed
        if n.startswith("nvidia-driver-") and not n.startswith(f"nvidia-driver-{branch}")
    )
    if other:
        problems.append(
            f"another driver branch is installed ({', '.join(other)}) and "
            f"nvidia_driver_branch is {branch}: rigup does not switch branches under a running "
            f"driver. Either set nvidia_driver_branch to it, or `apt purge {other[0]}`, reboot, "
            "and converge"
        )

    kernel = state.get("kernel") or ""
    if path == "ubuntu" and kernel and kernel_flavour(kernel) is None:
        problems.append(
            f"the running kernel {kernel} is not an Ubuntu kernel (<version>-<abi>-<flavour>): "
            "Canonical's prebuilt NVIDIA modules exist only for Ubuntu's kernels. Boot an Ubuntu "
            "kernel (linux-generic), or use nvidia_install_path = 'nvidia-repo' (DKMS)"
        )

    if state.get("secure_boot") and path == "nvidia-repo":
        problems.append(
            "Secure Boot is enabled and the nvidia-repo path builds unsigned modules with DKMS, "
            "which the kernel rejects. Either set nvidia_install_path = 'ubuntu' (Canonical's "
            "signed prebuilt modules), or enroll a Machine Owner Key first: `update-secureboot-"
            "policy --new-key`, `mokutil --import /var/lib/shim-signed/mok/MOK.der` (choose a "
            "one-time password), reboot, enroll it in MokManager, then converge again"
        )

    findings = diagnose_driver(state, [g.get("driver") for g in pci])
    for finding in findings:
        if finding.reboot_fixes:
            warnings.append(f"{finding} (the run reboots the host for it)")
        else:
            problems.append(str(finding))

    if smi and smi.get("error") and state.get("loaded") and not findings:
        problems.append(f"nvidia-smi fails: {smi['error']}")
    gpus = (smi or {}).get("gpus") or []
    if gpus:
        if len(gpus) != declared:
            problems.append(
                f"the driver sees {len(gpus)} GPU(s), the inventory declares {declared}: "
                "`nvidia-smi -L`; `journalctl -k | grep -i nvrm` shows GPUs the driver dropped"
            )
        try:
            plan_power_limits(gpus, data.get("nvidia_power_limit_w"))
        except PowerLimitError as exc:
            problems.append(f"nvidia_power_limit_w: {exc}")

    if interconnect and not interconnect.get("error") and declared > 1 and gpus:
        result = verify_interconnect(
            interconnect["links"],
            interconnect["topology"],
            interconnect["p2p"],
            gpu_count=declared,
            expected_links=data.get("nvlink_expected_links"),
        )
        if not result.verified:
            text = "; ".join(result.problems)
            if data.get("nvlink_required"):
                problems.append(
                    f"NVLink is required (nvlink_required) and not verified: {text}. Fix the "
                    "bridge, or set nvlink_required = False to run over PCIe"
                )
            else:
                warnings.append(
                    f"NVLink not verified ({text}): vLLM runs over PCIe with P2P and custom "
                    "all-reduce off"
                )
    return problems, warnings


def reboot_refusal(reasons: list[str], *, is_local: bool, allowed: bool) -> str | None:
    """The problem to report when a reboot is needed now but must not happen: the target is the
    controller itself (``@local``) or ``nvidia_reboot_allowed`` is False. None otherwise."""
    if not reasons or (allowed and not is_local):
        return None
    why = "it is the controller itself (@local)" if is_local else "nvidia_reboot_allowed is False"
    return (
        f"a reboot is needed ({'; '.join(reasons)}) and rigup will not reboot this host because "
        f"{why}: reboot it, then run again"
    )


def _refuse(message: str) -> None:
    raise OperationError(message)


@operation()
def cuda_home_linked(venv: str, home: str):
    """Point ``home`` at the toolkit inside ``venv`` (``lib/python3.X/site-packages/nvidia/cu13``)
    and give it the ``lib64`` that nvcc.profile and CUDA_HOME users expect (the wheels ship
    ``lib``). Evaluated when it runs, so it works on the run that creates the venv; a no-op when
    both are in place. Raises ``OperationError`` when the venv holds no toolkit."""
    state = host.get_fact(CudaToolkitHome, venv=venv, home=home) or {}
    if state.get("top") and state.get("lib64") and state.get("link") == state["top"]:
        host.noop(f"{home} -> {state['top']}")
        return
    q_venv, q_home = shlex.quote(venv), shlex.quote(home)
    find = f"ls -d {q_venv}/lib/python3*/site-packages/nvidia/cu13 2>/dev/null | head -n1"
    yield (
        f"top=$({find}); test -n \"$top\" || {{ echo 'no nvidia/cu13 in {venv}' >&2; exit 1; }}; "
        f'test -e "$top/lib64" || ln -s lib "$top/lib64"; '
        f'test "$(readlink {q_home})" = "$top" || ln -sfn "$top" {q_home}'
    )


#: The tool operations already added for a host in this run (every NVIDIA deploy needs them;
#: they are added once).
_TOOLS: dict[str, dict] = {}


def _tools(np: NvidiaPaths) -> dict:
    """Install rigup's on-target NVIDIA tools (once per host and run); returns the put
    operations by file name, for ``_if=any_changed(...)`` of the units that run them."""
    if host.name in _TOOLS:
        return _TOOLS[host.name]
    for path in (np.root, np.bin, np.lib, np.etc):
        files.directory(name=f"Directory {path}", path=path, user="root", group="root", mode="755")
    ops = {
        "rigup_nvidia.py": files.put(
            name="Library rigup_nvidia.py (the deploy's parsers)",
            src=str(Path(__file__).with_name("parsers.py")),
            dest=f"{np.lib}/rigup_nvidia.py",
            mode="644",
        )
    }
    for name in ("rigup-gpu-power", "rigup-nvlink", "rigup-nvidia-diagnose", "rigup-p2p-bandwidth"):
        ops[name] = files.put(
            name=f"Script {name}", src=str(FILES / name), dest=f"{np.bin}/{name}", mode="755"
        )
    _TOOLS[host.name] = ops
    return ops


def driver_usable(gpus: int) -> bool:
    """True when GPU services may be enabled: GPUs declared and a driver present or being
    installed by this run."""
    return gpus > 0 and (
        host.name in DRIVER_PLANNED or bool(host.get_fact(Which, command="nvidia-smi"))
    )


@deploy("NVIDIA driver")
def nvidia_driver() -> None:
    """Install and hold the driver of ``nvidia_install_path``/``nvidia_driver_branch``,
    blacklist nouveau, reboot when the driver needs it, verify it after.

    Skipped on a host that declares no GPUs. Raises ``DeployError`` before any change for every
    problem :func:`driver_preflight` finds.
    """
    data = host.data
    gpus = data.nvidia_gpu_count
    np = NvidiaPaths.from_data(data)
    if gpus == 0:
        logger.info(f"[{host.name}] NVIDIA driver: the host declares no GPUs; nothing to install")
        return

    pci = host.get_fact(NvidiaPciGpus) or []
    state = host.get_fact(NvidiaDriverState) or {}
    packages = host.get_fact(NvidiaPackages) or {}
    smi = host.get_fact(NvidiaGpus)
    interconnect = host.get_fact(NvidiaInterconnect)
    problems, warnings = driver_preflight(data, pci, state, packages, smi, interconnect)
    is_local = host.name.startswith("@local")
    reboot_reasons = [w for w in warnings if "reboots the host" in w]
    if state.get("reboot_required"):
        reboot_reasons.append("the system asks for a reboot (/var/run/reboot-required)")
    refusal = reboot_refusal(reboot_reasons, is_local=is_local, allowed=data.nvidia_reboot_allowed)
    if refusal:
        problems.append(refusal)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise DeployError(f"NVIDIA layer on {host.name}: refused (nothing was changed):\n{lines}")
    for warning in warnings:
        logger.warning(f"[{host.name}] NVIDIA: {warning}")

    kernel = state.get("kernel", "")
    wanted = driver_packages(data, kernel)
    DRIVER_PLANNED.add(host.name)
    tools = _tools(np)

    apt.packages(
        name="NVIDIA prerequisites (pciutils, mokutil, kmod, initramfs-tools)",
        packages=["pciutils", "mokutil", "kmod", "initramfs-tools"],
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

    if data.nvidia_install_path == "nvidia-repo":
        keyring = f"{np.cache}/{data.nvidia_cuda_keyring_deb}"
        files.directory(name=f"Directory {np.cache}", path=np.cache, mode="755")
        download = files.download(
            name=f"Download {data.nvidia_cuda_keyring_deb} (sha256 pinned)",
            src=f"{data.nvidia_cuda_repo_url}/{data.nvidia_cuda_keyring_deb}",
            dest=keyring,
            sha256sum=data.nvidia_cuda_keyring_sha256,
        )
        deb = apt.deb(name="Install cuda-keyring (NVIDIA's CUDA repository)", src=keyring)
        pin = files.template(
            name=f"Hold NVIDIA's repository to driver branch {data.nvidia_driver_branch}",
            src=str(FILES / "nvidia-driver-pin.j2"),
            dest="/etc/apt/preferences.d/rigup-nvidia-driver",
            mode="644",
            branch=data.nvidia_driver_branch,
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
        kernel_packages=KERNEL_METAPACKAGES if data.nvidia_install_path == "ubuntu" else (),
    )
    driver_held(
        name="Hold the driver packages (apt-mark hold)",
        prefixes=HOLD_PREFIXES,
        extra=KERNEL_METAPACKAGES if data.nvidia_install_path == "ubuntu" else (),
    )

    # A reboot can only be needed for a reason known now, or because this run installs the driver
    # or blacklists nouveau; a converged host gets no reboot operation at all.
    static = bool(reboot_reasons)
    installed = packages.get("installed", {})
    install_pending = any(pkg not in installed for pkg in wanted)
    blacklist_pending = state.get("nouveau_blacklisted") is not True
    if not (static or install_pending or blacklist_pending):
        return

    def reboot_needed() -> bool:
        return static or install.did_change() or initramfs.did_change()

    if is_local or not data.nvidia_reboot_allowed:
        python.call(
            name="Stop: a reboot is needed to load the driver",
            function=_refuse,
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
            reboot_timeout=data.nvidia_reboot_timeout_s,
            _if=reboot_needed,
        )
    changed = any_changed(
        install, initramfs, tools["rigup-nvidia-diagnose"], tools["rigup_nvidia.py"]
    )
    server.shell(
        name="Driver loaded and consistent (rigup-nvidia-diagnose)",
        commands=[f"{np.bin}/rigup-nvidia-diagnose"],
        _if=lambda: static or changed(),
    )


@operation()
def driver_held(prefixes: tuple[str, ...], extra: tuple[str, ...] = ()):
    """``apt-mark hold`` every installed package whose name starts with one of ``prefixes``, plus
    the installed ones of ``extra``. Evaluated when it runs (after the install); a no-op when all
    are held."""
    packages = host.get_fact(NvidiaPackages) or {}
    installed = set(packages.get("installed", {}))
    kernel = host.get_fact(KernelMetapackages) or []
    want = sorted(n for n in installed if n.startswith(prefixes)) + sorted(
        n for n in kernel if n in extra
    )
    missing = [n for n in want if n not in set(packages.get("held", []))]
    if not missing:
        host.noop("driver packages already held")
        return
    yield "apt-mark hold " + " ".join(shlex.quote(n) for n in missing)


@deploy("CUDA toolkit")
def cuda_toolkit() -> None:
    """CUDA toolkit ``cuda_toolkit_version`` (NVIDIA's PyPI wheels, locked) at
    ``<prefix>/cuda-<major.minor>/home``, on PATH for service users through :func:`cuda_env` and
    for login shells through /etc/profile.d/rigup-cuda.sh. Needs no GPU (the lab builds it)."""
    data = host.data
    np = NvidiaPaths.from_data(data)
    files.directory(name=f"Directory {np.cuda_root}", path=np.cuda_root, mode="755")
    locked_venv(
        data,
        what="CUDA toolkit",
        contents=f"cuda-toolkit {data.cuda_toolkit_version} wheels",
        lock_src=FILES / "cuda-toolkit.lock",
        lock=np.cuda_lock,
        venv=np.cuda_venv,
        python="python3",
    )
    cuda_home_linked(name=f"CUDA_HOME {np.cuda_home}", venv=np.cuda_venv, home=np.cuda_home)
    env = cuda_env(data)
    files.put(
        name="CUDA toolkit on PATH for login shells",
        src=StringIO(
            "# Managed by rigup (roles/nvidia): the pinned CUDA toolkit\n"
            f"export CUDA_HOME={env['CUDA_HOME']}\n"
            f'case ":$PATH:" in *":$CUDA_HOME/bin:"*) ;; *) PATH="$CUDA_HOME/bin:$PATH" ;; esac\n'
        ),
        dest="/etc/profile.d/rigup-cuda.sh",
        mode="644",
    )


@deploy("GPU power and persistence")
def gpu_power() -> None:
    """Persistence mode at boot (nvidia-persistenced drop-in) and ``rigup-gpu-power.service``,
    a oneshot after it that applies ``nvidia_power_limit_w`` to each GPU by UUID, reads it back
    and fails on any difference. The unit re-runs (restart) whenever its configuration changes.
    Installed but kept stopped on a host without GPUs or driver."""
    data = host.data
    np = NvidiaPaths.from_data(data)
    gpus = data.nvidia_gpu_count
    tools = _tools(np)
    config = _json_config("Power limit configuration", np.power_config, power_config(data))
    dropin = files.template(
        name="nvidia-persistenced with persistence mode (drop-in)",
        src=str(FILES / "persistenced-rigup.conf.j2"),
        dest="/etc/systemd/system/nvidia-persistenced.service.d/rigup-persistence.conf",
        mode="644",
        persistence=data.nvidia_persistence_mode,
    )
    unit = files.template(
        name=f"Unit {POWER_UNIT}",
        src=str(FILES / "rigup-gpu-power.service.j2"),
        dest=f"/etc/systemd/system/{POWER_UNIT}",
        mode="644",
        script=f"{np.bin}/rigup-gpu-power",
        config=np.power_config,
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=any_changed(dropin, unit))
    if driver_usable(gpus):
        _boot_unit(
            PERSISTENCED,
            "enabled and running",
            f"Restart {PERSISTENCED} (persistence setting changed)",
            dropin.did_change,
        )
        _boot_unit(
            POWER_UNIT,
            "enabled and applied",
            f"Re-apply the power limit (restart {POWER_UNIT})",
            any_changed(config, unit, dropin, tools["rigup-gpu-power"], tools["rigup_nvidia.py"]),
        )
    else:
        _held_back(POWER_UNIT, gpus)


@deploy("NVLink")
def nvlink() -> None:
    """``rigup-nvlink.service``: at boot, before vLLM, verify the links and P2P and write the
    interconnect environment vLLM reads (P2P over NVLink, or P2P and custom all-reduce off).
    With ``nvlink_required`` an unverified bridge keeps vLLM down. Kept stopped without GPUs."""
    data = host.data
    np = NvidiaPaths.from_data(data)
    gpus = data.nvidia_gpu_count
    tools = _tools(np)
    config = _json_config("NVLink expectations", np.nvlink_config, nvlink_config(data))
    unit = files.template(
        name=f"Unit {NVLINK_UNIT}",
        src=str(FILES / "rigup-nvlink.service.j2"),
        dest=f"/etc/systemd/system/{NVLINK_UNIT}",
        mode="644",
        script=f"{np.bin}/rigup-nvlink",
        config=np.nvlink_config,
        env_out=np.interconnect_env,
    )
    systemd.daemon_reload(name="systemd daemon-reload", _if=unit.did_change)
    if driver_usable(gpus):
        _boot_unit(
            NVLINK_UNIT,
            "enabled and verified",
            f"Verify again (restart {NVLINK_UNIT})",
            any_changed(config, unit, tools["rigup-nvlink"], tools["rigup_nvidia.py"]),
        )
    else:
        _held_back(NVLINK_UNIT, gpus)


def power_config(data: Any) -> dict:
    """What rigup-gpu-power reads: ``{"gpu_count": 2, "power_limit_w": 290 | None (card
    default), "persistence_mode": True}``."""
    return {
        "gpu_count": data.get("nvidia_gpu_count"),
        "power_limit_w": data.get("nvidia_power_limit_w"),
        "persistence_mode": data.get("nvidia_persistence_mode"),
    }


def nvlink_config(data: Any) -> dict:
    """What rigup-nvlink reads: ``{"gpu_count": 2, "expected_links": 4 (per GPU),
    "required": True}``."""
    return {
        "gpu_count": data.get("nvidia_gpu_count"),
        "expected_links": data.get("nvlink_expected_links"),
        "required": data.get("nvlink_required"),
    }


def _json_config(name: str, dest: str, values: dict):
    """Put ``values`` as indented JSON at ``dest`` (0644); returns the operation."""
    return files.put(
        name=name, src=StringIO(json.dumps(values, indent=2) + "\n"), dest=dest, mode="644"
    )


def _boot_unit(unit: str, state: str, restart_name: str, restart_if) -> None:
    """Enable and start ``unit`` (operation "<unit> <state>"), and restart it, not just start
    it, when ``restart_if`` fires: a oneshot re-applies its settings only when it runs again."""
    systemd.service(name=f"{unit} {state}", service=unit, running=True, enabled=True)
    systemd.service(name=restart_name, service=unit, running=True, restarted=True, _if=restart_if)


def _held_back(unit: str, gpus: int) -> None:
    why = "declares no NVIDIA GPUs" if gpus == 0 else "has no NVIDIA driver (no nvidia-smi)"
    logger.warning(f"[{host.name}] {unit}: this host {why}: installed, not started.")
    systemd.service(
        name=f"{unit} installed, not started (no GPUs or no driver)",
        service=unit,
        running=False,
        enabled=False,
    )


@deploy("NVIDIA layer")
def nvidia(settings) -> None:
    """The whole NVIDIA layer in order: driver, CUDA toolkit, power/persistence, NVLink, for a
    host whose ``settings`` were checked (roles.settings.host_settings)."""
    nvidia_driver()
    cuda_toolkit()
    gpu_power()
    nvlink()
