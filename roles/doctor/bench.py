"""rigup-bench: the seed's benchmark rows with vLLM's own ``vllm bench serve``, against the
running vllm.service, with /metrics deltas, GPU readings, a prefix-cache self-test, A/B arms and
a JSON record per run.

Standard library only; installed on the host as ``rigup_bench.py``. The load generator is vLLM's:
``<vLLM venv>/bin/python <vLLM bin>/vllm_cli.py bench serve ...`` (the same entry point on the
GPU and the CPU build of vLLM), with the served model's tokenizer from the placed checkpoint.
Figures are printed and recorded, never judged: a row's figure is what vLLM's result JSON says
(roles/doctor/settings.py FIGURES).

An arm restarts vllm.service with a temporary drop-in under /run (rendered at converge:
``<etc>/doctor/arms/<arm>.conf``), runs its rows, then removes it, restarts the configured
service and verifies it (no drop-in of rigup-bench, the same ExecStart and environment files as
before, /health and /v1/models answering), also when the run is interrupted (SIGINT, SIGTERM,
SIGHUP); a reboot removes a drop-in left by a killed run, and ``rigup-bench --restore`` too.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

try:  # on the host: installed beside this module by rigup
    import rigup_diagnosis as diagnosis
    import rigup_doctor as doctor
    import rigup_metrics as metrics
    import rigup_units as units
except ImportError:  # on the controller
    from roles.common import diagnosis, units
    from roles.doctor import checks as doctor
    from roles.doctor import metrics

#: Keys of vLLM's result JSON kept in rigup's record (benchmarks/serve.py:987-1077).
RESULT_KEYS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_concurrency",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "spec_decode_acceptance_rate",
    "spec_decode_acceptance_length",
)
#: What each figure is, in the table's "how" column.
HOW = {
    "decode": "1000 / median TPOT",
    "prefill": "input tokens / median TTFT",
    "throughput": "output tokens / duration, all users",
    "e2e": "median end-to-end latency",
    "cold-ttft": "median TTFT, fresh cache_salt and seed",
}
UNITS = {"decode": "tok/s", "prefill": "tok/s", "throughput": "tok/s", "e2e": "s", "cold-ttft": "s"}
GPU_FIELDS = (
    "index",
    "temperature.gpu",
    "clocks.sm",
    "clocks.max.sm",
    "power.draw",
    "power.limit",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
    "clocks_event_reasons.sw_power_cap",
)
#: A card this much warmer after a run than before is heat-soaked (C).
HEAT_SOAK_C = 10.0


class Refused(Exception):
    """rigup-bench will not run here (the message says why and what to do); nothing started."""


class Interrupted(Exception):
    """A signal ended the run (SIGINT, SIGTERM, SIGHUP)."""


def run(argv: list[str], env: dict[str, str] | None = None, timeout: float | None = None):
    """Run a command to its end: ``(exit status, stdout + stderr)``; 127 when it is missing. An
    exception while it runs (a signal: :class:`Interrupted`) kills it (subprocess.run does)."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    return proc.returncode, proc.stdout + proc.stderr


@dataclass
class Host:
    """How rigup-bench reaches the host: commands, HTTP, time. The defaults are the real ones."""

    runner: Callable[..., tuple[int, str]] = run
    get: Callable[[str], tuple[int, str]] = doctor.fetch
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = print


# --- rows -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A row as it runs: lengths and counts after ``--scale`` and the served context."""

    concurrency: int
    input_len: int
    output_len: int
    prompts: int


def shape(row: dict, max_model_len: int, scale: float = 1.0, concurrency: int | None = None):
    """The row's lengths times ``scale`` (at least 1 token, 2 generated for a TPOT), its prompt
    count times ``scale`` (at least the concurrency), the input capped so that input + output
    fit ``max_model_len``."""
    c = concurrency or row["concurrency"]
    out = max(
        2 if row["figure"] in ("decode", "e2e", "throughput") else 1,
        round(row["output_len"] * scale),
    )
    inp = max(1, round(row["input_len"] * scale))
    inp = min(inp, max_model_len - out - 1)
    prompts = max(c, round(row["prompts"] * scale))
    return Shape(c, inp, out, prompts)


