"""The whole diagnosis: every section in order (:func:`doctor`), as JSON (:func:`report`) and as
text (:func:`render`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rigup import diagnosis

from .boot import check_boot
from .cluster import check_cluster
from .core import SECTIONS, Fetch, Runner, Section, fetch, run
from .disk import check_disk, check_venvs
from .gpus import check_driver, check_gpus, check_nvlink, holders_sentence
from .services import check_services
from .vllm_metrics import check_metrics, custom_all_reduce, scrape


def doctor(
    cfg: dict,
    runner: Runner = run,
    get: Fetch = fetch,
    window_s: float | None = None,
    only: tuple[str, ...] = SECTIONS,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Section]:
    """Every section of :data:`SECTIONS` in ``only`` (``cluster`` only where doctor.json has
    one: a rig of a cluster of rigs). The /metrics window starts first and the
    other checks run inside it, so the whole diagnosis takes about the window."""
    window_s = cfg["doctor"]["window_s"] if window_s is None else window_s
    started = time.monotonic()
    first = scrape(cfg, get) if "metrics" in only else ""
    sections: dict[str, Section] = {}
    if "boot" in only:
        sections["boot"] = check_boot(cfg, runner)
    wanted = {"driver", "gpus", "services"} & set(only)
    gpus = check_gpus(cfg, runner) if wanted else Section("gpus")
    if "driver" in only:
        sections["driver"] = check_driver(cfg, runner, gpus.facts.get("gpus"))
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
    if "cluster" in only and cfg.get("cluster"):
        sections["cluster"] = check_cluster(cfg, runner)
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
            sections["metrics"] = check_metrics(
                cfg, first, get, facts.get("block_size"), custom_all_reduce(cfg, runner)
            )
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
