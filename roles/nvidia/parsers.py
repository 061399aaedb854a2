"""Parsers for ``nvidia-smi`` and related tool output. Pure functions, standard library only.

This module is also installed on the target next to the on-target scripts
(files/nvidia/rigup-gpu-power, files/nvidia/rigup-nvlink), so the deploy, the boot-time units and
the tests read the tools' output with the same code. Every parser is tested on real captured
output (tests/fixtures: 2x H200 captured with driver 580.159.04; RTX 3090 layouts from owners'
reports).

What a failure means lives in the diagnosis library (roles/common/diagnosis, installed beside
this module as ``rigup_diagnosis``): the readers here return its verdicts for what they cannot
read as data, and never raise on a tool's output, whatever its exit status.

Shapes (units in the names): power in W, link speed in GB/s, versions as strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

try:  # on the host: installed beside this module by rigup
    import rigup_diagnosis as diagnosis
except ImportError:  # on the controller
    from roles.common import diagnosis

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ParseError(ValueError):
    """Raised when tool output does not have the shape a parser expects (says which tool)."""


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (``nvidia-smi topo`` underlines its header with ESC[4m)."""
    return _ANSI.sub("", text)


# --- nvidia-smi --query-gpu ----------------------------------------------------------------------

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


# --- nvidia-smi -pl ------------------------------------------------------------------------------


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


# --- nvidia-smi nvlink -s ------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuLinks:
    """NVLink state of one GPU: ``links`` maps link number -> GB/s, None for ``<inactive>``."""

    index: int
    name: str
    uuid: str
    links: dict[int, float | None] = field(default_factory=dict)

    @property
    def active(self) -> int:
        """Number of links that report a speed."""
        return sum(1 for speed in self.links.values() if speed is not None)


_GPU_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: ([^)]+)\)")
_LINK_LINE = re.compile(r"^Link (\d+): (.*)$")


def parse_nvlink_status(text: str) -> list[GpuLinks]:
    """Parse ``nvidia-smi nvlink -s`` (lines ``GPU n: <name> (UUID: ...)`` then tab-indented
    ``Link k: 14.062 GB/s`` or ``Link k: <inactive>``). A GPU without NVLink lists no links."""
    gpus: list[GpuLinks] = []
    for raw in strip_ansi(text).splitlines():
        line = raw.strip()
        if m := _GPU_LINE.match(line):
            gpus.append(GpuLinks(int(m.group(1)), m.group(2), m.group(3), {}))
        elif (m := _LINK_LINE.match(line)) and gpus:
            value = m.group(2).strip()
            speed = re.match(r"^([\d.]+)\s*GB/s", value)
            gpus[-1].links[int(m.group(1))] = float(speed.group(1)) if speed else None
    return gpus


_ERROR_LINE = re.compile(r"^Link (\d+): (.+?) Errors?: (\d+)\s*$")


def parse_nvlink_errors(text: str) -> list[dict]:
    """Parse ``nvidia-smi nvlink -e`` (per GPU, per link: ``Link 0: Replay Errors: 0``,
    ``Recovery Errors``, ``CRC Errors``) into ``[{"gpu": 0, "link": 0, "kind": "Replay",
    "count": 0}]``; lines of another shape are skipped."""
    found: list[dict] = []
    gpu: int | None = None
    for raw in strip_ansi(text).splitlines():
        line = raw.strip()
        if m := _GPU_LINE.match(line):
            gpu = int(m.group(1))
        elif (m := _ERROR_LINE.match(line)) and gpu is not None:
            found.append(
                {"gpu": gpu, "link": int(m.group(1)), "kind": m.group(2), "count": int(m.group(3))}
            )
    return found


# --- nvidia-smi topo -m / topo -p2p r ---------------------------------------------------------


