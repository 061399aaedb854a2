"""Where the vLLM role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roles.common.paths import ServicePaths

UNIT = "vllm.service"


@dataclass(frozen=True)
class VllmPaths(ServicePaths):
    """:class:`ServicePaths` of ``vllm`` plus ``args_file`` (``<etc>/vllm/serve-args.json``)."""

    COMPONENT: ClassVar[str] = "vllm"

    args_file: str

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        return {"args_file": f"{base['etc']}/serve-args.json"}
