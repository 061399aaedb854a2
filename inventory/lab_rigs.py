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

from lab.pair import pair_configs
from lab.pair_inventory import engine_settings, machine_settings

_net, _cfgs, _state = pair_configs()

#: The cluster, shared by both machines (roles/cluster/group.py checks it across them); the
#: engine's settings are inventory/lab_replicas.py's too (lab/pair_inventory.py).
CLUSTER = {
    **engine_settings(_cfgs[0], _state, stages_per_engine=1),
    "cluster_name": "lab-pair",
    "vllm_nnodes": 2,
    "vllm_pipeline_parallel_size": 2,
    # the pair's checks, faster than a real rig's so that the lab measures recovery in minutes:
    # a dead peer restarts vllm.service within 15 + 2 × (5 + 15) = 55 s
    # (roles/cluster/watch.py detection_bound_s)
    "cluster_watch_interval_s": 5,
    "cluster_watch_failures": 2,
    "cluster_probe_timeout_s": 15,
}


def _rig(i: int) -> tuple[str, dict]:
    cfg = _cfgs[i]
    return (
        cfg.name,
        {
            **machine_settings(cfg, core=i),  # one core each
            "vllm_node_rank": i,
            "cluster_private_address": cfg.address,
            "cluster_private_ifname": "lan0",  # lab/pairnet.py RIG_IFNAME
        },
    )


lab_rigs = ([_rig(0), _rig(1)], CLUSTER)
