"""The settings the lab pair's two inventories share: inventory/lab_rigs.py (the two machines as
one cluster, pipeline parallel 2 across them) and inventory/lab_replicas.py (the same two machines
as two replica rigs behind vLLM's router). Both serve the same tiny checkpoint on the same
engine settings and the same core per machine, so the pair's decode rate and one rig's are
measured like for like (tests/lab/test_many_rigs.py).

Standard library and lab.* only (pyinfra loads the inventories as plain files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab.config import LabConfig
from lab.hub_lab import hub_endpoint

#: roles/vllm's port on each machine (inventory/group_data/all.py vllm_port): each machine has a
#: network namespace of its own, so both use the shipped one
VLLM_PORT = 8000


#: the KV cache of one pipeline stage of the pair, in bytes (one of lab/tiny's two full-attention
#: layers): --kv-cache-memory-bytes 268435456 served (measured for the issue of many rigs)
STAGE_KV_CACHE_BYTES = 268435456


def engine_settings(leader: LabConfig, state: Path, stages_per_engine: int) -> dict[str, Any]:
    """Group data both inventories share: vLLM's CPU build serving the tiny checkpoint from the
    hub in ``leader`` (its address on the link), one model lock in the pair's ``state``
    directory, the LLM mode only. ``stages_per_engine``: 1 for an engine that holds one of the
    pair's two stages, 2 for one that holds the whole model; its KV cache grows with it, so that
    every engine holds the same tokens (262144, vllm_max_model_len: one rig with the pair's
    256 MiB refused "0.25 GiB KV cache is needed ... larger than the available", measured)."""
    return {
        "vllm_device": "cpu",
        "nvidia_gpu_count": 0,  # no GPU: the CPU build
        # one engine process per machine on its one core (the shipped 2 is the rig's two GPUs;
        # vLLM's CPU build wants one core list per rank: VLLM_CPU_OMP_THREADS_BIND below)
        "vllm_tensor_parallel_size": 1,
        # no MTP across rigs (roles/cluster/settings.py), and none on one rig either, so that
        # one rig's decode is compared with the pair's on the same engine
        "vllm_speculative_config": None,
        # the KV cache in bytes, not a share of memory: a share of a machine that shares its
        # memory with the controller is not plenty
        "vllm_extra_args": [
            "--kv-cache-memory-bytes",
            str(STAGE_KV_CACHE_BYTES * stages_per_engine),
        ],
        "vllm_start_timeout_s": 900,
        # both machines read and write one model lock (they serve the same bytes)
        "model_lock_dir": str(state / "model-locks"),
        "hf_endpoint": hub_endpoint(leader),
        "voxcpm_install": False,
        "comfyui_install": False,
        "rigup_mode": "llm",
        "doctor_disk_warn_gib": 5.0,  # the machines' disk is the controller's
    }


def machine_settings(cfg: LabConfig, core: int) -> dict[str, Any]:
    """Host data of one machine in either inventory: SSH through the pair's relay on 127.0.0.1,
    and its engine bound to CPU ``core`` (the controller has few, and two engines on the same
    cores slow each other down: vLLM's CPU workers spin)."""
    return {
        "ssh_hostname": "127.0.0.1",
        "ssh_port": cfg.ssh_port,
        "ssh_user": "root",
        "ssh_key": str(cfg.ssh_key),
        "ssh_known_hosts_file": str(cfg.known_hosts),
        "ssh_strict_host_key_checking": "yes",
        "vllm_env": {"VLLM_CPU_OMP_THREADS_BIND": str(core)},
    }
