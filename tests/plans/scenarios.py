"""Host answers for plan tests with pyinfra's @fake connector.

Each scenario returns ``(fake_responses, host_data_overrides)``. Answers follow the real output
shapes of the facts involved (captured from the lab machine and from Ubuntu hosts); anything not
matched answers with empty output, which pyinfra facts read as "absent".
"""

from __future__ import annotations

import re

MIRROR = "/srv/mirror/Qwen3.6-27B-int4-AutoRound"
PLACED = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"


def _ubuntu_2604(uid: int = 0, systemd: bool = True) -> dict:
    return {
        "uname -s": ["Linux"],
        "/etc/os-release": [
            "id=ubuntu",
            "version_id=26.04",
            f"systemd={int(systemd)}",
            f"uid={uid}",
        ],
        re.compile(r"^command -v (useradd|usermod|groupadd)"): ["/usr/sbin/useradd"],
    }


def _mirror_present() -> dict:
    return {
        f"test -d {MIRROR}": [
            "@present",
            "1524 config.json",
            "95233 model.safetensors.index.json",
            "9932771000 model-00001-of-00002.safetensors",
            "8543210000 model-00002-of-00002.safetensors",
            "11422654 tokenizer.json",
        ],
        f"test -d {PLACED}": ["@absent"],
    }


def _driver() -> dict:
    return {"command -v nvidia-smi": ["/usr/bin/nvidia-smi"]}


def fresh_rig():
    """Ubuntu 26.04 with the NVIDIA driver, nothing of rigup yet, the checkpoint on a mounted
    mirror; 2 GPUs declared."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {}


def fresh_rig_no_driver():
    """As fresh_rig, but no NVIDIA driver is installed yet (no nvidia-smi)."""
    return {**_ubuntu_2604(), **_mirror_present()}, {}


def fresh_no_gpu():
    """As fresh_rig, but the host declares no GPUs (like the lab machine)."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"nvidia_gpu_count": 0}


def bad_kv_cache_dtype():
    """A typo in a setting: must stop before any operation is even planned."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"vllm_kv_cache_dtype": "fp8_e5m3"}


def too_few_gpus():
    """Tensor parallel 2 on a host that declares one GPU."""
    return {**_ubuntu_2604(), **_mirror_present()}, {"nvidia_gpu_count": 1}


def missing_model_source():
    """The mirror path does not exist and nothing is placed."""
    return {
        **_ubuntu_2604(),
        f"test -d {MIRROR}": ["@absent"],
        f"test -d {PLACED}": ["@absent"],
    }, {}


def not_a_checkpoint():
    """The mirror path exists but holds no config.json."""
    return {
        **_ubuntu_2604(),
        f"test -d {MIRROR}": ["@present", "12 README.md"],
        f"test -d {PLACED}": ["@absent"],
    }, {}


def no_systemd():
    """A container or chroot without systemd as PID 1."""
    return {**_ubuntu_2604(systemd=False), **_mirror_present()}, {}


def not_root():
    """Connected as an unprivileged user without --sudo."""
    return {**_ubuntu_2604(uid=1000), **_mirror_present()}, {}


SCENARIOS = {
    f.__name__: f
    for f in (
        fresh_rig,
        fresh_rig_no_driver,
        fresh_no_gpu,
        bad_kv_cache_dtype,
        too_few_gpus,
        missing_model_source,
        not_a_checkpoint,
        no_systemd,
        not_root,
    )
}


# --- GPU modes, VRAM budget and ComfyUI (issue 4) -------------------------------------------------
def _mode_state(active: str, services: dict[str, str]) -> dict:
    """Answer of roles.modes.ModeTargets: ``active`` target up, each service with its state."""
    lines = []
    for target in ("rigup-llm.target", "rigup-media.target"):
        lines.append(f"@target {target} {'active' if target == active else 'inactive'}")
        lines += [f"@wants {target} {unit} {state}" for unit, state in services.items()
                  if (unit == "vllm.service") == (target == "rigup-llm.target")]  # fmt: skip
    return {"for t in rigup-llm.target rigup-media.target": lines}


def _running(*units: str) -> dict:
    """pyinfra's SystemdStatus answers: each unit active (SubState=running)."""
    return {
        re.compile(rf"--property SubState '?{re.escape(u)}"): [f"Id={u}", "SubState=running"]
        for u in units
    }


def llm_mode_running():
    """A converged rig in the LLM mode: vllm.service up, the media mode's ComfyUI down."""
    return {
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        **_running("vllm.service"),
        **_mode_state(
            "rigup-llm.target", {"vllm.service": "active", "comfyui.service": "inactive"}
        ),
    }, {}


def media_mode_by_user():
    """The owner switched to the media mode with rigup-mode; the default is still llm."""
    return {
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        **_running("comfyui.service"),
        **_mode_state(
            "rigup-media.target", {"vllm.service": "inactive", "comfyui.service": "active"}
        ),
    }, {}


def media_oversubscribed():
    """VoxCPM2 (8 GiB) put on ComfyUI's GPU, which ComfyUI fills but for a 1 GiB reserve."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "voxcpm_vram_gib": 8.0,
        "voxcpm_gpu_index": 0,
    }


def llm_oversubscribed():
    """vLLM asked for 99 % of each card, plus its CUDA context outside that budget."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "vllm_gpu_memory_utilization": 0.99
    }


def comfyui_highvram():
    """--highvram in comfyui_extra_args: defeats offloading on 24 GB cards."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "comfyui_extra_args": ["--highvram"]
    }


def comfyui_on_cpu_no_gpu():
    """The lab's shape: no GPU declared, ComfyUI on the CPU, media mode at boot."""
    return {**_ubuntu_2604(), **_mirror_present()}, {
        "nvidia_gpu_count": 0,
        "comfyui_cpu": True,
        "rigup_mode": "media",
    }


SCENARIOS.update(
    {
        f.__name__: f
        for f in (
            llm_mode_running,
            media_mode_by_user,
            media_oversubscribed,
            llm_oversubscribed,
            comfyui_highvram,
            comfyui_on_cpu_no_gpu,
        )
    }
)
