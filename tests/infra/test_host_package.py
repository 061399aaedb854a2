"""The rig's own code on the host: the package rigup (the repository's rigup/) in each tool tree's
``lib`` (``<prefix>/lib``, ``<prefix>/nvidia/lib``, ``<prefix>/doctor/lib``), alone there, the
same files as the repository's, root's, and importable by the host's python3."""

from __future__ import annotations

import hashlib
import shlex

import pytest

from roles.common.libraries import PACKAGE, PACKAGE_NAME
from roles.common.paths import Layout
from roles.doctor.paths import DoctorPaths
from roles.nvidia.paths import NvidiaPaths

TREES = {
    "common": lambda data: Layout.from_data(data).lib,
    "nvidia": lambda data: NvidiaPaths.from_data(data).lib,
    "doctor": lambda data: DoctorPaths.from_data(data).lib,
}


def _repository_files() -> dict[str, str]:
    """``{"./diagnosis/core.py": sha256}`` of the package's modules in the repository."""
    return {
        f"./{p.relative_to(PACKAGE)}": hashlib.sha256(p.read_bytes()).hexdigest()
        for p in PACKAGE.rglob("*.py")
    }


@pytest.mark.parametrize("tree", sorted(TREES))
def test_lib_holds_the_package_alone(host, data, tree):
    lib = TREES[tree](data)
    out = host.run(f"ls -A {shlex.quote(lib)}")
    assert out.rc == 0, f"{lib} is missing: {out.stderr}"
    assert out.stdout.split() == [PACKAGE_NAME], f"{lib} holds {out.stdout.split()}"


@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_package_is_the_repositorys(host, data, tree):
    package = f"{TREES[tree](data)}/{PACKAGE_NAME}"
    q = shlex.quote(package)
    out = host.run(f"cd {q} && find . -name '*.py' -type f -exec sha256sum {{}} +")
    assert out.rc == 0, f"{package}: {out.stderr}"
    held = {path: digest for digest, path in (line.split() for line in out.stdout.splitlines())}
    want = _repository_files()
    assert held == want, (
        f"{package} differs from the repository's rigup/: missing {sorted(set(want) - set(held))}, "
        f"extra {sorted(set(held) - set(want))}, changed "
        f"{sorted(p for p in set(held) & set(want) if held[p] != want[p])} (run the deploy)"
    )
    owners = host.run(f"find {q} ! -user root -o ! -group root -o -perm /022")
    assert owners.stdout == "", f"not root's only to change: {owners.stdout.split()}"


@pytest.mark.parametrize("tree", sorted(TREES))
def test_the_host_python_imports_it(host, data, tree):
    lib = TREES[tree](data)
    code = (
        f"import sys; sys.path.insert(0, {lib!r}); "
        "from rigup import bench, diagnosis, doctor, metrics, nvidia, report, units; "
        "print(diagnosis.__file__)"
    )
    out = host.run(f"cd / && /usr/bin/python3 -I -c {shlex.quote(code)}")
    assert out.rc == 0, f"rigup does not import from {lib}: {out.stderr[-500:]}"
    assert out.stdout.strip() == f"{lib}/{PACKAGE_NAME}/diagnosis/__init__.py"
