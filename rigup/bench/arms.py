"""A/B arms: a temporary drop-in applied, then restored and verified (also on SIGINT, SIGTERM,
SIGHUP); and the preconditions of a run."""

from __future__ import annotations

import os
import re
import shutil
import signal
from typing import Any

from rigup import metrics, units

from .core import Host, Interrupted, Refused
from .rows import read_scrape

_ARGV = re.compile(r"argv\[\]=(.*?) ;")


def service_snapshot(cfg: dict, host: Host) -> dict[str, str]:
    """What must be the same after an arm: vllm.service's command line (without the run-time
    fields of ``systemctl show``), its environment files, unset variables and drop-ins."""
    _, out = host.runner(
        [
            "systemctl",
            "show",
            cfg["vllm"]["unit"],
            "-pExecStart",
            "-pEnvironmentFiles",
            "-pUnsetEnvironment",
            "-pDropInPaths",
        ]
    )
    props: dict[str, str] = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key] = (props.get(key, "") + "\n" + value).strip()
    m = _ARGV.search(props.get("ExecStart", ""))
    props["ExecStart"] = m.group(1) if m else props.get("ExecStart", "")
    return props


def restart(cfg: dict, host: Host) -> tuple[int, str]:
    """``rigup-start --restart vllm.service``: returns once /health answers, or fails with the
    diagnosis of its journal (rigup-explain)."""
    return host.runner([cfg["bench"]["rigup_start"], "--restart", cfg["vllm"]["unit"]])


def apply_arm(cfg: dict, host: Host, name: str) -> None:
    """Put the arm's drop-in under /run and restart vLLM with it."""
    arm = cfg["bench"]["arms"][name]
    dropin = cfg["bench"]["dropin"]
    os.makedirs(os.path.dirname(dropin), exist_ok=True)
    shutil.copyfile(arm["dropin"], dropin)
    host.runner(["systemctl", "daemon-reload"])
    code, out = restart(cfg, host)
    if code != 0:
        raise RuntimeError(f"vllm.service did not come up with arm {name}:\n{out.strip()}")
    if dropin not in service_snapshot(cfg, host).get("DropInPaths", ""):
        raise RuntimeError(f"systemd does not read {dropin} for arm {name}")


def restore(cfg: dict, host: Host, snapshot: dict[str, str] | None) -> dict:
    """Remove rigup-bench's drop-in, restart the configured vllm.service and verify it:
    ``{"ok", "checks": [...], "problems": [...]}``."""
    dropin = cfg["bench"]["dropin"]
    removed = os.path.exists(dropin)
    if removed:
        os.remove(dropin)
    host.runner(["systemctl", "daemon-reload"])
    code, out = restart(cfg, host)
    problems, checks = [], []
    if code != 0:
        problems.append(f"vllm.service did not come back up:\n{out.strip()}")
    now = service_snapshot(cfg, host)
    if dropin in now.get("DropInPaths", ""):
        problems.append(f"systemd still reads {dropin}")
    else:
        checks.append("no rigup-bench drop-in")
    if snapshot is not None:
        differs = [k for k in snapshot if snapshot[k] != now.get(k)]
        if differs:
            problems.append(f"vllm.service differs from before the run: {', '.join(differs)}")
        else:
            checks.append("ExecStart, environment files and drop-ins as before the run")
    status, _ = host.get(cfg["vllm"]["health_url"])
    (checks if status == 200 else problems).append(f"GET /health: {status or 'no answer'}")
    status, body = host.get(cfg["vllm"]["base_url"] + "/v1/models")
    named = cfg["vllm"]["served_model_name"] in body
    if status == 401 or (status == 200 and named):
        checks.append(f"GET /v1/models: {status}")
    else:
        problems.append(f"GET /v1/models: {status or 'no answer'}")
    return {"ok": not problems, "removed_dropin": removed, "checks": checks, "problems": problems}


class Signals:
    """While active, SIGINT/SIGTERM/SIGHUP raise :class:`Interrupted`; :meth:`hold` ignores them
    (during the restore)."""

    NAMES = ("SIGINT", "SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.saved: dict[int, Any] = {}

    def __enter__(self) -> Signals:
        for name in self.NAMES:
            sig = getattr(signal, name)
            self.saved[sig] = signal.signal(sig, self._raise)
        return self

    def _raise(self, signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    def hold(self) -> None:
        for sig in self.saved:
            signal.signal(sig, signal.SIG_IGN)

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


# --- preconditions ------------------------------------------------------------------------------


def refuse_unless_ready(cfg: dict, host: Host, busy_ok: bool = False) -> None:
    """Refuse (:class:`Refused`, nothing started) unless the rig is in the LLM mode and
    vllm.service is up and idle, with no arm left over."""
    unit = cfg["vllm"]["unit"]
    llm = next(m for m, spec in cfg["modes"].items() if unit in spec["services"])
    target = cfg["modes"][llm]["target"]
    _, out = host.runner(["systemctl", "is-active", target])
    if out.strip() != "active":
        active = [
            m
            for m, spec in cfg["modes"].items()
            if host.runner(["systemctl", "is-active", spec["target"]])[1].strip() == "active"
        ]
        now = f"the {active[0]} mode" if active else "no mode"
        raise Refused(
            f"the rig is in {now}, not the {llm} mode ({target} is {out.strip() or 'inactive'}): "
            f"`sudo rigup-mode {llm}` switches to it. Nothing was started."
        )
    if os.path.exists(cfg["bench"]["dropin"]):
        raise Refused(
            f"a benchmark arm's drop-in is still in place ({cfg['bench']['dropin']}): "
            "`sudo rigup-bench --restore` first. Nothing was started."
        )
    state, journal = units.read_unit(unit, host.runner, mode=llm, mode_active=True)
    status, _ = host.get(cfg["vllm"]["health_url"])
    if (state.get("active"), state.get("sub")) != ("active", "running") or status != 200:
        why = "; ".join(str(v) for v in units.explain(state, journal) if v.severity != "ok")
        raise Refused(
            f"{unit} is not serving ({state.get('active')}/{state.get('sub')}, /health "
            f"{status or 'no answer'}): {why or 'rigup-doctor says why'}. Nothing was started."
        )
    if not os.path.exists(cfg["vllm"]["cli"][-1]):
        raise Refused(f"{cfg['vllm']['cli'][-1]} is missing: converge (deploys/vllm.py)")
    if not busy_ok:
        scrape = read_scrape(cfg, host)
        busy = (scrape.total(metrics.RUNNING) or 0) + (scrape.total(metrics.WAITING) or 0)
        if busy:
            raise Refused(
                f"vLLM is serving {busy:g} other request(s): the figures would be wrong. Wait "
                "for them, or pass --busy-ok. Nothing was started."
            )
