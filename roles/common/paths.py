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
    """

    prefix: str
    etc: str
    state: str
    tmp: str
    uv_cache: str
    uv_venv: str
    uv: str
    checks: str

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
        )
