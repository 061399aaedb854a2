"""Where the VoxCPM2 role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roles.common.paths import Layout, ServicePaths

UNIT = "voxcpm.service"


def interpreter_dir_name(version: str, arch: str) -> str:
    """Directory uv gives a managed CPython: ``cpython-3.12.16-linux-x86_64-gnu``.

    ``arch`` is ``uname -m`` (x86_64, aarch64). glibc only: Ubuntu and Debian, rigup's targets.
    """
    return f"cpython-{version}-linux-{arch}-gnu"


@dataclass(frozen=True)
class VoxcpmPaths(ServicePaths):
    """:class:`ServicePaths` of ``voxcpm`` plus uv's managed CPython builds
    (``python_install_dir``, UV_PYTHON_INSTALL_DIR), the ``server`` script and the ``voices``
    directory (reference recordings ``<voice>.wav``)."""

    COMPONENT: ClassVar[str] = "voxcpm"

    python_install_dir: str
    server: str
    voices: str

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        return {
            "python_install_dir": f"{Layout.from_data(data).prefix}/python",
            "server": f"{base['bin']}/voxcpm_server.py",
            "voices": f"{base['home']}/voices",
        }

    def interpreter(self, version: str, arch: str) -> str:
        """The uv-managed CPython the venv is built from."""
        minor = ".".join(version.split(".")[:2])
        return f"{self.python_install_dir}/{interpreter_dir_name(version, arch)}/bin/python{minor}"
