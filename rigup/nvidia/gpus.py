"""The GPUs as nvidia-smi reports them: ``--query-gpu`` (:func:`read_gpu_query`), the answer of
``-pl``, and the power limits planned from them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rigup import diagnosis

from .core import ParseError, strip_ansi

#: The fields rigup queries, in order (``nvidia-smi --help-query-gpu`` names them).
GPU_QUERY_FIELDS = (
    "index",
    "uuid",
    "pci.bus_id",
    "name",
    "driver_version",
    "persistence_mode",
    "power.limit",
    "power.default_limit",
    "power.min_limit",
    "power.max_limit",
    "enforced.power.limit",
    "compute_cap",
)

#: The output format of every query rigup makes: no header, no units.
GPU_QUERY_FORMAT = "--format=csv,noheader,nounits"
#: The command line for :data:`GPU_QUERY_FIELDS`.
GPU_QUERY_COMMAND = f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} {GPU_QUERY_FORMAT}"


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as ``nvidia-smi --query-gpu`` reports it.

    Power values are in W; None when the tool answers ``[N/A]`` / ``[Not Supported]`` (cards or
    drivers without power management) or when the field was not queried.
    """

    index: int
    uuid: str
    pci_bus_id: str = ""
    name: str = ""
    driver_version: str = ""
    persistence_mode: str = ""  # "Enabled" / "Disabled"
    power_limit_w: float | None = None
    default_power_limit_w: float | None = None
    min_power_limit_w: float | None = None
    max_power_limit_w: float | None = None
    enforced_power_limit_w: float | None = None
    compute_capability: str = ""  # "8.6" for an RTX 3090 (compute_cap)


_FIELD_ATTR = {
    "index": "index",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "name": "name",
    "driver_version": "driver_version",
    "persistence_mode": "persistence_mode",
    "power.limit": "power_limit_w",
    "power.default_limit": "default_power_limit_w",
    "power.min_limit": "min_power_limit_w",
    "power.max_limit": "max_power_limit_w",
    "enforced.power.limit": "enforced_power_limit_w",
    "compute_cap": "compute_capability",
}


def _watts(value: str) -> float | None:
    value = value.strip()
    if value.startswith("[") or value in ("N/A", ""):
        return None
    value = value.removesuffix("W").strip()
    try:
        return float(value)
    except ValueError as exc:
        raise ParseError(f"nvidia-smi --query-gpu: {value!r} is not a power in W") from exc


def _gpu_row(line: str, fields: tuple[str, ...]) -> GpuInfo:
    """One data row of ``--query-gpu``; :class:`ParseError` when it is not one."""
    cols = [c.strip() for c in line.split(",")]
    if len(cols) != len(fields):
        raise ParseError(
            f"nvidia-smi --query-gpu: expected {len(fields)} columns, got {len(cols)}: {line!r}"
        )
    values: dict = {}
    for name, raw in zip(fields, cols, strict=True):
        attr = _FIELD_ATTR.get(name)
        if attr is None:
            continue
        if attr == "index":
            if not raw.isdigit():
                raise ParseError(f"nvidia-smi --query-gpu: {raw!r} is not a GPU index")
            values[attr] = int(raw)
        elif attr.endswith("_w"):
            values[attr] = _watts(raw)
        else:
            values[attr] = raw
    if "index" not in values or "uuid" not in values:
        raise ParseError("nvidia-smi --query-gpu: the index and uuid columns are required")
    return GpuInfo(**values)


def _query_lines(text: str, fields: tuple[str, ...]) -> tuple[list[str], tuple[str, ...]]:
    lines = [line.strip() for line in strip_ansi(text).splitlines() if line.strip()]
    if lines and lines[0].lower().startswith("index"):
        fields = tuple(re.sub(r"\s*\[.*\]$", "", col.strip()) for col in lines[0].split(","))
        lines = lines[1:]
    return lines, fields


