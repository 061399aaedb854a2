"""systemd units as rigup's on-host tools read them: ``systemctl show``, the journal of a unit's
last runs, and what both say (the diagnosis library's verdicts).

Standard library only: part of the package rigup (as rigup.units, beside rigup.diagnosis) in
``<prefix>/lib``, for ``rigup-explain``, which rigup-start runs when a unit does not come up;
and in rigup-doctor's ``lib``. The parsers are pure; the two readers take a ``runner``
(``argv -> (exit status, output)``) so testinfra runs the same code over SSH.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from rigup import diagnosis

Runner = Callable[[list[str]], tuple[int, str]]

#: What rigup reads of a unit (systemd.unit(5), systemctl show).
PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "UnitFileState",
    "InvocationID",
    "RestartUSec",
    "DropInPaths",
    "ExecStart",
    "PartOf",
    "NeedDaemonReload",
    "ExecMainStartTimestamp",
    "FragmentPath",
    "EnvironmentFiles",
    "ReadWritePaths",
    "WorkingDirectory",
)
#: properties systemctl show repeats, one line per value (kept as a list joined by newlines)
_REPEATED = ("EnvironmentFiles",)
#: a GPU mode's target (roles/modes): a service is PartOf= its mode's target
_MODE_TARGET = re.compile(r"\brigup-([\w-]+)\.target\b")

#: The units whose journal has a classifier of its own (the diagnosis library's sources).
LOG_SOURCES = {
    "vllm.service": "vllm-log",
    "comfyui.service": "comfyui-log",
    "voxcpm.service": "voxcpm-log",
}


def run(argv: list[str], timeout: float = 30) -> tuple[int, str]:
    """Run a command: ``(exit status, stdout + stderr)``; 127 when missing, 124 on timeout."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{argv[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(argv)}: no answer within {timeout:g} s"
    return proc.returncode, proc.stdout + proc.stderr


def show_argv(units: Iterable[str]) -> list[str]:
    """``systemctl show`` of :data:`PROPERTIES`, timestamps as seconds since the epoch."""
    return ["systemctl", "show", "--timestamp=unix", *(f"-p{p}" for p in PROPERTIES), "--", *units]


def parse_show(text: str) -> list[dict[str, str]]:
    """``systemctl show`` of several units: one ``{property: value}`` per unit, in order (the
    blocks are separated by an empty line)."""
    units: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                units.append(current)
            current = {}
            continue
        key, sep, value = line.partition("=")
        if sep and key in _REPEATED and key in current:
            current[key] += "\n" + value
        elif sep and key not in current:  # ExecStart= may repeat; the first is the service's
            current[key] = value
    if current:
        units.append(current)
    return units


def _seconds(value: str) -> str:
    """``RestartUSec=15s`` (or ``15000000``) -> ``"15"``."""
    value = value.strip()
    if value.isdigit():
        return f"{int(value) / 1_000_000:g}"
    return value.removesuffix("s") if value.endswith("s") and value[:-1].isdigit() else value


def unit_state(props: Mapping[str, str], **extra: Any) -> dict[str, Any]:
    """The state :func:`rigup.diagnosis.classify_unit` reads, from ``systemctl show``'s
    properties (``extra``: ``mode``, ``mode_active``, ``arm``, ``dropin``); without ``mode``,
    the GPU mode is read from the unit's ``PartOf=`` (``rigup-llm.target``: llm)."""
    restarts = props.get("NRestarts", "0")
    target = _MODE_TARGET.search(props.get("PartOf", ""))
    started = props.get("ExecMainStartTimestamp", "").lstrip("@")
    return {
        "need_reload": props.get("NeedDaemonReload") == "yes",
        "started": int(started) if started.isdigit() else None,
        "inputs": unit_inputs(props),
        "mode": target.group(1) if target else "",
        "unit": props.get("Id", ""),
        "load": props.get("LoadState", ""),
        "active": props.get("ActiveState", ""),
        "sub": props.get("SubState", ""),
        "result": props.get("Result", ""),
        "restarts": int(restarts) if restarts.isdigit() else 0,
        "enabled": props.get("UnitFileState", ""),
        "invocation": props.get("InvocationID", ""),
        "restart_sec": _seconds(props.get("RestartUSec", "")),
        "dropins": props.get("DropInPaths", "").split(),
        **extra,
    }


