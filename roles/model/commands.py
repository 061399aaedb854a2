"""The commands the model role runs on a host (files/model/model_fetch.py), as pure functions."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path
from typing import Any

from roles.common.paths import Layout
from roles.model.manifest import Manifest
from roles.model.paths import ModelPaths

FILES = Path(__file__).resolve().parents[2] / "files" / "model"


def _load_fetch_module():
    """files/model/model_fetch.py as a module: its pure checks are shared with the controller."""
    spec = importlib.util.spec_from_file_location("rigup_model_fetch", FILES / "model_fetch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


model_fetch = _load_fetch_module()


def fetch_argv(data: Any, manifest: Manifest, manifest_file: str, dest: str) -> str:
    """The shell command that places ``manifest`` at ``dest`` on the host (model_fetch.py place).

    Only the token's FILE path is passed, never the token.
    """
    p = ModelPaths.from_data(data)
    argv = [
        p.python,
        p.fetch,
        "place",
        "--manifest",
        manifest_file,
        "--dest",
        dest,
        "--sources",
        ",".join(data.get("model_sources")),
        "--link",
        data.get("model_local_link"),
        "--report",
        f"{p.reports}/{manifest.name}@{manifest.revision}.json",
    ]
    for root in data.get("model_local_dirs"):
        argv += ["--local-dir", root]
    if data.get("hf_endpoint"):
        argv += ["--hf-endpoint", data.get("hf_endpoint")]
    if "huggingface" in data.get("model_sources"):
        argv += ["--hf-token-file", p.hf_token_file]
    if data.get("modelscope_endpoint"):
        argv += ["--modelscope-endpoint", data.get("modelscope_endpoint")]
    if "modelscope" in data.get("model_sources"):
        argv += ["--modelscope-token-file", p.modelscope_token_file]
    if data.get("model_replace_mismatched"):
        argv.append("--replace-mismatched")
    env = f"TMPDIR={shlex.quote(Layout.from_data(data).tmp)} HF_HUB_DISABLE_TELEMETRY=1"
    return f"{env} {shlex.join(argv)}"


def placed_mismatches(manifest: Manifest, record: dict | None, sizes: dict[str, int]) -> list[str]:
    """Files of a placed copy that are missing or differ in size from the manifest/record, as
    ``"dest: problem"`` strings. ``sizes`` is a :class:`DirectoryInventory` of the placed dir."""
    recorded = {f["dest"]: f for f in (record or {}).get("files", [])}
    return [
        f"{m['dest']}: {m['problem']}"
        for m in model_fetch.size_mismatches(manifest.to_json()["files"], recorded, sizes)
    ]


def backup_argv(data: Any, store: str, to: str) -> str:
    """The shell command that copies every placed model of ``store`` to ``to``, verified."""
    p = ModelPaths.from_data(data)
    return shlex.join(
        [p.python, p.fetch, "backup", "--store", store, "--to", to,
         "--report", f"{p.reports}/backup.json"]
    )  # fmt: skip