def parse_gpu_query(text: str, fields: tuple[str, ...] = GPU_QUERY_FIELDS) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` into GPUs.

    With a header line (``index, uuid, power.limit [W], ...``) the columns are taken from it, so
    both captured layouts read the same; without one, ``fields`` names the columns in order.
    Unknown columns are ignored. Raises :class:`ParseError` on rows of the wrong width or
    non-numeric values: for output that may hold error lines use :func:`read_gpu_query`.
    """
    lines, fields = _query_lines(text, fields)
    return [_gpu_row(line, fields) for line in lines]


@dataclass(frozen=True)
class GpuQuery:
    """What :func:`read_gpu_query` read: the GPUs whose rows it could read, the diagnosis of
    everything else nvidia-smi printed and of its exit status, and the status itself."""

    gpus: list[GpuInfo]
    verdicts: list[diagnosis.Verdict]
    exit_code: int | None = 0

    @property
    def failed(self) -> list[diagnosis.Verdict]:
        return diagnosis.failures(self.verdicts)

    @property
    def error(self) -> str | None:
        """The first failure as one sentence (what, why, fix), or None."""
        return str(self.failed[0]) if self.failed else None


def read_gpu_query(
    text: str | None, exit_code: int | None = 0, fields: tuple[str, ...] = GPU_QUERY_FIELDS
) -> GpuQuery:
    """Read ``nvidia-smi --query-gpu`` output (stdout and stderr together) of ANY shape: rows of
    the GPUs it reached, error lines for the ones it did not ("Unable to determine the device
    handle for GPU1: 0000:02:00.0: Unknown Error"), a driver that does not answer, garbage, with
    any exit status. Never raises: every line that is not a row is named by the diagnosis
    library, and so is an exit status no line explains."""
    lines, fields = _query_lines(text or "", fields)
    gpus: list[GpuInfo] = []
    other: list[str] = []
    for line in lines:
        try:
            gpus.append(_gpu_row(line, fields))
        except (ParseError, ValueError, TypeError):
            other.append(line)
    verdicts, unrecognised = diagnosis.classify_nvidia_smi(other, exit_code)
    if unrecognised:
        verdicts.append(
            diagnosis.Verdict(
                id="nvidia-smi-unrecognised",
                severity=diagnosis.WARN,
                what="nvidia-smi printed lines rigup does not recognise",
                why=f"{len(unrecognised)} line(s), e.g. {unrecognised[0]!r}",
                fix="run the query by hand; report the output to rigup",
                evidence=tuple(unrecognised),
                source="nvidia-smi",
            )
        )
    return GpuQuery(gpus, verdicts, exit_code)


@dataclass(frozen=True)
class PowerLimitAnswer:
    """What ``nvidia-smi -i <gpu> -pl <W>`` said. ``ok`` only for an explicit "was set to".

    nvidia-smi prints "All done." even after refusing a GPU (captured in owners' reports), and its
    exit code has varied across releases, so the text decides.
    """

    ok: bool
    reason: str  # "set", "out-of-range", "insufficient-permissions", "not-supported", "unknown"
    message: str
    set_w: float | None = None
    min_w: float | None = None
    max_w: float | None = None


_PL_SET = re.compile(r"was set to ([\d.]+) W")
_PL_RANGE = re.compile(r"between ([\d.]+) W and ([\d.]+) W")


def parse_power_limit_answer(text: str) -> PowerLimitAnswer:
    """Classify the answer of ``nvidia-smi -pl``; see :class:`PowerLimitAnswer`."""
    text = strip_ansi(text).strip()
    first = next((line for line in text.splitlines() if line.strip()), "")
    lower = text.lower()
    if "insufficient permissions" in lower:
        return PowerLimitAnswer(False, "insufficient-permissions", first)
    if "not a valid power limit" in lower or "out of range" in lower:
        m = _PL_RANGE.search(text)
        lo, hi = (float(m.group(1)), float(m.group(2))) if m else (None, None)
        return PowerLimitAnswer(False, "out-of-range", first, min_w=lo, max_w=hi)
    if "not supported" in lower:
        return PowerLimitAnswer(False, "not-supported", first)
    m = _PL_SET.search(text)
    if m and "failed" not in lower and "terminating early" not in lower:
        return PowerLimitAnswer(True, "set", first, set_w=float(m.group(1)))
    return PowerLimitAnswer(False, "unknown", first or "(no output)")


class PowerLimitError(ValueError):
    """A requested power limit some GPU cannot take; the message lists every GPU's range in W."""


def plan_power_limits(gpus: list[GpuInfo], requested_w: float | None) -> dict[str, float]:
    """Target power limit in W for each GPU, by UUID, before anything is written.

    ``requested_w`` None means each card's own default limit (``power.default_limit``). Every GPU
    is checked against its own ``power.min_limit``/``power.max_limit`` first (3090 boards differ:
    350-450 W max, owners' reports), and :class:`PowerLimitError` names each GPU that cannot take
    the value, so a bad request changes no GPU at all. GPUs that report no power management
    ([N/A]) raise too: a limit that cannot be applied is an error, not a silent skip.
    """
    targets: dict[str, float] = {}
    problems = []
    for gpu in gpus:
        lo, hi, default = gpu.min_power_limit_w, gpu.max_power_limit_w, gpu.default_power_limit_w
        if lo is None or hi is None:
            problems.append(f"GPU {gpu.index} ({gpu.uuid}) reports no power limit range (N/A)")
            continue
        target = default if requested_w is None else float(requested_w)
        if target is None:
            problems.append(f"GPU {gpu.index} ({gpu.uuid}) reports no default power limit")
        elif not lo <= target <= hi:
            problems.append(
                f"GPU {gpu.index} ({gpu.uuid}): {target:g} W is outside its range "
                f"{lo:g}-{hi:g} W (default {default:g} W)"
                if default is not None
                else f"GPU {gpu.index} ({gpu.uuid}): {target:g} W is outside {lo:g}-{hi:g} W"
            )
        else:
            targets[gpu.uuid] = target
    if problems:
        raise PowerLimitError("; ".join(problems))
    return targets


def power_limit_mismatches(
    gpus: list[GpuInfo], targets: dict[str, float], tolerance_w: float = 0.5
) -> list[str]:
    """GPUs whose read-back ``power.limit`` differs from the target by more than ``tolerance_w``
    (nvidia-smi prints two decimals; 0.5 W absorbs rounding only). Missing GPUs are reported."""
    seen = {gpu.uuid: gpu for gpu in gpus}
    problems = []
    for uuid, target in targets.items():
        gpu = seen.get(uuid)
        if gpu is None:
            problems.append(f"{uuid}: not found in the read-back")
        elif gpu.power_limit_w is None or abs(gpu.power_limit_w - target) > tolerance_w:
            problems.append(
                f"GPU {gpu.index} ({uuid}): power limit reads {gpu.power_limit_w} W, expected {target:g} W"
            )
    return problems
