"""What a rig of a cluster changes in vllm.service (the same template, files/common/
service.unit.j2, on every rig): pure, so the unit tests render it per rank."""

from __future__ import annotations

from typing import Any

from roles.cluster.member import ClusterMember
from roles.common.command_line import exec_line
from roles.vllm.footprint import FOOTPRINT as ENGINE

#: the unit the rigs of a cluster run together: the engine's (roles/vllm/footprint.py)
ENGINE_UNIT = ENGINE.unit
#: the oneshot unit that loads the rig's nftables table (roles/cluster/firewall.py)
FIREWALL_UNIT = "rigup-cluster-firewall.service"


def watch_script(settings: Any) -> str:
    """Where files/cluster/cluster_watch.py is installed: ``<rigup_prefix>/bin/rigup-cluster-watch``."""
    return f"{settings.get('rigup_prefix')}/bin/rigup-cluster-watch"


def cluster_unit(
    member: ClusterMember | None, differs: dict[str, Any], ready_exec: str = ""
) -> dict[str, Any]:
    """``differs`` (the ServiceSpec fields a role sets) for a rig of ``member``'s cluster: a
    follower has no readiness URL (``vllm serve --headless`` runs no API server: vLLM 0.22.1
    entrypoints/cli/serve.py ``run_headless``); the leader is ready when ``ready_exec`` (a
    1-token completion: :func:`leader_ready_exec`) succeeds; every rig's unit may reach its
    peers' addresses and, with ``cluster_firewall``, requires and starts after
    :data:`FIREWALL_UNIT`. Unchanged for a rig that serves alone (``member`` None)."""
    if member is None:
        return differs
    out = {**differs, "peer_addresses": member.peer_addresses}
    if not member.is_leader:
        out["ready_path"] = ""
    elif ready_exec:
        out["ready_exec"] = ready_exec
    if member.firewall:
        out["requires"] = (*differs.get("requires", ()), FIREWALL_UNIT)
        comment = (
            f"# The cluster's firewall ({FIREWALL_UNIT}, roles/cluster) is up before the engine "
            "listens to the peer rigs."
        )
        old = differs.get("requires_comment", "")
        out["requires_comment"] = f"{old}\n{comment}" if old else comment
    return out


def leader_ready_exec(script: str, url: str, model: str, timeout_s: int) -> str:
    """The leader's ExecStartPost= command: ``rigup-cluster-watch --ready URL MODEL TIMEOUT
    $MAINPID`` (files/cluster/cluster_watch.py ``wait_ready``), each word quoted for systemd."""
    return (
        exec_line(["/usr/bin/python3", script, "--ready", url, model, str(timeout_s)]) + " $MAINPID"
    )
