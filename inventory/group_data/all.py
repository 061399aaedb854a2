"""rigup settings: every version and tunable, in one place.

This is the one file users edit. Every value applies to every host; an inventory file can override
any of them per host (inventory/lab.py does, for the lab machine). Each line names its source:
  seed      = the rig owner's measured recipe (2x RTX 3090 + NVLink bridge, Ubuntu 26.04)
  vLLM docs = docs.vllm.ai / `vllm serve --help` of the pinned release
  measured  = measured by rigup (figures in the closing notes of the issue that added the line)
Settings are validated (types, ranges, consistency) before any change on a host:
roles/common/settings.py holds the rules, and a bad value stops the run with an error naming it.
"""

# --- Hardware the inventory declares ------------------------------------------------------------
nvidia_gpu_count = 2  # seed: two RTX 3090s; a host with 0 gets services installed, not started

# --- Layout on the host -------------------------------------------------------------------------
rigup_prefix = "/opt/rigup"  # software rigup builds (uv, venvs, on-target check scripts)
rigup_etc_dir = "/etc/rigup"  # rendered configuration (env files, vLLM argv)
rigup_state_dir = "/var/lib/rigup"  # service users' homes and caches (torch/triton/vLLM caches)
rigup_tmp_dir = "/var/tmp/rigup"  # measured: a vLLM install filled the 2.4 GB tmpfs /tmp
uv_cache_dir = "/var/cache/rigup/uv"  # uv's wheel cache; a rebuild re-uses it instead of ~4 GB

# --- Base packages and tools --------------------------------------------------------------------
# Debian/Ubuntu packages every component needs. gcc + python3-dev: Triton (inside vLLM) compiles
# a small C helper at first start (vLLM docs, "installation: requirements").
base_apt_packages = [
    "ca-certificates",
    "curl",
    "python3",
    "python3-venv",
    "python3-dev",
    "build-essential",
]
uv_version = "0.13.9"  # PyPI: latest uv on 2026-11-30; builds every venv from a committed lock

# --- vLLM -----------------------------------------------------------------------------------------
vllm_version = "0.22.1"  # seed; files/vllm/requirements.lock pins it and every dependency
vllm_user = "vllm"  # non-root service user
vllm_python = "python3"  # interpreter for the venv; vLLM 0.22.1 wheel: Requires-Python >=3.10,<3.15
vllm_host = "127.0.0.1"  # loopback by default: put a reverse proxy or SSH tunnel in front
vllm_port = 8000  # vLLM docs: default port of `vllm serve`
vllm_served_model_name = "qwen3.6-27b"  # the name clients send as "model"
vllm_tensor_parallel_size = 2  # seed: TP=2 across the two 3090s
vllm_kv_cache_dtype = "fp8_e5m2"  # seed; vLLM docs: fp8 KV cache halves its memory
# seed: 16. For hybrid (attention + gated-delta-net) models such as Qwen3.6, vLLM 0.22.1 raises the
# attention block size until one page holds a mamba state: 784 with bf16 KV (2x3090 logs), 1600
# with these flags (fp8_e5m2 + MTP 3, measured with vLLM's own code). docs/text-only.md
vllm_block_size = 16
vllm_max_num_batched_tokens = 16384  # seed
vllm_speculative_config = {"method": "mtp", "num_speculative_tokens": 3}  # seed: MTP, 3 tokens
vllm_max_model_len = 262144  # seed: full 256 Ki context (2x3090 log: KV pool 623,873 tokens)
# seed: ~23.4 GB in use on each 24 GB card at TP=2; 0.94 x 24 GiB = 22.6 GiB for vLLM plus
# ~0.8 GiB of CUDA context/NCCL outside the budget (vLLM 0.22.1 default: 0.92, config/cache.py)
vllm_gpu_memory_utilization = 0.94
# How text-only serving is obtained (docs/text-only.md):
#   "language_model_only": vLLM 0.22.1's --language-model-only flag, config.json untouched
#   "strip_vision_config": the seed's edit (vision_config removed from config.json, original kept)
vllm_text_only_method = "language_model_only"
vllm_extra_args = []  # more `vllm serve` flags, checked by vLLM's own parser like the rest
vllm_start_timeout_s = 1800  # model load + torch.compile + CUDA graphs: 3090 owners report 5-15 min
vllm_env = {}  # extra environment for the service (e.g. {"VLLM_LOGGING_LEVEL": "DEBUG"})

