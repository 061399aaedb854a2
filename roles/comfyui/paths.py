"""Where the ComfyUI role puts things on a host (deploys and tests share it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from roles.common.paths import Layout

UNIT = "comfyui.service"

#: Sub-directories of --base-directory that ComfyUI reads and writes (folder_paths.py of the
#: pinned release). rigup creates them and never touches what is inside. temp/ is left to
#: ComfyUI: main.py deletes it at exit and creates it at start (cleanup_temp), so managing it
#: would make every deploy outside the media mode re-create it.
BASE_SUBDIRS = ("models", "custom_nodes", "input", "output", "user")


@dataclass(frozen=True)
class ComfyuiPaths:
    """Absolute paths of ComfyUI's pieces. Build with :meth:`from_data`.

    ``src`` is the git checkout (root-owned, read-only to the service); ``base`` is
    ``--base-directory`` (models, custom_nodes, input, output, user and ComfyUI's own temp;
    owned by the service user); ``home`` holds caches (torch, Hugging Face) outside the user's
    tree.
    """

    root: str
    src: str
    venv: str
    python: str
    lock: str
    scripts: str
    etc: str
    env_file: str
    args_file: str
    home: str
    base: str
    database: str
    unit: str

    @classmethod
    def from_data(cls, data: Any) -> ComfyuiPaths:
        layout = Layout.from_data(data)
        base = str(data.get("comfyui_base_dir")).rstrip("/")
        root = f"{layout.prefix}/comfyui"
        etc = f"{layout.etc}/comfyui"
        return cls(
            root=root,
            src=f"{root}/src",
            venv=f"{root}/venv",
            python=f"{root}/venv/bin/python",
            lock=f"{root}/requirements.lock",
            scripts=f"{root}/bin",
            etc=etc,
            env_file=f"{etc}/comfyui.env",
            args_file=f"{etc}/main-args.json",
            home=f"{layout.state}/comfyui",
            base=base,
            database=f"{base}/user/comfyui.db",
            unit=f"/etc/systemd/system/{UNIT}",
        )
