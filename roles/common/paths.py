"""rigup's directory layout on a host, shared by every role (each role derives its own paths
from it: roles/<role>/paths.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

#: where rigup links the commands a user runs (rigup-explain, rigup-doctor ...) so that they are
#: on PATH (Ubuntu's default PATH holds it; /usr/local is the local administrator's, not dpkg's)
LINK_DIR = "/usr/local/bin"


@dataclass(frozen=True)
class Layout:
    """Absolute paths every role builds on. Build with :meth:`from_data`.

    + prefix: software rigup builds (``rigup_prefix``: uv, venvs, on-target scripts)
    + etc: rendered configuration (``rigup_etc_dir``); state: homes and records
      (``rigup_state_dir``); tmp: build temp files off the tmpfs /tmp (``rigup_tmp_dir``)
    + uv_cache: uv's wheel cache; uv_venv / uv: the pinned uv and its venv
    + checks: stamps of passed on-host checks (``<state>/checks``)
    + bin, lib: rigup's commands shared by every service (rigup-start, rigup-explain,
      wait-ready) and the package they import (``<lib>/rigup``, roles/common/libraries.py)
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
class ToolPaths:
    """Where a component's tree lives: ``<prefix>/<name>`` with its on-host scripts ``bin`` and
    modules ``lib``, and its configuration ``<etc>/<name>``. Subclasses set ``COMPONENT`` (the
    name) and add their own fields through :meth:`extra`; build with :meth:`from_data`."""

    COMPONENT: ClassVar[str] = ""

    root: str
    bin: str
    lib: str
    etc: str

    @classmethod
    def fields(cls, data: Any, name: str) -> dict[str, str]:
        """This class's own fields for component ``name`` (``vllm``, ``model``, ...) as keyword
        arguments."""
        layout = Layout.from_data(data)
        root = f"{layout.prefix}/{name}"
        return {
            "root": root,
            "bin": f"{root}/bin",
            "lib": f"{root}/lib",
            "etc": f"{layout.etc}/{name}",
        }

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        """A subclass's fields beyond :meth:`fields`, derived from them (``base``) and ``data``."""
        return {}

    @classmethod
    def from_data(cls, data: Any):
        """The paths of ``cls.COMPONENT`` on a host with settings ``data`` (``host.data`` or a
        dict)."""
        base = cls.fields(data, cls.COMPONENT)
        return cls(**base, **cls.extra(base, data))


@dataclass(frozen=True)
class ComponentPaths(ToolPaths):
    """A component with its own venv: :class:`ToolPaths` plus ``<root>/venv``, its ``python``
    and the ``lock`` it is built from (``<root>/requirements.lock``)."""

    venv: str
    python: str
    lock: str

    @classmethod
    def fields(cls, data: Any, name: str) -> dict[str, str]:
        base = ToolPaths.fields(data, name)
        root = base["root"]
        return {
            **base,
            "venv": f"{root}/venv",
            "python": f"{root}/venv/bin/python",
            "lock": f"{root}/requirements.lock",
        }


@dataclass(frozen=True)
class ServicePaths(ComponentPaths):
    """A component that runs as ``<name>.service``: :class:`ComponentPaths` plus its env file
    ``<etc>/<name>/<name>.env``, the service user's home ``<state>/<name>``, the unit file, and
    the root-only ``secrets_dir`` (``<etc>/<name>/secrets``) with the environment file of the
    server's API key, ``api_key_file``, for a service that takes one."""

    env_file: str
    home: str
    unit: str
    secrets_dir: str
    api_key_file: str

    @classmethod
    def fields(cls, data: Any, name: str) -> dict[str, str]:
        base = ComponentPaths.fields(data, name)
        secrets = f"{base['etc']}/secrets"
        return {
            **base,
            "env_file": f"{base['etc']}/{name}.env",
            "home": f"{Layout.from_data(data).state}/{name}",
            "unit": f"/etc/systemd/system/{name}.service",
            "secrets_dir": secrets,
            "api_key_file": f"{secrets}/api-key.env",
        }
