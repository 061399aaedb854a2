"""Parsers for ``nvidia-smi`` and related tool output. Pure functions, standard library only.

This module is also installed on the target next to the on-target scripts
(files/nvidia/rigup-gpu-power, files/nvidia/rigup-nvlink), so the deploy, the boot-time units and
the tests read the tools' output with the same code. Every parser is tested on real captured
output (tests/fixtures: 2x H200 captured with driver 580.159.04; RTX 3090 layouts from owners'
reports).

Shapes (units in the names): power in W, link speed in GB/s, versions as strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
)

#: The command line for :data:`GPU_QUERY_FIELDS` without header or units.
GPU_QUERY_COMMAND = (
    f"nvidia-smi --query-gpu={','.join(GPU_QUERY_FIELDS)} --format=csv,noheader,nounits"
)


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


def parse_gpu_query(text: str, fields: tuple[str, ...] = GPU_QUERY_FIELDS) -> list[GpuInfo]:
    """Parse ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`` into GPUs.

    With a header line (``index, uuid, power.limit [W], ...``) the columns are taken from it, so
    both captured layouts read the same; without one, ``fields`` names the columns in order.
    Unknown columns are ignored. Raises :class:`ParseError` on rows of the wrong width or
    non-numeric values.
    """
    lines = [line.strip() for line in strip_ansi(text).splitlines() if line.strip()]
    if lines and lines[0].lower().startswith("index"):
        fields = tuple(re.sub(r"\s*\[.*\]$", "", col.strip()) for col in lines[0].split(","))
        lines = lines[1:]
    gpus = []
    for line in lines:
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
                values[attr] = int(raw)
            elif attr.endswith("_w"):
                values[attr] = _watts(raw)
            else:
                values[attr] = raw
        if "index" not in values or "uuid" not in values:
            raise ParseError("nvidia-smi --query-gpu: the index and uuid columns are required")
        gpus.append(GpuInfo(**values))
    return gpus


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
    """``mokutil --sb-state`` -> True (enabled), False (disabled), None (no EFI / unknown).

    Answers: "SecureBoot enabled", "SecureBoot disabled", "This system doesn't support Secure
    Boot", "EFI variables are not supported on this system".
    """
    lower = text.lower()
    if "secureboot enabled" in lower:
        return True
    if "secureboot disabled" in lower:
        return False
    return None


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
        entries.append(DkmsEntry(module, version, kernel, state.strip().split()[0]))
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

#: Shell snippet that prints the driver state as ``key=value`` lines (read by
#: :func:`parse_driver_state`); run by the NvidiaDriverState fact and by rigup-nvidia-diagnose.
DRIVER_STATE_COMMAND = (
    'echo "kernel=$(uname -r)"; '
    'echo "loaded=$(cat /sys/module/nvidia/version 2>/dev/null)"; '
    'echo "installed=$(modinfo -k "$(uname -r)" -F version nvidia 2>/dev/null | head -n1)"; '
    "lib=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\\.so\\.1 .*x86-64/ {print $NF; exit}'); "
    'echo "userspace=$(test -n "$lib" && readlink -f "$lib" | sed -n \'s/.*libnvidia-ml\\.so\\.//p\')"; '
    'echo "nouveau_loaded=$(test -d /sys/module/nouveau && echo 1 || echo 0)"; '
    "echo \"nouveau_blacklisted=$(grep -rlsE '^[[:space:]]*blacklist[[:space:]]+nouveau' "
    '/etc/modprobe.d /usr/lib/modprobe.d /lib/modprobe.d | head -n1)"; '
    'echo "reboot_required=$(test -f /var/run/reboot-required && echo 1 || echo 0)"; '
    'echo "nvidia_smi=$(command -v nvidia-smi)"; '
    'echo "secure_boot=$(mokutil --sb-state 2>&1 | head -n1)"; '
    "dkms status nvidia 2>/dev/null | sed 's/^/dkms=/'; true"
)


def parse_driver_state(lines: list[str]) -> dict:
    """Read :data:`DRIVER_STATE_COMMAND` output.

    Returns ``{"kernel": "7.0.0-44-generic", "loaded": "580.178.04" | None (module in memory,
    /sys/module/nvidia/version), "installed": version of the module on disk for the running
    kernel (modinfo) | None, "userspace": libnvidia-ml version in the linker cache | None,
    "nouveau_loaded": bool, "nouveau_blacklisted": bool, "reboot_required": bool,
    "nvidia_smi": path | None, "secure_boot": True | False | None, "dkms": [DkmsEntry]}``.
    """
    values: dict[str, str] = {}
    dkms_lines = []
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key == "dkms":
            dkms_lines.append(value)
        else:
            values[key] = value.strip()
    return {
        "kernel": values.get("kernel", ""),
        "loaded": values.get("loaded") or None,
        "installed": values.get("installed") or None,
        "userspace": values.get("userspace") or None,
        "nouveau_loaded": values.get("nouveau_loaded") == "1",
        "nouveau_blacklisted": bool(values.get("nouveau_blacklisted")),
        "reboot_required": values.get("reboot_required") == "1",
        "nvidia_smi": values.get("nvidia_smi") or None,
        "secure_boot": parse_secure_boot(values.get("secure_boot", "")),
        "dkms": parse_dkms_status("\n".join(dkms_lines)),
    }


@dataclass(frozen=True)
class Finding:
    """A diagnosed driver problem: its ``cause``, the ``fix``, and whether a reboot fixes it."""

    cause: str
    fix: str
    reboot_fixes: bool

    def __str__(self) -> str:
        return f"{self.cause}. Fix: {self.fix}"


def diagnose_driver(state: dict, gpu_drivers: list[str | None] | None = None) -> list[Finding]:
    """Diagnose the failures 3090 owners report, from :func:`parse_driver_state` output.

    ``gpu_drivers``: the kernel driver bound to each NVIDIA GPU on the PCI bus (None = unbound).
    Covers: nouveau bound, driver installed but not loaded, kernel module version different from
    the userspace libraries (nvidia-smi: "Driver/library version mismatch"), module on disk newer
    than the one loaded, DKMS build failed for the running kernel, no module for the running
    kernel. Returns [] for a healthy driver and for a host with no NVIDIA userspace at all (a
    fresh box: nothing to diagnose yet).
    """
    findings: list[Finding] = []
    kernel = state.get("kernel") or "the running kernel"
    loaded, installed, userspace = (
        state.get("loaded"),
        state.get("installed"),
        state.get("userspace"),
    )
    if state.get("nouveau_loaded") or "nouveau" in (gpu_drivers or []):
        findings.append(
            Finding(
                "nouveau (the open-source driver) is loaded"
                + (" and bound to a GPU" if "nouveau" in (gpu_drivers or []) else ""),
                "blacklist it (/etc/modprobe.d/rigup-blacklist-nouveau.conf, written by rigup), "
                "regenerate the initramfs (update-initramfs -u) and reboot",
                True,
            )
        )
    if not userspace and not installed and not loaded:
        return findings
    if loaded is None:
        dkms = [e for e in state.get("dkms", []) if e.module == "nvidia"]
        for_kernel = [e for e in dkms if e.kernel == state.get("kernel")]
        if installed:
            findings.append(
                Finding(
                    f"the NVIDIA driver {installed} is installed for {kernel} but not loaded",
                    "reboot; if it stays unloaded, `modprobe nvidia` and `journalctl -k | grep -iE "
                    "'nvrm|nvidia'` show why (with Secure Boot on, an unsigned module is rejected: "
                    "'Key was rejected by service')",
                    True,
                )
            )
        elif dkms and not any(e.state == "installed" for e in for_kernel):
            version = dkms[0].version
            state_text = for_kernel[0].state if for_kernel else "not built"
            findings.append(
                Finding(
                    f"the DKMS build of nvidia {version} failed for {kernel} ({state_text})",
                    f"read /var/lib/dkms/nvidia/{version}/build/make.log; install the headers "
                    f"(`apt install linux-headers-{state.get('kernel')}`) and run `dkms "
                    f"autoinstall -k {state.get('kernel')}`, or boot a kernel it built for; "
                    "the Ubuntu install path (nvidia_install_path = 'ubuntu') uses Canonical's "
                    "prebuilt modules and needs no DKMS",
                    False,
                )
            )
        else:
            findings.append(
                Finding(
                    f"no nvidia kernel module exists for {kernel}",
                    "install the prebuilt modules for this kernel (`apt install "
                    "linux-modules-nvidia-<branch>-open-$(uname -r)`) or boot the kernel they "
                    "were installed for; a converge installs the -generic metapackage",
                    False,
                )
            )
    elif userspace and loaded != userspace:
        findings.append(
            Finding(
                f"the loaded kernel module is {loaded} but the userspace libraries are {userspace} "
                "(nvidia-smi: 'Driver/library version mismatch')",
                "reboot to load the module that matches the libraries (an upgrade replaced them "
                "under the running driver); rigup holds the packages so it does not recur",
                True,
            )
        )
    elif installed and installed != loaded:
        findings.append(
            Finding(
                f"the module on disk is {installed} but {loaded} is loaded",
                "reboot to load the installed module",
                True,
            )
        )
    return findings
