"""The lab pair: two lab machines serving one model across them, as the two rigs of
inventory/rigs.py (created by lab/pair.py: each in a network namespace of its own, joined by a
bridge, reached over SSH through the pair's relay on 127.0.0.1).

vLLM 0.22.1's CPU build serves the lab's tiny Qwen3.6-shaped checkpoint (lab/tiny: 8 layers,
full attention at 3 and 7, so each pipeline stage keeps one) with pipeline parallel 2 across the
machines, one stage and one CPU core each, with vLLM's own multi-node launcher: rank 0 (rigs-a)
runs the API, rank 1 (rigs-b) ``--headless``. The checkpoint comes from the lab's
Hugging Face-compatible server (lab/hub_lab.py), which runs in the leader and answers on its
address on the link. Only what the pair needs is converged (tests/lab/test_many_rigs.py):

    .venv/bin/pyinfra inventory/lab_rigs.py deploys/base.py tests/lab/deploys/pair_llm.py \\
        deploys/cluster.py deploys/modes.py

(pair_llm.py: the checkpoint, vLLM and rigup-doctor); no NVIDIA layer (no GPU; the single lab
proves it), no VoxCPM2, no ComfyUI.
"""

from lab.hub_lab import hub_endpoint
from lab.pair import pair_configs

_net, _cfgs, _state = pair_configs()
_leader = _cfgs[0]

#: The cluster, shared by both machines (roles/cluster/group.py checks it across them).
CLUSTER = {
    "cluster_name": "lab-pair",
    "vllm_nnodes": 2,
    "vllm_pipeline_parallel_size": 2,
    "vllm_tensor_parallel_size": 1,
    "vllm_device": "cpu",
    "nvidia_gpu_count": 0,  # no GPU: the CPU build, one stage per machine
    "vllm_speculative_config": None,  # no MTP across rigs (roles/cluster/settings.py)
    # the KV cache in bytes, not a share of memory: 256 MiB per stage is plenty for the tiny
    # model, and a share of a machine that shares its memory with the controller is not
    # (measured for the issue of many rigs: --kv-cache-memory-bytes 268435456 served)
    "vllm_extra_args": ["--kv-cache-memory-bytes", "268435456"],
    # the pair's checks, faster than a real rig's so that the lab measures recovery in minutes:
    # a dead peer restarts vllm.service within 15 + 2 × (5 + 15) = 55 s
    # (roles/cluster/watch.py detection_bound_s)
    "cluster_watch_interval_s": 5,
    "cluster_watch_failures": 2,
    "cluster_probe_timeout_s": 15,
    "vllm_start_timeout_s": 900,
    # both machines read and write one model lock (the cluster serves the same bytes)
    "model_lock_dir": str(_state / "model-locks"),
    "hf_endpoint": hub_endpoint(_leader),
    "voxcpm_install": False,
    "comfyui_install": False,
    "rigup_mode": "llm",
    "doctor_disk_warn_gib": 5.0,  # the machines' disk is the controller's
}


def _rig(i: int) -> tuple[str, dict]:
    cfg = _cfgs[i]
    return (
        cfg.name,
        {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": cfg.ssh_port,
            "ssh_user": "root",
            "ssh_key": str(cfg.ssh_key),
            "ssh_known_hosts_file": str(cfg.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "vllm_node_rank": i,
            "cluster_private_address": cfg.address,
            "cluster_private_ifname": "lan0",  # lab/pairnet.py RIG_IFNAME
            # one core each: the controller has few, and two engines on the same cores slow
            # each other down (vLLM's CPU workers spin)
            "vllm_env": {"VLLM_CPU_OMP_THREADS_BIND": str(i)},
        },
    )


lab_rigs = ([_rig(0), _rig(1)], CLUSTER)
