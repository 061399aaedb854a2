"""A 2x NVIDIA H200 machine (NVLink NV18), checked read-only: rigup's NVIDIA facts, NVLink
verification and GPU testinfra module on real hardware (benchmarks/nvidia-readonly.sh).

Never converge it: the checks read the GPUs and change nothing. The expectations below are that
machine's (18 links per GPU at 26.562 GB/s, from its `nvidia-smi nvlink -s`; compute capability 9.0, from
its `nvidia-smi --query-gpu=compute_cap`: tests/fixtures/h200x2/compute-cap.txt); everything else,
including the 290 W power limit, comes from inventory/group_data/all.py, so the power-limit test
fails there by design (the H200s run at 700 W).
"""

h200x2 = [
    (
        "@local",
        {
            "nvidia_gpu_count": 2,
            "nvlink_expected_links": 18,
            "nvlink_link_gbps": 26.562,
            "nvidia_gpu_compute_capability": "9.0",
        },
    )
]
