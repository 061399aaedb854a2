"""Rules for the VoxCPM2 role's settings (inventory/group_data/all.py, "VoxCPM2")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from roles.common.checks import (
    ENV_NAME,
    SAFE_NAME,
    UNIX_NAME,
    Check,
    boolean,
    host_address,
    integer,
    location_or_empty,
    matches,
    number,
)
from roles.common.locks import version_check
from roles.model.settings import manifest_ref

LOCK = Path(__file__).resolve().parents[2] / "files" / "voxcpm" / "requirements.lock"

RULES: dict[str, Check] = {
    "voxcpm_install": boolean,
    "voxcpm_python_version": matches(
        re.compile(r"^3\.(10|11|12)\.\d+$"),
        "an exact CPython 3.10.x-3.12.x release such as 3.12.16 (voxcpm 2.0.3 supports 3.10-3.12)",
    ),
    "voxcpm_python_install_mirror": location_or_empty(paths=False),
    "voxcpm_python_downloads_json": location_or_empty(paths=True),
    "voxcpm_version": version_check(LOCK, "voxcpm", "voxcpm_version"),
    "voxcpm_user": matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"),
    "voxcpm_host": host_address,
    "voxcpm_api_key_env": matches(ENV_NAME, "an environment variable name such as VOXCPM_API_KEY"),
    "voxcpm_port": integer(1, 65535),
    "voxcpm_served_model_name": matches(SAFE_NAME, "a name of letters, digits, '.', '_' and '-'"),
    "voxcpm_model_manifest": manifest_ref,
    "voxcpm_gpu_index": integer(0, 15),
    "voxcpm_vram_gib": number(0.0, 1024.0, lo_open=True),
    "voxcpm_cfg_value": number(0.0, 20.0, lo_open=True),
    "voxcpm_inference_timesteps": integer(1, 1000),
    "voxcpm_torch_compile": boolean,
    "voxcpm_start_timeout_s": integer(30, 24 * 3600),
    "voxcpm_test_double_synthesizer": boolean,
}

OPTIONAL: tuple[str, ...] = ()


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several VoxCPM2 keys (none yet)."""
    return []
