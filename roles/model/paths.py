"""Where the model role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roles.common.paths import ComponentPaths, Layout


@dataclass(frozen=True)
class ModelPaths(ComponentPaths):
    """:class:`ComponentPaths` of the model tool (``<prefix>/model``), plus:

    + store: ``model_store_dir`` (placed models: ``<store>/<name>/<revision>``)
    + fetch: the tool's script; manifests_dir, secrets_dir and the token files in ``<etc>/model``
    + reports: one JSON record per placed model (``<state>/model``)
    """

    store: str
    fetch: str
    manifests_dir: str
    secrets_dir: str
    hf_token_file: str
    modelscope_token_file: str
    reports: str

    COMPONENT: ClassVar[str] = "model"

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        secrets = f"{base['etc']}/secrets"
        return {
            "store": str(data.get("model_store_dir")).rstrip("/"),
            "fetch": f"{base['bin']}/model_fetch.py",
            "manifests_dir": f"{base['etc']}/manifests",
            "secrets_dir": secrets,
            "hf_token_file": f"{secrets}/hf-token",
            "modelscope_token_file": f"{secrets}/modelscope-token",
            "reports": f"{Layout.from_data(data).state}/model",
        }
