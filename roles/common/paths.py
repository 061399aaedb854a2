"""rigup's directory layout on a host, shared by every role (each role derives its own paths
from it: roles/<role>/paths.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Layout:
    """Absolute paths every role builds on. Build with :meth:`from_data`.

    + prefix: software rigup builds (``rigup_prefix``: uv, venvs, on-target scripts)
    + etc: rendered configuration (``rigup_etc_dir``); state: homes and records
      (``rigup_state_dir``); tmp: build temp files off the tmpfs /tmp (``rigup_tmp_dir``)
    + uv_cache: uv's wheel cache; uv_venv / uv: the pinned uv and its venv
    + checks: stamps of passed on-host checks (``<state>/checks``)
    + bin, lib: rigup's commands shared by every service (rigup-start, rigup-explain,
      wait-ready) and the standard-library modules they import (rigup_diagnosis, rigup_units)
    """

    prefix: str
    etc: str
    state: str
    tmp: str
    uv_cache: str
    uv_venv: str
    uv: str
    checks: str
    bin: str
    lib: str

    @classmethod
    def from_data(cls, data: Any) -> Layout:
        """Derive the layout from the keys rigup_prefix / rigup_etc_dir / rigup_state_dir /
        rigup_tmp_dir / uv_cache_dir of ``data`` (``host.data`` or a dict)."""
        prefix = str(data.get("rigup_prefix")).rstrip("/")
        state = str(data.get("rigup_state_dir")).rstrip("/")
        return cls(
            prefix=prefix,
            etc=str(data.get("rigup_etc_dir")).rstrip("/"),
            state=state,
            tmp=str(data.get("rigup_tmp_dir")).rstrip("/"),
            uv_cache=str(data.get("uv_cache_dir")).rstrip("/"),
            uv_venv=f"{prefix}/uv",
            uv=f"{prefix}/uv/bin/uv",
            checks=f"{state}/checks",
            bin=f"{prefix}/bin",
            lib=f"{prefix}/lib",
        )


@dataclass(frozen=True)
class ComponentPaths:
    """Where a component with its own venv lives: ``<prefix>/<name>/{venv,bin,requirements.lock}``
    and its configuration in ``<etc>/<name>``. Build with :meth:`of`.

    + root, venv, python (the venv's), lock, bin (on-host scripts), etc
    """

    root: str
    venv: str
    python: str
    lock: str
    bin: str
    etc: str

    @staticmethod
    def fields(data: Any, name: str) -> dict[str, str]:
        """The fields for component ``name`` (``vllm``, ``model``, ...) as keyword arguments."""
        layout = Layout.from_data(data)
        root = f"{layout.prefix}/{name}"
        return {
            "root": root,
            "venv": f"{root}/venv",
            "python": f"{root}/venv/bin/python",
            "lock": f"{root}/requirements.lock",
            "bin": f"{root}/bin",
            "etc": f"{layout.etc}/{name}",
        }


@dataclass(frozen=True)
class ServicePaths(ComponentPaths):
    """A component that runs as ``<name>.service``: :class:`ComponentPaths` plus its env file
    ``<etc>/<name>/<name>.env``, the service user's home ``<state>/<name>`` and the unit file."""

    env_file: str
    home: str
    unit: str

    @staticmethod
    def fields(data: Any, name: str) -> dict[str, str]:
        base = ComponentPaths.fields(data, name)
        return {
            **base,
            "env_file": f"{base['etc']}/{name}.env",
            "home": f"{Layout.from_data(data).state}/{name}",
            "unit": f"/etc/systemd/system/{name}.service",
        }
