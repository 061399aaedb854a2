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

    def modules_package(self, branch: int | str) -> str:
        """``linux-modules-nvidia-<branch>-open-<name>``: Canonical's signed prebuilt modules
        for this flavour, following its kernels."""
        return f"linux-modules-nvidia-{branch}-open-{self.name}"


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


def installed_flavour(packages: Mapping[str, str]) -> KernelFlavour | None:
    """The flavour of the installed kernel meta-package, whatever kernel runs now: the kernel a
    host boots next, for a driver installed to be loaded then (``nvidia_driver_next_boot``: a
    container runs its host's kernel, never the one its linux-generic installs). ``packages`` as
    for :func:`kernel_flavour`, and the same choice among several. None when no image
    meta-package is installed."""
    return _best(list(_image_metas(packages)), packages)


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
