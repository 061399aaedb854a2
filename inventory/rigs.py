"""Several rigs in one inventory, serving one model together (docs/many-rigs.md).

Two rigs of two RTX 3090s each, joined by a private link (10/25 GbE, a switch or a direct
cable), serve one model with vLLM 0.22.1's own multi-node launcher: pipeline parallel 2 across
the rigs (one stage each), tensor parallel 2 inside each. Converge them in one run (in
parallel), or one of them with ``--limit``; the other rigs are still read, so the cluster is
checked whole and the leader's address comes from the leader's own entry:

    .venv/bin/pyinfra inventory/rigs.py deploys/full.py
    .venv/bin/pyinfra inventory/rigs.py deploys/full.py --limit rig-b.local

Edit the hosts below (SSH names or addresses, as in inventory/rig.py) and each rig's private
address and interface. The group data (the second item of ``rigs``) declares the cluster; every
other setting comes from inventory/group_data/all.py, the same for every rig. Before any change
the run checks each rig and the cluster across them (exactly one leader, ranks 0..N-1 once each,
tensor × pipeline parallel equal to the GPUs the rigs declare, the same vLLM and the same model
lock everywhere: roles/cluster/group.py) and refuses, naming the rig and the key.
"""

#: The cluster, shared by its rigs: two pipeline stages, one per rig, two GPUs each.
CLUSTER = {
    "cluster_name": "pair",
    "vllm_nnodes": 2,
    "vllm_pipeline_parallel_size": 2,
    "vllm_tensor_parallel_size": 2,
    "nvidia_gpu_count": 2,
    # no MTP across rigs: vLLM 0.22.1 refuses pipeline parallel for Qwen3.6's MTP drafter
    # (roles/cluster/settings.py no_drafter_across_rigs)
    "vllm_speculative_config": None,
    # The leader's API faces the LAN only with an API key: set VLLM_API_KEY on the controller
    # and vllm_host = "0.0.0.0" here, or keep 127.0.0.1 and reach it through an SSH tunnel.
}

rigs = (
    [
        # rank 0: the leader, which runs the API server; its private address is every rig's
        # --master-addr
        (
            "rig-a.local",
            {
                "ssh_user": "root",
                "vllm_node_rank": 0,
                "cluster_private_address": "10.77.0.1",
                "cluster_private_ifname": "enp5s0",
            },
        ),
        # rank 1: a follower (vllm serve --headless), the second pipeline stage
        (
            "rig-b.local",
            {
                "ssh_user": "root",
                "vllm_node_rank": 1,
                "cluster_private_address": "10.77.0.2",
                "cluster_private_ifname": "enp5s0",
            },
        ),
    ],
    CLUSTER,
)
