"""Where the vLLM role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.paths import ServicePaths

UNIT = "vllm.service"


@dataclass(frozen=True)
class VllmPaths(ServicePaths):
    """:class:`ServicePaths` of ``vllm`` plus ``args_file`` (``<etc>/vllm/serve-args.json``)."""

    args_file: str

    @classmethod
    def from_data(cls, data: Any) -> VllmPaths:
        base = ServicePaths.fields(data, "vllm")
        return cls(**base, args_file=f"{base['etc']}/serve-args.json")
