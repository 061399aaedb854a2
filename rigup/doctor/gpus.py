"""rigup-doctor's driver, GPUs and NVLink sections: nvidia-smi's telemetry, who holds the GPUs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rigup import diagnosis
from rigup import nvidia as nv

from .core import APPS_QUERY, TELEMETRY_FIELDS, Runner, Section, run
from .vllm_metrics import custom_all_reduce


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


def branch_context(cfg: dict) -> dict:
    """What the driver branches' known issues (rigup/diagnosis/driver_branches.py) read of the
    rig's settings besides the driver state: ``gpu_count`` (declared GPUs) and
    ``tensor_parallel`` (vLLM's tensor parallel size)."""
    return {
        "gpu_count": cfg["gpus"]["count"] or 0,
        "tensor_parallel": (cfg.get("vllm") or {}).get("tensor_parallel_size") or 1,
    }


def check_driver(cfg: dict, runner: Runner = run, gpus: list[dict] | None = None) -> Section:
    """The NVIDIA driver (loaded, consistent, why not) and this boot's Xid events; ``gpus``
    (the GPU section's rows: index, pci_bus_id, name) names the GPU of each Xid."""
    section = Section("driver")
    if not cfg["gpus"]["count"]:
        section.verdicts = diagnosis.classify_gpus({"expected_count": 0, "gpus": []})
        return section
    state = {**nv.driver_state(runner), **branch_context(cfg)}
    driver = diagnosis.installed_driver(state.get("packages") or [])
    if driver is not None and driver.branch == 595 and state["tensor_parallel"] > 1:
        state["custom_all_reduce"] = custom_all_reduce(cfg, runner)
    found = diagnosis.classify_state("driver-state", state)
    found += diagnosis.classify_kernel_log(
        "\n".join(state.get("kernel_log") or []), diagnosis.gpu_labels(gpus or [])
    )
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
