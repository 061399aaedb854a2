"""Rules for the base role's settings (inventory/group_data/all.py, "Layout" and "Base")."""

from __future__ import annotations

from collections.abc import Mapping
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
from roles.common.setting import Setting, optional, rules

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


SETTINGS: tuple[Setting, ...] = (
    Setting("rigup_prefix", owned_dir),
    Setting("rigup_etc_dir", owned_dir),
    Setting("rigup_state_dir", owned_dir),
    Setting("rigup_tmp_dir", owned_dir),
    Setting("uv_cache_dir", owned_dir),
    Setting("base_apt_packages", package_list),
    Setting("uv_version", version_check(UV_LOCK, "uv", "uv_version")),
    Setting("uv_index_url", url_or_empty),
    Setting("uv_extra_index_urls", url_list),
    Setting("uv_find_links", wheel_places),
    Setting("uv_offline", boolean),
)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several base keys (none yet)."""
    return []
