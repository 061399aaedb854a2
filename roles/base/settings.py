"""Rules for the base role's settings (inventory/group_data/all.py, "Layout" and "Base")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.common.checks import VERSION, Check, matches, owned_dir, package_list

RULES: dict[str, Check] = {
    "rigup_prefix": owned_dir,
    "rigup_etc_dir": owned_dir,
    "rigup_state_dir": owned_dir,
    "rigup_tmp_dir": owned_dir,
    "uv_cache_dir": owned_dir,
    "base_apt_packages": package_list,
    "uv_version": matches(VERSION, "a release number such as 0.13.9"),
}

OPTIONAL: tuple[str, ...] = ()


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several base keys (none yet)."""
    return []