def bench_argv(
    cfg: dict, s: Shape, *, seed: int, salt: str, result_dir: str, filename: str, label: str
) -> list[str]:
    """``vllm bench serve`` for one pass: the random dataset (no shared prefix), exactly
    ``output_len`` tokens per request (--ignore-eos), the four latency percentiles (e2el must be
    asked for), a per-run ``cache_salt``, no ready-check request (rigup-bench checked /health;
    the check would send the first prompt twice)."""
    v = cfg["vllm"]
    return [
        *v["cli"],
        "bench",
        "serve",
        "--backend",
        "openai",
        "--base-url",
        v["base_url"],
        "--endpoint",
        "/v1/completions",
        "--model",
        v["served_model_name"],
        "--tokenizer",
        v["model_dir"],
        "--dataset-name",
        "random",
        "--random-input-len",
        str(s.input_len),
        "--random-output-len",
        str(s.output_len),
        "--random-range-ratio",
        "0",
        "--num-prompts",
        str(s.prompts),
        "--max-concurrency",
        str(s.concurrency),
        "--request-rate",
        "inf",
        "--ignore-eos",
        "--seed",
        str(seed),
        "--extra-body",
        json.dumps({"cache_salt": salt}),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--ready-check-timeout-sec",
        "0",
        "--disable-tqdm",
        "--label",
        label,
        "--save-result",
        "--result-dir",
        result_dir,
        "--result-filename",
        filename,
    ]


def figure(kind: str, result: dict, s: Shape) -> float | None:
    """The row's figure from vLLM's result JSON (None when vLLM did not report it)."""
    try:
        if kind == "decode":
            return 1000.0 / result["median_tpot_ms"]
        if kind == "prefill":
            return s.input_len / (result["median_ttft_ms"] / 1000.0)
        if kind == "throughput":
            return float(result["output_throughput"])
        if kind == "e2e":
            return result["median_e2el_ms"] / 1000.0
        if kind == "cold-ttft":
            return result["median_ttft_ms"] / 1000.0
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    raise ValueError(f"unknown figure {kind!r}")


def read_scrape(cfg: dict, host: Host) -> metrics.Scrape:
    got = doctor.scrape(cfg, host.get)
    if isinstance(got, str):
        raise RuntimeError(f"vLLM's /metrics: {got}")
    return got


def api_key_env(cfg: dict) -> dict[str, str]:
    """``OPENAI_API_KEY`` for vLLM's benchmark from the root-only key file (vllm bench serve
    sends it as the bearer token); {} when vLLM has no key."""
    try:
        with open(cfg["vllm"]["api_key_file"], encoding="utf-8") as f:
            for line in f:
                key, sep, value = line.strip().partition("=")
                if sep and key == "VLLM_API_KEY" and value:
                    return {"OPENAI_API_KEY": value}
    except OSError:
        pass
    return {}


def run_pass(cfg: dict, host: Host, s: Shape, label: str, *, seed=None, salt=None) -> dict:
    """One ``vllm bench serve`` pass with /metrics read before and after: ``{"result": vLLM's
    JSON (RESULT_KEYS), "window": the /metrics window, "seconds", "seed", "salt"}``."""
    seed = random.randrange(1, 2**31) if seed is None else seed
    salt = salt or f"rigup-bench-{os.urandom(8).hex()}"
    tmp = tempfile.mkdtemp(prefix="rigup-bench-")
    try:
        argv = bench_argv(
            cfg, s, seed=seed, salt=salt, result_dir=tmp, filename="result.json", label=label
        )
        before = read_scrape(cfg, host)
        started = host.clock()
        code, out = host.runner(argv, env=api_key_env(cfg))
        seconds = host.clock() - started
        after = read_scrape(cfg, host)
        path = os.path.join(tmp, "result.json")
        if code != 0 or not os.path.exists(path):
            tail = "\n".join(out.strip().splitlines()[-12:])
            raise RuntimeError(f"vllm bench serve failed (exit {code}):\n{tail}")
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    window = metrics.window(before, after, since=f"the {label} pass")
    return {
        "result": {k: raw.get(k) for k in RESULT_KEYS if k in raw},
        "window": window,
        "seconds": round(seconds, 1),
        "seed": seed,
        "salt": salt,
    }


