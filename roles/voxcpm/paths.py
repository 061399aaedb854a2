"""Where the VoxCPM2 role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.paths import Layout

UNIT = "voxcpm.service"


def interpreter_dir_name(version: str, arch: str) -> str:
    """Directory uv gives a managed CPython: ``cpython-3.12.16-linux-x86_64-gnu``.

    ``arch`` is ``uname -m`` (x86_64, aarch64). glibc only: Ubuntu and Debian, rigup's targets.
    """
    return f"cpython-{version}-linux-{arch}-gnu"


@dataclass(frozen=True)
class VoxcpmPaths:
    """Absolute paths of the voxcpm role on a host. Build with :meth:`from_data`."""

    python_install_dir: str  # UV_PYTHON_INSTALL_DIR: uv-managed CPython builds
    root: str
    venv: str
    python: str  # the venv's interpreter
    lock: str
    server: str
    etc: str
    env_file: str
    home: str
    voices: str
    unit: str

    @classmethod
    def from_data(cls, data: Any) -> VoxcpmPaths:
        layout = Layout.from_data(data)
        etc = f"{layout.etc}/voxcpm"
        home = f"{layout.state}/voxcpm"
        root = f"{layout.prefix}/voxcpm"
        return cls(
            python_install_dir=f"{layout.prefix}/python",
            root=root,
            venv=f"{root}/venv",
            python=f"{root}/venv/bin/python",
            lock=f"{root}/requirements.lock",
            server=f"{root}/bin/voxcpm_server.py",
            etc=etc,
            env_file=f"{etc}/voxcpm.env",
            home=home,
            voices=f"{home}/voices",
            unit=f"/etc/systemd/system/{UNIT}",
        )

    def interpreter(self, version: str, arch: str) -> str:
        """The uv-managed CPython the venv is built from."""
        minor = ".".join(version.split(".")[:2])
        return f"{self.python_install_dir}/{interpreter_dir_name(version, arch)}/bin/python{minor}"
