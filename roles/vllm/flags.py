"""Pure rendering of the vLLM service: ``vllm serve`` arguments, environment and ExecStart line.

Everything here is a function of the settings mapping (``host.data`` or a dict), so the unit tests
check it directly, and the deploy ships the very same argument list to the host, where vLLM's
own parser checks it (files/vllm/check_args.py). Pure: no pyinfra import (benchmarks/gpu-serve
renders the same arguments on a GPU machine without it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from roles.common.command_line import exec_line
from roles.common.setting import render
from roles.common.urls import local_probe_url
from roles.vllm.paths import VllmPaths
from roles.vllm.settings import DEV_MODE_ENV, SETTINGS, VllmSettings

if TYPE_CHECKING:  # roles.cluster's package deploys with pyinfra; this module renders without it
    from roles.cluster.member import ClusterMember

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


def serve_args(
    data: Mapping[str, Any] | Any, model_dir: str, member: ClusterMember | None = None
) -> list[str]:
    """Arguments that follow ``vllm serve`` for the checkpoint at ``model_dir``: the managed ones
    (:func:`managed_args`) then ``vllm_extra_args``."""
    extra = VllmSettings.of(data).vllm_extra_args or []
    return [*managed_args(data, model_dir, member), *(str(a) for a in extra)]


def managed_args(
    data: Mapping[str, Any] | Any, model_dir: str, member: ClusterMember | None = None
) -> list[str]:
    """The arguments rigup's settings decide (no ``vllm_extra_args``): the checkpoint, then each
    flag of roles/vllm/settings.py ``SETTINGS`` in its declared order and form
    (roles.common.setting: a value, a ``--x``/``--no-x`` switch, compact JSON, nothing when off).

    Shape: ``[model_dir, "--served-model-name", name, "--host", h, "--port", "8000", ...]``. Units:
    ``--max-model-len`` and ``--max-num-batched-tokens`` in tokens, ``--block-size`` in tokens per
    KV block, ``--gpu-memory-utilization`` as a fraction of each GPU's memory. The speculative
    config is compact JSON (``{"method":"mtp","num_speculative_tokens":3}``), as the seed used it.
    ``member``: on a rig of a cluster (roles/cluster) its multi-node flags follow
    (``--pipeline-parallel-size``, ``--nnodes``, ``--node-rank``, ``--master-addr``,
    ``--master-port``, ``--headless`` on followers: ``ClusterMember.vllm_args``).
    """
    cluster = member.vllm_args() if member else []
    return [model_dir, *render(SETTINGS, VllmSettings.of(data)), *cluster]


def service_env(
    data: Mapping[str, Any] | Any,
    home: str,
    toolkit: Mapping[str, str] | None = None,
    member: ClusterMember | None = None,
) -> dict[str, str]:
    """Environment of the vLLM service (written to a 0640 env file, not the unit).

    ``home`` is the service user's state directory; every cache lives below it. Models are read
    offline (HF_HUB_OFFLINE=1) from the placed directory; no telemetry leaves the host; every
    socket the engine opens for itself listens on loopback (:data:`LOOPBACK_ENV`, and
    ``PYTHONPATH`` naming the directory of files/vllm/sitecustomize.py).
    ``toolkit``: CUDA_HOME and PATH of the pinned CUDA toolkit (roles.nvidia.cuda_env), for the
    kernels FlashInfer and Triton compile at run time. ``member``: on a rig of a cluster, vLLM's
    address and gloo's and NCCL's interface are the private link's (``ClusterMember.env``), not
    loopback. ``vllm_server_dev_mode``: ``VLLM_SERVER_DEV_MODE=1``. ``vllm_env`` overrides any of
    these but that one (refused there).
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
        **(member.env() if member else {}),
        # files/vllm/sitecustomize.py: torch.distributed's store on that loopback address too
        # (torch binds it to every interface otherwise)
        "PYTHONPATH": VllmPaths.from_data(data).lib,
    }
    if data.get("vllm_device") != "cpu":
        # PyTorch's sampler instead of FlashInfer's: +1.7-3.0 % decode with MTP on 2x3090
        # (club-3090's measurement; vLLM 0.22.1 uses FlashInfer's on sm_86 by default)
        env["VLLM_USE_FLASHINFER_SAMPLER"] = "0"
    if data.get("vllm_server_dev_mode"):
        # vLLM's dev-mode routes (roles/vllm/settings.py DEV_MODE_ROUTES); the settings check
        # keeps vllm_host on loopback with it
        env[DEV_MODE_ENV] = "1"
    env.update({str(k): str(v) for k, v in (data.get("vllm_env") or {}).items()})
    return env


def exec_start(venv: str, args: list[str]) -> str:
    """The ``ExecStart=`` value: ``<venv>/bin/vllm serve <args...>``, each argument quoted, then
    ``$RIGUP_VLLM_INTERCONNECT_ARGS`` (flags rigup-nvlink derives from the verified
    interconnect; systemd splits the variable into words)."""
    return exec_line([f"{venv}/bin/vllm", "serve", *args]) + " $RIGUP_VLLM_INTERCONNECT_ARGS"


def health_url(data: Mapping[str, Any] | Any, path: str = "/health") -> str:
    """URL of vLLM's ``path`` (``/health``, ``/metrics``, ``/v1/models``) as seen from the host."""
    vllm = VllmSettings.of(data)
    return local_probe_url(str(vllm.vllm_host), vllm.vllm_port, path)