def run_row(cfg: dict, host: Host, row: dict, scale: float = 1.0) -> dict:
    """One row: its pass (and the baseline pass of an "a -> b" row), the figure, the /metrics
    deltas (prefix cache, speculative decoding, preemptions) and, for a cold row, the proof
    that nothing hit the prefix cache."""
    max_len = cfg["vllm"]["max_model_len"]
    s = shape(row, max_len, scale)
    entry: dict[str, Any] = {
        "id": row["id"],
        "label": row["label"],
        "figure": row["figure"],
        "unit": UNITS[row["figure"]],
        "seed": row.get("seed"),
        "seed_from": row.get("seed_from"),
        **s.__dict__,
        "how": f"c={s.concurrency}, {s.input_len:,} in / {s.output_len:,} out, "
        f"{s.prompts} request{'s' if s.prompts > 1 else ''}; {HOW[row['figure']]}",
    }
    if row.get("baseline_concurrency"):
        b = shape(row, max_len, scale, row["baseline_concurrency"])
        base = run_pass(cfg, host, b, f"{row['id']} c={b.concurrency}")
        entry["value_from"] = figure(row["figure"], base["result"], b)
        entry["baseline"] = {**b.__dict__, "result": base["result"]}
        entry["how"] = f"c={b.concurrency} -> " + entry["how"]
    got = run_pass(cfg, host, s, row["id"])
    w = got["window"]
    entry.update(
        value=figure(row["figure"], got["result"], s),
        result=got["result"],
        seconds=got["seconds"],
        prefix_cache=metrics.prefix_cache(w),
        acceptance=metrics.acceptance(w),
        preemptions=w.get("preemptions"),
        prompt_tokens=w.get("prompt_tokens"),
    )
    if row["figure"] == "cold-ttft":
        hits = w.get("hits") or 0
        entry["cold"] = hits == 0
        entry["cold_proof"] = f"Δvllm:prefix_cache_hits_total = {hits:g}" + (
            ", prefix caching off" if not w.get("queries") else ""
        )
    return entry


def merged_acceptance(rows: list[dict]) -> dict | None:
    """Speculative decoding over every row of an arm, from the rows' /metrics deltas."""
    total = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0, "per_pos": []}
    for r in rows:
        a = r.get("acceptance")
        if not a:
            continue
        total["drafts"] += a["drafts"]
        total["draft_tokens"] += a["draft_tokens"]
        total["accepted"] += a["accepted"]
        per = [p * a["drafts"] for p in a["per_position"]]
        total["per_pos"] = [
            x + y
            for x, y in zip(
                total["per_pos"] + [0.0] * (len(per) - len(total["per_pos"])),
                per + [0.0] * (len(total["per_pos"]) - len(per)),
                strict=True,
            )
        ]
    return metrics.acceptance(total)


# --- GPUs before and after ---------------------------------------------------------------------


