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


# --- Models (issue 5) ---
#: roles/model/facts.py ModelCandidates: what the local source finds under model_local_dirs
CANDIDATES = re.compile(r"echo store ")
FREE_BYTES = "df -B1 --output=avail"


def _free(gb: int = 500) -> dict:
    return {FREE_BYTES: ["Avail", str(gb * 10**9)]}


def _mirror_present(free_gb: int = 500) -> dict:
    return {
        CANDIDATES: [f"mirror {MIRROR}"],
        **_free(free_gb),
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
        CANDIDATES: [],
        f"test -d {MIRROR}": ["@absent"],
        f"test -d {PLACED}": ["@absent"],
    }, {}


def not_a_checkpoint():
    """The mirror path exists but holds no config.json."""
    return {
        **_ubuntu_2604(),
        CANDIDATES: [f"mirror {MIRROR}"],
        f"test -d {MIRROR}": ["@present", "12 README.md"],
        f"test -d {PLACED}": ["@absent"],
    }, {}


def no_systemd():
    """A container or chroot without systemd as PID 1."""
    return {**_ubuntu_2604(systemd=False), **_mirror_present()}, {}


def not_root():
    """Connected as an unprivileged user without --sudo."""
    return {**_ubuntu_2604(uid=1000), **_mirror_present()}, {}


def disk_too_small():
    """The checkpoint (18.5 GB on the mirror) does not fit in 10 GB of free space."""
    return {**_ubuntu_2604(), **_driver(), **_mirror_present(free_gb=10)}, {}


def hub_only_unpinned():
    """Only Hugging Face configured, but the LLM manifest is unpinned (no commit known here)."""
    return {**_ubuntu_2604(), **_driver(), CANDIDATES: [], **_free()}, {
        "model_sources": ["huggingface"]
    }


def fresh_rig_run():
    """As fresh_rig, for a real run on @fake: once placed, the checkpoint's config.json reads
    back (what the text-only edit needs at execution time)."""
    responses, overrides = fresh_rig()
    return {f"test -f {PLACED}/config.json": ['{"model_type": "qwen3_5"}'], **responses}, overrides


def fetch_fails():
    """The transfer fails on the host (e.g. a file does not verify): the run must fail there."""
    responses, overrides = fresh_rig_run()
    failure = {
        "success": False,
        "stderr": ["model_fetch: ERROR: config.json: sha256 0000, 1111 expected"],
    }
    return {re.compile(r"model_fetch\.py place"): failure, **responses}, overrides


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
        disk_too_small,
        hub_only_unpinned,
        fresh_rig_run,
        fetch_fails,
    )
}
