"""Where the model role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.paths import Layout


@dataclass(frozen=True)
class ModelPaths:
    """Absolute paths of the model role. Build with :meth:`from_data`.

    + store: ``model_store_dir`` (placed models: ``<store>/<name>/<revision>``)
    + tool_*: the model tool venv and its scripts (``<prefix>/model``)
    + manifests_dir, secrets_dir, hf_token_file, modelscope_token_file: ``<etc>/model/...``
    + reports: one JSON record per placed model (``<state>/model``)
    """

    store: str
    tool_root: str
    tool_venv: str
    tool_python: str
    tool_lock: str
    tool_bin: str
    fetch: str
    etc: str
    manifests_dir: str
    secrets_dir: str
    hf_token_file: str
    modelscope_token_file: str
    reports: str

    @classmethod
    def from_data(cls, data: Any) -> ModelPaths:
        layout = Layout.from_data(data)
        root = f"{layout.prefix}/model"
        etc = f"{layout.etc}/model"
        return cls(
            store=str(data.get("model_store_dir")).rstrip("/"),
            tool_root=root,
            tool_venv=f"{root}/venv",
            tool_python=f"{root}/venv/bin/python",
            tool_lock=f"{root}/requirements.lock",
            tool_bin=f"{root}/bin",
            fetch=f"{root}/bin/model_fetch.py",
            etc=etc,
            manifests_dir=f"{etc}/manifests",
            secrets_dir=f"{etc}/secrets",
            hf_token_file=f"{etc}/secrets/hf-token",
            modelscope_token_file=f"{etc}/secrets/modelscope-token",
            reports=f"{layout.state}/model",
        )
