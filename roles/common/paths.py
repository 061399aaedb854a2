"""Where rigup puts things on a host, derived from the settings (one definition for deploys and
tests alike)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def model_dir(data: Any) -> str:
    """Absolute path of the placed LLM: ``<model_store_dir>/<name>/<revision>`` of the manifest
    ``model_llm_manifest`` (files/model/manifests/). Raises ``ManifestError`` for a bad one."""
    from roles.model.manifest import load_manifest, store_path  # roles.model imports Paths

    return store_path(
        str(data.get("model_store_dir")), load_manifest(data.get("model_llm_manifest"))
    )


@dataclass(frozen=True)
class Paths:
    """Absolute paths on the host. Build with :meth:`from_data` from ``host.data`` or a dict."""

    prefix: str
    etc: str
    state: str
    tmp: str
    uv_cache: str
    uv_venv: str
    uv: str
    checks: str
    vllm_root: str
    vllm_venv: str
    vllm_bin: str
    vllm_lock: str
    vllm_scripts: str
    vllm_etc: str
    vllm_args_file: str
    vllm_env_file: str
    vllm_home: str
    vllm_unit: str
    model_dir: str
    model_config: str
    model_config_original: str
    model_tool_root: str
    model_tool_venv: str
    model_tool_python: str
    model_tool_lock: str
    model_tool_bin: str
    model_fetch: str
    model_etc: str
    model_manifests_dir: str
    model_secrets_dir: str
    hf_token_file: str
    modelscope_token_file: str
    model_reports: str

    @classmethod
    def from_data(cls, data: Any) -> Paths:
        """Derive every path from the settings keys rigup_* / uv_cache_dir / model_*."""
        prefix = data.get("rigup_prefix").rstrip("/")
        etc = data.get("rigup_etc_dir").rstrip("/")
        state = data.get("rigup_state_dir").rstrip("/")
        vllm_root = f"{prefix}/vllm"
        mdir = model_dir(data)
        return cls(
            prefix=prefix,
            etc=etc,
            state=state,
            tmp=data.get("rigup_tmp_dir").rstrip("/"),
            uv_cache=data.get("uv_cache_dir").rstrip("/"),
            uv_venv=f"{prefix}/uv",
            uv=f"{prefix}/uv/bin/uv",
            checks=f"{state}/checks",
            vllm_root=vllm_root,
            vllm_venv=f"{vllm_root}/venv",
            vllm_bin=f"{vllm_root}/venv/bin/vllm",
            vllm_lock=f"{vllm_root}/requirements.lock",
            vllm_scripts=f"{vllm_root}/bin",
            vllm_etc=f"{etc}/vllm",
            vllm_args_file=f"{etc}/vllm/serve-args.json",
            vllm_env_file=f"{etc}/vllm/vllm.env",
            vllm_home=f"{state}/vllm",
            vllm_unit="/etc/systemd/system/vllm.service",
            model_dir=mdir,
            model_config=f"{mdir}/config.json",
            model_config_original=f"{mdir}/config.json.rigup-orig",
            model_tool_root=f"{prefix}/model",
            model_tool_venv=f"{prefix}/model/venv",
            model_tool_python=f"{prefix}/model/venv/bin/python",
            model_tool_lock=f"{prefix}/model/requirements.lock",
            model_tool_bin=f"{prefix}/model/bin",
            model_fetch=f"{prefix}/model/bin/model_fetch.py",
            model_etc=f"{etc}/model",
            model_manifests_dir=f"{etc}/model/manifests",
            model_secrets_dir=f"{etc}/model/secrets",
            hf_token_file=f"{etc}/model/secrets/hf-token",
            modelscope_token_file=f"{etc}/model/secrets/modelscope-token",
            model_reports=f"{state}/model",
        )
