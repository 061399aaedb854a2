"""Where the vLLM role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.paths import ServicePaths

UNIT = "vllm.service"


@dataclass(frozen=True)
class VllmPaths(ServicePaths):
    """:class:`ServicePaths` of ``vllm`` plus ``args_file`` (``<etc>/vllm/serve-args.json``) and
    the API key's environment file ``api_key_file`` in the root-only ``secrets_dir``."""

    args_file: str
    secrets_dir: str
    api_key_file: str

    @classmethod
    def from_data(cls, data: Any) -> VllmPaths:
        base = ServicePaths.fields(data, "vllm")
        secrets = f"{base['etc']}/secrets"
        return cls(
            **base,
            args_file=f"{base['etc']}/serve-args.json",
            secrets_dir=secrets,
            api_key_file=f"{secrets}/api-key.env",
        )
