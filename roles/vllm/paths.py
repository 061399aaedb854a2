"""Where the vLLM role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.paths import Layout

UNIT = "vllm.service"


@dataclass(frozen=True)
class VllmPaths:
    """Absolute paths of the vLLM role. Build with :meth:`from_data`."""

    root: str
    venv: str
    python: str
    lock: str
    scripts: str
    etc: str
    args_file: str
    env_file: str
    home: str
    unit: str

    @classmethod
    def from_data(cls, data: Any) -> VllmPaths:
        """``<prefix>/vllm/{venv,bin,requirements.lock}``, ``<etc>/vllm/{serve-args.json,
        vllm.env}``, the service home ``<state>/vllm``."""
        layout = Layout.from_data(data)
        root = f"{layout.prefix}/vllm"
        etc = f"{layout.etc}/vllm"
        return cls(
            root=root,
            venv=f"{root}/venv",
            python=f"{root}/venv/bin/python",
            lock=f"{root}/requirements.lock",
            scripts=f"{root}/bin",
            etc=etc,
            args_file=f"{etc}/serve-args.json",
            env_file=f"{etc}/vllm.env",
            home=f"{layout.state}/vllm",
            unit=f"/etc/systemd/system/{UNIT}",
        )
