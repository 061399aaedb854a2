"""comfyui: ComfyUI at a pinned commit, a uv-built locked venv, its base directory and service.

Settings: every ``comfyui_*`` key (rules in roles/comfyui/settings.py). Layout
(:class:`roles.comfyui.paths.ComfyuiPaths`):

- ``<prefix>/comfyui/src``: git checkout of ``comfyui_git_url`` (a URL, or a local mirror path
  for rigs behind a firewall and for the lab) at the commit of the release ``comfyui_release``,
  as its lock says (roles/comfyui/release.py; a release without a lock is locked by its first
  run); root-owned, read-only to the service. A checkout with local changes is never reset: the
  run stops and names them.
- ``<prefix>/comfyui/venv``: built by uv from the release's requirements lock (hash-pinned).
- ``comfyui_base_dir`` (``--base-directory``): models/, custom_nodes/, input/, output/, user/
  (and ComfyUI's own temp/), owned by the service user. rigup creates the directories and never
  touches what is in them; model files are links into the model store.
- ``<etc>/comfyui/workflows`` (/etc/rigup/comfyui/workflows): rigup's API workflows
  (files/comfyui/workflows/*.json: FLUX.2 [dev] text to image, LTX-2.3 text to video),
  root-owned, for rigup-bench --media and ``python3 -m rigup.media.bench`` (docs/media-workflows.md); not read by the service itself.
- ``comfyui.service``: hardened, part of the media mode (roles/modes), counted as started once
  ``GET /system_stats`` answers. Its flags are checked by the pinned ComfyUI's own parser.
"""

from __future__ import annotations

import hashlib
import json
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt

from roles.comfyui.flags import exec_start, main_args, service_env
from roles.comfyui.footprint import FOOTPRINT
from roles.comfyui.paths import BASE_SUBDIRS, ComfyuiPaths
from roles.comfyui.release import release_of, release_source
from roles.comfyui.settings import ComfyuiSettings
from roles.common.operations import fingerprint
from roles.common.placed import directory_placed, file_placed, survey
from roles.common.service import GpuService, ServiceSpec
from roles.model import ModelStore, link_model_files
from roles.nvidia.layer import NvidiaLayer, gpu_hold_back_reason

FILES = Path(__file__).resolve().parents[2] / "files" / "comfyui"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def service_spec(settings: Any) -> ServiceSpec:
    """comfyui.service: what differs from the skeleton."""
    d = ComfyuiPaths.from_data(settings)
    return ServiceSpec.of(
        settings,
        d,
        FOOTPRINT,
        env=service_env(settings),
        description=f"{release_of(settings).label} (rigup media mode)",
        documentation="https://docs.comfy.org/",
        exec_start=exec_start(settings),
        read_write_paths=(d.base,),
        working_directory=d.base,
        stop_timeout_s=30,
        restart_sec=10,
    )


@deploy("ComfyUI")
def comfyui(settings, store: ModelStore, nvidia: NvidiaLayer | None = None) -> None:
    """Check out the pinned ComfyUI, build its locked venv, lay out its base directory, check its
    flags with its own parser, place its models and install its unit.

    The service is linked into ``rigup-media.target`` where it can run: with ``comfyui_cpu``, or
    on a host with GPUs and the NVIDIA driver; otherwise it is installed, stopped and disabled,
    and the run says why. Does nothing (and says so) when ``comfyui_install`` is False.
    ``nvidia``: what roles.nvidia.nvidia returned in this run (the driver there or planned);
    without it (a partial run) the host as it is.
    """
    cfg = ComfyuiSettings.of(settings)
    if not cfg.comfyui_install:
        logger.info(f"[{host.name}] ComfyUI: comfyui_install is False; not installed")
        return
    d = ComfyuiPaths.from_data(settings)
    svc = GpuService(settings, service_spec(settings))

    apt.packages(name="git (ComfyUI source)", packages=["git"])
    svc.account("rigup ComfyUI service")
    # The base directory tree: the directories themselves, never their content.
    svc.directories(
        root_owned=(d.root, d.bin, d.etc),
        owned=((d.base, "750"), *((f"{d.base}/{sub}", "750") for sub in BASE_SUBDIRS)),
    )

    release, changes = release_source(settings)
    svc.track(*changes, software=True)
    check_args = FILES / "check_args.py"
    survey((f"{d.bin}/check_args.py", d.args_file))
    svc.put("Script check_args.py", check_args, f"{d.bin}/check_args.py", "755")

    args = main_args(settings)
    svc.put(
        "ComfyUI main.py arguments (JSON)", StringIO(json.dumps(args, indent=2) + "\n"), d.args_file
    )
    svc.check(
        name="Check the main.py arguments with the pinned ComfyUI's own parser",
        command=(
            f"{svc.as_user(PYTHONDONTWRITEBYTECODE='1')} {d.python} "
            f"{d.bin}/check_args.py {d.src} {d.args_file}"
        ),
        stamp=f"{svc.layout.checks}/comfyui-args.ok",
        key=fingerprint(
            args,
            release.commit,
            _sha256(release.requirements) if release.requirements else release.tag,
            _sha256(check_args),
        ),
        what="ComfyUI argument check",
    )

    # rigup's API workflows for the media rows: read by rigup-bench, not by the service (so not
    # tracked: a changed workflow restarts nothing).
    shipped = sorted((FILES / "workflows").glob("*.json"))
    survey((d.workflows, *(f"{d.workflows}/{w.name}" for w in shipped)))
    directory_placed(
        name=f"Directory {d.workflows}", path=d.workflows, user="root", group="root", mode="755"
    )
    for w in shipped:
        file_placed(
            name=f"Workflow {w.name}",
            src=str(w),
            dest=f"{d.workflows}/{w.name}",
            user="root",
            group="root",
            mode="644",
        )

    # The model manifests of comfyui_models, placed in the store (verified, atomic) and linked
    # into models/<folder> (each manifest's dest names the folder). ComfyUI follows the links;
    # the store stays the one copy, root-owned and read-only to the service.
    for manifest in cfg.comfyui_models:
        link_model_files(store.place(manifest), into=f"{d.base}/models")

    svc.install(
        None if cfg.comfyui_cpu else gpu_hold_back_reason(settings, nvidia),
        hint="comfyui_cpu = True runs it on the CPU",
    )
