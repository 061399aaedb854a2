"""The GPU serving check's steps on a started engine: wait for it, run the API checks tests/infra
runs (roles/vllm/api_checks.py), read its start from its log (engine_start_facts), measure
rigup-bench's rows (rigup/bench, the rig's own code), and write the summary."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuserve import engine
from gpuserve.rigup import host_package, pure, settings


def host_lib() -> Path:
    """rigup's host package, in a temporary ``lib`` first on ``sys.path`` (once per process).
    Returns the directory."""
    for p in sys.path:
        if p.endswith("rigup-gpu-lib"):
            return Path(p)
    return host_package(Path(tempfile.mkdtemp(prefix="rigup-")) / "rigup-gpu-lib")


def _libs(run: Path):
    """rigup.metrics, rigup.bench as a rig imports them."""
    host_lib()
    from rigup import bench, metrics

    return metrics, bench


def api_checks(record: dict) -> list[dict]:
    """The API checks tests/infra runs, every one to the end: ``[{"check", "ok", ...}]``."""
    c = pure("roles.vllm.api_checks")
    api = c.Api(record["base_url"], record["served_model_name"])
    spec = bool(record.get("speculative_config"))
    reasoning = bool(record.get("reasoning_parser"))
    return c.run_all(
        [
            ("health", lambda: c.health(api)),
            ("models", lambda: c.models(api)),
            ("completion", lambda: c.completion(api)),
            ("chat, reasoning apart", lambda: c.chat_reasoning_apart(api, reasoning)),
            ("stream", lambda: c.stream(api)),
            ("tool call (qwen3_coder)", lambda: c.tool_call(api, False, False, reasoning)),
            ("tool call, streamed", lambda: c.tool_call(api, False, True, reasoning)),
            ("tool call, thinking on", lambda: c.tool_call(api, True, False, reasoning)),
            ("tool call, thinking on, streamed", lambda: c.tool_call(api, True, True, reasoning)),
            ("metrics", lambda: c.metrics(api, speculative=spec)),
        ]
    )


def summary(
    run: Path,
    healthy: bool,
    waited: float,
    why: str,
    checks: list[dict] | None,
    scraped: dict | None = None,
) -> dict:
    """The run's summary, written to ``run/summary.json``: the engine's start facts from its
    log, the GPUs, the checks, and with MTP on ``mtp_acceptance``: ``{"metrics": scraped (what
    :func:`acceptance_since_start` read), "log": the log's SpecDecoding lines summed}``."""
    record = engine.load(run)
    log = (run / "engine.log").read_text(encoding="utf-8", errors="replace")
    facts = pure("rigup.diagnosis.engine_start").engine_start_facts(log)
    out = {
        "kv_prediction": kv_prediction(record, facts.as_dict()),
        "run": str(run),
        "healthy": healthy,
        "waited_s": waited,
        "why_not": why or None,
        "since_start_s": round(time.time() - record["started"], 1),
        "machine": record.get("machine"),
        "overrides": record.get("overrides"),
        "gpu_memory_utilization": record.get("gpu_memory_utilization"),
        "engine": facts.as_dict(),
        "checks": checks,
        "checks_passed": None if checks is None else all(c["ok"] for c in checks),
    }
    if record.get("speculative_config"):
        metrics, _ = _libs(run)
        out["mtp_acceptance"] = {"metrics": scraped, "log": metrics.logged_acceptance(log)}
    (run / "summary.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    return out


#: what a run that served records for the next start (``start --max-model-len-of RUN``)
SERVED = "served.json"


def record_served(run: Path, record: dict) -> dict:
    """Write ``run/served.json`` once the engine answered /health: the context length it serves
    (tokens; after ``--fit`` the length vLLM estimated, not the one asked), its tensor parallel
    size, its per-GPU budget (GiB) and MTP on/off. Returns what it wrote."""
    overrides = record.get("overrides") or {}
    served = {
        "max_model_len": record["max_model_len"],
        "tensor_parallel_size": overrides.get("tensor_parallel_size"),
        "memory_gib": overrides.get("memory_gib"),
        "mtp": bool(record.get("speculative_config")),
    }
    (run / SERVED).write_text(json.dumps(served, indent=1) + "\n", encoding="utf-8")
    return served


def served_max_model_len(run: Path) -> int:
    """The context length (tokens) the engine of ``run`` served, from ``run/served.json``.
    Raises ValueError naming the file when that run never served (no /health answer)."""
    path = run / SERVED
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["max_model_len"])
    except FileNotFoundError:
        raise ValueError(
            f"--max-model-len-of {run}: no {SERVED} there (its engine never answered /health)"
        ) from None
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"--max-model-len-of {run}: {path} is unreadable: {exc}") from None