# --- The LLM checkpoint -------------------------------------------------------------------------
model_store_dir = (
    "/srv/rigup/models"  # one versioned directory per model: <store>/<name>/<revision>
)
model_name = "qwen3.6-27b-int4-autoround"  # directory name in the store
model_revision = "mirror-2026-11"  # version label of the copy (a hub commit once downloads land)
# Where the checkpoint comes from. "local": a directory on the target (a backup disk, a NAS mount,
# a mirror). Hugging Face / ModelScope sources come with the model-acquisition work.
model_source = "local"
model_local_path = "/srv/mirror/Qwen3.6-27B-int4-AutoRound"

# --- GPU modes and VRAM budget (issue 4) ----------------------------------------------------------
# vLLM at TP=2 fills both cards, so the rig runs one mode at a time: "llm" (rigup-llm.target:
# vllm.service) or "media" (rigup-media.target: comfyui.service, voxcpm.service). This is the mode
# at boot and after a fresh deploy; switch at any time with `rigup-mode llm|media`.
rigup_mode = "llm"
nvidia_gpu_vram_gib = 24.0  # RTX 3090: 24 GiB (24576 MiB) per card (NVIDIA spec sheet)
# CUDA context + NCCL/cuBLAS workspaces per process per GPU, outside vLLM's own budget.
# seed: 23.4 GB in use per card with vllm_gpu_memory_utilization 0.94 (0.94 x 24 = 22.6 GiB)
cuda_context_gib = 0.8

# --- ComfyUI (issue 4) ------------------------------------------------------------------------------
comfyui_install = True  # False leaves ComfyUI off this host (and out of the VRAM budget)
# Source: a git URL, or an absolute path to a git mirror on the host (firewalled rigs, the lab).
comfyui_git_url = "https://github.com/comfyanonymous/ComfyUI.git"
# ComfyUI v0.8.0 release commit ("ComfyUI v0.8.0", 2026-01-07), the newest release this repo could
# verify from a mirror; files/comfyui/requirements.lock follows its requirements.txt. The FLUX.2
# Dev nodes need >= 0.3.71 (Comfy-Org workflow templates); the LTX-2.3 templates were saved with
# core nodes up to 0.22.0, so bump this pin (and the lock) before serving LTX-2.3.
comfyui_commit = "fc0cb10bcbee6e73ed3caf34c27f7bde4559a07f"
comfyui_version = "0.8.0"  # comfyui_version.py at comfyui_commit (checked after checkout)
comfyui_user = "comfyui"  # non-root service user; owns comfyui_base_dir
comfyui_python = "python3"  # interpreter for the venv; ComfyUI v0.8.0: requires-python >=3.10
comfyui_host = "127.0.0.1"  # loopback by default (--listen); ComfyUI has no authentication
comfyui_port = 8188  # ComfyUI's default --port
# --base-directory: models/, custom_nodes/, input/, output/, user/, temp/ (user files live here)
comfyui_base_dir = "/srv/rigup/comfyui"
comfyui_cpu = False  # True: --cpu (no GPU; slow): the lab runs ComfyUI this way
comfyui_gpu_index = 0  # --cuda-device in media mode (VoxCPM2 takes the other card)
# --reserve-vram: GiB ComfyUI leaves free on its card; ComfyUI takes the rest (VRAM budget).
# ComfyUI's own default reserve on Linux is 0.4 GiB (comfy/model_management.py); 1 GiB also
# leaves room for a desktop session on the card.
comfyui_reserve_vram_gib = 1.0
comfyui_extra_args = []  # more flags, checked by the pinned ComfyUI's own parser; never
#                          --highvram/--gpu-only on 24 GB cards (refused)
comfyui_start_timeout_s = 600  # import of torch + custom nodes until GET /system_stats answers
comfyui_env = {}  # extra environment for the service
# Model manifests (files/comfyui/models/<name>.json) placed into comfyui_base_dir/models.
comfyui_models = ["flux2-dev", "ltx-2.3"]
