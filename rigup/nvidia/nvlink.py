"""NVLink and the topology: ``nvidia-smi nvlink -s`` / ``-e``, ``topo -m`` / ``topo -p2p r``, and
the interconnect verified from them (:func:`verify_interconnect`, :func:`interconnect_env`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .core import ParseError, strip_ansi


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


#: ``nvidia-smi nvlink --status`` printed nothing: driver 580 lists no GPU when no bridge is
#: fitted (canonical/checkbox#2617, 2026-06-26), where older drivers listed each GPU without links.
NO_LINKS_AT_ALL = (
    "no NVLink links reported at all: no bridge detected (nvidia-smi nvlink --status printed "
    "nothing); with a bridge fitted: power off, reseat it on both cards, boot"
)


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
    if not links and gpu_count > 1:
        # driver 580 prints nothing at all for GPUs without a bridge (canonical/checkbox#2617)
        nvlink_problems.append(NO_LINKS_AT_ALL)
    for index in range(gpu_count if links else 0):
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