def _matrix(text: str) -> dict[tuple[int, int], str]:
    """Read a GPU x GPU matrix printed by ``nvidia-smi topo`` (header ``GPU0 GPU1 ...``)."""
    lines = [line for line in strip_ansi(text).splitlines() if line.strip()]
    header: list[str] = []
    cells: dict[tuple[int, int], str] = {}
    for line in lines:
        cols = [c.strip() for c in line.split("\t")]
        if not header:
            if any(re.fullmatch(r"GPU\d+", c) for c in cols):
                header = cols
            continue
        row = cols[0]
        if not re.fullmatch(r"GPU\d+", row):
            if row.startswith("Legend") or not row:
                break
            continue
        i = int(row[3:])
        for col_name, value in zip(header, cols, strict=False):
            if re.fullmatch(r"GPU\d+", col_name):
                j = int(col_name[3:])
                cells[(i, j)] = value
    # header has a leading empty cell in the same position as the row label, so zip aligns.
    return cells


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """Parse ``nvidia-smi topo -m`` into ``{(gpu_i, gpu_j): "NV4" | "PHB" | "X" | ...}``.

    Real output underlines the header with ANSI escapes and separates cells with tabs; CPU/NUMA
    affinity columns are ignored. Raises :class:`ParseError` when no GPU matrix is found.
    """
    cells = _matrix(text)
    if not cells:
        raise ParseError("nvidia-smi topo -m: no GPU matrix found")
    return cells


def nvlink_count(connection: str) -> int:
    """Links in a ``topo -m`` cell: ``"NV4"`` -> 4, anything else (``PHB``, ``SYS``...) -> 0."""
    m = re.fullmatch(r"NV(\d+)", connection.strip())
    return int(m.group(1)) if m else 0


def parse_p2p_matrix(text: str) -> dict[tuple[int, int], str]:
    """Parse ``nvidia-smi topo -p2p r`` (or ``w``/``n``...) into ``{(i, j): "OK" | "CNS" | ...}``.

    Codes (nvidia-smi legend): OK, CNS chipset not supported, GNS GPU not supported, TNS topology
    not supported, NS not supported, U unknown, X self.
    """
    cells = _matrix(text)
    if not cells:
        raise ParseError("nvidia-smi topo -p2p: no GPU matrix found")
    return cells


# --- driver / kernel state ----------------------------------------------------------------------


_NVRM = re.compile(r"NVRM version: (.*?Kernel Module.*?)\s+(\d+\.\d+(?:\.\d+)?)\s")


def parse_proc_driver_version(text: str) -> tuple[str, bool] | None:
    """``/proc/driver/nvidia/version`` -> ``("580.159.04", open_module)``; None if not loaded."""
    m = _NVRM.search(text)
    if not m:
        return None
    return m.group(2), "Open Kernel Module" in m.group(1)


def parse_secure_boot(text: str) -> bool | None:
    """Whether ``mokutil --sb-state`` (its whole output) says Secure Boot is ENFORCED: True,
    False (disabled, validation disabled in shim, setup mode, no EFI, not supported), None
    (unknown). The diagnosis library's :func:`secure_boot` says why."""
    return diagnosis.secure_boot(text).enforced


@dataclass(frozen=True)
class DkmsEntry:
    """One ``dkms status`` line: module/version, kernel, state (``installed``, ``built``...)."""

    module: str
    version: str
    kernel: str
    state: str


def parse_dkms_status(text: str) -> list[DkmsEntry]:
    """Parse ``dkms status`` (``nvidia/580.178.04, 7.0.0-44-generic, x86_64: installed``).

    Lines without a kernel (``nvidia/580.178.04: added``) give an entry with kernel "".
    """
    entries = []
    for line in text.splitlines():
        line = line.strip()
        if ":" not in line or "/" not in line.split(",")[0]:
            continue
        head, state = line.rsplit(":", 1)
        parts = [p.strip() for p in head.split(",")]
        module, _, version = parts[0].partition("/")
        kernel = parts[1] if len(parts) > 1 else ""
        words = state.split()
        entries.append(DkmsEntry(module, version, kernel, words[0] if words else ""))
    return entries


# --- checks on parsed state (used by the deploy and by the boot-time units) -----------------------


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


