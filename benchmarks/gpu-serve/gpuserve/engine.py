"""The engine as rigup runs it, on a GPU machine: ``vllm serve``'s arguments and environment
rendered by roles/vllm/flags.py from inventory/group_data/all.py with this run's overrides,
started in its own session (it outlives the command that started it), waited for, and stopped.

Run state lives in one directory (``--run DIR``): ``engine.log`` (vLLM's stdout and stderr),
``engine.json`` (pid, argv, environment names, GPUs, the overrides) and later ``summary.json``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuserve.rigup import REPO, pure

#: NVLink multicast (NVLS) stays off in every process the engine starts: the lent machines
#: cannot use it (the device README, KINDS.md), and rigup's 3090s have none
NVLS_OFF = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
#: Make a Hopper GPU take the kernel paths a 3090 (sm_86) takes: Marlin INT4 instead of Machete
#: (Hopper-only), and the Triton/FLA gated-delta-net prefill instead of FlashInfer's (Hopper+)
AS_3090_ENV = {"VLLM_DISABLED_KERNELS": "MacheteLinearKernel"}
AS_3090_ARGS = ["--gdn-prefill-backend", "triton"]
#: environment names whose values engine.json leaves out (tokens, keys, passwords)
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
#: vLLM's launcher from rigup (files/vllm/vllm_cli.py): ``vllm serve`` / ``vllm bench serve``
VLLM_CLI = REPO / "files" / "vllm" / "vllm_cli.py"


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_mib: int


def parse_gpus(text: str) -> list[Gpu]:
    """``nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits`` rows."""
    gpus = []
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) == 3 and cols[0].isdigit() and cols[2].isdigit():
            gpus.append(Gpu(int(cols[0]), cols[1], int(cols[2])))
    return gpus


def read_gpus() -> list[Gpu]:
    """This machine's GPUs (nvidia-smi); [] when it has none or nvidia-smi fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_gpus(out.stdout) if out.returncode == 0 else []


@dataclass(frozen=True)
class Overrides:
    """What this run changes in rigup's settings. ``memory_gib``: each GPU's budget in GiB
    (``--gpu-memory-utilization`` = budget / the card's total); ``mtp``: the settings'
    speculative config, or none; ``as_3090``: the 3090's kernel paths on a newer GPU."""

    model: str
    tensor_parallel_size: int | None = None
    max_model_len: int | None = None
    memory_gib: float | None = None
    mtp: bool = True
    enforce_eager: bool = False
    as_3090: bool = False
    port: int | None = None
    #: the NCCL environment and flags rigup-nvlink derived (:func:`interconnect`)
    interconnect_env: tuple[tuple[str, str], ...] = ()
    interconnect_args: tuple[str, ...] = ()


@dataclass
class Rendered:
    argv: list[str]
    env: dict[str, str]
    settings: dict[str, Any] = field(repr=False)
    gpu_memory_utilization: float | None = None


def render(
    settings: dict[str, Any], o: Overrides, gpus: list[Gpu], home: str, toolkit: dict[str, str]
) -> Rendered:
    """``[python, vllm_cli.py, "serve", ...]`` and the engine's environment, rendered by
    roles/vllm/flags.py from ``settings`` with ``o`` applied. Raises ValueError naming every
    bad override at once (before anything starts)."""
    problems = []
    data = dict(settings)
    if not (Path(o.model) / "config.json").is_file():
        problems.append(f"model: {o.model} has no config.json")
    if o.tensor_parallel_size is not None:
        data["vllm_tensor_parallel_size"] = o.tensor_parallel_size
    tp = data["vllm_tensor_parallel_size"]
    if tp < 1 or (gpus and tp > len(gpus)):
        problems.append(f"tensor parallel size {tp}: this machine has {len(gpus)} GPU(s)")
    if o.max_model_len is not None:
        if o.max_model_len < 16:
            problems.append(f"max model len {o.max_model_len}: fewer than 16 tokens")
        data["vllm_max_model_len"] = o.max_model_len
    utilization = None
    if o.memory_gib is not None:
        if not gpus:
            problems.append("memory budget: no GPU answered nvidia-smi to take its total from")
        else:
            total_gib = min(g.memory_total_mib for g in gpus) / 1024
            if not 0 < o.memory_gib < total_gib:
                problems.append(
                    f"memory budget {o.memory_gib} GiB: each GPU has {total_gib:.2f} GiB"
                )
            else:
                utilization = round(o.memory_gib / total_gib, 4)
                data["vllm_gpu_memory_utilization"] = utilization
    if o.port is not None:
        data["vllm_port"] = o.port
    if problems:
        raise ValueError("; ".join(problems))
    if not o.mtp:
        data["vllm_speculative_config"] = None
    extra = list(data.get("vllm_extra_args") or [])
    if o.enforce_eager:
        extra.append("--enforce-eager")
    if o.as_3090:
        extra += AS_3090_ARGS
    data["vllm_extra_args"] = extra
    data["vllm_env"] = {
        **(data.get("vllm_env") or {}),
        **dict(o.interconnect_env),
        **(AS_3090_ENV if o.as_3090 else {}),
        **NVLS_OFF,
    }
    flags = pure("roles.vllm.flags")
    # the interconnect flags follow the unit's arguments, as $RIGUP_VLLM_INTERCONNECT_ARGS does
    argv = [sys.executable, str(VLLM_CLI), "serve", *flags.serve_args(data, o.model),
            *o.interconnect_args]  # fmt: skip
    env = flags.service_env(data, home, toolkit)
    return Rendered(argv, env, data, utilization)


