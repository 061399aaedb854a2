"""Rules for the ComfyUI role's settings (inventory/group_data/all.py, "ComfyUI")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from roles.comfyui.release import TAG, Release, ReleaseError, load_release
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
from roles.common.urls import is_loopback
from roles.model.manifest import ManifestError, load_manifest, release_version
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


RULES: dict[str, Check] = {
    "comfyui_install": boolean,
    "comfyui_git_url": git_source,
    "comfyui_release": matches(TAG, "a release tag of ComfyUI such as v0.8.0"),
    "comfyui_commit": commit_or_empty,
    "comfyui_lock_dir": abs_path_or_empty,
    "comfyui_user": matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"),
    "comfyui_python": python_interpreter,
    "comfyui_host": host_address,
    "comfyui_allow_network_without_auth": boolean,
    "comfyui_port": service_port,
    "comfyui_base_dir": owned_dir,
    "comfyui_cpu": boolean,
    "comfyui_gpu_index": integer(0, 15),
    "comfyui_reserve_vram_gib": number(0.0, 1024.0),
    "comfyui_extra_args": str_list,
    "comfyui_start_timeout_s": integer(10, 24 * 3600),
    "comfyui_env": env_mapping,
    "comfyui_models": manifest_list,
}

OPTIONAL: tuple[str, ...] = ()


def consistency(values: Mapping[str, Any]) -> list[str]:
    """comfyui_host beyond loopback only with comfyui_allow_network_without_auth (ComfyUI has no
    authentication); comfyui_extra_args may not set managed flags nor the VRAM-pinning ones; the
    release's lock, when there is one, must be usable; comfyui_commit needs that lock; every
    manifest of comfyui_models must load in the release (:func:`models_the_release_cannot_load`)."""
    problems = []
    try:
        release = load_release(values["comfyui_release"], values["comfyui_lock_dir"])
    except ReleaseError as exc:
        problems.append(f"comfyui_release: {' '.join(str(exc).split())}")
        release = None
    if release is not None and not release.locked and values["comfyui_commit"]:
        problems.append(
            f"comfyui_commit: {values['comfyui_commit']} replaces the commit of a release lock, "
            f"and comfyui_release {release.tag} has none yet ({release.lock_file}); converge once "
            "without comfyui_commit on a rig that reaches the git remote to lock the release"
        )
    if release is not None and values["comfyui_install"]:
        problems.extend(models_the_release_cannot_load(release, values["comfyui_models"]))
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


def release_version_of(release: Release) -> Version | None:
    """The ComfyUI version ``release`` runs: its lock's ``version``, else (not locked yet) the
    version its tag names (:func:`roles.model.manifest.release_version`); None when neither
    names one (a tag of one's own)."""
    if release.version:
        try:
            return Version(release.version)
        except InvalidVersion:
            return None
    return release_version(release.tag)


def models_the_release_cannot_load(release: Release, models: list[str]) -> list[str]:
    """A problem, naming ``comfyui_release`` and the ``comfyui_models`` entry, for each manifest
    whose ``comfyui_min_release`` is newer than the release, or whose minimum cannot be compared
    with a release that names no version. Manifests that do not load are reported by the
    ``comfyui_models`` rule itself (roles/model/settings.py) and skipped here."""
    problems = []
    have = release_version_of(release)
    for ref in models:
        try:
            manifest = load_manifest(ref)
        except ManifestError:
            continue
        need = manifest.comfyui_min_release
        if need is None:
            continue
        if have is None:
            problems.append(
                f"comfyui_release: {release.tag} names no ComfyUI version, and comfyui_models "
                f"entry {ref!r} needs ComfyUI {need} or newer ({manifest.source_file}); set a "
                "release tag of ComfyUI (vX.Y.Z) or remove the entry"
            )
        elif have < release_version(need):
            problems.append(
                f"comfyui_release: ComfyUI {have} ({release.tag}) cannot load comfyui_models "
                f"entry {ref!r}: it needs {need} or newer ({manifest.comfyui_min_release_source}; "
                f"{manifest.source_file}). Set comfyui_release to {need} or newer, or remove "
                "the entry"
            )
    return problems
