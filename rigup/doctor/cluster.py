"""rigup-doctor's cluster section: on a rig that serves one model with other rigs
(``vllm_nnodes`` > 1, roles/cluster), its supervisor (rigup-cluster-watch's timer and last
check) and what the supervisor's state file says of the peers: which rig stopped answering,
why, when, and how many restarts it caused.

:func:`cluster_state` is pure (the unit tests run it on captured state files); the readers take
the runner and a path. A rig that serves alone has no ``cluster`` key in doctor.json and no
section.
"""

from __future__ import annotations

import json
import time
from typing import Any

from rigup import diagnosis, units

from .core import Runner, Section, run


def peer_words(cfg: dict) -> tuple[str, str]:
    """``(peer, peer_names)``: the rigs this rig's probe depends on, as the verdicts name them.
    A follower's probe reads its session to the leader: ``"the leader rigs-a (10.77.0.1)"``;
    the leader's completion goes through every follower's stage: ``"the follower rigs-b
    (10.77.0.2)"``, or with several ``"one of the followers rigs-b (10.77.0.2), rigs-c
    (10.77.0.3)"``. ``peer_names`` are the inventory names alone (``"rigs-b"``, ``"rigs-b,
    rigs-c"``)."""
    wanted = "leader" if cfg["role"] == "follower" else "follower"
    peers = [p for p in cfg["peers"] if p["role"] == wanted]
    named = ", ".join(f"{p['name']} ({p['address']})" for p in peers)
    if wanted == "leader":
        lead = "the leader"
    else:
        lead = "the follower" if len(peers) == 1 else "one of the followers"
    return f"{lead} {named}", ", ".join(p["name"] for p in peers)


def duration(seconds: float) -> str:
    """``42`` -> ``"42 s"``, ``600`` -> ``"10 min"``, ``7200`` -> ``"2.0 h"``, ``259200`` ->
    ``"3.0 d"``."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def utc(epoch: float) -> str:
    """Seconds since the epoch as ``2026-12-02 07:41:03 UTC``."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def cluster_state(
    cfg: dict,
    timer: dict[str, Any],
    service: dict[str, Any],
    watch: dict[str, Any] | None,
    now: float,
    boot: float,
    unreadable: str = "",
) -> dict[str, Any]:
    """The state :func:`rigup.diagnosis.classify_cluster` reads. ``cfg``: doctor.json's
    ``cluster`` (roles/cluster/watch.py ``doctor_view``); ``timer``, ``service``: the
    supervisor's units as :func:`rigup.units.unit_state` reads them; ``watch``: its state file
    (files/cluster/cluster_watch.py ``check``: ``failures``, ``last``, ``checked``,
    ``restarts``, ``restarted``, ``why``; times in seconds since the epoch), None when there is
    none yet; ``now``, ``boot``: the time now and of this boot, seconds since the epoch;
    ``unreadable``: the state file's path when this user may not read it."""
    w = cfg["watch"]
    peer, peer_names = peer_words(cfg)
    state: dict[str, Any] = {
        "rig": cfg["rig"],
        "role": cfg["role"],
        "rank": cfg["rank"],
        "cluster": cfg["name"],
        "peer": peer,
        "peer_names": peer_names,
        "timer": w["timer"],
        "service": w["service"],
        "timer_state": (timer.get("active") or "unknown")
        if timer.get("load") != "not-found"
        else "not-found",
        "result": service.get("result") if service.get("load") != "not-found" else "",
        "threshold": w["failures"],
        "interval": w["interval_s"],
        "bound": w["detection_bound_s"],
        "unreadable": unreadable,
        "no_state": not unreadable and not watch,
    }
    if not watch:
        return state
    checked = float(watch.get("checked") or 0)
    state.update(
        failures=int(watch.get("failures") or 0),
        last=watch.get("last") or "?",
        checked_at=utc(checked) if checked else "?",
        ago=duration(now - checked) if checked else "?",
        stale=bool(checked) and now - checked > w["detection_bound_s"],
        restarts=int(watch.get("restarts") or 0),
    )
    restarted = watch.get("restarted")
    if restarted:
        state.update(
            restarted_at=utc(float(restarted)),
            restarted_ago=duration(now - float(restarted)),
            why=watch.get("why") or "?",
            this_boot=float(restarted) >= boot,
        )
    return state


def boot_time(path: str = "/proc/stat") -> float:
    """This boot's time, seconds since the epoch (``btime`` of /proc/stat, proc(5))."""
    with open(path, encoding="ascii") as f:
        for line in f:
            if line.startswith("btime "):
                return float(line.split()[1])
    raise ValueError(f"{path} has no btime line")


def read_watch_state(path: str) -> tuple[dict[str, Any] | None, str]:
    """``(the supervisor's state, "")``; ``(None, "")`` when it has not written one yet (or it
    is not JSON: the next check writes it anew); ``(None, path)`` when this user may not read
    it."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f), ""
    except PermissionError:
        return None, path
    except (OSError, ValueError):
        return None, ""


def check_cluster(
    cfg: dict, runner: Runner = run, now: float | None = None, boot: float | None = None
) -> Section:
    """The cluster section of a rig of a cluster (``cfg["cluster"]``): the supervisor's timer
    and last check (``systemctl show``) and its state file. An empty section on a rig that
    serves alone. ``now`` and ``boot`` (seconds since the epoch) default to the host's clock
    and this boot's time (:func:`boot_time`): a restart before ``boot`` is not this boot's."""
    section = Section("cluster")
    cluster = cfg.get("cluster")
    if not cluster:
        return section
    w = cluster["watch"]
    _, out = runner(units.show_argv([w["timer"], w["service"]]))
    shown = units.parse_show(out)
    timer, service = (units.unit_state(p) for p in (shown + [{}, {}])[:2])
    watch, unreadable = read_watch_state(w["state_file"])
    state = cluster_state(
        cluster,
        timer,
        service,
        watch,
        time.time() if now is None else now,
        boot_time() if boot is None else boot,
        unreadable,
    )
    section.verdicts = diagnosis.classify_cluster(state)
    section.facts = {
        "rig": cluster["rig"],
        "role": cluster["role"],
        "rank": cluster["rank"],
        "cluster": cluster["name"],
        "peers": cluster["peers"],
        "timer": {"unit": w["timer"], "active": state["timer_state"]},
        "state_file": w["state_file"],
        "watch": watch if watch is not None else ("unreadable" if unreadable else None),
        "detection_bound_s": w["detection_bound_s"],
    }
    return section