def kv_prediction(record: dict, facts: dict) -> dict:
    """roles/vllm/kv_budget.py's figures for this engine beside what vLLM logged: the block
    size, the KV pool for the KV memory vLLM found, the memory ``max_model_len`` needs, and the
    estimated maximum model length (``{"error"}`` for a checkpoint it cannot read)."""
    kv_budget = pure("roles.vllm.kv_budget")
    shape_of = pure("roles.common.model_shape").Shape.from_config
    args = record["argv"][3:]

    def flag(name: str, default: str) -> str:
        return args[args.index(name) + 1] if name in args else default

    try:
        config = json.loads(Path(record["overrides"]["model"], "config.json").read_text())
        spec = record.get("speculative_config") or {}
        kv = kv_budget.layout(
            shape_of(config),
            flag("--kv-cache-dtype", "auto"),
            int(flag("--tensor-parallel-size", "1")),
            spec.get("num_speculative_tokens", 0) if spec.get("method") == "mtp" else 0,
            int(flag("--block-size", "16")),
        )
    except (OSError, KeyError, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    length = record["max_model_len"]
    out = {
        "block_size": kv.block_size,
        "block_size_vllm": facts.get("block_size"),
        "needed_gib": round(kv.needed_bytes(length) / kv_budget.GIB, 2),
        "needed_gib_vllm": facts.get("kv_needed_gib"),
    }
    available = facts.get("available_kv_gib") or facts.get("kv_available_gib")
    if available:
        out["estimated_max_model_len"] = kv.estimated_max_model_len(available * kv_budget.GIB)
        out["estimated_max_model_len_vllm"] = facts.get("estimated_max_model_len")
        out["pool_tokens"] = kv.pool_tokens(available * kv_budget.GIB, length)
        out["pool_tokens_vllm"] = facts.get("kv_pool_tokens")
    return out


def acceptance_since_start(record: dict, run: Path) -> dict:
    """MTP acceptance from /metrics since the engine started (:func:`acceptance_of`), or
    ``{"error"}`` when /metrics did not answer."""
    c = pure("roles.vllm.api_checks")
    status, text = c.Api(record["base_url"], record["served_model_name"]).request(
        "/metrics", key=None
    )
    if status != 200:
        return {"error": f"/metrics answered {status or 'nothing'}: {text[:200]}"}
    return acceptance_of(text, run)


def acceptance_of(text: str, run: Path) -> dict:
    """MTP acceptance in one /metrics answer (Prometheus text), counted since the engine
    started: rigup.metrics' ``{"rate", "mean_length", "per_position", "drafts",
    "draft_tokens", "accepted"}``, or with no draft made only the counters as read
    (``{"drafts", "draft_tokens", "accepted"}``, None where vLLM exports no such counter)."""
    metrics, _ = _libs(run)
    w = metrics.window(None, metrics.parse(text))
    return metrics.acceptance(w) or {k: w[k] for k in ("drafts", "draft_tokens", "accepted")}


def bench_config(record: dict, run: Path) -> dict[str, Any]:
    """rigup-bench's configuration (the keys roles/doctor/config.py gives a rig) for this engine."""
    s = settings()
    args = record["argv"][3:]

    def flag(name: str) -> str | None:
        return args[args.index(name) + 1] if name in args else None

    return {
        "vllm": {
            "version": s.get("vllm_version"),
            "served_model_name": record["served_model_name"],
            "model_dir": record["overrides"]["model"],
            "model": {"name": Path(record["overrides"]["model"]).name},
            "base_url": record["base_url"],
            "health_url": f"{record['base_url']}/health",
            "metrics_url": f"{record['base_url']}/metrics",
            "cli": [record["argv"][0], record["argv"][1]],
            "api_key_file": str(run / "no-api-key"),
            "serve_args": record["argv"][3:],
            "max_model_len": record["max_model_len"],
            "block_size": record["block_size"],
            "speculative_config": record.get("speculative_config"),
            "kv_cache_dtype": flag("--kv-cache-dtype") or "auto",
            "tensor_parallel_size": int(flag("--tensor-parallel-size") or 1),
            "unit": "vllm.service",
        },
        "gpus": {"count": len((record.get("machine") or {}).get("gpus") or [])},
        "bench": {
            "results": str(run / "bench"),
            "rows": [dict(r) for r in s["bench_rows"]],
            "seed_source": s.get("bench_seed_source"),
            "seed_acceptance": s.get("bench_seed_acceptance"),
            "arms": {},
        },
    }


def bench(run: Path, site: Path | None, rows: list[str] | None, scale: float) -> dict:
    """rigup-bench's rows against the engine of ``run`` (no arms: there is no vllm.service to
    restart here), labelled with the machine and MTP on/off; saved under ``run/bench``."""
    record = engine.load(run)
    _, rb = _libs(run)
    if site is not None:  # vllm bench serve runs from the installed wheelhouse too
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p
        )
    cfg = bench_config(record, run)
    plan = rb.plan(cfg, rows, None, scale, False)
    result = rb.bench(cfg, plan)
    machine = record.get("machine") or {}
    gpus = machine.get("gpus") or []
    result["machine"] = {
        "gpu": gpus[0]["name"] if gpus else None,
        "gpu_count": len(gpus),
        "tensor_parallel_size": record["overrides"].get("tensor_parallel_size"),
        "mtp": bool(record.get("speculative_config")),
        "gpu_memory_utilization": record.get("gpu_memory_utilization"),
        "memory_gib": record["overrides"].get("memory_gib"),
    }
    result["path"] = rb.save(cfg, result)
    result["table"] = machine_line(result["machine"]) + "\n" + rb.table(result)
    return result


def machine_line(m: dict) -> str:
    """The bench's label: ``machine: 1 x NVIDIA H200, tensor parallel 1, MTP on, 24 GiB a GPU``."""
    budget = f", {m['memory_gib']:g} GiB a GPU" if m.get("memory_gib") else ""
    return (
        f"machine: {m['gpu_count']} x {m['gpu'] or 'no GPU'}, tensor parallel "
        f"{m['tensor_parallel_size'] or 'as set'}, MTP {'on' if m['mtp'] else 'off'}{budget}"
    )
