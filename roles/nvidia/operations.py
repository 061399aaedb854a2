"""The NVIDIA layer's own operations, evaluated when they run (after what earlier operations of
the same run installed)."""

from __future__ import annotations

import shlex

from pyinfra import host, logger
from pyinfra.api import StringCommand, operation
from pyinfra.api.exceptions import OperationError

from roles.nvidia.branches import driver_metapackage, other_driver_packages
from roles.nvidia.cuda_headers import (
    MATH_FUNCTIONS_H,
    HeaderError,
    needs_noexcept,
    noexcept_edits,
    sed_command,
)
from roles.nvidia.facts import (
    CudaMathHeader,
    CudaToolkitHome,
    Glibc,
    KernelPackages,
    NvidiaPackages,
)


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


@operation()
def cuda_math_header_patched(home: str):
    """Give the rsqrt/rsqrtf declarations of ``<home>/include/crt/math_functions.h`` the
    ``noexcept(true)`` that glibc >= 2.42 declares them with, so nvcc 13.0 compiles ``.cu`` files
    on such a host (roles/nvidia/cuda_headers.py says why). Each changed line ends with
    cuda_headers.MARK.

    + home: CUDA_HOME of the pinned toolkit (``<prefix>/cuda-13.0/home``)

    Evaluated when it runs, after the toolkit's install, so a toolkit installed again (its venv
    rebuilt) is edited again on the same run; a no-op when the host's glibc is older than 2.42 or
    not glibc (the file is left as it is), and when every declaration has an exception
    specification already. Raises ``OperationError`` when the header is absent at execution time,
    or when it is not the layout this edit knows (cuda_headers.HeaderError).
    """
    glibc = host.get_fact(Glibc)
    if not needs_noexcept(glibc):
        libc = f"glibc {'.'.join(map(str, glibc))}" if glibc else "a libc other than glibc"
        host.noop(f"{MATH_FUNCTIONS_H} left as it is ({libc} declares no rsqrt of its own)")
        return
    path = f"{home}/{MATH_FUNCTIONS_H}"
    header = host.get_fact(CudaMathHeader, path=path) or {}
    if not header.get("exists"):
        if host.state.is_executing:
            raise OperationError(f"{path} does not exist: the CUDA toolkit is not installed")
        # Planning before the toolkit is installed: the edit is computed when it runs.
        yield StringCommand("true", "#", f"{path}: rsqrt/rsqrtf get noexcept(true) once installed")
        return
    declarations = {int(n): line for n, line in header["declarations"].items()}
    try:
        edits = noexcept_edits(declarations)
    except HeaderError as exc:
        raise OperationError(f"{path}: {exc}") from exc
    if not edits:
        host.noop(f"{path}: rsqrt/rsqrtf already declared noexcept")
        return
    try:
        yield sed_command(path, edits)
    except ValueError as exc:
        raise OperationError(str(exc)) from exc


@operation()
def driver_held(prefixes: tuple[str, ...], extra: tuple[str, ...] = ()):
    """``apt-mark hold`` every installed package whose name starts with one of ``prefixes``, plus
    the installed ones of ``extra`` (the kernel meta-packages of the running kernel's flavour).
    Evaluated when it runs (after the install); a no-op when all are held."""
    packages = host.get_fact(NvidiaPackages) or {}
    installed = set(packages.get("installed", {}))
    kernel = set((host.get_fact(KernelPackages) or {}).get("packages") or {})
    want = sorted(n for n in installed if n.startswith(tuple(prefixes))) + sorted(
        n for n in extra if n in kernel
    )
    missing = [n for n in want if n not in set(packages.get("held", []))]
    if not missing:
        host.noop("driver packages already held")
        return
    yield "apt-mark hold " + " ".join(shlex.quote(n) for n in missing)


def refuse(message: str) -> None:
    """For ``python.call``: stop the run at this point with ``message``."""
    raise OperationError(message)


def report(message: str) -> None:
    """For ``python.call``: print ``message`` as a warning when the operation runs."""
    logger.warning(message)


@operation()
def driver_switched(wanted: list[str], branch: int, variant: str):
    """Switch the Ubuntu path's driver to ``branch``/``variant`` where another one is installed:
    release the holds of the other driver's packages
    (:func:`roles.nvidia.branches.other_driver_packages`) and, in ONE apt transaction, install
    ``wanted`` and remove them (``apt-get install <wanted> <other>-``), so the host never has two
    drivers' libraries nor none. Removed, not purged: configuration files stay. Evaluated when it
    runs; a no-op where no other driver's package is installed. The holds of what is installed
    then follow (:func:`driver_held`)."""
    installed = (host.get_fact(NvidiaPackages) or {}).get("installed", {})
    others = other_driver_packages(installed, branch, variant)
    if not others:
        host.noop(f"no other driver than {driver_metapackage(branch, variant)} installed")
        return
    quoted = " ".join(shlex.quote(n) for n in others)
    yield f"apt-mark unhold {quoted}"
    yield (
        "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "
        + " ".join(shlex.quote(n) for n in [*wanted, *(f"{o}-" for o in others)])
    )
