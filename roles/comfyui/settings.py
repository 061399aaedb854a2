"""Rules for the ComfyUI role's settings (inventory/group_data/all.py, "ComfyUI")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from roles.comfyui.release import TAG, ReleaseError, load_release
from roles.common.checks import (
    GIT_COMMIT,
    UNIX_NAME,
    Check,
    abs_path_or_empty,
    boolean,
    env_mapping,
    flag_clashes,
    git_source,
    host_address,
    integer,
    matches,
    number,
    owned_dir,
    python_interpreter,
    service_port,
    str_list,
)
from roles.common.setting import ServiceKeys, Setting, optional, rules
from roles.common.urls import is_loopback
from roles.model.settings import manifest_list

#: ComfyUI flags rigup sets from its own settings (roles/comfyui/flags.py; flag -> setting), so
#: not allowed in comfyui_extra_args under any spelling (ComfyUI's argparse takes abbreviations:
#: `--list` is `--listen`, which opens ComfyUI, without authentication, on every interface).
MANAGED: dict[str, str] = {
    "--listen": "comfyui_host",
    "--port": "comfyui_port",
    "--base-directory": "comfyui_base_dir",
    "--database-url": "comfyui_base_dir",
    "--cuda-device": "comfyui_gpu_index",
    "--reserve-vram": "comfyui_reserve_vram_gib",
    "--cpu": "comfyui_cpu",
}
#: ComfyUI flags refused on 24 GB cards: they keep every model in VRAM and defeat the
#: offloading FLUX.2 Dev and LTX-2.3 need there (comfy/cli_args.py, "vram_group" of the pinned
#: release; --high-vram is the common misspelling of --highvram and does not exist).
REFUSED_FLAGS = ("--highvram", "--gpu-only", "--high-vram")


def commit_or_empty(value: Any) -> str | None:
    """ "" (the release lock's commit) or a full 40-character commit id."""
    if value == "" or (isinstance(value, str) and GIT_COMMIT.match(value)):
        return None
    return (
        "must be empty (the release's locked commit) or a full 40-character git commit id, "
        f"got {value!r}"
    )


SETTINGS: tuple[Setting, ...] = (
    Setting("comfyui_install", boolean),
    Setting("comfyui_git_url", git_source),
    Setting("comfyui_release", matches(TAG, "a release tag of ComfyUI such as v0.8.0")),
    Setting("comfyui_commit", commit_or_empty),
    Setting("comfyui_lock_dir", abs_path_or_empty),
    Setting("comfyui_user", matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)")),
    Setting("comfyui_python", python_interpreter),
    Setting("comfyui_host", host_address),
    Setting("comfyui_allow_network_without_auth", boolean),
    Setting("comfyui_port", service_port),
    Setting("comfyui_base_dir", owned_dir),
    Setting("comfyui_cpu", boolean),
    Setting("comfyui_gpu_index", integer(0, 15)),
    Setting("comfyui_reserve_vram_gib", number(0.0, 1024.0)),
    Setting("comfyui_extra_args", str_list),
    Setting("comfyui_start_timeout_s", integer(10, 24 * 3600)),
    Setting("comfyui_env", env_mapping),
    Setting("comfyui_models", manifest_list),
)

RULES: dict[str, Check] = rules(SETTINGS)
#: The settings of comfyui.service's account, bind address, port and start timeout.
SERVICE_KEYS = ServiceKeys(
    user="comfyui_user",
    host="comfyui_host",
    port="comfyui_port",
    start_timeout_s="comfyui_start_timeout_s",
)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """comfyui_host beyond loopback only with comfyui_allow_network_without_auth (ComfyUI has no
    authentication); comfyui_extra_args may not set managed flags nor the VRAM-pinning ones; the
    release's lock, when there is one, must be usable."""
    problems = []
    try:
        load_release(values["comfyui_release"], values["comfyui_lock_dir"])
    except ReleaseError as exc:
        problems.append(f"comfyui_release: {' '.join(str(exc).split())}")
    host = values["comfyui_host"]
    if not is_loopback(host) and not values["comfyui_allow_network_without_auth"]:
        problems.append(
            f"comfyui_host: {host} is not loopback, and ComfyUI has no authentication: whoever "
            "reaches the port runs workflows and reads every input and output. Bind it to "
            "127.0.0.1 (reach it through an SSH tunnel or a reverse proxy with authentication), "
            "or set comfyui_allow_network_without_auth = True to expose it anyway"
        )
    flags = {a.split("=", 1)[0] for a in values["comfyui_extra_args"]}
    for clash in flag_clashes(values["comfyui_extra_args"], MANAGED, {}):
        problems.append(f"comfyui_extra_args: {clash}; set it there instead")
    refused = sorted(
        {f for f in flags for r in REFUSED_FLAGS if len(f) > 3 and r.startswith(f)}
        | (flags & set(REFUSED_FLAGS))
    )
    if refused:
        problems.append(
            f"comfyui_extra_args: {', '.join(refused)} keeps every model in VRAM and defeats "
            "ComfyUI's offloading, which FLUX.2 Dev and LTX-2.3 need on 24 GB cards; remove it"
        )
    return problems