def read_gpus(cfg: dict, host: Host) -> list[dict]:
    """Temperature, SM clock, power draw and limit, slowdown reasons of each GPU ([] without)."""
    if not cfg["gpus"]["count"]:
        return []
    code, out = host.runner(
        ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    if code != 0:
        return [{"error": out.strip()[-300:]}]
    rows = doctor.parse_telemetry(out, GPU_FIELDS)
    return [{"index": i, **row} for i, row in sorted(rows.items())]


def heat_note(before: list[dict], after: list[dict]) -> str:
    """ "heat-soaked ..." when a card got HEAT_SOAK_C warmer or slowed down for heat, else ""."""
    notes = []
    was = {g.get("index"): g for g in before}
    for g in after:
        t0, t1 = (was.get(g.get("index")) or {}).get("temperature_c"), g.get("temperature_c")
        thermal = {"hw_thermal_slowdown", "sw_thermal_slowdown"} & set(g.get("reasons") or [])
        if (t0 is not None and t1 is not None and t1 - t0 >= HEAT_SOAK_C) or thermal:
            notes.append(
                f"GPU {g.get('index')} {t0 if t0 is not None else '?'} -> {t1} C"
                + (" (thermal slowdown)" if thermal else "")
            )
    if not notes:
        return ""
    return (
        "heat-soaked: " + ", ".join(notes) + ": later rows ran on a hotter card and a 3090 "
        "clocks down when hot; let it cool and run again for comparable figures"
    )


def gpu_line(gpus: list[dict]) -> str:
    if not gpus:
        return "no GPU (CPU engine)"
    parts = []
    for g in gpus:
        if "error" in g:
            return f"nvidia-smi: {g['error']}"
        parts.append(
            f"GPU {g['index']} {g.get('temperature_c', '?'):g} C, {g.get('clocks_sm_mhz') or 0:g} MHz, "
            f"{g.get('power_draw_w') or 0:g} W of {g.get('power_limit_w') or 0:g} W"
        )
    return "; ".join(parts)


# --- prefix-cache self-test ---------------------------------------------------------------------


def self_test(cfg: dict, host: Host, block: int | None) -> dict:
    """The thread's method: one prompt of at least two attention blocks, sent twice with the same
    cache_salt; the second must raise Δvllm:prefix_cache_hits_total above 0. Its verdict, from
    the diagnosis library, says why when it does not."""
    block = block or cfg["vllm"]["block_size"]
    max_len = cfg["vllm"]["max_model_len"]
    length = min(max_len - 2, 3 * block + 16)
    s = Shape(1, length, 1, 1)
    seed, salt = random.randrange(1, 2**31), f"rigup-self-test-{os.urandom(8).hex()}"
    first = run_pass(cfg, host, s, "self-test 1/2", seed=seed, salt=salt)
    second = run_pass(cfg, host, s, "self-test 2/2", seed=seed, salt=salt)
    w1, w2 = first["window"], second["window"]
    state = {
        **doctor.metrics_state(cfg, w2, block),
        "since": "the second of two identical prompts",
        "self_test": True,
        "prompt_len": length,
    }
    verdicts = [v for v in diagnosis.classify_metrics(state) if v.kind == "prefix-cache"]
    hits2 = w2.get("hits") or 0
    status = (
        "hit" if hits2 > 0 else ("off" if not (w1.get("queries") or w2.get("queries")) else "miss")
    )
    return {
        "status": status,
        "passed": status in ("hit", "off"),
        "prompt_len": length,
        "block_size": block,
        "first": metrics.prefix_cache(w1),
        "second": metrics.prefix_cache(w2),
        "verdict": verdicts[0].as_dict() if verdicts else None,
    }


# --- arms: a temporary drop-in, restored and verified -------------------------------------------


_ARGV = re.compile(r"argv\[\]=(.*?) ;")


def service_snapshot(cfg: dict, host: Host) -> dict[str, str]:
    """What must be the same after an arm: vllm.service's command line (without the run-time
    fields of ``systemctl show``), its environment files, unset variables and drop-ins."""
    _, out = host.runner(
        [
            "systemctl",
            "show",
            cfg["vllm"]["unit"],
            "-pExecStart",
            "-pEnvironmentFiles",
            "-pUnsetEnvironment",
            "-pDropInPaths",
        ]
    )
    props: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key] = (props.get(key, "") + "\n" + value).strip()
    m = _ARGV.search(props.get("ExecStart", ""))
    props["ExecStart"] = m.group(1) if m else props.get("ExecStart", "")
    return props


def restart(cfg: dict, host: Host) -> tuple[int, str]:
    """``rigup-start --restart vllm.service``: returns once /health answers, or fails with the
    diagnosis of its journal (rigup-explain)."""
    return host.runner([cfg["bench"]["rigup_start"], "--restart", cfg["vllm"]["unit"]])


def apply_arm(cfg: dict, host: Host, name: str) -> None:
    """Put the arm's drop-in under /run and restart vLLM with it."""
    arm = cfg["bench"]["arms"][name]
    dropin = cfg["bench"]["dropin"]
    os.makedirs(os.path.dirname(dropin), exist_ok=True)
    shutil.copyfile(arm["dropin"], dropin)
    host.runner(["systemctl", "daemon-reload"])
    code, out = restart(cfg, host)
    if code != 0:
        raise RuntimeError(f"vllm.service did not come up with arm {name}:\n{out.strip()}")
    if dropin not in service_snapshot(cfg, host).get("DropInPaths", ""):
        raise RuntimeError(f"systemd does not read {dropin} for arm {name}")


