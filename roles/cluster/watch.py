"""The supervisor's configuration and units (files/cluster/cluster_watch.py does the checks):
pure renderings, so the unit tests read them per rank."""

from __future__ import annotations

from typing import Any

from roles.cluster.member import ClusterMember
from roles.common.urls import local_probe_url
from roles.vllm.paths import VllmPaths
from roles.vllm.settings import VllmSettings

WATCH = "rigup-cluster-watch"


def detection_bound_s(interval_s: int, failures: int, probe_timeout_s: int) -> int:
    """Seconds from a peer's death to the restart of vllm.service, at most: a check that started
    just before the death may still pass (up to ``probe_timeout_s``); the timer starts the next
    check ``interval_s`` after the last one ended (OnUnitInactiveSec=), a failing probe takes up
    to ``probe_timeout_s`` (a hung completion), and ``failures`` of them in a row restart.
    The pair then serves again once the model has loaded (up to ``vllm_start_timeout_s``)."""
    return probe_timeout_s + failures * (interval_s + probe_timeout_s)


def state_path(settings: Any) -> str:
    """Where rigup-cluster-watch keeps its state (JSON, files/cluster/cluster_watch.py
    ``check``): ``<rigup_state_dir>/cluster/watch-state.json``, in a directory root's only."""
    return f"{settings.get('rigup_state_dir')}/cluster/watch-state.json"


def doctor_view(settings: Any, member: ClusterMember) -> dict:
    """What rigup-doctor's cluster section reads of this rig's place in its cluster (the
    ``cluster`` key of doctor.json, roles/doctor/config.py): the rig, its rank and role, the
    cluster's name, its peers by inventory name and private address (``[{"name",
    "address", "role"}]``, by rank), the supervisor's units and state file, and the bound on
    the seconds from a peer's death to a restart (:func:`detection_bound_s`)."""
    interval = settings.get("cluster_watch_interval_s")
    failures = settings.get("cluster_watch_failures")
    probe = settings.get("cluster_probe_timeout_s")
    return {
        "name": member.cluster,
        "rig": member.name,
        "rank": member.rank,
        "role": "leader" if member.is_leader else "follower",
        "nnodes": member.nnodes,
        "address": member.address,
        "leader": member.leader,
        "master_addr": member.master_addr,
        "master_port": member.master_port,
        "peers": [
            {
                "name": name,
                "address": address,
                "role": "leader" if name == member.leader else "follower",
            }
            for name, address in member.peers
        ],
        "watch": {
            "timer": f"{WATCH}.timer",
            "service": f"{WATCH}.service",
            "state_file": state_path(settings),
            "interval_s": interval,
            "failures": failures,
            "probe_timeout_s": probe,
            "detection_bound_s": detection_bound_s(interval, failures, probe),
        },
    }


def watch_config(settings: Any, member: ClusterMember, state_file: str) -> dict:
    """What rigup-cluster-watch reads (JSON): the rig's role, what it probes and when it
    restarts. The API key is read on the host from vllm.service's root-only environment file,
    never copied here."""
    vllm = VllmSettings.of(settings)
    return {
        "rig": member.name,
        "role": "leader" if member.is_leader else "follower",
        "unit": "vllm.service",
        "leader": member.leader,
        "leader_address": member.master_addr,
        "master_port": member.master_port,
        "completion_url": local_probe_url(str(vllm.vllm_host), vllm.vllm_port, "/v1/completions"),
        "model": vllm.vllm_served_model_name,
        "api_key_file": VllmPaths.from_data(settings).api_key_file,
        "probe_timeout_s": settings.get("cluster_probe_timeout_s"),
        "failures": settings.get("cluster_watch_failures"),
        # a follower is active at once and meets the leader's store only once the leader runs:
        # it waits as long as the leader's start may take
        "grace_s": vllm.vllm_start_timeout_s,
        "state_file": state_file,
    }


def watch_units(script: str, config: str, state_dir: str, interval_s: int) -> dict[str, str]:
    """``{unit name: text}`` of the oneshot check and its timer (every ``interval_s`` seconds
    after the last check ended, from boot on); ``systemctl status rigup-cluster-watch`` shows
    the last decision."""
    service = f"""\
# Managed by rigup (roles/cluster). Change the inventory and re-run the deploy.
[Unit]
Description=rigup: check this rig's part of the cluster, restart vllm.service when its peer is gone
Documentation=man:systemd.timer(5)
After=vllm.service

[Service]
Type=oneshot
# root: it restarts vllm.service and reads its API key file
ExecStart=/usr/bin/python3 {script} {config}
TimeoutStartSec=300
ProtectSystem=strict
ReadWritePaths={state_dir}
ProtectHome=yes
PrivateTmp=yes
NoNewPrivileges=yes
"""
    timer = f"""\
# Managed by rigup (roles/cluster). Change the inventory and re-run the deploy.
[Unit]
Description=rigup: check this rig's part of the cluster every {interval_s} s

[Timer]
OnBootSec={interval_s}
OnUnitInactiveSec={interval_s}
AccuracySec=1s

[Install]
WantedBy=timers.target
"""
    return {f"{WATCH}.service": service, f"{WATCH}.timer": timer}