@dataclass
class Interconnect:
    """Result of :func:`verify_interconnect`.

    ``nvlink_ok``: every GPU has the expected number of active links and every GPU pair shows
    ``NV<expected>`` in ``topo -m``. ``p2p_ok``: every pair reads OK in ``topo -p2p r``.
    ``problems``: one sentence per finding, naming the cause and the fix.
    """

    nvlink_ok: bool
    p2p_ok: bool
    active_links: dict[int, int]
    pairs: dict[tuple[int, int], str]
    p2p: dict[tuple[int, int], str]
    problems: list[str]

    @property
    def verified(self) -> bool:
        """True when NVLink is up as expected and P2P reads OK both ways."""
        return self.nvlink_ok and self.p2p_ok


#: Per-link bandwidth an RTX 3090 NVLink bridge reports (GB/s per link and direction,
#: ``nvidia-smi nvlink -s`` on a bridged 3090 pair, owners' captures in tests/fixtures/rtx3090).
RTX3090_LINK_GBPS = 14.062


def verify_interconnect(
    links: list[GpuLinks],
    topology: dict[tuple[int, int], str],
    p2p: dict[tuple[int, int], str],
    *,
    gpu_count: int,
    expected_links: int,
) -> Interconnect:
    """Check NVLink and P2P among ``gpu_count`` GPUs against ``expected_links`` links per GPU.

    ``expected_links`` is what the bridge provides per GPU (4 for a 3090 pair: ``NV4``; 18 on the
    2x H200 lending machine). Extra links are not a problem; fewer are (a degraded bridge).
    """
    nvlink_problems: list[str] = []
    by_index = {gpu.index: gpu for gpu in links}
    active = {gpu.index: gpu.active for gpu in links}
    for index in range(gpu_count):
        gpu = by_index.get(index)
        if gpu is None:
            nvlink_problems.append(
                f"GPU {index}: no NVLink status (nvidia-smi nvlink -s lists no such GPU): check "
                "that the driver sees every GPU (nvidia-smi -L)"
            )
        elif gpu.active == 0:
            nvlink_problems.append(
                f"GPU {index}: no active NVLink (0 of {expected_links} links): the bridge is "
                "missing or not seated; power off, reseat the bridge on both cards, boot"
            )
        elif gpu.active < expected_links:
            down = [str(k) for k, speed in sorted(gpu.links.items()) if speed is None]
            nvlink_problems.append(
                f"GPU {index}: NVLink degraded, {gpu.active} of {expected_links} links active "
                f"(inactive: {', '.join(down) or 'not listed'}): reseat the bridge; if it stays, "
                "try the bridge on the other slot pair or replace it"
            )
    pairs = {}
    for i in range(gpu_count):
        for j in range(gpu_count):
            if i == j:
                continue
            cell = topology.get((i, j), "?")
            pairs[(i, j)] = cell
            if i < j and nvlink_count(cell) < expected_links:
                nvlink_problems.append(
                    f"GPU {i} <-> GPU {j}: topo -m shows {cell}, expected NV{expected_links}"
                    + (" (no NVLink: traffic goes over PCIe)" if nvlink_count(cell) == 0 else "")
                )
    p2p_problems: list[str] = []
    p2p_cells = {}
    for i in range(gpu_count):
        for j in range(gpu_count):
            if i == j:
                continue
            cell = p2p.get((i, j), "?")
            p2p_cells[(i, j)] = cell
            if cell != "OK":
                p2p_problems.append(
                    f"P2P read GPU {i} -> GPU {j}: {cell} (expected OK; CNS = chipset not "
                    "supported: GeForce cards have no P2P over PCIe, only over NVLink)"
                )
    several = gpu_count > 1
    nvlink_ok = several and not nvlink_problems
    p2p_ok = several and not p2p_problems
    problems = nvlink_problems + p2p_problems
    return Interconnect(nvlink_ok, p2p_ok, active, pairs, p2p_cells, problems)


