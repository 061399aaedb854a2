"""Pure rendering of the vLLM service: ``vllm serve`` arguments, environment and ExecStart line.

Everything here is a function of the settings mapping (``host.data`` or a dict), so the unit tests
check it directly, and the deploy ships the very same argument list to the host, where vLLM's
own parser checks it (files/vllm/check_args.py).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from roles.common.service import exec_line
from roles.common.urls import local_probe_url
from roles.vllm.paths import VllmPaths

#: Where vLLM's engine reaches its own processes on one rig: loopback, so none of its internal
#: sockets (unauthenticated, pickle-based) listens on another address. Read by vLLM 0.22.1 at
#: (vllm/utils/network_utils.py, vllm/envs.py), gloo and NCCL:
LOOPBACK_ENV = {
    # get_ip(): the address of the engine's message queues and of the single-process executor's
    # torch.distributed init; unset, the address of the default route
    "VLLM_HOST_IP": "127.0.0.1",
    # get_loopback_ip(): the multiprocess executor's (tensor parallel) torch.distributed init
    "VLLM_LOOPBACK_IP": "127.0.0.1",
    # gloo, every vLLM process group's CPU side (the CPU build's tensor parallel): its pairs
    # listen on this interface; unset, on the address the host name resolves to
    "GLOO_SOCKET_IFNAME": "lo",
    # NCCL's bootstrap and socket transport; unset, any interface but lo and docker*
    "NCCL_SOCKET_IFNAME": "lo",
}


def serve_args(data: Mapping[str, Any] | Any, model_dir: str) -> list[str]:
    """Arguments that follow ``vllm serve`` for the checkpoint at ``model_dir``: the managed ones
    (:func:`managed_args`) then ``vllm_extra_args``."""
    return [*managed_args(data, model_dir), *(str(a) for a in data.get("vllm_extra_args") or [])]


def managed_args(data: Mapping[str, Any] | Any, model_dir: str) -> list[str]:
    """The arguments rigup's settings decide, in a stable order (no ``vllm_extra_args``).

    Shape: ``[model_dir, "--served-model-name", name, "--host", h, "--port", "8000", ...]``. Units:
    ``--max-model-len`` and ``--max-num-batched-tokens`` in tokens, ``--block-size`` in tokens per
    KV block, ``--gpu-memory-utilization`` as a fraction of each GPU's memory. The speculative
    config is compact JSON (``{"method":"mtp","num_speculative_tokens":3}``), as the seed used it.
    """
    args = [
        model_dir,
        "--served-model-name", str(data.get("vllm_served_model_name")),
        "--host", str(data.get("vllm_host")),
        "--port", str(data.get("vllm_port")),
        "--tensor-parallel-size", str(data.get("vllm_tensor_parallel_size")),
        "--kv-cache-dtype", str(data.get("vllm_kv_cache_dtype")),
        "--block-size", str(data.get("vllm_block_size")),
        "--max-num-batched-tokens", str(data.get("vllm_max_num_batched_tokens")),
        "--max-model-len", str(data.get("vllm_max_model_len")),
        "--gpu-memory-utilization", str(data.get("vllm_gpu_memory_utilization")),
    ]  # fmt: skip
    spec = data.get("vllm_speculative_config")
    if spec:
        args += ["--speculative-config", json.dumps(dict(spec), separators=(",", ":"))]
    if data.get("vllm_text_only_method") == "language_model_only":
        args.append("--language-model-only")
    args += ["--max-num-seqs", str(data.get("vllm_max_num_seqs"))]
    args.append(
        "--enable-prefix-caching"
        if data.get("vllm_enable_prefix_caching")
        else "--no-enable-prefix-caching"
    )
    args.append(
        "--enable-chunked-prefill"
        if data.get("vllm_enable_chunked_prefill")
        else "--no-enable-chunked-prefill"
    )
    threshold = data.get("vllm_long_prefill_token_threshold")
    if threshold:
        args += ["--long-prefill-token-threshold", str(threshold)]
    if data.get("vllm_reasoning_parser"):
        args += ["--reasoning-parser", str(data.get("vllm_reasoning_parser"))]
    if data.get("vllm_tool_call_parser"):
        args += [
            "--enable-auto-tool-choice",
            "--tool-call-parser",
            str(data.get("vllm_tool_call_parser")),
        ]
    generation = data.get("vllm_override_generation_config")
    if generation:
        args += [
            "--override-generation-config",
            json.dumps(dict(generation), separators=(",", ":"), sort_keys=True),
        ]
    return args


def service_env(
    data: Mapping[str, Any] | Any, home: str, toolkit: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment of the vLLM service (written to a 0640 env file, not the unit).

    ``home`` is the service user's state directory; every cache lives below it. Models are read
    offline (HF_HUB_OFFLINE=1) from the placed directory; no telemetry leaves the host; every
    socket the engine opens for itself listens on loopback (:data:`LOOPBACK_ENV`, and
    ``PYTHONPATH`` naming the directory of files/vllm/sitecustomize.py).
    ``toolkit``: CUDA_HOME and PATH of the pinned CUDA toolkit (roles.nvidia.cuda_env), for the
    kernels FlashInfer and Triton compile at run time. ``vllm_env`` overrides any of these.
    """
    env = {
        **(toolkit or {}),
        "HOME": home,
        "HF_HOME": f"{home}/huggingface",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CACHE_ROOT": f"{home}/vllm-cache",
        "TRITON_CACHE_DIR": f"{home}/triton-cache",
        "TORCHINDUCTOR_CACHE_DIR": f"{home}/inductor-cache",
        "XDG_CACHE_HOME": f"{home}/cache",
        "TMPDIR": f"{home}/tmp",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        **LOOPBACK_ENV,
        # files/vllm/sitecustomize.py: torch.distributed's store on that loopback address too
        # (torch binds it to every interface otherwise)
        "PYTHONPATH": VllmPaths.from_data(data).lib,
    }
    if data.get("vllm_device") != "cpu":
        # PyTorch's sampler instead of FlashInfer's: +1.7-3.0 % decode with MTP on 2x3090
        # (club-3090's measurement; vLLM 0.22.1 uses FlashInfer's on sm_86 by default)
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    env.update({str(k): str(v) for k, v in (data.get("vllm_env") or {}).items()})
    return env


def exec_start(venv: str, args: list[str]) -> str:
    """The ``ExecStart=`` value: ``<venv>/bin/vllm serve <args...>``, each argument quoted, then
    ``$RIGUP_VLLM_INTERCONNECT_ARGS`` (flags rigup-nvlink derives from the verified
    interconnect; systemd splits the variable into words)."""
    return exec_line([f"{venv}/bin/vllm", "serve", *args]) + " $RIGUP_VLLM_INTERCONNECT_ARGS"


def health_url(data: Mapping[str, Any] | Any, path: str = "/health") -> str:
    """URL of vLLM's ``path`` (``/health``, ``/metrics``, ``/v1/models``) as seen from the host."""
    return local_probe_url(str(data.get("vllm_host")), data.get("vllm_port"), path)
