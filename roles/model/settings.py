"""Rules for the model role's settings (inventory/group_data/all.py, "Models")."""

from __future__ import annotations

from collections.abc import Mapping
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
from roles.common.setting import Setting, optional, rules
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


SETTINGS: tuple[Setting, ...] = (
    Setting("model_store_dir", owned_dir),
    Setting("model_llm_manifest", manifest_ref),
    Setting("model_sources", model_sources),
    Setting("model_local_dirs", abs_path_list),
    Setting("model_local_link", choice(("copy", "hardlink"))),
    Setting("hf_endpoint", url_or_empty),
    Setting("hf_token_env", matches(ENV_NAME, "an environment variable name such as HF_TOKEN")),
    Setting("modelscope_endpoint", url_or_empty),
    Setting("modelscope_token_env", matches(ENV_NAME, "an environment variable name")),
    Setting("model_replace_mismatched", boolean),
    Setting("model_verify_sha256", boolean),
    Setting("model_lock_dir", abs_path_or_empty),
    Setting("model_backup_dir", writable_dir_or_empty),
    Setting("model_tool_python", python_interpreter),
)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """The store, its sources and its backup are distinct trees."""
    problems = []
    store = values["model_store_dir"]
    for root in values["model_local_dirs"]:
        if contains(store, root) or contains(root, store):
            problems.append(
                f"model_local_dirs: {root} and model_store_dir {store} must not contain one "
                "another (the store is where models are placed, not a source)"
            )
    backup = values["model_backup_dir"]
    if backup and (contains(store, backup) or contains(backup, store)):
        problems.append(
            f"model_backup_dir: {backup} and model_store_dir must not contain one another (a "
            "backup belongs on another disk)"
        )
    return problems
