"""Where the router role puts things on a host: :class:`RouterPaths` (its venv under
``<prefix>/router``, its env file and home) and its console script."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roles.common.paths import ServicePaths

UNIT = "router.service"


@dataclass(frozen=True)
class RouterPaths(ServicePaths):
    """:class:`ServicePaths` of ``router`` plus ``executable``, the venv's ``vllm-router``
    (the wheel's console script, vllm_router.launch_router:main)."""

    COMPONENT: ClassVar[str] = "router"

    executable: str

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        return {"executable": f"{base['venv']}/bin/vllm-router"}
