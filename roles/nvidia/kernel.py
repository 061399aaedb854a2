"""Ubuntu kernel flavours: which prebuilt NVIDIA module package fits the running kernel, and
which kernel meta-packages move with it. Pure.

Canonical publishes the signed NVIDIA modules per kernel meta-package, named after the image
meta-package: ``linux-image-generic-hwe-26.04`` -> ``linux-modules-nvidia-580-open-generic-hwe-26.04``
(ubuntu-drivers-common: get_linux_modules_metapackage takes the flavour from the installed
``linux-image-*`` meta-package). So the flavour is read from the installed meta-package that
depends on the running kernel's image, never guessed from ``uname -r``: an Ubuntu Desktop runs
the HWE kernel (``linux-generic-hwe-26.04``) whose ``uname -r`` ends in ``-generic`` too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from roles.nvidia.branches import modules_metapackage

_UBUNTU_KERNEL = re.compile(r"^\d+\.\d+\.\d+-\d+-([a-z][a-z0-9-]*)$")
_VERSIONED = re.compile(r"^\d+\.\d+\.\d+-\d+-([a-z][a-z0-9-]*)$")


def uname_flavour(kernel: str) -> str | None:
    """The flavour tail of a ``uname -r`` (``7.0.0-44-generic`` -> ``generic``,
    ``7.0.0-44-generic-64k`` -> ``generic-64k``). None for a kernel that is not shaped like
    Ubuntu's ``<version>-<abi>-<flavour>`` (a custom or foreign kernel: no prebuilt modules)."""
    m = _UBUNTU_KERNEL.match(kernel)
    return m.group(1) if m else None


@dataclass(frozen=True)
class KernelFlavour:
    """The installed kernel meta-package family that tracks the running kernel.

    ``name``: the image meta-package without ``linux-image-`` (``generic-hwe-26.04``);
    ``metapackages``: the installed ones of ``linux-<name>``, ``linux-image-<name>``,
    ``linux-headers-<name>`` (held with the driver on the Ubuntu path).
    """

    name: str
    metapackages: tuple[str, ...]

    def modules_package(self, branch: int, variant: str = "open") -> str:
        """``linux-modules-nvidia-<branch><variant suffix>-<name>``
        (:func:`roles.nvidia.branches.modules_metapackage`): Canonical's signed prebuilt modules
        for this flavour, following its kernels."""
        return modules_metapackage(branch, variant, self.name)


def _depends(field: str) -> list[str]:
    """Package names in a Depends field (``a (>= 1), b | c`` -> ``[a, b, c]``)."""
    return [alt.split()[0] for part in field.split(",") for alt in part.split("|") if alt.split()]


def _image_metas(packages: Mapping[str, str]) -> dict[str, list[str]]:
    """Installed image meta-packages (``linux-image-<flavour>``, not a versioned image) by
    flavour, with the versioned kernels each depends on."""
    metas: dict[str, list[str]] = {}
    for name, depends in packages.items():
        if not name.startswith("linux-image-"):
            continue
        flavour = name[len("linux-image-") :]
        if flavour[:1].isdigit() or flavour.startswith(("unsigned-", "uc-")):
            continue
        kernels = [
            dep.removeprefix("linux-image-unsigned-").removeprefix("linux-image-")
            for dep in _depends(depends)
            if dep.startswith("linux-image-")
        ]
        kernels = [k for k in kernels if _VERSIONED.match(k)]
        if kernels:
            metas[flavour] = kernels
    return metas


def kernel_flavour(kernel: str, packages: Mapping[str, str]) -> KernelFlavour | None:
    """The flavour of the running ``kernel`` from the installed kernel packages (``{name:
    Depends}``, the KernelPackages fact): the image meta-package that depends on the running
    kernel's image, or, after an upgrade not yet booted, the one whose kernel has the same
    flavour tail. When several qualify (``linux-generic`` and ``linux-generic-hwe-26.04`` both
    installed), the one whose top meta-package ``linux-<flavour>`` is installed wins, then not
    ``virtual``, then an HWE one (it is where the kernel moves). None when no installed meta-package tracks it."""
    metas = _image_metas(packages)
    tail = uname_flavour(kernel)
    exact = [f for f, kernels in metas.items() if kernel in kernels]
    same_tail = [
        f for f, kernels in metas.items() if tail and any(uname_flavour(k) == tail for k in kernels)
    ]
    return _best(exact or same_tail, packages)


def _kernel_order(kernel: str) -> tuple[int, ...]:
    """``7.0.0-1010-oem`` -> ``(7, 0, 0, 1010)``: the order GRUB's default follows (the
    highest version first; ``linux-version sort``)."""
    return tuple(int(n) for n in re.findall(r"\d+", kernel.rsplit("-", 1)[0]))


def installed_flavour(packages: Mapping[str, str]) -> KernelFlavour | None:
    """The flavour of the installed kernel meta-package that the host boots next, whatever
    kernel runs now, for a driver installed to be loaded then (``nvidia_driver_next_boot``: a
    container runs its host's kernel, never the one its linux-generic installs): the one whose
    kernel is the newest (GRUB boots the highest version by default: ``7.0.0-1010-oem`` before
    ``7.0.0-44-generic``), then the same choice as :func:`kernel_flavour`. ``packages`` as for
    :func:`kernel_flavour`. None when no image meta-package is installed."""
    metas = _image_metas(packages)
    if not metas:
        return None
    newest = {f: max(_kernel_order(k) for k in kernels) for f, kernels in metas.items()}
    top = max(newest.values())
    return _best([f for f, order in newest.items() if order == top], packages)


def _best(candidates: list[str], packages: Mapping[str, str]) -> KernelFlavour | None:
    """The flavour among ``candidates`` whose top meta-package ``linux-<flavour>`` is installed,
    then not ``virtual``, then HWE (where the kernel moves); with its installed meta-packages."""
    if not candidates:
        return None
    best = max(
        candidates,
        key=lambda f: (
            f"linux-{f}" in packages,
            not f.startswith("virtual"),  # linux-image-virtual also points at -generic kernels
            "-hwe-" in f,
            len(f),
            f,
        ),
    )
    names = (f"linux-{best}", f"linux-image-{best}", f"linux-headers-{best}")
    return KernelFlavour(best, tuple(n for n in names if n in packages))
