"""The diagnosis library's types and readers: severities, sources, :class:`Signature`,
:class:`Verdict`, and the functions that read a source's text or state with the table
(:data:`rigup.diagnosis.SIGNATURES`, assembled by the package from its source modules)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL = "ok", "warn", "fail"
SEVERITIES = (OK, WARN, FAIL)

#: What a signature reads. ``driver-state`` is the dict of rigup.nvidia.parse_driver_state.
SOURCES = (
    "nvidia-smi",
    "kernel-log",
    "dkms",
    "mokutil",
    "driver-state",
    "vllm-log",
    "comfyui-log",
    "comfyui-job",
    "voxcpm-log",
    "metrics",
    "gpu-state",
    "nvlink",
    "unit-state",
    "unit-log",
    "service-log",
    "disk",
    "venv",
    "cluster",
    "boot",
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


def _table() -> tuple[Signature, ...]:
    """The whole table, :data:`SIGNATURES` of the package (assembled from the source modules,
    which import this one)."""
    from . import SIGNATURES

    return SIGNATURES


def signatures(source: str) -> list[Signature]:
    """The signatures of one source, in priority order."""
    return [s for s in _table() if s.source == source]


def by_id(sig_id: str, source: str | None = None) -> Signature:
    """The signature ``sig_id`` (of ``source``: one diagnosis may be read from several)."""
    for sig in _table():
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


def classify_lines(
    source: str, text: str | None, fields: Mapping[str, Any] | None = None
) -> tuple[list[Verdict], list[str]]:
    """Name each line of ``text`` with the first signature of ``source`` that recognises it.

    Returns ``(verdicts, unrecognised lines)``. Lines recognised by the same signature with the
    same message are one verdict with every line as evidence (a kernel log repeats an Xid).
    ``fields`` are facts from elsewhere the templates and ``derive`` may read (the GPUs'
    names by PCI slot); what a line says wins over them.
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
            found_fields = {**(fields or {}), **_context(sig, joined), **m.groupdict()}
            v = verdict(sig, found_fields, (line,))
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