def interconnect_env(result: Interconnect | None) -> tuple[dict[str, str], list[str]]:
    """NCCL environment and extra ``vllm serve`` flags for what was verified.

    Verified NVLink + P2P: ``NCCL_P2P_LEVEL=NVL`` (NCCL docs: use P2P only where GPUs are
    connected through NVLink), vLLM's custom all-reduce stays on. Anything less (or None: not
    verified): ``NCCL_P2P_DISABLE=1`` and ``--disable-custom-all-reduce`` — GeForce cards have no
    P2P over PCIe (``topo -p2p r`` answers CNS), and NCCL or vLLM's custom all-reduce probing it
    is what owners report hanging at start-up.
    """
    if result is not None and result.verified:
        return {"NCCL_P2P_LEVEL": "NVL"}, []
    return {"NCCL_P2P_DISABLE": "1"}, ["--disable-custom-all-reduce"]


# --- driver state and diagnosis -----------------------------------------------------------------

#: Lines of DKMS output (apt's term.log, make.log) worth classifying: the failure, the log it
#: names, and the usual causes (headers, compiler).
_DKMS_GREP = (
    "Bad return status|Consult .*make\\.log|kernel headers for kernel|compiler differs|"
    "kernel was built by|You are using|gcc[^ ]*: (not found|No such file)|BUILD_EXCLUSIVE"
)

#: Shell snippet that prints the driver state as ``key=value`` lines (read by
#: :func:`parse_driver_state`); run by the NvidiaDriverState fact, by rigup-nvidia-diagnose and by
#: the boot units when nvidia-smi fails. Read-only.
DRIVER_STATE_COMMAND = (
    'k=$(uname -r); echo "kernel=$k"; '
    'echo "loaded=$(cat /sys/module/nvidia/version 2>/dev/null)"; '
    'echo "installed=$(modinfo -k "$k" -F version nvidia 2>/dev/null | head -n1)"; '
    'echo "signer=$(modinfo -k "$k" -F signer nvidia 2>/dev/null | head -n1)"; '
    "for d in /lib/modules/*; do "
    'v=$(modinfo -k "${d##*/}" -F version nvidia 2>/dev/null | head -n1); '
    'test -n "$v" && echo "module_kernel=${d##*/} $v"; done; '
    "lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\\.so\\.1 .*x86-64/ {print $NF; exit}'); "
    'echo "userspace=$(test -n "$lib" && readlink -f "$lib" | sed -n \'s/.*libnvidia-ml\\.so\\.//p\')"; '
    'echo "nouveau_loaded=$(test -d /sys/module/nouveau && echo 1 || echo 0)"; '
    "echo \"nouveau_blacklisted=$(grep -rlsE '^[[:space:]]*blacklist[[:space:]]+nouveau' "
    '/etc/modprobe.d /usr/lib/modprobe.d /lib/modprobe.d | head -n1)"; '
    'echo "reboot_required=$(test -f /var/run/reboot-required && echo 1 || echo 0)"; '
    'echo "nvidia_smi=$(command -v nvidia-smi)"; '
    "mokutil --sb-state 2>&1 | sed 's/^/secure_boot=/'; "
    "mok=/var/lib/shim-signed/mok/MOK.der; test -f $mok && "
    "mokutil --test-key $mok 2>&1 | head -n1 | sed 's/^/mok=/'; "
    'echo "efi=$(test -d /sys/firmware/efi && echo 1 || echo 0)"; '
    "e=/sys/firmware/efi/efivars; g=8be4df61-93ca-11d2-aa0d-e98c0e1d93e9; "
    "echo \"sb_var=$(od -An -tu1 $e/SecureBoot-$g 2>/dev/null | awk '{print $NF}')\"; "
    "echo \"setup_var=$(od -An -tu1 $e/SetupMode-$g 2>/dev/null | awk '{print $NF}')\"; "
    'echo "moksbstate=$(test -e $e/MokSBStateRT-605dab50-e046-4300-abb6-3dd810dd8b23 && echo 1 || echo 0)"; '
    "for d in /sys/bus/pci/devices/*; do "
    'test "$(cat $d/vendor 2>/dev/null)" = 0x10de || continue; '
    'case "$(cat $d/class)" in 0x0300*|0x0302*) ;; *) continue ;; esac; '
    'drv=-; test -e $d/driver && drv=$(basename "$(readlink $d/driver)"); '
    'echo "gpu_driver=${d##*/} $drv"; done; '
    "dpkg-query -W -f='${db:Status-Abbrev} ${Package}\\n' 'linux-modules-nvidia-*' "
    "'nvidia-dkms-*' 'nvidia-open' 'nvidia-driver-*' 'cuda-keyring' 2>/dev/null "
    '| awk \'$1 == "ii" || $1 == "hi" {print "package=" $2}\'; '
    "dkms status nvidia 2>/dev/null | sed 's/^/dkms=/'; "
    "ls -d /var/lib/dkms/nvidia/*/build/make.log /var/lib/dkms/nvidia/*/*/*/log/make.log "
    "2>/dev/null | sed 's/^/dkms_log=/'; "
    f"{{ grep -hE '{_DKMS_GREP}' /var/log/apt/term.log 2>/dev/null | tail -n 20; "
    "for f in /var/lib/dkms/nvidia/*/build/make.log; do "
    f"grep -hE '{_DKMS_GREP}' \"$f\" 2>/dev/null | tail -n 10; done; }} | sed 's/^/dkms_out=/'; "
    "journalctl -k -b --no-pager -q 2>/dev/null "
    "| grep -E 'NVRM|nvidia|Lockdown|fallen off the bus' | tail -n 60 | sed 's/^/klog=/'; true"
)

