"""Rules for the base role's settings (inventory/group_data/all.py, "Layout" and "Base")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.common.checks import (
    Check,
    boolean,
    owned_dir,
    package_list,
    str_list,
    url_or_empty,
)
from roles.common.locks import version_check
from roles.common.setting import Setting, TypedSettings, declared, optional, rules, setting

UV_LOCK = Path(__file__).resolve().parents[2] / "files" / "base" / "uv.lock"


def url_list(value: Any) -> str | None:
    """A list of http(s) URLs (package indexes)."""
    problem = str_list(value)
    if problem:
        return problem
    bad = [v for v in value if not v or url_or_empty(v)]
    return f"must be http(s) URLs such as https://pypi.org/simple, got {bad!r}" if bad else None


def wheel_places(value: Any) -> str | None:
    """A list of wheel directories: absolute paths on the host, or http(s)/file URLs."""
    problem = str_list(value)
    if problem:
        return problem
    bad = [
        v
        for v in value
        if not (v.startswith("/") or v.startswith("file:///") or url_or_empty(v) is None)
        or v in ("", "/")
        or any(c in v for c in " ,\n")
    ]
    return (
        f"must be absolute paths or URLs of wheel directories (no spaces or commas), got {bad!r}"
        if bad
        else None
    )


@dataclass(frozen=True)
class BaseSettings(TypedSettings):
    """The base role's settings, each declared once: name, the type code reads, check. Defaults,
    meaning and sources: inventory/group_data/all.py ("Layout", "Base packages and tools",
    "Where downloads come from"). ``BaseSettings.of(host.data)`` reads them into typed
    attributes."""

    rigup_prefix: str = setting(owned_dir)
    rigup_etc_dir: str = setting(owned_dir)
    rigup_state_dir: str = setting(owned_dir)
    rigup_tmp_dir: str = setting(owned_dir)
    uv_cache_dir: str = setting(owned_dir)
    base_apt_packages: list[str] = setting(package_list)
    uv_version: str = setting(version_check(UV_LOCK, "uv", "uv_version"))
    uv_index_url: str = setting(url_or_empty)
    uv_extra_index_urls: list[str] = setting(url_list)
    uv_find_links: list[str] = setting(wheel_places)
    uv_offline: bool = setting(boolean)


SETTINGS: tuple[Setting, ...] = declared(BaseSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several base keys (none yet)."""
    return []
