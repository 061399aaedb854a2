"""The run: its plan, each arm's rows, the record saved under the results directory and read
back."""

from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass, field
from typing import Any

from rigup import doctor, units

from . import roofline
from .arms import Signals, apply_arm, restore, service_snapshot
from .core import Host, Interrupted, Refused
from .gpus import heat_note, read_gpus
from .render import fmt
from .rows import Shape, merged_acceptance, run_pass, run_row, self_test


@dataclass
class Plan:
    """What one rigup-bench run does: the configured service's rows, then each arm's."""

    rows: list[dict]
    arms: list[str] = field(default_factory=list)
    arm_rows: dict[str, list[dict]] = field(default_factory=dict)
    scale: float = 1.0
    self_test: bool = True


def plan(cfg: dict, rows: list[str] | None, arms: list[str] | None, scale: float, self_test: bool):
    """The rows to run (all when ``rows`` is None) and the arms (each runs ``rows`` if given,
    else its own ``rows``, else the rows its seed names, else all)."""
    every = cfg["bench"]["rows"]
    known = {r["id"]: r for r in every}
    unknown = [r for r in rows or [] if r not in known]
    if unknown:
        raise Refused(f"unknown row(s) {unknown}; rows: {', '.join(known)}")
    chosen = [known[r] for r in rows] if rows else list(every)
    arm_names = list(cfg["bench"]["arms"]) if arms == ["all"] else list(arms or [])
    missing = [a for a in arm_names if a not in cfg["bench"]["arms"]]
    if missing:
        raise Refused(
            f"unknown arm(s) {missing}; arms: {', '.join(cfg['bench']['arms']) or 'none'}"
        )
    if arms == ["all"]:
        arm_names = [a for a in arm_names if not cfg["bench"]["arms"][a].get("unavailable")]
    for a in arm_names:
        if why := cfg["bench"]["arms"][a].get("unavailable"):
            raise Refused(f"arm {a} cannot run with these settings: {why}")
    arm_rows = {}
    for a in arm_names:
        arm = cfg["bench"]["arms"][a]
        named = [known[r] for r in arm.get("rows") or arm.get("seed", {}) if r in known]
        arm_rows[a] = chosen if rows else (named or list(every))
    return Plan(chosen, arm_names, arm_rows, scale, self_test)


def run_arm(cfg: dict, host: Host, name: str, rows: list[dict], scale: float) -> dict:
    what = (
        "the service as converged" if name == "configured" else cfg["bench"]["arms"][name]["what"]
    )
    seeds = {} if name == "configured" else cfg["bench"]["arms"][name].get("seed", {})
    gpus_before = read_gpus(cfg, host)
    # The first requests after a start are slower (measured in the lab: a prefill of 41 tokens
    # took 5x as long right after a restart): one request of its own (its own prompt, so no row
    # finds it cached) before the rows.
    warm = run_pass(cfg, host, Shape(1, 32, 8, 1), f"{name} warm-up")
    done = []
    for row in rows:
        host.log(f"rigup-bench: arm {name}: row {row['id']} ...")
        entry = run_row(cfg, host, row, scale)
        if name != "configured":
            entry["seed"] = seeds.get(row["id"])
            entry["seed_from"] = None
        done.append(entry)
        host.log(
            f"rigup-bench: arm {name}: row {row['id']}: {fmt(entry.get('value'), entry['unit'])}"
        )
    gpus_after = read_gpus(cfg, host)
    return {
        "roofline": arm_roofline(cfg, host, done),
        "name": name,
        "what": what,
        "warm_up_s": warm["seconds"],
        "rows": done,
        "acceptance": merged_acceptance(done),
        "gpus_before": gpus_before,
        "gpus_after": gpus_after,
        "heat": heat_note(gpus_before, gpus_after),
    }


