"""The package rigup (the rig's own code): standard library only, importable from a tool tree's
``lib`` alone as the deploy installs it, and the one name both sides import it by."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from roles.common.libraries import PACKAGE, PACKAGE_NAME

REPO = Path(__file__).resolve().parents[2]
MODULES = sorted(str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py"))
#: what the package's modules are imported as (rigup.doctor.core, ...)
DOTTED = [m.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for m in MODULES]


def _imports(module: str) -> set[str]:
    """The top-level names ``module`` (a path under the repository) imports, relative imports
    left out (they stay inside its package)."""
    names = set()
    for node in ast.walk(ast.parse((REPO / module).read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_the_package_is_the_repositorys_rigup():
    assert (PACKAGE, PACKAGE_NAME) == (REPO / "rigup", "rigup")
    assert "rigup/diagnosis/__init__.py" in MODULES and "rigup/report.py" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_it_needs_only_the_standard_library_and_itself(module):
    """The rig runs it with its own python3: no pyinfra, no roles/, no third-party package."""
    foreign = {n for n in _imports(module) if n not in sys.stdlib_module_names} - {
        "__future__",
        PACKAGE_NAME,
    }
    assert not foreign, f"{module} imports {sorted(foreign)}"


def test_every_module_imports_from_a_lib_directory_alone(tmp_path):
    """Laid out as on a rig (``<lib>/rigup``, a copy), each module imports with an interpreter
    that sees neither the repository nor any site-packages (``-I -S``), and comes from the copy."""
    import shutil

    lib = tmp_path / "lib"
    shutil.copytree(PACKAGE, lib / PACKAGE_NAME, ignore=shutil.ignore_patterns("__pycache__"))
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); "
        "print('\\n'.join(importlib.import_module(m).__file__ for m in sys.argv[2:]))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code, str(lib), *DOTTED],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(lib / m) for m in MODULES]
