"""Facts of the NVIDIA layer. Each ``process()`` is pure and tested on captured output
(tests/unit/test_nvidia_role.py); the parsing itself lives in rigup/nvidia."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase

from rigup.nvidia import (
    DRIVER_STATE_COMMAND,
    GPU_QUERY_COMMAND,
    ParseError,
    parse_driver_state,
    parse_nvlink_status,
    parse_p2p_matrix,
    parse_topology,
    read_gpu_query,
)
from roles.nvidia.cuda_headers import DECLARATION_GREP, parse_glibc_version

#: PCI class codes of GPUs: 0x0300 VGA controller, 0x0302 3D controller (PCI SIG class codes).
GPU_PCI_CLASSES = ("0x0300", "0x0302")
NVIDIA_PCI_VENDOR = "0x10de"


class NvidiaPciGpus(FactBase):
    """NVIDIA GPUs on the PCI bus, from sysfs (works with no driver installed):
    ``[{"address": "0000:01:00.0", "device": "0x2204", "driver": "nvidia" | "nouveau" | None}]``.
    """

    def command(self) -> str:
        return (
            "for d in /sys/bus/pci/devices/*; do "
            f'test "$(cat $d/vendor 2>/dev/null)" = {NVIDIA_PCI_VENDOR} || continue; '
            'c=$(cat $d/class); case "$c" in 0x0300*|0x0302*) ;; *) continue ;; esac; '
            'drv=""; test -e $d/driver && drv=$(basename "$(readlink $d/driver)"); '
            'echo "${d##*/} $(cat $d/device) $c ${drv:--}"; done'
        )

    def process(self, output: list[str]) -> list[dict]:
        gpus = []
        for line in output:
            parts = line.split()
            if len(parts) != 4:
                continue
            address, device, pci_class, driver = parts
            gpus.append(
                {
                    "address": address,
                    "device": device,
                    "class": pci_class,
                    "driver": None if driver == "-" else driver,
                }
            )
        return gpus


class NvidiaDriverState(FactBase):
    """Kernel-side and userspace state of the NVIDIA driver (see parsers.parse_driver_state)."""

    def command(self) -> str:
        return DRIVER_STATE_COMMAND

    def process(self, output: list[str]) -> dict:
        return parse_driver_state(output)


#: Where NVIDIA's CUDA apt repository is recognised in apt sources (the marker of the
#: "nvidia-repo" install path).
NVIDIA_REPO_MARKER = "developer.download.nvidia.com/compute/cuda/repos"


class NvidiaPackages(FactBase):
    """NVIDIA-related Debian packages, apt sources and holds.

    ``{"installed": {"nvidia-driver-580-open": "580.178.04-0ubuntu0.26.04.1", ...},
    "nvidia_repo_sources": ["/etc/apt/sources.list.d/cuda-ubuntu2604-x86_64.list"],
    "held": ["nvidia-driver-580-open", ...]}``. Only fully installed packages (``ii``/``hi``).
    """

    def command(self) -> str:
        return (
            "dpkg-query -W -f='pkg ${db:Status-Abbrev} ${Package} ${Version}\\n' "
            "'nvidia-*' 'libnvidia-*' 'linux-modules-nvidia-*' 'xserver-xorg-video-nvidia-*' "
            "'cuda-keyring' 'cuda-drivers*' "
            "2>/dev/null; "
            f"grep -rlsF {NVIDIA_REPO_MARKER} /etc/apt/sources.list /etc/apt/sources.list.d "
            "| sed 's/^/source /'; "
            "apt-mark showhold 2>/dev/null | sed 's/^/hold /'; true"
        )

    def process(self, output: list[str]) -> dict:
        installed: dict[str, str] = {}
        sources: list[str] = []
        held: list[str] = []
        for line in output:
            parts = line.split()
            if len(parts) == 4 and parts[0] == "pkg" and parts[1] in ("ii", "hi"):
                installed[parts[2]] = parts[3]
            elif len(parts) == 2 and parts[0] == "source":
                sources.append(parts[1])
            elif len(parts) == 2 and parts[0] == "hold":
                held.append(parts[1])
        return {"installed": installed, "nvidia_repo_sources": sources, "held": held}


class NvidiaGpus(FactBase):
    """GPUs as the driver reports them (``nvidia-smi --query-gpu``, see parsers.GPU_QUERY_FIELDS),
    read by parsers.read_gpu_query whatever nvidia-smi printed and however it exited.

    ``{"gpus": [GpuInfo, ...], "verdicts": [Verdict, ...], "exit_code": 0, "error": None |
    "<the first failure: what, why, fix>"}``; ``None`` when nvidia-smi is not installed.
    """

    def command(self) -> str:
        return (
            "command -v nvidia-smi >/dev/null 2>&1 || { echo @absent; exit 0; }; "
            f'out=$({GPU_QUERY_COMMAND} 2>&1); echo "@exit $?"; printf \'%s\\n\' "$out"'
        )

    def process(self, output: list[str]) -> dict | None:
        if not output or output[0].strip() == "@absent":
            return None
        exit_code = 0
        if output[0].startswith("@exit"):
            status = output[0].removeprefix("@exit").strip()
            exit_code = int(status) if status.isdigit() else 255
            output = output[1:]
        query = read_gpu_query("\n".join(output), exit_code)
        return {
            "gpus": query.gpus,
            "verdicts": query.verdicts,
            "exit_code": exit_code,
            "error": query.error,
        }


class NvidiaInterconnect(FactBase):
    """NVLink and P2P state: ``{"links": [GpuLinks], "topology": {(i, j): "NV4"},
    "p2p": {(i, j): "OK"}, "error": None}`` from ``nvidia-smi nvlink -s``, ``topo -m`` and
    ``topo -p2p r``; ``None`` when nvidia-smi is not installed."""

    def command(self) -> str:
        return (
            "command -v nvidia-smi >/dev/null 2>&1 || { echo @absent; exit 0; }; "
            "echo @nvlink; nvidia-smi nvlink -s 2>&1; "
            "echo @topo; nvidia-smi topo -m 2>&1; "
            "echo @p2p; nvidia-smi topo -p2p r 2>&1; true"
        )

    def process(self, output: list[str]) -> dict | None:
        if not output or output[0].strip() == "@absent":
            return None
        sections: dict[str, list[str]] = {}
        current = None
        for line in output:
            if line.strip() in ("@nvlink", "@topo", "@p2p"):
                current = line.strip()[1:]
                sections[current] = []
            elif current:
                sections[current].append(line)
        result: dict = {"links": [], "topology": {}, "p2p": {}, "error": None}
        try:
            result["links"] = parse_nvlink_status("\n".join(sections.get("nvlink", [])))
            result["topology"] = parse_topology("\n".join(sections.get("topo", [])))
            result["p2p"] = parse_p2p_matrix("\n".join(sections.get("p2p", [])))
        except ParseError as exc:
            result["error"] = str(exc)
        return result


class KernelPackages(FactBase):
    """The running kernel and the installed kernel packages with what each depends on, from
    which roles/nvidia/kernel.py derives the flavour (the installed meta-package that tracks the
    running kernel): ``{"kernel": "7.0.0-44-generic", "packages": {"linux-image-generic-hwe-26.04":
    "linux-image-7.0.0-44-generic, linux-firmware, ...", ...}}``. Only installed packages."""

    def command(self) -> str:
        return (
            'echo "@kernel $(uname -r)"; '
            "dpkg-query -W -f='${db:Status-Abbrev}|${Package}|${Depends}\\n' 'linux-*' "
            "2>/dev/null; true"
        )

    def process(self, output: list[str]) -> dict:
        kernel = ""
        packages: dict[str, str] = {}
        for line in output:
            if line.startswith("@kernel "):
                kernel = line.split(None, 1)[1].strip() if len(line.split()) > 1 else ""
                continue
            status, _, rest = line.partition("|")
            name, _, depends = rest.partition("|")
            if status.strip() in ("ii", "hi") and name.strip():
                packages[name.strip()] = depends.strip()
        return {"kernel": kernel, "packages": packages}


class SystemdUnits(FactBase):
    """Load and unit-file state of systemd units: ``{"nvidia-persistenced.service":
    {"LoadState": "masked", "UnitFileState": "masked"}, ...}`` (units systemd does not know read
    ``LoadState=not-found``)."""

    def command(self, units: list[str]) -> str:
        names = " ".join(shlex.quote(u) for u in units)
        return f"systemctl show -p Id,LoadState,UnitFileState -- {names} 2>/dev/null; true"

    def process(self, output: list[str]) -> dict[str, dict[str, str]]:
        units: dict[str, dict[str, str]] = {}
        current: dict[str, str] | None = None
        for line in output:
            key, sep, value = line.strip().partition("=")
            if not sep:
                continue
            if key == "Id":
                current = units.setdefault(value, {})
            elif current is not None:
                current[key] = value
        return units


class CudaToolkitHome(FactBase):
    """Where the toolkit wheels put CUDA inside a venv, and the state of rigup's stable link:
    ``{"top": "<venv>/lib/python3.13/site-packages/nvidia/cu13" | None, "lib64": bool (top/lib64
    exists), "link": target of ``home`` | None}``."""

    def command(self, venv: str, home: str) -> str:
        q_venv, q_home = shlex.quote(venv), shlex.quote(home)
        return (
            f"top=$(ls -d {q_venv}/lib/python3*/site-packages/nvidia/cu13 2>/dev/null | head -n1); "
            'echo "top=$top"; '
            'echo "lib64=$(test -n "$top" && test -e "$top/lib64" && echo 1 || echo 0)"; '
            f'echo "link=$(readlink {q_home} 2>/dev/null)"'
        )

    def process(self, output: list[str]) -> dict:
        values = dict(line.split("=", 1) for line in output if "=" in line)
        return {
            "top": values.get("top") or None,
            "lib64": values.get("lib64") == "1",
            "link": values.get("link") or None,
        }


class Glibc(FactBase):
    """The host's glibc as ``(major, minor)``, e.g. ``(2, 43)`` on Ubuntu 26.04; None when the
    libc is not glibc. From ``getconf GNU_LIBC_VERSION``, else ``ldd --version``
    (roles/nvidia/cuda_headers.py parse_glibc_version)."""

    def command(self) -> str:
        return "getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>&1 | head -n1; true"

    def process(self, output: list[str]) -> tuple[int, int] | None:
        return parse_glibc_version(output)


class CudaMathHeader(FactBase):
    """The ``extern`` declarations of rsqrt/rsqrtf in a CUDA ``crt/math_functions.h``:
    ``{"exists": True, "declarations": {629: "extern ... double rsqrt(double x);", ...}}``
    (line number -> line); ``{"exists": False, "declarations": {}}`` when the file is absent."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"test -f {q} || {{ echo @absent; exit 0; }}; echo @present; "
            f"grep -n -E {shlex.quote(DECLARATION_GREP)} {q}; true"
        )

    def process(self, output: list[str]) -> dict:
        if not output or output[0].strip() == "@absent":
            return {"exists": False, "declarations": {}}
        declarations: dict[int, str] = {}
        for line in output:
            number, sep, text = line.partition(":")
            if sep and number.isdigit():
                declarations[int(number)] = text
        return {"exists": True, "declarations": declarations}
