"""Where the ComfyUI role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from roles.common.paths import ServicePaths

UNIT = "comfyui.service"

#: Sub-directories of --base-directory that ComfyUI reads and writes (folder_paths.py of the
#: pinned release). rigup creates them and never touches what is inside. temp/ is left to
#: ComfyUI: main.py deletes it at exit and creates it at start (cleanup_temp), so managing it
#: would make every deploy outside the media mode re-create it.
BASE_SUBDIRS = ("models", "custom_nodes", "input", "output", "user")


@dataclass(frozen=True)
class ComfyuiPaths(ServicePaths):
    """:class:`ServicePaths` of ``comfyui`` plus the git checkout ``src`` (root-owned, read-only
    to the service), ``args_file``, ``base`` = ``--base-directory`` (models, custom_nodes, input,
    output, user and ComfyUI's own temp; owned by the service user), ComfyUI's ``database``
    in it and ``workflows``: rigup's shipped API workflows (files/comfyui/workflows/*.json,
    root-owned), which rigup-bench --media and ``python3 -m rigup.media.bench`` read. The service's ``home`` holds caches (torch, Hugging Face) outside the user's tree."""

    src: str
    args_file: str
    base: str
    database: str
    workflows: str

    COMPONENT: ClassVar[str] = "comfyui"

    @classmethod
    def extra(cls, base: dict[str, str], data: Any) -> dict[str, str]:
        user_base = str(data.get("comfyui_base_dir")).rstrip("/")
        return {
            "src": f"{base['root']}/src",
            "args_file": f"{base['etc']}/main-args.json",
            "base": user_base,
            "database": f"{user_base}/user/comfyui.db",
            "workflows": f"{base['etc']}/workflows",
        }
