"""Signatures of the GPUs as nvidia-smi reports them (rigup-doctor's query) and of NVLink
(nvidia-smi nvlink -s / -e, topo -m): :func:`classify_gpus` and :func:`classify_nvlink`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature, Verdict, classify_state
from .nvidia_smi import LOST_GPU_FIX


def _gpu_names(gpus: list[Mapping[str, Any]]) -> str:
    return " and ".join(f"GPU {g.get('index')}" for g in gpus) or "?"


def _match_gpu_count(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    expected, found = s.get("expected_count"), len(s.get("gpus") or [])
    if not expected or found == expected:
        return None
    return {"found": found, "expected": expected}


def _match_persistence(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    off = [g for g in s.get("gpus") or [] if g.get("persistence_mode") == "Disabled"]
    if not s.get("persistence") or not off:
        return None
    return {"gpus": _gpu_names(off)}


def _match_power_limit(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    want = s.get("power_limit_w")
    if want is None:
        return None
    off = [
        g
        for g in s.get("gpus") or []
        if g.get("power_limit_w") is not None and abs(g["power_limit_w"] - want) > 0.5
    ]
    if not off:
        return None
    got = ", ".join(f"GPU {g['index']} {g['power_limit_w']:g} W" for g in off)
    return {"got": got, "want": f"{want:g}"}


def _throttled(reasons: tuple[str, ...]) -> Callable[[Mapping[str, Any]], Mapping[str, Any] | None]:
    def match(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
        hit = [g for g in s.get("gpus") or [] if set(g.get("reasons") or ()) & set(reasons)]
        if not hit:
            return None
        temps = ", ".join(
            f"GPU {g['index']} {g['temperature_c']:g} C"
            for g in hit
            if g.get("temperature_c") is not None
        )
        return {"gpus": _gpu_names(hit), "temps": temps or "temperature not reported"}

    return match


def _match_gpus_ok(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    gpus = s.get("gpus") or []
    if not gpus:
        return None
    names = sorted({str(g.get("name")) for g in gpus})
    limits = sorted({f"{g['power_limit_w']:g} W" for g in gpus if g.get("power_limit_w")})
    temps = ", ".join(
        f"{g['temperature_c']:g} C" for g in gpus if g.get("temperature_c") is not None
    )
    persistence = {str(g.get("persistence_mode")) for g in gpus}
    return {
        "count": len(gpus),
        "names": " + ".join(names),
        "limits": "/".join(limits) or "not reported",
        "temps": temps or "not reported",
        "persistence": "on" if persistence == {"Enabled"} else "/".join(sorted(persistence)),
    }


_GPU_STATE: list[Signature] = [
    Signature(
        id="gpu-count",
        source="gpu-state",
        severity=FAIL,
        what="{found} NVIDIA GPU(s) answer, {expected} declared (nvidia_gpu_count)",
        why="a GPU the driver does not list is missing from the bus or was dropped by the driver",
        fix="`lspci -d 10de:` shows whether the cards are on the PCIe bus; the kernel log's Xid "
        "lines (below) say why the driver dropped one; " + LOST_GPU_FIX,
    ),
    Signature(
        id="gpu-persistence",
        source="gpu-state",
        severity=WARN,
        what="persistence mode is off on {gpus}",
        why="nvidia-persistenced is not holding the driver state: each client re-initialises the "
        "GPUs (slow starts) and the power limit may be lost",
        fix="`systemctl status nvidia-persistenced`; a converge (deploys/nvidia.py) enables it",
    ),
    Signature(
        id="gpu-power-limit",
        source="gpu-state",
        severity=WARN,
        what="power limit {got}, {want} W configured (nvidia_power_limit_w)",
        why="rigup-gpu-power sets it at boot; something changed it since (nvidia-smi -pl, another "
        "tool) or the unit failed",
        fix="`sudo systemctl restart rigup-gpu-power` applies it again; `journalctl -u "
        "rigup-gpu-power` shows its read-back",
    ),
    Signature(
        id="gpu-throttle/thermal",
        source="gpu-state",
        severity=WARN,
        what="{gpus} slowed down by heat ({temps})",
        why="nvidia-smi reports a thermal slowdown: the clocks are held down until the card "
        "cools; a heat-soaked 3090 decodes slower",
        fix="check airflow, the case fans and the cards' fans (and the memory pads of a 3090); "
        "benchmark a cool card for comparable figures",
    ),
    Signature(
        id="gpu-throttle/power-brake",
        source="gpu-state",
        severity=WARN,
        what="{gpus} slowed down by the hardware power brake",
        why="the board or the power supply signalled an over-current (HW Power Brake Slowdown)",
        fix="check the power supply's capacity and the PCIe power cables (no daisy-chained "
        "pigtail for a 3090)",
    ),
    Signature(
        id="gpu-throttle/hw-slowdown",
        source="gpu-state",
        severity=WARN,
        what="{gpus} slowed down by the hardware (HW Slowdown: {temps})",
        why="the GPU halves its clocks for a thermal or power emergency signal",
        fix="check cooling and power delivery; `nvidia-smi -q -d PERFORMANCE` shows which",
    ),
    Signature(
        id="gpu-throttle/power-cap",
        source="gpu-state",
        severity=OK,
        what="{gpus} clocked down to stay within the power limit",
        why="expected under load with the limit rigup sets (nvidia_power_limit_w; the seed's "
        "290 W)",
        fix="nothing to do",
    ),
    Signature(
        id="gpus",
        source="gpu-state",
        severity=OK,
        what="{count} GPU(s): {names}; persistence {persistence}; power limit {limits}; {temps}",
        why="read from nvidia-smi now",
        fix="nothing to do",
    ),
]
_GPU_STATE.insert(
    0,
    Signature(
        id="gpus-none",
        source="gpu-state",
        severity=OK,
        what="no NVIDIA GPU declared (nvidia_gpu_count = 0)",
        why="vLLM serves on the CPU here; the driver, GPU and NVLink checks do not apply",
        fix="nothing to do",
    ),
)
_GPU_MATCHERS = {
    "gpus-none": lambda s: {} if s.get("expected_count") == 0 else None,
    "gpu-count": _match_gpu_count,
    "gpu-persistence": _match_persistence,
    "gpu-power-limit": _match_power_limit,
    "gpu-throttle/thermal": _throttled(("hw_thermal_slowdown", "sw_thermal_slowdown")),
    "gpu-throttle/power-brake": _throttled(("hw_power_brake_slowdown",)),
    "gpu-throttle/hw-slowdown": _throttled(("hw_slowdown",)),
    "gpu-throttle/power-cap": _throttled(("sw_power_cap",)),
    "gpus": _match_gpus_ok,
}
_GPU_STATE = [Signature(**{**s.__dict__, "matcher": _GPU_MATCHERS[s.id]}) for s in _GPU_STATE]


def classify_gpus(state: Mapping[str, Any]) -> list[Verdict]:
    """Verdicts about the GPUs: ``state`` is ``{"gpus": [{"index", "name", "persistence_mode",
    "power_limit_w", "temperature_c", "reasons": [active clock event reasons]}], "expected_count",
    "power_limit_w" (configured, None = the cards' default), "persistence" (expected on)}``."""
    return classify_state("gpu-state", state)


# --- NVLink (nvidia-smi nvlink -s / -e, topo -m) -------------------------------------------------


def _match_nvlink_required(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not s.get("required") or not s.get("problems"):
        return None
    return {"problems": "; ".join(s["problems"])}


def _match_nvlink_degraded(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if s.get("required") or not s.get("problems") or not any((s.get("active") or {}).values()):
        return None
    return {"problems": "; ".join(s["problems"])}


def _match_nvlink_absent(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if s.get("required") or not s.get("problems"):
        return None
    if not s.get("active"):  # nvidia-smi nvlink --status printed nothing (driver 580)
        return {"absent": "no NVLink links reported at all: no bridge detected"}
    return {"absent": "no active NVLink link"}


def _match_nvlink_errors(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    errors = [e for e in s.get("errors") or [] if e.get("count")]
    if not errors:
        return None
    listed = ", ".join(f"GPU {e['gpu']} link {e['link']} {e['kind']} {e['count']}" for e in errors)
    return {"errors": listed}


def _match_nvlink_ok(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if s.get("problems") or not s.get("active"):
        return None
    links = sorted(set((s.get("active") or {}).values()))
    pairs = sorted({v for v in (s.get("pairs") or {}).values()})
    return {"links": "/".join(map(str, links)), "pairs": "/".join(pairs) or "?"}


_NVLINK: list[Signature] = [
    Signature(
        id="nvlink-down/required",
        source="nvlink",
        severity=FAIL,
        what="NVLink is not as expected and nvlink_required is True",
        why="{problems}",
        fix="power off, reseat the bridge on both cards, boot; rigup-nvlink keeps vLLM down "
        "until the links verify (or set nvlink_required = False to serve over PCIe)",
        matcher=_match_nvlink_required,
    ),
    Signature(
        id="nvlink-down/degraded",
        source="nvlink",
        severity=WARN,
        what="NVLink is degraded",
        why="{problems}; vLLM runs over PCIe with P2P off (nvlink_required = False)",
        fix="power off, reseat the bridge on both cards, boot",
        matcher=_match_nvlink_degraded,
    ),
    Signature(
        id="nvlink-down/absent",
        source="nvlink",
        severity=OK,
        what="{absent}: tensor parallel runs over PCIe",
        why="no active links, and nvlink_required = False: vLLM runs with NCCL_P2P_DISABLE=1 and "
        "--disable-custom-all-reduce (the seed: decode barely changes, prefill loses speed)",
        fix="nothing to do without a bridge",
        matcher=_match_nvlink_absent,
    ),
    Signature(
        id="nvlink-errors",
        source="nvlink",
        severity=WARN,
        what="NVLink error counters are not zero: {errors}",
        why="replay, recovery or CRC errors mean a marginal connection; a fatal one is Xid 74",
        fix="power off, clean the bridge contacts and reseat it; if the counters keep growing, "
        "replace the bridge",
        matcher=_match_nvlink_errors,
        reference="nvidia-smi nvlink -e (captured on the 2x H200 machine: "
        "tests/fixtures/h200x2/nvlink-e.txt)",
    ),
    Signature(
        id="nvlink",
        source="nvlink",
        severity=OK,
        what="NVLink: {links} link(s) per GPU active, {pairs} between the GPUs",
        why="read from nvidia-smi nvlink -s and topo -m now",
        fix="nothing to do",
        matcher=_match_nvlink_ok,
    ),
]


def classify_nvlink(state: Mapping[str, Any]) -> list[Verdict]:
    """Verdicts about NVLink: ``state`` holds ``required``, ``active`` ({gpu: active links}),
    ``pairs`` ({(i, j): "NV4"}), ``problems`` (rigup.nvidia.verify_interconnect's) and
    ``errors`` ([{"gpu", "link", "kind", "count"}] from ``nvidia-smi nvlink -e``)."""
    return classify_state("nvlink", state)