def arm_roofline(cfg: dict, host: Host, rows: list[dict]) -> dict | None:
    """The decode row against the memory-bandwidth ceiling (roofline.py) on a GPU engine:
    the served checkpoint's config.json, the row's mean context (input + half the output), the
    first GPU's name; None without a measured decode row or a GPU; ``{"error"}`` when the
    config cannot be read."""
    row = next((r for r in rows if r["figure"] == "decode" and r.get("value")), None)
    if row is None or not cfg["gpus"]["count"]:
        return None
    path = os.path.join(cfg["vllm"]["model_dir"], "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        step = roofline.decode_step_bytes(
            config,
            row["input_len"] + row["output_len"] // 2,
            cfg["vllm"].get("kv_cache_dtype") or "auto",
            cfg["vllm"].get("tensor_parallel_size") or 1,
        )
    except (OSError, ValueError) as exc:
        return {"error": f"{path}: {exc}"}
    code, out = host.runner(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    names = [n.strip() for n in out.splitlines() if n.strip()] if code == 0 else []
    mean = (row.get("acceptance") or {}).get("mean_length")
    return roofline.roofline(step, names[0] if names else "an unnamed GPU", row["value"], mean)


def bench(cfg: dict, p: Plan, host: Host | None = None) -> dict:
    """Run the plan; the record (also written as JSON by :func:`save`)."""
    host = host or Host()
    started = dt.datetime.now(dt.UTC)
    record: dict[str, Any] = {
        "started": started.isoformat(timespec="seconds"),
        "engine": "GPU" if cfg["gpus"]["count"] else "CPU",
        "vllm": {
            k: cfg["vllm"].get(k)
            for k in ("version", "served_model_name", "model", "serve_args", "max_model_len")
        },
        "scale": p.scale,
        "seed_source": cfg["bench"]["seed_source"],
        "seed_acceptance": cfg["bench"]["seed_acceptance"],
        "arms": [],
        "interrupted": None,
        "restored": None,
    }
    snapshot = service_snapshot(cfg, host) if p.arms else None
    with Signals() as signals:
        try:
            record["arms"].append(run_arm(cfg, host, "configured", p.rows, p.scale))
            if p.self_test:
                _, journal = units.read_unit(cfg["vllm"]["unit"], host.runner)
                record["self_test"] = self_test(cfg, host, doctor.block_size(journal))
            for name in p.arms:
                host.log(f"rigup-bench: arm {name}: restarting vllm.service with its drop-in ...")
                apply_arm(cfg, host, name)
                record["arms"].append(run_arm(cfg, host, name, p.arm_rows[name], p.scale))
        except Interrupted as exc:
            record["interrupted"] = str(exc)
            host.log(f"rigup-bench: interrupted ({exc})")
        except Exception as exc:  # recorded, the service restored, then re-raised by the caller
            record["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            if p.arms:
                signals.hold()
                host.log("rigup-bench: restoring the configured vllm.service ...")
                record["restored"] = restore(cfg, host, snapshot)
    record["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    return record


def save(cfg: dict, record: dict) -> str:
    """Write the record to ``<results>/<UTC time>.json``; its path."""
    os.makedirs(cfg["bench"]["results"], exist_ok=True)
    stamp = record["started"].replace(":", "").replace("-", "").replace("+0000", "Z")
    path = os.path.join(cfg["bench"]["results"], f"{stamp}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return path


def latest(results: str, complete: bool = False, kind: str | None = "llm") -> dict | None:
    """The newest record under ``results`` (None when there is none); ``complete``: the newest
    that was neither interrupted nor failed; ``kind``: "llm" (the seed's rows, a record without
    a ``kind``), "media" (rigup-bench --media's) or None (either)."""
    try:
        names = sorted(n for n in os.listdir(results) if n.endswith(".json"))
    except OSError:
        return None
    for name in reversed(names):
        try:
            with open(os.path.join(results, name), encoding="utf-8") as f:
                record = {**json.load(f), "path": os.path.join(results, name)}
            if complete and (record.get("interrupted") or record.get("error")):
                continue
            if kind is not None and record.get("kind", "llm") != kind:
                continue
            return record
        except (OSError, ValueError):
            continue
    return None