def cuda_toolkit() -> dict[str, str]:
    """CUDA_HOME and PATH of the machine's CUDA toolkit (FlashInfer's JIT needs nvcc), as
    roles.nvidia.cuda_env gives them on a rig; {} when there is none."""
    home = os.environ.get("CUDA_HOME") or "/usr/local/cuda"
    if not Path(home, "bin", "nvcc").exists():
        return {}
    return {"CUDA_HOME": home, "PATH": f"{home}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}"}


def start(r: Rendered, run: Path, site: Path | None, extra: dict[str, Any]) -> dict:
    """Start the engine in a new session (``setsid``: it outlives this command), logging to
    ``run/engine.log``; record ``run/engine.json``. ``site``: the installed wheelhouse, first on
    PYTHONPATH. Returns the record."""
    run.mkdir(parents=True, exist_ok=True)
    for key in ("HOME", "TMPDIR"):
        Path(r.env[key]).mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **r.env}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p
        )
    log = open(run / "engine.log", "ab")  # noqa: SIM115  (the engine keeps it)
    proc = subprocess.Popen(
        r.argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        cwd=str(run),
    )  # fmt: skip
    record = record_of(r, proc.pid, extra)
    (run / "engine.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def record_of(r: Rendered, pid: int, extra: dict[str, Any]) -> dict:
    """The engine record (engine.json): how it was started and what the later steps read."""
    return {
        "pid": pid,
        "started": time.time(),
        "argv": r.argv,
        "env": {k: "(not recorded)" if SECRET.search(k) else r.env[k] for k in sorted(r.env)},
        "gpu_memory_utilization": r.gpu_memory_utilization,
        "served_model_name": r.settings.get("vllm_served_model_name"),
        "base_url": f"http://127.0.0.1:{r.settings.get('vllm_port')}",
        "speculative_config": r.settings.get("vllm_speculative_config"),
        "max_model_len": r.settings.get("vllm_max_model_len"),
        "block_size": r.settings.get("vllm_block_size"),
        "reasoning_parser": r.settings.get("vllm_reasoning_parser"),
        **extra,
    }


def load(run: Path) -> dict:
    """The engine record of ``run``. Raises FileNotFoundError when nothing was started there."""
    return json.loads((run / "engine.json").read_text(encoding="utf-8"))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def wait_healthy(record: dict, timeout_s: float, poll_s: float = 5.0) -> tuple[bool, float, str]:
    """Poll ``/health`` until it answers 200, the engine exits, or ``timeout_s`` passes:
    ``(healthy, seconds waited, why not)``."""
    checks = pure("roles.vllm.api_checks")
    api = checks.Api(record["base_url"], record["served_model_name"], timeout=10)
    started = time.monotonic()
    while True:
        status, _ = api.request("/health", key=None)
        waited = round(time.monotonic() - started, 1)
        if status == 200:
            return True, waited, ""
        if not alive(record["pid"]):
            return False, waited, "the engine exited (its log says why)"
        if waited >= timeout_s:
            return False, waited, f"/health did not answer 200 within {timeout_s:g} s"
        time.sleep(poll_s)


def group_alive(pgid: int) -> bool:
    """Whether any process of the engine's process group (its session: the API server, the
    engine core, the workers) is left; a zombie leader of this process is reaped first."""
    alive(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(record: dict, grace_s: float = 60) -> str:
    """SIGTERM the engine's process group and wait until every process of it is gone (the
    GPU memory with them), SIGKILL after ``grace_s``: how it ended."""
    pid = record["pid"]
    if not group_alive(pid):
        return "not running"
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "not running"
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pid):
            return "stopped (SIGTERM)"
        time.sleep(1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "stopped (SIGTERM)"
    while group_alive(pid) and time.monotonic() < deadline + 30:
        time.sleep(1)
    return f"killed (SIGKILL after {grace_s:g} s)"


def asdict_gpus(gpus: list[Gpu]) -> list[dict]:
    return [asdict(g) for g in gpus]


#: rigup's boot-time NVLink check on a rig (rigup-nvlink.service), run here as it is
RIGUP_NVLINK = REPO / "files" / "nvidia" / "rigup-nvlink"


def parse_env_file(text: str) -> tuple[dict[str, str], list[str]]:
    """rigup-nvlink's EnvironmentFile: (NCCL variables, RIGUP_VLLM_INTERCONNECT_ARGS words)."""
    env = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            env[key.strip()] = value.strip()
    args = env.pop("RIGUP_VLLM_INTERCONNECT_ARGS", "").split()
    return env, args


def interconnect(work: Path, gpu_count: int, expected_links: int, lib: Path) -> dict:
    """What rigup-nvlink verifies on this machine's GPUs and the NCCL environment and ``vllm
    serve`` flags it derives, as on a rig (its script, with rigup's host package in ``lib``):
    ``{"exit", "report", "env", "args"}``."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / "nvlink.json"
    config.write_text(
        json.dumps({"gpu_count": gpu_count, "expected_links": expected_links, "required": False})
    )
    out = work / "interconnect.env"
    got = subprocess.run(
        [sys.executable, str(RIGUP_NVLINK), "--config", str(config), "--env-out", str(out),
         "--json"],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "PYTHONPATH": str(lib)},
    )  # fmt: skip
    env, args = parse_env_file(out.read_text(encoding="utf-8")) if out.exists() else ({}, [])
    return {"exit": got.returncode, "report": (got.stdout + got.stderr)[-3000:], "env": env,
            "args": args}  # fmt: skip
