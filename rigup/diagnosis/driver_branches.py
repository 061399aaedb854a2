"""Which driver a host runs, from its package names, and the known issues of the branches rigup
supports (580, 595): signatures over the driver state (source ``driver-state``).

The package names are those of Ubuntu 26.04's archive (resolute restricted, read 2026-12-03):
``<base>-<branch>[-server][-open][-<rest>]``, e.g. ``nvidia-driver-580-open``,
``linux-modules-nvidia-595-open-7.0.0-44-generic``, ``libnvidia-compute-580-server``. The known
issues match on the driver state (rigup.nvidia.parse_driver_state: ``packages``, ``kernel``) and
what rigup-doctor adds from the rig's settings: ``gpu_count`` (declared GPUs),
``tensor_parallel`` (vLLM's tensor parallel size) and ``custom_all_reduce`` (on, off, or None
when not read). Without those (the deploy's preflight) the issues that need them do not match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .core import OK, WARN, Signature

#: ``<base>-<branch>[-server][-open][-<rest>]``: a package of one driver branch.
_DRIVER_PACKAGE = re.compile(
    r"^(?P<base>(?:lib)?nvidia-[a-z0-9-]*?|xserver-xorg-video-nvidia|linux-modules-nvidia)"
    r"-(?P<branch>\d{3})(?P<server>-server)?(?P<open>-open)?(?:-.+)?$"
)

#: Packages of one variant only (open or closed kernel modules); a branch's other packages are
#: shared by its open and closed modules.
_MODULE_BASES = ("nvidia-driver", "nvidia-kernel-source", "nvidia-dkms", "linux-modules-nvidia")


@dataclass(frozen=True)
class DriverPackage:
    """What a package name says of the driver it belongs to: its ``branch`` (580), whether it is
    of the ``server`` packaging, and for the module packages (nvidia-driver, the kernel source,
    the prebuilt modules) whether they are the ``open`` ones; ``open`` is None for a package
    shared by the open and closed modules (the libraries, nvidia-utils)."""

    branch: int
    server: bool
    open: bool | None


def driver_package_of(name: str) -> DriverPackage | None:
    """``linux-modules-nvidia-580-open-7.0.0-44-generic`` -> ``DriverPackage(580, False, True)``;
    ``libnvidia-compute-595`` -> ``DriverPackage(595, False, None)``; None for a package of no
    branch (``nvidia-prime``, ``libnvidia-egl-wayland1``, ``nvidia-open`` of NVIDIA's
    repository)."""
    m = _DRIVER_PACKAGE.match(name)
    if not m:
        return None
    per_variant = m.group("base") in _MODULE_BASES
    return DriverPackage(
        branch=int(m.group("branch")),
        server=bool(m.group("server")),
        open=bool(m.group("open")) if per_variant else None,
    )


def installed_driver(packages: Iterable[str]) -> DriverPackage | None:
    """The driver of the first ``nvidia-driver-<branch>...`` meta-package among ``packages``
    (sorted), or None (none installed, or NVIDIA's repository's ``nvidia-open``)."""
    for name in sorted(packages):
        if name.startswith("nvidia-driver-") and (pkg := driver_package_of(name)):
            return pkg
    return None


def _driver(s: Mapping[str, Any]) -> DriverPackage | None:
    return installed_driver(s.get("packages") or [])


#: The kernel of NVIDIA/open-gpu-kernel-modules#1211's panic (Ubuntu 26.04's 7.0.0-22).
PANIC_KERNEL = re.compile(r"^7\.0\.0-22-")


def _match_open_580_nvlink_panic(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    d = _driver(s)
    kernel = s.get("kernel") or ""
    if d is None or d.branch != 580 or not d.open or (s.get("gpu_count") or 0) < 2:
        return None
    if not PANIC_KERNEL.match(kernel):
        return None
    return {"kernel": kernel, "evidence": (f"kernel {kernel}", *sorted(s.get("packages") or []))}


def _match_595_custom_all_reduce(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    d = _driver(s)
    tp = s.get("tensor_parallel") or 1
    if d is None or d.branch != 595 or tp < 2 or s.get("custom_all_reduce") is False:
        return None
    state = "on" if s.get("custom_all_reduce") else "on unless the unit disables it (not read)"
    return {"tp": tp, "car_state": state}


_DRIVER_BRANCHES: list[Signature] = [
    Signature(
        id="driver-580-open-nvlink-panic",
        source="driver-state",
        severity=WARN,
        what="driver 580 with open kernel modules, NVLink GPUs and kernel {kernel}: a known "
        "kernel panic at module load",
        why="NVIDIA/open-gpu-kernel-modules#1211 (2026-06-20): Ubuntu 26.04, kernel 7.0.0-22, "
        "nvidia-open 580.159.03, NVLink, vLLM: the host panics when the module loads and reboots "
        "idle, with no Xid; the closed modules of nvidia-driver-580-server did not",
        fix='set nvidia_driver_variant = "server" (nvidia-driver-580-server, closed modules) and '
        "converge: the run switches the driver in one apt transaction and reboots to load it; "
        "or boot a kernel other than 7.0.0-22",
        matcher=_match_open_580_nvlink_panic,
        reference="NVIDIA/open-gpu-kernel-modules#1211",
    ),
    Signature(
        id="driver-595-custom-all-reduce",
        source="driver-state",
        severity=OK,
        what="driver 595 with tensor parallel {tp} and vLLM's custom all-reduce {car_state}: "
        "known issue to watch",
        why="a 2x A100 report after a driver update to 595 saw speculative decoding accept 0 % "
        "of its drafts (answers of '!!!!') with custom all-reduce on and 100 % without "
        "(noonghunna/club-3090#922, 2026-08-21); the metrics section says when acceptance falls",
        fix="if acceptance drops to 0 %: `sudo rigup-bench --arms nvlink-off --rows decode-1` "
        "runs with --disable-custom-all-reduce and prints the acceptance; if it comes back, keep "
        'vllm_extra_args = ["--disable-custom-all-reduce"], or go back to nvidia_driver_branch '
        "= 580",
        matcher=_match_595_custom_all_reduce,
        reference="noonghunna/club-3090#922",
    ),
]