def unit_inputs(props: Mapping[str, str]) -> list[str]:
    """The files a unit's main process started with: its unit file and drop-ins, its
    EnvironmentFile= files (``/etc/x.env (ignore_errors=yes)``, one per line) and the absolute
    paths in its ExecStart= argv (the program, an arguments file). An argv path inside what the
    service itself writes (its ReadWritePaths= and WorkingDirectory=: ComfyUI's
    ``--base-directory``, whose time changes with every output) is its output, not an input."""
    paths = [props.get("FragmentPath", ""), *props.get("DropInPaths", "").split()]
    for line in props.get("EnvironmentFiles", "").splitlines():
        paths.append(line.split(" (ignore_errors=", 1)[0].strip())
    writes = [
        w.lstrip("-+").rstrip("/")
        for w in [*props.get("ReadWritePaths", "").split(), props.get("WorkingDirectory", "")]
        if w.lstrip("-+").startswith("/")
    ]
    argv = re.search(r"argv\[\]=(.*?) ; ", props.get("ExecStart", ""))
    if argv:
        paths += [
            w
            for w in argv.group(1).split()
            if w.startswith("/") and not any(w == d or w.startswith(d + "/") for d in writes)
        ]
    return list(dict.fromkeys(p for p in paths if p.startswith("/")))


def changed_since(stat_out: str, started: int | None) -> list[str]:
    """The paths of ``stat -L -c '%Y %n' PATHS...`` modified after ``started`` (seconds since
    the epoch); files that do not exist are skipped (an optional EnvironmentFile=-)."""
    if started is None:
        return []
    changed = []
    for line in stat_out.splitlines():
        stamp, _, path = line.partition(" ")
        if stamp.isdigit() and path.startswith("/") and int(stamp) > started:
            changed.append(path)
    return changed


def journal_argv(unit: str, lines: int = 400) -> list[str]:
    """This boot's last ``lines`` journal entries of ``unit`` as JSON, with the invocation IDs
    that split them into runs (systemd's own messages carry ``INVOCATION_ID``, the service's
    output ``_SYSTEMD_INVOCATION_ID``)."""
    return [
        "journalctl",
        "-u",
        unit,
        "-b",
        "-n",
        str(lines),
        "--no-pager",
        "-o",
        "json",
        "--output-fields=MESSAGE,_SYSTEMD_INVOCATION_ID,INVOCATION_ID",
    ]


def _message(value: Any) -> str:
    if isinstance(value, list):  # journald gives non-UTF-8 messages as byte arrays
        return bytes(v for v in value if isinstance(v, int) and 0 <= v < 256).decode(
            "utf-8", "replace"
        )
    return "" if value is None else str(value)