_MULTI = ("secure_boot", "module_kernel", "gpu_driver", "package", "dkms", "dkms_log")
_MULTI += ("dkms_out", "klog")


def _int_or_none(value: str | None) -> int | None:
    return int(value) if value and value.strip().isdigit() else None


#: Verdicts of nvidia-smi whose cause the driver state can name.
DRIVER_KINDS = (
    "driver-not-loaded",
    "driver-library-mismatch",
    "nvml-missing",
    "nvml-failed",
    "nvidia-smi-missing",
)


def parse_driver_state(lines: list[str]) -> dict:
    """Read :data:`DRIVER_STATE_COMMAND` output.

    Returns ``{"kernel": "7.0.0-44-generic", "loaded": "580.178.04" | None (module in memory,
    /sys/module/nvidia/version), "installed": version of the module on disk for the running
    kernel (modinfo) | None, "signer": its signer | None, "module_kernels": {kernel: version}
    (every kernel with an nvidia module), "userspace": libnvidia-ml version in the linker cache |
    None, "nouveau_loaded": bool, "nouveau_blacklisted": bool, "reboot_required": bool,
    "nvidia_smi": path | None, "secure_boot": True (enforced) | False | None (unknown),
    "secure_boot_state": "enforced" | "shim-validation-disabled" | "setup-mode" | "disabled" |
    "no-efi" | "unsupported" | "unknown", "secure_boot_note": one sentence, "mok_enrolled": the
    Machine Owner Key DKMS signs with is enrolled (True / False / None: no key), "gpu_drivers":
    [driver bound to each NVIDIA GPU on the PCI bus, None when unbound], "gpu_addresses": [...],
    "packages": [installed driver packages], "dkms": [DkmsEntry], "dkms_logs": [make.log paths],
    "dkms_output": [DKMS error lines], "kernel_log": [NVIDIA kernel log lines of this boot]}``.
    """
    values: dict[str, str] = {}
    multi: dict[str, list[str]] = {key: [] for key in _MULTI}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in multi:
            multi[key].append(value.rstrip())
        else:
            values[key] = value.strip()
    efi = values.get("efi")
    sb = diagnosis.secure_boot(
        "\n".join(multi["secure_boot"]),
        efi=None if efi is None else efi == "1",
        sb_var=_int_or_none(values.get("sb_var")),
        setup_var=_int_or_none(values.get("setup_var")),
        moksbstate=values.get("moksbstate") == "1" if "moksbstate" in values else None,
    )
    module_kernels = {}
    for entry in multi["module_kernel"]:
        kernel, _, version = entry.partition(" ")
        module_kernels[kernel] = version.strip()
    gpus = [entry.split() for entry in multi["gpu_driver"] if entry.split()]
    return {
        "kernel": values.get("kernel", ""),
        "loaded": values.get("loaded") or None,
        "installed": values.get("installed") or None,
        "signer": values.get("signer") or None,
        "module_kernels": module_kernels,
        "userspace": values.get("userspace") or None,
        "nouveau_loaded": values.get("nouveau_loaded") == "1",
        "nouveau_blacklisted": bool(values.get("nouveau_blacklisted")),
        "reboot_required": values.get("reboot_required") == "1",
        "nvidia_smi": values.get("nvidia_smi") or None,
        "secure_boot": sb.enforced,
        "secure_boot_state": sb.state,
        "secure_boot_note": str(sb.verdict),
        # the key DKMS signs with (Ubuntu's update-secureboot-policy): "is already enrolled"
        "mok_enrolled": None if "mok" not in values else "already enrolled" in values["mok"],
        "gpu_addresses": [g[0] for g in gpus],
        "gpu_drivers": [None if len(g) < 2 or g[1] == "-" else g[1] for g in gpus],
        "packages": [p.strip() for p in multi["package"] if p.strip()],
        "dkms": parse_dkms_status("\n".join(multi["dkms"])),
        "dkms_logs": multi["dkms_log"],
        "dkms_output": multi["dkms_out"],
        "kernel_log": multi["klog"],
    }


