"""Signatures of a rig's part in a cluster of rigs (rigup-doctor's cluster section): its
supervisor, rigup-cluster-watch (roles/cluster, files/cluster/cluster_watch.py), and what its
state file says of the peer rigs.

The state is what rigup/doctor/cluster.py ``cluster_state`` builds: the supervisor's timer and
service (``timer``, ``timer_state``, ``service``, ``result``), its state file's fields
(``failures``, ``last``, ``checked``, ``restarts``, ``restarted``, ``why``) or why it was not
read (``unreadable``, ``no_state``), and the rig's place: ``rig``, ``role``, ``rank``,
``cluster``, ``peer`` (the rigs its probe depends on, by inventory name and private address),
``threshold`` (failed checks that restart), ``interval``, ``bound`` (seconds from a peer's death
to the restart, roles/cluster/watch.py ``detection_bound_s``), ``this_boot`` (the last restart
happened since this boot) and ``stale`` (the last check is older than ``bound``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .core import FAIL, OK, WARN, Signature, Verdict, classify_state

#: What each role's probe failing means (files/cluster/cluster_watch.py's docstring: measured
#: on the CPU build's pair in two network namespaces).
MEANING = {
    "leader": "the 1-token completion through every pipeline stage hung: a follower's stage no "
    "longer answers (vLLM 0.22.1's leader keeps answering /health when its follower is gone)",
    "follower": "its session to the leader's master port (torch.distributed's store) closed: "
    "the leader's engine stopped or restarted (vLLM 0.22.1's follower idles without it and "
    "never exits)",
}


def _match(test: Callable[[Mapping[str, Any]], bool]):
    def match(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if not test(s):
            return None
        return {**s, "meaning": MEANING.get(s.get("role") or "", "")}

    return match


def _watch_down(s: Mapping[str, Any]) -> bool:
    return s.get("timer_state") != "active"


def _watch_failed(s: Mapping[str, Any]) -> bool:
    return s.get("result") not in (None, "", "success")


_CLUSTER: list[Signature] = [
    Signature(
        id="cluster/watch-missing",
        source="cluster",
        severity=FAIL,
        what="{timer} is {timer_state}: nothing supervises {rig}'s part of the cluster {cluster}",
        why="vLLM 0.22.1's pair does not notice a dead peer (the leader answers /health and hangs "
        "every completion, a follower idles) and neither exits, so systemd's Restart= never "
        "fires: only the supervisor restarts vllm.service when its peer {peer} dies",
        fix="`sudo systemctl enable --now {timer}`; a converge (deploys/cluster.py) installs it "
        "where it is missing",
        matcher=_match(_watch_down),
    ),
    Signature(
        id="cluster/watch-failed",
        source="cluster",
        severity=FAIL,
        what="the supervisor's last check failed ({service}: {result})",
        why="the check itself did not run to its end, so a dead peer may go unnoticed",
        fix="`journalctl -u {service} -b` shows why",
        matcher=_match(_watch_failed),
    ),
    Signature(
        id="cluster/not-root",
        source="cluster",
        severity=OK,
        what="{rig}'s supervisor ({timer}) is active; its state ({unreadable}) is root's only: "
        "run `sudo rigup-doctor` to see its peers",
        why="rigup keeps the supervisor's state directory private to root",
        fix="run it with sudo",
        matcher=_match(lambda s: bool(s.get("unreadable"))),
    ),
    Signature(
        id="cluster/no-check",
        source="cluster",
        severity=OK,
        what="{rig} ({role}) of the cluster {cluster}: {timer} is active and has not checked yet",
        why="its first check runs {interval} s after boot or after the converge that started it",
        fix="nothing to do; `journalctl -u {service} -b` shows each check",
        matcher=_match(lambda s: bool(s.get("no_state"))),
    ),
    Signature(
        id="cluster/watch-stale",
        source="cluster",
        severity=WARN,
        what="the supervisor's last check was {ago} ago, more than the {bound} s it takes to "
        "act on a dead peer: {last}",
        why="{timer} runs a check every {interval} s after the last one ended; none ran since",
        fix="`systemctl list-timers {timer}` shows its next run; `journalctl -u {service} -b` "
        "each check",
        matcher=_match(lambda s: bool(s.get("stale"))),
    ),
    Signature(
        id="cluster/peer-failing",
        source="cluster",
        severity=WARN,
        what="{rig} ({role}): its peer {peer} is not answering: {failures} of {threshold} "
        "checks in a row failed",
        why="{last}: {meaning}",
        fix="the supervisor restarts vllm.service at {threshold} failed checks, within {bound} s "
        "of the peer's death; why the peer's engine stopped: `journalctl -u vllm.service -b` on "
        "{peer_names}",
        matcher=_match(lambda s: (s.get("failures") or 0) > 0),
    ),
    Signature(
        id="cluster/peer-lost",
        source="cluster",
        severity=WARN,
        what="{rig} ({role}) lost its peer {peer}: the supervisor restarted vllm.service at "
        "{restarted_at} ({restarted_ago} ago; {restarts} restart(s) in all)",
        why="{why}: {meaning}",
        fix="the pair serves again by itself once both engines have loaded (it did if this "
        "rig's other sections are ok); why the peer's engine died: `journalctl -u vllm.service "
        "-b` on {peer_names}; each check of this rig: `journalctl -u {service} -b`",
        matcher=_match(lambda s: bool(s.get("this_boot"))),
    ),
    Signature(
        id="cluster/ok",
        source="cluster",
        severity=OK,
        what="{rig} ({role}, rank {rank}) of the cluster {cluster} with {peer}: supervised by "
        "{timer}, last check {ago} ago: {last}",
        why="rigup-cluster-watch checks every {interval} s and restarts vllm.service within "
        "{bound} s of a peer's death",
        fix="nothing to do",
        matcher=_match(lambda s: True),
    ),
]


def classify_cluster(state: Mapping[str, Any]) -> list[Verdict]:
    """The verdict on a rig's part in its cluster: one of :data:`_CLUSTER`, the first that
    recognises ``state`` (the module docstring lists its keys)."""
    return classify_state("cluster", state)
