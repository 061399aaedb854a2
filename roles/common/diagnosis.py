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

New sources (vLLM's journal, its /metrics) add rows to the same table and call
:func:`classify_lines` or :func:`classify_state`.
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
    "on this stack (vLLM serving Qwen3.6 with MTP speculative decoding) suspect first the known "
    "crash of MTP speculative decoding in the gated-delta-net layers (vllm#50021): vLLM's "
    "journal then shows 'CUDA error: an illegal memory access was encountered' in a worker during "
    "speculative decoding"
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
        fix="read `journalctl -u vllm` around that time; to confirm, serve without MTP "
        "(vllm_speculative_config = None) and converge; if the Xid also comes with other "
        "programs, suspect the card",
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
    installed but not loaded (a reboot loads it)."""
    return classify_state("driver-state", state)


SIGNATURES: tuple[Signature, ...] = (
    *_NVIDIA_SMI,
    *_KERNEL_LOG,
    *_DKMS,
    *_MOKUTIL,
    *_DRIVER_STATE,
)