def diagnose_driver(
    state: dict, gpu_drivers: list[str | None] | None = None, install_path: str | None = None
) -> list[diagnosis.Verdict]:
    """The driver's verdicts (diagnosis library, source ``driver-state``) from
    :func:`parse_driver_state` output. ``gpu_drivers`` (the driver bound to each NVIDIA GPU on
    the PCI bus) and ``install_path`` override what the state found itself. A driver that is not
    loaded is one verdict, ``driver-not-loaded/<cause>``; [] for a healthy driver."""
    merged = dict(state)
    if gpu_drivers is not None:
        merged["gpu_drivers"] = gpu_drivers
    if install_path is not None:
        merged["install_path"] = install_path
    return diagnosis.classify_driver_state(merged)


def explain(verdicts: list[diagnosis.Verdict], state: dict | None) -> list[diagnosis.Verdict]:
    """Replace a tool's general verdict ("the NVIDIA kernel module is not loaded", nvidia-smi
    missing) by the driver state's specific one of the same kind, with its cause and fix."""
    if state is None:
        return list(verdicts)
    driver = diagnose_driver(state)
    not_loaded = [v for v in driver if v.kind == "driver-not-loaded"]
    general = [v for v in verdicts if v.kind in DRIVER_KINDS]
    if not_loaded and general:
        return [v for v in verdicts if v.kind not in DRIVER_KINDS] + not_loaded
    return diagnosis.refine(verdicts, driver)


# --- on the host: the tools' runs, shared by rigup-gpu-power, rigup-nvlink, rigup-nvidia-diagnose --


def run(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run a command; ``(exit status, stdout + stderr)``. A missing program is status 127 and a
    timeout 124, like a shell's, never an exception."""
    import subprocess

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv)}: no answer within {timeout:g} s"
    return proc.returncode, proc.stdout + proc.stderr


def driver_state(runner=run, command: str = DRIVER_STATE_COMMAND) -> dict:
    """:func:`parse_driver_state` of ``command`` (:data:`DRIVER_STATE_COMMAND`) run through
    ``runner``."""
    _, out = runner(["sh", "-c", command])
    return parse_driver_state(out.splitlines())


def query_gpus(
    runner=run, smi: str = "nvidia-smi", state_command: str = DRIVER_STATE_COMMAND
) -> GpuQuery:
    """``nvidia-smi --query-gpu`` through ``runner``, read by :func:`read_gpu_query`. When it
    fails for a driver reason ("couldn't communicate with the NVIDIA driver"), the driver state
    names the cause: one "the NVIDIA kernel module is not loaded" verdict with it."""
    code, out = runner([smi, f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", GPU_QUERY_FORMAT])
    query = read_gpu_query(out, code)
    if any(v.kind in DRIVER_KINDS for v in query.failed):
        state = driver_state(runner, state_command)
        query = GpuQuery(query.gpus, explain(query.verdicts, state), code)
    return query
