"""Rules for the ComfyUI role's settings (inventory/group_data/all.py, "ComfyUI")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from roles.comfyui.release import TAG, Release, ReleaseError, load_release
from roles.common.checks import (
    GIT_COMMIT,
    UNIX_NAME,
    Check,
    abs_path_or_empty,
    boolean,
    contains,
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
from roles.common.setting import (
    Setting,
    TypedSettings,
    declared,
    each_rule,
    optional,
    rules,
    setting,
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


@dataclass(frozen=True)
class ComfyuiSettings(TypedSettings):
    """The ComfyUI role's settings, each declared once: name, the type code reads, check.
    Defaults, meaning and sources: inventory/group_data/all.py ("ComfyUI").
    ``ComfyuiSettings.of(host.data)`` reads them into typed attributes."""

    comfyui_install: bool = setting(boolean)
    comfyui_git_url: str = setting(git_source)
    comfyui_release: str = setting(matches(TAG, "a release tag of ComfyUI such as v0.8.0"))
    comfyui_commit: str = setting(commit_or_empty)
    comfyui_lock_dir: str = setting(abs_path_or_empty)
    comfyui_user: str = setting(matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"))
    comfyui_python: str = setting(python_interpreter)
    comfyui_host: str = setting(host_address)
    comfyui_allow_network_without_auth: bool = setting(boolean)
    comfyui_port: int = setting(service_port)
    comfyui_base_dir: str = setting(owned_dir)
    comfyui_cpu: bool = setting(boolean)
    comfyui_gpu_index: int = setting(integer(0, 15))
    comfyui_reserve_vram_gib: float = setting(number(0.0, 1024.0))
    comfyui_extra_args: list[str] = setting(str_list)
    comfyui_start_timeout_s: int = setting(integer(10, 24 * 3600))
    comfyui_env: Mapping[str, str | int | float] = setting(env_mapping)
    comfyui_models: list[str] = setting(manifest_list)


SETTINGS: tuple[Setting, ...] = declared(ComfyuiSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def release_usable(values: Mapping[str, Any]) -> list[str]:
    """The release's lock, when there is one, must be usable."""
    try:
        load_release(values["comfyui_release"], values["comfyui_lock_dir"])
    except ReleaseError as exc:
        return [f"comfyui_release: {' '.join(str(exc).split())}"]
    return []


def commit_needs_lock(values: Mapping[str, Any]) -> list[str]:
    """comfyui_commit replaces the commit of a release lock, so the release must have one."""
    try:
        release = load_release(values["comfyui_release"], values["comfyui_lock_dir"])
    except ReleaseError:
        return []  # release_usable reports it
    if not release.locked and values["comfyui_commit"]:
        return [
            f"comfyui_commit: {values['comfyui_commit']} replaces the commit of a release lock, "
            f"and comfyui_release {release.tag} has none yet ({release.lock_file}); converge once "
            "without comfyui_commit on a rig that reaches the git remote to lock the release"
        ]
    return []


def models_fit_release(values: Mapping[str, Any]) -> list[str]:
    """Every manifest of comfyui_models must load in the release
    (:func:`models_the_release_cannot_load`); nothing to check without comfyui_install."""
    try:
        release = load_release(values["comfyui_release"], values["comfyui_lock_dir"])
    except ReleaseError:
        return []  # release_usable reports it
    if not values["comfyui_install"]:
        return []
    return models_the_release_cannot_load(release, values["comfyui_models"])


def network_needs_opt_in(values: Mapping[str, Any]) -> list[str]:
    """comfyui_host beyond loopback only with comfyui_allow_network_without_auth (ComfyUI has no
    authentication)."""
    host = values["comfyui_host"]
    if not is_loopback(host) and not values["comfyui_allow_network_without_auth"]:
        return [
            f"comfyui_host: {host} is not loopback, and ComfyUI has no authentication: whoever "
            "reaches the port runs workflows and reads every input and output. Bind it to "
            "127.0.0.1 (reach it through an SSH tunnel or a reverse proxy with authentication), "
            "or set comfyui_allow_network_without_auth = True to expose it anyway"
        ]
    return []


def extra_args_allowed(values: Mapping[str, Any]) -> list[str]:
    """comfyui_extra_args may not set managed flags nor the VRAM-pinning ones."""
    problems = [
        f"comfyui_extra_args: {clash}; set it there instead"
        for clash in flag_clashes(values["comfyui_extra_args"], MANAGED, {})
    ]
    flags = {a.split("=", 1)[0] for a in values["comfyui_extra_args"]}
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


#: The rules over several ComfyUI keys, each run on its own (roles.common.setting.each_rule).
CONSISTENCY = (
    release_usable,
    commit_needs_lock,
    models_fit_release,
    network_needs_opt_in,
    extra_args_allowed,
)


def comfyui_base_dir_apart(values: Mapping[str, Any]) -> list[str]:
    """ComfyUI's base directory (user outputs) neither inside nor around rigup's own trees."""
    base = values["comfyui_base_dir"]
    return [
        f"comfyui_base_dir: must be a directory of its own (it holds user outputs), not "
        f"inside or around {key} ({values[key]})"
        for key in ("model_store_dir", "rigup_prefix", "rigup_state_dir", "rigup_etc_dir")
        if contains(base, values[key]) or contains(values[key], base)
    ]


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Problems of the rules over several ComfyUI keys (:data:`CONSISTENCY`); a rule that reads a
    key that failed its own check is skipped."""
    return each_rule(values, CONSISTENCY)


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
