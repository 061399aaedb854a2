"""A CPython of an exact version for a service venv, installed by uv's managed Python.

Why: voxcpm 2.0.3 supports Python 3.10-3.12 and Ubuntu 26.04 ships 3.14 (docs/voxcpm.md). uv
installs python-build-standalone builds (relocatable CPython, the build and its sha256 pinned by
the uv release), from GitHub by default, from ``UV_PYTHON_INSTALL_MIRROR`` behind a firewall, or
from a JSON list of one's own builds (``UV_PYTHON_DOWNLOADS_JSON_URL``; the lab's).
"""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, operation

from roles.common.facts import uv_env


class PythonVersion(FactBase):
    """``"3.12.16"``: the version of the interpreter at ``path``, or None when it does not run."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"test -x {q} && {q} -c 'import platform; print(platform.python_version())' "
            "2>/dev/null || true"
        )

    def process(self, output: list[str]) -> str | None:
        lines = [line.strip() for line in output if line.strip()]
        return lines[-1] if lines and lines[-1][:1].isdigit() else None


def python_install_env(install_dir: str, mirror: str = "", downloads_json: str = "") -> str:
    """Environment for ``uv python install``: where builds go, explicit installs allowed (rigup's
    uv_env forbids implicit downloads), and the optional mirror / own download list."""
    env = f"UV_PYTHON_INSTALL_DIR={shlex.quote(install_dir)} UV_PYTHON_DOWNLOADS=manual"
    if mirror:
        env += f" UV_PYTHON_INSTALL_MIRROR={shlex.quote(mirror)}"
    if downloads_json:
        env += f" UV_PYTHON_DOWNLOADS_JSON_URL={shlex.quote(downloads_json)}"
    return env


@operation()
def managed_python_installed(
    version: str,
    interpreter: str,
    install_dir: str,
    uv: str,
    cache_dir: str,
    tmp_dir: str,
    mirror: str = "",
    downloads_json: str = "",
):
    """Install CPython ``version`` with ``uv python install`` unless ``interpreter`` runs it.

    + version: exact CPython version, e.g. ``3.12.16``
    + interpreter: path uv gives that build (``<install_dir>/cpython-<v>-linux-<arch>-gnu/bin/
      python3.X``); checked after the install, so a different layout fails the operation here
    + install_dir: UV_PYTHON_INSTALL_DIR; uv / cache_dir / tmp_dir: as for every uv command
    + mirror: UV_PYTHON_INSTALL_MIRROR ("" = uv's default source)
    + downloads_json: UV_PYTHON_DOWNLOADS_JSON_URL ("" = uv's built-in list)

    ``--no-bin``: no ``python3.X`` link in root's ~/.local/bin; the venv names the interpreter.
    """
    if host.get_fact(PythonVersion, path=interpreter) == version:
        host.noop(f"CPython {version} is installed at {interpreter}")
        return
    env = f"{uv_env(cache_dir, tmp_dir)} {python_install_env(install_dir, mirror, downloads_json)}"
    yield f"mkdir -p {shlex.quote(install_dir)} {shlex.quote(tmp_dir)} {shlex.quote(cache_dir)}"
    yield f"{env} {shlex.quote(uv)} python install --no-bin {shlex.quote(version)}"
    yield (
        f"test -x {shlex.quote(interpreter)} || {{ echo 'uv installed CPython {version} "
        f"elsewhere than {interpreter}' >&2; exit 1; }}"
    )
