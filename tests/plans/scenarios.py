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
        **_voxcpm_copy_present(),  # issue 4: the VoxCPM2 local copy
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


# --- VoxCPM2 (issue 4) ---------------------------------------------------------------------------
VOXCPM_COPY = "/srv/mirror/VoxCPM2"
VOXCPM_PLACED = "/srv/rigup/models/voxcpm2/unverified-2026-11"


def _voxcpm_copy_present() -> dict:
    """The VoxCPM2 snapshot as `hf download openbmb/VoxCPM2` leaves it (file names from voxcpm
    2.0.3's VoxCPM2Model.from_local; sizes illustrative), nothing placed yet, an x86_64 host."""
    return {
        f"test -d {VOXCPM_COPY}": [
            "@present",
            "1830 config.json",
            "4548832 tokenizer.json",
            "1163 tokenizer_config.json",
            "412 special_tokens_map.json",
            "220913592 audiovae.safetensors",
            "4582418688 model.safetensors",
        ],
        f"test -d {VOXCPM_PLACED}": ["@absent"],
        "uname -m": ["x86_64"],
    }


def voxcpm_python_out_of_range():
    """voxcpm 2.0.3 does not support Python 3.13: refused before any change."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {"voxcpm_python_version": "3.13.1"}


def voxcpm_gpu_index_missing():
    """VoxCPM2 on GPU 2 of a host that declares two."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {"voxcpm_gpu_index": 2}


def voxcpm_no_model_copy():
    """The LLM mirror is there, the VoxCPM2 copy is not, nothing placed."""
    return {
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        f"test -d {VOXCPM_COPY}": ["@absent"],
    }, {}


def voxcpm_venv_on_old_python():
    """A converged rig whose VoxCPM2 venv was built on CPython 3.11.9 before the setting moved to
    3.12.16: the venv is rebuilt on the new interpreter."""
    return {
        **_ubuntu_2604(),
        **_driver(),
        **_mirror_present(),
        # PythonVersion of the venv's interpreter, and the venv directory (stat, as on Ubuntu)
        "/opt/rigup/voxcpm/venv/bin/python -c 'import platform": ["3.11.9"],
        "test -e /opt/rigup/voxcpm/venv ||": [
            "user=root group=root mode=drwxr-xr-x atime=1764486000 mtime=1764486000 "
            "ctime=1764486000 size=4096 '/opt/rigup/voxcpm/venv'"
        ],
    }, {}


def voxcpm_firewalled():
    """A rig behind a firewall: CPython from a python-build-standalone mirror on a NAS."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present()}, {
        "voxcpm_python_install_mirror": "file:///mnt/nas/python-build-standalone"
    }


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
        voxcpm_python_out_of_range,
        voxcpm_gpu_index_missing,
        voxcpm_no_model_copy,
        voxcpm_firewalled,
        voxcpm_venv_on_old_python,
    )
}
