"""Rules for the model role's settings (inventory/group_data/all.py, "Models")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roles.common.checks import (
    ENV_NAME,
    SAFE_NAME,
    Check,
    abs_path_list,
    abs_path_or_empty,
    boolean,
    choice,
    contains,
    matches,
    owned_dir,
    python_interpreter,
    str_list,
    url_or_empty,
    writable_dir_or_empty,
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
from roles.model.manifest import ManifestError, load_manifest

#: Model sources (roles/model, files/model/modeltool).
MODEL_SOURCES = ("local", "huggingface", "modelscope")


def model_sources(value: Any) -> str | None:
    """Distinct values of :data:`MODEL_SOURCES`, at least one."""
    problem = str_list(value)
    if problem:
        return problem
    if not value:
        return f"must name at least one of {', '.join(MODEL_SOURCES)}"
    bad = [v for v in value if v not in MODEL_SOURCES]
    if bad or len(set(value)) != len(value):
        return f"must be distinct values of {', '.join(MODEL_SOURCES)}; got {list(value)!r}"
    return None


def manifest_ref(value: Any) -> str | None:
    """A manifest name (files/model/manifests/<name>.toml) or path that loads and validates."""
    if not isinstance(value, str) or not (value.startswith("/") or SAFE_NAME.match(value)):
        return (
            f"must be a manifest name (files/model/manifests/<name>.toml) or a path, got {value!r}"
        )
    try:
        load_manifest(value)
    except ManifestError as exc:
        return " ".join(str(exc).split())
    return None


def manifest_list(value: Any) -> str | None:
    """A list of :func:`manifest_ref` values."""
    problem = str_list(value)
    if problem:
        return problem
    return next((f"{v!r}: {p}" for v in value if (p := manifest_ref(v))), None)


@dataclass(frozen=True)
class ModelSettings(TypedSettings):
    """The model role's settings, each declared once: name, the type code reads, check.
    Defaults, meaning and sources: inventory/group_data/all.py ("Models").
    ``ModelSettings.of(host.data)`` reads them into typed attributes."""

    model_store_dir: str = setting(owned_dir)
    model_llm_manifest: str = setting(manifest_ref)
    model_sources: list[str] = setting(model_sources)
    model_local_dirs: list[str] = setting(abs_path_list)
    model_local_link: str = setting(choice(("copy", "hardlink")))
    hf_endpoint: str = setting(url_or_empty)
    hf_token_env: str = setting(matches(ENV_NAME, "an environment variable name such as HF_TOKEN"))
    modelscope_endpoint: str = setting(url_or_empty)
    modelscope_token_env: str = setting(matches(ENV_NAME, "an environment variable name"))
    model_replace_mismatched: bool = setting(boolean)
    model_verify_sha256: bool = setting(boolean)
    model_lock_dir: str = setting(abs_path_or_empty)
    model_backup_dir: str = setting(writable_dir_or_empty)
    model_tool_python: str = setting(python_interpreter)


SETTINGS: tuple[Setting, ...] = declared(ModelSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def sources_outside_store(values: Mapping[str, Any]) -> list[str]:
    """No local source inside or around the store."""
    store = values["model_store_dir"]
    return [
        f"model_local_dirs: {root} and model_store_dir {store} must not contain one "
        "another (the store is where models are placed, not a source)"
        for root in values["model_local_dirs"]
        if contains(store, root) or contains(root, store)
    ]


def backup_outside_store(values: Mapping[str, Any]) -> list[str]:
    """The backup neither inside nor around the store."""
    store, backup = values["model_store_dir"], values["model_backup_dir"]
    if backup and (contains(store, backup) or contains(backup, store)):
        return [
            f"model_backup_dir: {backup} and model_store_dir must not contain one another (a "
            "backup belongs on another disk)"
        ]
    return []


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The store, its sources and its backup are distinct trees (each rule on its own)."""
    return each_rule(values, (sources_outside_store, backup_outside_store))