def restore(cfg: dict, host: Host, snapshot: dict[str, str] | None) -> dict:
    """Remove rigup-bench's drop-in, restart the configured vllm.service and verify it:
    ``{"ok", "checks": [...], "problems": [...]}``."""
    dropin = cfg["bench"]["dropin"]
    removed = os.path.exists(dropin)
    if removed:
        os.remove(dropin)
    host.runner(["systemctl", "daemon-reload"])
    code, out = restart(cfg, host)
    problems, checks = [], []
    if code != 0:
        problems.append(f"vllm.service did not come back up:\n{out.strip()}")
    now = service_snapshot(cfg, host)
    if dropin in now.get("DropInPaths", ""):
        problems.append(f"systemd still reads {dropin}")
    else:
        checks.append("no rigup-bench drop-in")
    if snapshot is not None:
        differs = [k for k in snapshot if snapshot[k] != now.get(k)]
        if differs:
            problems.append(f"vllm.service differs from before the run: {', '.join(differs)}")
        else:
            checks.append("ExecStart, environment files and drop-ins as before the run")
    status, _ = host.get(cfg["vllm"]["health_url"])
    (checks if status == 200 else problems).append(f"GET /health: {status or 'no answer'}")
    status, body = host.get(cfg["vllm"]["base_url"] + "/v1/models")
    named = cfg["vllm"]["served_model_name"] in body
    if status == 401 or (status == 200 and named):
        checks.append(f"GET /v1/models: {status}")
    else:
        problems.append(f"GET /v1/models: {status or 'no answer'}")
    return {"ok": not problems, "removed_dropin": removed, "checks": checks, "problems": problems}


class Signals:
    """While active, SIGINT/SIGTERM/SIGHUP raise :class:`Interrupted`; :meth:`hold` ignores them
    (during the restore)."""

    NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        for name in self.NAMES:
            sig = getattr(signal, name)
            self.saved[sig] = signal.signal(sig, self._raise)
        return self

    def _raise(self, signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    def hold(self) -> None:
        for sig in self.saved:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


# --- preconditions ------------------------------------------------------------------------------


def refuse_unless_ready(cfg: dict, host: Host, busy_ok: bool = False) -> None:
    """Refuse (:class:`Refused`, nothing started) unless the rig is in the LLM mode and
    vllm.service is up and idle, with no arm left over."""
    unit = cfg["vllm"]["unit"]
    llm = next(m for m, spec in cfg["modes"].items() if unit in spec["services"])
    target = cfg["modes"][llm]["target"]
    _, out = host.runner(["systemctl", "is-active", target])
    if out.strip() != "active":
        active = [
            m
            for m, spec in cfg["modes"].items()
            if host.runner(["systemctl", "is-active", spec["target"]])[1].strip() == "active"
        ]
        now = f"the {active[0]} mode" if active else "no mode"
        raise Refused(
            f"the rig is in {now}, not the {llm} mode ({target} is {out.strip() or 'inactive'}): "
            f"`sudo rigup-mode {llm}` switches to it. Nothing was started."
        )
    if os.path.exists(cfg["bench"]["dropin"]):
        raise Refused(
            f"a benchmark arm's drop-in is still in place ({cfg['bench']['dropin']}): "
            "`sudo rigup-bench --restore` first. Nothing was started."
        )
    state, journal = units.read_unit(unit, host.runner, mode=llm, mode_active=True)
    status, _ = host.get(cfg["vllm"]["health_url"])
    if (state.get("active"), state.get("sub")) != ("active", "running") or status != 200:
        why = "; ".join(str(v) for v in units.explain(state, journal) if v.severity != "ok")
        raise Refused(
            f"{unit} is not serving ({state.get('active')}/{state.get('sub')}, /health "
            f"{status or 'no answer'}): {why or 'rigup-doctor says why'}. Nothing was started."
        )
    if not os.path.exists(cfg["vllm"]["cli"][-1]):
        raise Refused(f"{cfg['vllm']['cli'][-1]} is missing: converge (deploys/vllm.py)")
    if not busy_ok:
        scrape = read_scrape(cfg, host)
        busy = (scrape.total(metrics.RUNNING) or 0) + (scrape.total(metrics.WAITING) or 0)
        if busy:
            raise Refused(
                f"vLLM is serving {busy:g} other request(s): the figures would be wrong. Wait "
                "for them, or pass --busy-ok. Nothing was started."
            )


# --- the run --------------------------------------------------------------------------------


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
        "name": name,
        "what": what,
        "warm_up_s": warm["seconds"],
        "rows": done,
        "acceptance": merged_acceptance(done),
        "gpus_before": gpus_before,
        "gpus_after": gpus_after,
        "heat": heat_note(gpus_before, gpus_after),
    }


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


