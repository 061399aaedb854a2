"""ComfyUI with rigup's own arguments under the 24 GiB cap: start, run workflows, measure, stop.

One run (:func:`run`) in ``run_dir``:

1. the ballast (comfygpu/cap.py) takes the GPU down to ``free_gib`` free (``ballast.json``);
2. nvidia-smi samples the GPU (``smi-gpu.csv``: memory.used/total MiB, utilisation, every
   0.5 s) and the processes (``smi-apps.csv``: pid, used MiB);
3. ComfyUI's ``main.py`` starts with the arguments and environment :func:`rigup_service`
   rendered on the controller (``roles.comfyui.flags`` of rigup's settings, only
   ``comfyui_base_dir`` and, when asked, other settings changed), the service home's caches
   moved under ``run_dir/../home``; its output is ``comfyui.log``; sitecustomize caps the total it
   reads and samples torch's allocator (``torch-samples.jsonl``);
4. each workflow (API format) runs through rigup's own client (rigup/media/comfyui.py:
   ``POST /prompt``, ``/ws`` for the step times, ``/history`` for the outcome), its result in
   ``history-<name>.json``;
5. ComfyUI, the samplers and the ballast stop; ``summary.json`` gathers the figures
   (:mod:`comfygpu.summary`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from comfygpu import cap, summary

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent
REPO = BENCH.parents[1]
#: no NVLink multicast, in every process started here (the device's rule)
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def rigup_service(base: Path, overrides: dict) -> dict:
    """rigup's ``main.py`` arguments and service environment (roles/comfyui/flags.py
    ``main_args``/``service_env``) for ``comfyui_base_dir = base`` and ``overrides`` of rigup's
    settings (inventory/group_data/all.py): ``{"argv", "env", "overrides"}``. Needs rigup's
    controller environment (roles.comfyui.settings imports pyinfra), so it runs on the
    controller and the GPU machine reads the rendered file (:func:`run`'s ``service``)."""
    sys.path.insert(0, str(REPO / "benchmarks" / "gpu-serve"))
    from gpuserve.rigup import pure, settings

    flags = pure("roles.comfyui.flags")
    data = settings()
    data.update({"comfyui_base_dir": str(base), **overrides})
    return {"argv": flags.main_args(data), "env": flags.service_env(data), "overrides": overrides}


def _get(url: str, timeout: float = 5.0) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.load(r)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def submit(port: int, workflow: dict, timeout_s: float) -> dict:
    """Run ``workflow`` through rigup's own client (rigup/media/comfyui.py: /prompt, /ws,
    /history); returns its Result as a dict (``messages`` without the preview frames), or
    ``{"status": "client error", "error": ...}`` when ComfyUI went away or timed out."""
    from rigup.media import comfyui

    started = time.time()
    try:
        result = comfyui.run(f"http://127.0.0.1:{port}", workflow, timeout=timeout_s)
    except (comfyui.ComfyUIError, TimeoutError) as exc:
        return {"status": "client error", "error": repr(exc), "submitted": started}
    out = dataclasses.asdict(result)
    out["submitted"] = started
    return out


def _stop(proc: subprocess.Popen | None, grace: float = 30.0) -> None:
    if not proc or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _smi_used_mib() -> int | None:
    """nvidia-smi's memory.used of GPU 0 (MiB); None without nvidia-smi (a CPU run)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return int(out.strip().splitlines()[0])


def run(
    comfyui: Path,
    sites: list[Path],
    base: Path,
    run_dir: Path,
    workflows: list[tuple[str, dict]],
    service: dict,
    free_gib: float | None = cap.DEFAULT_FREE_GIB,
    total_bytes: int = cap.RTX3090_TOTAL_BYTES,
    timeout_s: float = 480.0,
    start_timeout_s: float = 240.0,
) -> dict:
    """One ComfyUI run under the cap (``free_gib`` None: no cap) of ``workflows`` (name, API
    format). Returns the summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    home = run_dir.parent / "home"
    for d in ("models", "custom_nodes", "input", "output", "user"):
        (base / d).mkdir(parents=True, exist_ok=True)
    args = service["argv"]
    base_arg = Path(args[args.index("--base-directory") + 1])
    if base_arg != base:
        raise ValueError(f"the rendered service's --base-directory is {base_arg}, not {base}")
    rig_home = service["env"]["HOME"]
    env = {
        k: v.replace(rig_home, str(home), 1) if v.startswith(rig_home) else v
        for k, v in service["env"].items()
    }
    for key in ("HF_HOME", "TORCH_HOME", "TRITON_CACHE_DIR", "XDG_CACHE_HOME", "TMPDIR"):
        Path(env[key]).mkdir(parents=True, exist_ok=True)
    port = int(args[args.index("--port") + 1])
    record = {
        "argv": ["python3", "main.py", *args],
        "env": env,
        "overrides": service.get("overrides", {}),
        "pythonpath": [str(s) for s in sites],
    }
    procs = {}
    try:
        if free_gib is not None:
            status = run_dir / "ballast.json"
            procs["ballast"] = subprocess.Popen(
                [sys.executable, "-c",
                 "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
                 "from comfygpu.cap import hold; hold(float(sys.argv[2]), Path(sys.argv[3]))",
                 str(BENCH), str(free_gib), str(status)],
                env={**os.environ, **NO_MULTICAST}, stdout=open(run_dir / "ballast.log", "w"),
                stderr=subprocess.STDOUT,
            )  # fmt: skip
            for _ in range(240):
                if status.exists() or procs["ballast"].poll() is not None:
                    break
                time.sleep(0.5)
            if not status.exists():
                raise RuntimeError(
                    f"the ballast did not start: {(run_dir / 'ballast.log').read_text()}"
                )
        record["smi_used_before_comfyui_mib"] = _smi_used_mib()
        smi = shutil.which("nvidia-smi") is not None
        procs["smi_gpu"] = smi and subprocess.Popen(
            ["nvidia-smi", "--query-gpu=timestamp,memory.used,memory.total,utilization.gpu",
             "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=open(run_dir / "smi-gpu.csv", "w"), stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs["smi_apps"] = smi and subprocess.Popen(
            ["nvidia-smi", "--query-compute-apps=timestamp,pid,used_memory",
             "--format=csv,noheader,nounits", "-lms", "500"],
            stdout=open(run_dir / "smi-apps.csv", "w"), stderr=subprocess.DEVNULL,
        )  # fmt: skip
        cap_env = {"COMFYUI_GPU_SAMPLES": str(run_dir / "torch-samples.jsonl")}
        if free_gib is not None:
            cap_env["COMFYUI_GPU_TOTAL_BYTES"] = str(total_bytes)
        py_path = os.pathsep.join([str(HERE / "site_cap"), *[str(s) for s in sites]])
        full_env = {**os.environ, **env, **NO_MULTICAST, **cap_env, "PYTHONPATH": py_path}
        started = time.time()
        procs["comfyui"] = subprocess.Popen(
            [sys.executable, "main.py", *args], cwd=comfyui, env=full_env,
            stdout=open(run_dir / "comfyui.log", "w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        record["comfyui_pid"] = procs["comfyui"].pid
        stats = None
        while time.time() - started < start_timeout_s and procs["comfyui"].poll() is None:
            stats = _get(f"http://127.0.0.1:{port}/system_stats")
            if stats:
                break
            time.sleep(1.0)
        record["ready_s"] = round(time.time() - started, 1) if stats else None
        record["system_stats"] = stats
        record["workflows"] = {}
        for n, (name, workflow) in enumerate(workflows if stats else []):
            if name in record["workflows"]:
                name = f"{name}-{n + 1}"
            (run_dir / f"workflow-{name}.json").write_text(json.dumps(workflow, indent=1))
            result = submit(port, workflow, timeout_s)
            (run_dir / f"history-{name}.json").write_text(json.dumps(result, indent=1))
            record["workflows"][name] = result
            if procs["comfyui"].poll() is not None:
                break
        record["comfyui_exit"] = procs["comfyui"].poll()
    finally:
        for name in ("comfyui", "smi_gpu", "smi_apps", "ballast"):
            _stop(procs.get(name))
        record["outputs"] = sorted(
            f"{p.relative_to(base / 'output')} {p.stat().st_size}"
            for p in (base / "output").rglob("*") if p.is_file()
        )  # fmt: skip
        (run_dir / "record.json").write_text(json.dumps(record, indent=1, default=str))
    result = summary.summarize(run_dir)
    (run_dir / "summary.json").write_text(json.dumps(result, indent=1))
    shutil.rmtree(home / "tmp", ignore_errors=True)
    return result