def parse_journal(text: str) -> list[tuple[str, str]]:
    """``journalctl -o json`` lines -> ``[(invocation id, message line)]``; a message with
    several lines gives one entry per line; lines that are not JSON are kept with id ""."""
    entries: list[tuple[str, str]] = []
    for raw in text.splitlines():
        raw = raw.strip()
        if not raw:
            continue
        try:
            entry = json.loads(raw)
        except ValueError:
            entries.append(("", raw))
            continue
        if not isinstance(entry, dict):
            continue
        inv = str(entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID") or "")
        for line in _message(entry.get("MESSAGE")).splitlines():
            entries.append((inv, line))
    return entries


def runs(entries: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """Journal entries grouped by run (invocation), oldest first. Lines without an id belong to
    the run before them."""
    grouped: dict[str, list[str]] = {}
    last = ""
    for inv, line in entries:
        key = inv or last
        grouped.setdefault(key, []).append(line)
        last = key
    return list(grouped.items())


def explained_runs(
    state: Mapping[str, Any], unit_runs: list[tuple[str, list[str]]]
) -> list[tuple[str, list[str]]]:
    """The runs that explain the unit's state: a running unit's current run only (an old crash
    is history), unless systemd restarted it since it was started (then the crash is in the run
    before); otherwise the last two runs (a crash loop's current attempt may just have begun;
    the one before it ended with the error)."""
    if not unit_runs:
        return []
    running = (state.get("active"), state.get("sub")) == ("active", "running")
    if running and not state.get("restarts"):
        current = [run for run in unit_runs if run[0] == state.get("invocation")]
        return current[-1:] or unit_runs[-1:]
    return unit_runs[-2:]


def lines_to_explain(state: Mapping[str, Any], unit_runs: list[tuple[str, list[str]]]) -> list[str]:
    """The journal lines of :func:`explained_runs`."""
    return [line for _, lines in explained_runs(state, unit_runs) for line in lines]


def run_times(text: str) -> dict[str, tuple[float, float]]:
    """``journalctl -o json`` lines -> ``{invocation id: (first, last)}`` times of each run's
    entries in seconds since the epoch (``__REALTIME_TIMESTAMP``, in microseconds, which
    journalctl prints whatever --output-fields says); entries without an id belong to the run
    before them, as in :func:`runs`."""
    times: dict[str, tuple[float, float]] = {}
    last = ""
    for raw in text.splitlines():
        try:
            entry = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        key = str(entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID") or "") or last
        last = key
        stamp = str(entry.get("__REALTIME_TIMESTAMP") or "")
        if not stamp.isdigit():
            continue
        at = int(stamp) / 1_000_000
        first, end = times.get(key, (at, at))
        times[key] = (min(first, at), max(end, at))
    return times


#: Verdicts of a unit's journal that leave the cause to the kernel log (a process killed by a
#: signal or the OOM killer writes no error of its own; systemd's own lines say only how it ended).
SILENT_DEATHS = (
    "vllm-worker-died",
    "vllm-engine-failed",
    "unit-oom",
    "unit-signal/killed",
    "unit-signal/crash",
)
#: What the kernel log can add to them.
KERNEL_CAUSES = ("process-trap", "oom-kill")
#: The deaths a CPU trap of the kernel log can explain (not a kill from outside).
TRAP_DEATHS = ("vllm-worker-died", "vllm-engine-failed", "unit-signal/crash")
#: Verdicts of a failure in native GPU code, whose cause may be the GPU itself: the kernel
#: log's Xid events and GPU resets are added to them.
NATIVE_FAILURES = ("vllm-native/cuda-check", "vllm-cuda-crash")
_KILLED_PID = re.compile(r"Killed process (\d+) ")


def _gpu_event(v: diagnosis.Verdict) -> bool:
    return v.id.startswith(("xid-", "gpu-reset/")) and v.severity != diagnosis.OK


#: Seconds of kernel log read before and after a unit's explained runs: an Xid or a CPU trap
#: comes at most seconds before the error it causes in the unit's journal (a NCCL watchdog
#: reports a hung peer up to its timeout later; vLLM's default is well under a minute).
KERNEL_SLACK_S = 60


def kernel_argv(lines: int = 300, window: tuple[float, float] | None = None) -> list[str]:
    """This boot's last kernel messages (``journalctl -k``); with ``window`` (seconds since the
    epoch, :func:`run_times`) only those from :data:`KERNEL_SLACK_S` before its start to as
    long after its end."""
    argv = ["journalctl", "-k", "-b", "-n", str(lines), "--no-pager", "-o", "cat"]
    if window:
        start, end = window
        argv += [
            f"--since=@{int(start - KERNEL_SLACK_S)}",
            f"--until=@{int(end + KERNEL_SLACK_S) + 1}",
        ]
    return argv


#: What a write that found its file system full explains: the errors that follow from it in the
#: same journal (a C++ compile error of torch.compile reads as an engine that failed to start).
NO_SPACE_EXPLAINS = ("vllm-engine-failed", "vllm-worker-died", "vllm-arch-inspect")


def _journal_verdicts(
    source: str | None, lines: list[str], df: Mapping[str, Any] | None = None, **fields: Any
) -> list:
    """What a run's journal lines say: a write that found its file system full (any unit:
    ENOSPC is THE cause, first, and the deaths it explains are left out; ``df``: that path's
    file system now), the service's own signatures (vLLM, ComfyUI, VoxCPM2) and systemd's lines
    about the unit (any unit)."""
    text = "\n".join(lines)
    if source == "vllm-log":
        logged = diagnosis.classify_vllm_log(text, **fields)
    else:
        logged = diagnosis.classify_service_log(source, text) if source else []
    full = diagnosis.classify_no_space(text, df)
    if full:
        logged = [v for v in logged if v.id not in NO_SPACE_EXPLAINS]
    return full + logged + diagnosis.classify_unit_log(text)


def _kernel_causes(
    logged: list[diagnosis.Verdict], kernel: list[str], unit: str
) -> list[diagnosis.Verdict]:
    """The kernel's account of a death the journal only reports: a CPU trap, or an OOM kill of
    this unit (one the kernel's line gives to another unit is not this one's); after a CUDA
    error in native code the Xid events and GPU resets too."""
    if not kernel or not any(v.id in SILENT_DEATHS + NATIVE_FAILURES for v in logged):
        return []
    text = "\n".join(kernel)
    owners = diagnosis.oom_units(text)
    native = any(v.id in NATIVE_FAILURES for v in logged)

    def ours(v: diagnosis.Verdict) -> bool:
        if v.id != "oom-kill":
            return True
        pids = [m.group(1) for line in v.evidence for m in [_KILLED_PID.search(line)] if m]
        return any(owners.get(pid) in (None, unit) for pid in pids)

    # a CPU trap explains a process that died on its own, not one killed from outside
    trapped = any(v.id in TRAP_DEATHS for v in logged)
    return [
        v
        for v in diagnosis.classify_kernel_log(text)
        if (v.id == "oom-kill" and ours(v))
        or (v.id == "process-trap" and trapped)
        or (native and _gpu_event(v))
    ]


def _when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch)) if epoch else "earlier"


def _history(verdicts: list[diagnosis.Verdict], unit: str, ended: str) -> list:
    """An earlier run's failures, for a unit that runs again: warnings with the time that run
    ended (the failure is past; the service serves now)."""
    return [
        diagnosis.Verdict(
            **{
                **v.__dict__,
                "severity": diagnosis.WARN,
                "what": f"{v.what} (an earlier run, ended {ended}; {unit} runs again since)",
            }
        )
        for v in verdicts
        if v.severity != diagnosis.OK
    ]


def explain(
    state: Mapping[str, Any],
    journal: list[str],
    kernel: list[str] | None = None,
    **fields: Any,
) -> list[diagnosis.Verdict]:
    """The unit's verdict and what its journal says: the service's own signatures for a unit
    with a journal classifier (:data:`LOG_SOURCES`: vLLM, ComfyUI, VoxCPM2; a running unit
    whose current run logged a failure is not "up": ComfyUI stays up after a failed job) and
    systemd's lines about any unit (the OOM killer, a signal). A unit that is not up and whose
    journal nothing recognises gets its last lines as evidence. When the journal says only that
    a process died, ``kernel`` (this boot's kernel messages) may say how: a CPU trap or an OOM
    kill of this unit; after a CUDA error in native code, this boot's Xid events and GPU
    resets are added (the GPU itself may be the cause). A running unit's earlier runs
    (``state["history_lines"]``, the first lines of ``journal``, ended at
    ``state["history_end"]``) are history: their failures are warnings with that time. A write
    that found its file system full (ENOSPC, in any run explained) comes first, before the unit's
    own verdict: it is the cause (``state["no_space_df"]``: that file system's ``df`` now,
    :func:`read_unit`)."""
    unit = str(state.get("unit") or "")
    source = LOG_SOURCES.get(unit)
    running = (state.get("active"), state.get("sub")) == ("active", "running")
    split = int(state.get("history_lines") or 0) if running else 0
    df = state.get("no_space_df")
    logged = _journal_verdicts(source, journal[split:], df, **fields)
    past = _journal_verdicts(source, journal[:split], df, **fields) if split else []
    failing = any(v.severity == diagnosis.FAIL for v in logged)
    ended = _when(state.get("history_end"))
    verdicts = diagnosis.classify_unit(
        {**state, "logged_failure": failing, "ended": ended if split else ""}
    )
    if kernel:
        for found in (past, logged):
            found += _kernel_causes(found, kernel, unit)
    for found in (past, logged):  # the kernel named the OOM kill: systemd's SIGKILL is its
        if any(v.kind in ("oom-kill", "unit-oom") for v in found):
            found[:] = [v for v in found if v.id != "unit-signal/killed"]
    up = any(v.id in ("service/up", "service/up-failing") for v in verdicts)
    if up:  # a running service: only what is wrong now counts (not start-up notes)
        logged = [v for v in logged if v.severity != diagnosis.OK]
    logged = _history(past, unit, ended) + logged
    if not up and not any(v.severity == diagnosis.FAIL for v in logged):
        tail = tuple(line for line in journal[-8:] if line.strip())
        verdicts = [
            diagnosis.Verdict(**{**v.__dict__, "evidence": v.evidence or tail})
            if v.severity == diagnosis.FAIL
            else v
            for v in verdicts
        ]
    full = [v for v in logged if v.kind == "no-space" and v.severity == diagnosis.FAIL]
    return full + verdicts + [v for v in logged if v not in full]


def df_argv(path: str) -> list[str]:
    """``df`` of the file system holding ``path`` or its nearest existing parent (a file that a
    failed write named may not exist), as :func:`rigup.diagnosis.parse_df` reads it."""
    script = 'p=$1; while ! test -e "$p" && test "$p" != /; do p=$(dirname "$p"); done; '
    return ["sh", "-c", script + " ".join(diagnosis.DF_ARGS) + ' "$p"', "sh", path]


def read_df(path: str, runner: Runner = run) -> dict[str, Any] | None:
    """``{"mount", "free_gib", "size_gib", ...}`` of the file system holding ``path``
    (:func:`rigup.diagnosis.parse_df`), None when ``df`` gives no figure."""
    code, out = runner(df_argv(path))
    found = diagnosis.parse_df(out) if code == 0 else []
    return found[0] if found else None


def read_kernel(runner: Runner = run, window: tuple[float, float] | None = None) -> list[str]:
    """This boot's kernel messages, around ``window`` when given (a unit's explained runs:
    ``state["window"]`` of :func:`read_unit`); [] where the kernel log cannot be read (a
    container)."""
    code, out = runner(kernel_argv(window=window))
    return out.splitlines() if code == 0 else []


def read_unit(unit: str, runner: Runner = run, journal_lines: int = 400, **extra: Any):
    """``(state, journal lines to explain)`` of ``unit`` on this host, through ``runner``;
    ``state["window"]`` is the time span of those lines (seconds since the epoch) when the
    journal gives it, for :func:`read_kernel`; ``state["no_space_df"]`` the ``df`` of the file
    system a failed write (ENOSPC) named, when they hold one (:func:`read_df`)."""
    _, out = runner(show_argv([unit]))
    props = (parse_show(out) or [{}])[0]
    state = unit_state(props, **extra)
    if state["load"] in ("", "not-found"):
        return state, []
    if (state["active"], state["sub"]) == ("active", "running") and state["inputs"]:
        _, stat_out = runner(["stat", "-L", "-c", "%Y %n", *state["inputs"]])
        state["changed_inputs"] = changed_since(stat_out, state["started"])
    _, log = runner(journal_argv(unit, journal_lines))
    explained = explained_runs(state, runs(parse_journal(log)))
    times = run_times(log)
    spans = [times[inv] for inv, _ in explained if inv in times]
    if spans:
        state["window"] = (min(a for a, _ in spans), max(b for _, b in spans))
    current = state.get("invocation")
    earlier = [(inv, lines) for inv, lines in explained if inv != current]
    if current and len(earlier) < len(explained) and earlier:
        state["history_lines"] = sum(len(lines) for _, lines in earlier)
        ends = [times[inv][1] for inv, _ in earlier if inv in times]
        state["history_end"] = max(ends) if ends else None
        explained = earlier + [(inv, lines) for inv, lines in explained if inv == current]
    lines = [line for _, lines in explained for line in lines]
    full = diagnosis.first_no_space_path(lines)
    if full and (df := read_df(full, runner)):
        state["no_space_df"] = df
    return state, lines