def latest(results: str, complete: bool = False) -> dict | None:
    """The newest record under ``results`` (None when there is none); ``complete``: the newest
    that was neither interrupted nor failed."""
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
            return record
        except (OSError, ValueError):
            continue
    return None


# --- the table ----------------------------------------------------------------------------------


def fmt(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:,.1f} {unit}"


def row_cells(r: dict) -> tuple[str, str, str, str]:
    seed = fmt(r.get("seed"), r["unit"])
    value = fmt(r.get("value"), r["unit"])
    if r.get("seed_from") is not None:
        seed = f"{fmt(r['seed_from'], r['unit'])} -> {seed}"
    if "value_from" in r:
        value = f"{fmt(r.get('value_from'), r['unit'])} -> {value}"
    how = r["how"]
    if r.get("cold") is not None:
        how += f"; cold: {'yes' if r['cold'] else 'NO'} ({r['cold_proof']})"
    return r["label"], seed, value, how


def table(record: dict, markdown: bool = True) -> str:
    """The run as Markdown tables, one per arm, with the seed's figures beside this run's."""
    engine = record.get("engine", "GPU")
    lines = [
        f"rigup-bench {record['started']}: vLLM {record['vllm'].get('version')}, "
        f"{record['vllm'].get('served_model_name')} on the {engine}"
        + (
            " (CPU engine with a tiny test model: figures show the pipeline works, not speed; "
            "they are not comparable with the seed's)"
            if engine == "CPU"
            else ""
        ),
        f"{record['seed_source']}",
    ]
    if record.get("scale", 1.0) != 1.0:
        lines.append(f"lengths and prompt counts scaled by {record['scale']:g} (--scale)")
    for arm in record["arms"]:
        lines += ["", f"arm {arm['name']}: {arm['what']}", ""]
        lines += ["| row | seed | this run | how |", "| --- | --- | --- | --- |"]
        for r in arm["rows"]:
            lines.append("| " + " | ".join(row_cells(r)) + " |")
        a = arm.get("acceptance")
        if a:
            per = ", ".join(f"{p:.2f}" for p in a["per_position"])
            lines.append(
                f"\nspeculative decoding (from /metrics deltas): acceptance {100 * a['rate']:.1f} % "
                f"(seed {100 * record['seed_acceptance']:.1f} %), mean acceptance length "
                f"{a['mean_length']:.2f}, per position {per}"
            )
        else:
            lines.append("\nspeculative decoding: no drafts (off, or not in this engine)")
        lines.append(f"GPUs before: {gpu_line(arm['gpus_before'])}")
        lines.append(f"GPUs after:  {gpu_line(arm['gpus_after'])}")
        if arm.get("heat"):
            lines.append(arm["heat"])
    st = record.get("self_test")
    if st:
        v = st.get("verdict") or {}
        lines += [
            "",
            f"prefix-cache self-test ({st['prompt_len']:,}-token prompt twice, block "
            f"{st['block_size']}): {st['status'].upper()} "
            f"(second: {st['second']['hits']:g} of {st['second']['queries']:g} tokens hit)",
            f"  {v.get('what', '')}: {v.get('why', '')}",
        ]
    if record.get("interrupted"):
        lines.append(f"\ninterrupted by {record['interrupted']}")
    if record.get("error"):
        lines.append(f"\nfailed: {record['error']}")
    if record.get("restored") is not None:
        r = record["restored"]
        lines.append(
            "\nrestored: "
            + (
                "yes, verified (" + "; ".join(r["checks"]) + ")"
                if r["ok"]
                else "NO: " + "; ".join(r["problems"])
            )
        )
    return "\n".join(lines)
