"""Signatures of a systemd service's state (systemctl show): crash loops, failed and stopped
units; :func:`classify_unit`."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature, Verdict, classify_state


def _unit_fields(s: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "unit": s.get("unit"),
        "n": s.get("restarts") or 0,
        "state": f"{s.get('active')}/{s.get('sub')}",
        "result": s.get("result") or "?",
        "mode": s.get("mode") or "?",
        "other": s.get("other_mode") or "other",
        "mode_words": f" in the {s['mode']} mode" if s.get("mode") else " (outside rigup's modes)",
        "restart_sec": s.get("restart_sec") or "?",
        "ended_words": f"; the last ended {s['ended']}" if s.get("ended") else "",
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


def _stale_words(s: Mapping[str, Any]) -> str:
    words = [f"{', '.join(s['changed_inputs'])} changed"] if s.get("changed_inputs") else []
    if s.get("need_reload"):
        words.append(
            "its unit changed on disk and systemd has not reloaded it (NeedDaemonReload=yes)"
        )
    return "; ".join(words)


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
        what="{unit} runs, after {n} crash(es) since it was started{ended_words}",
        why="systemd restarted it after it died and it runs again; the journal of the earlier "
        "run says why (below, as warnings: that run is over)",
        fix="`journalctl -u {unit} -b` shows the crash",
        matcher=_unit_match(lambda s: _running(s) and (s.get("restarts") or 0) > 0),
    ),
    Signature(
        id="service/up-failing",
        source="unit-state",
        severity=WARN,
        what="{unit} runs ({state}), but its current run logged a failure (below)",
        why="the service stays up after a failed job (a workflow or request that ran out of "
        "memory): it answers its health check and fails the work",
        fix="fix what its journal names (below); `journalctl -u {unit} -b` shows it",
        matcher=_unit_match(lambda s: _running(s) and bool(s.get("logged_failure"))),
    ),
    Signature(
        id="service/up",
        source="unit-state",
        severity=OK,
        what="{unit} is up ({state})",
        why="running{mode_words}",
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
        id="service-stale",
        source="unit-state",
        severity=WARN,
        what="{unit} runs an older configuration than the one on disk: {changed}",
        why="what it starts with changed after it started ({started}) and nothing restarted it: "
        "a converge interrupted between writing its files and its restart, or a hand edit",
        fix="converge (it restarts a running service whose unit, environment or inputs changed "
        "since it started), or `sudo systemctl daemon-reload && sudo /opt/rigup/bin/rigup-start "
        "--restart {unit}`",
        matcher=lambda s: (
            {
                **_unit_fields(s),
                "changed": _stale_words(s),
                "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(s["started"]))
                if s.get("started")
                else "?",
            }
            if _running(s) and (s.get("changed_inputs") or s.get("need_reload"))
            else None
        ),
        reference="systemd's NeedDaemonReload= and ExecMainStartTimestamp= (systemctl show "
        "--timestamp=unix); captured on the lab machine: tests/fixtures/systemd/stale/",
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
    target is active), ``restart_sec``, ``arm`` (a rigup-bench arm drop-in in place) and
    ``logged_failure`` (the current run's journal shows a failure), ``changed_inputs`` (the
    files it started with that changed since: rigup.units.read_unit) and ``need_reload``
    (systemd's NeedDaemonReload=)."""
    return classify_state("unit-state", state)
