"""The cluster rules on pyinfra's inventory: every host of the inventory, ``--limit`` or not
(pyinfra 3 keeps all hosts in its inventory and limits only which are active), so one rig
re-converged alone still sees its cluster, and its leader's address comes from the leader's own
host data."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyinfra import host, inventory
from pyinfra.api.exceptions import DeployError

from roles.cluster.group import ClusterMember, clusters, group_problems, member_of


class ClusterError(DeployError):
    """Raised when the rigs of a cluster disagree; the message lists every problem."""


def inventory_rigs() -> dict[str, Any]:
    """``{host name: host.data}`` of every host of the inventory, in its order."""
    return {h.name: h.data for h in inventory}


def require_valid_cluster(own: Callable[[Any], list[str]]) -> None:
    """Raise :class:`ClusterError` listing, all at once, each rig's own problems (``own``:
    roles/settings.py ``validate``) for every rig of a cluster of the inventory, then every
    problem across the rigs of each cluster (roles/cluster/group.py ``group_problems``); None
    when there is none. A rig that serves alone is left to its own run's check."""
    rigs = inventory_rigs()
    problems = [
        f"{name}: {problem}"
        for members in clusters(rigs).values()
        for name, data in members.items()
        for problem in own(data)
    ]
    problems.extend(group_problems(rigs))
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ClusterError(
            f"invalid cluster of rigs in the inventory (nothing was changed on any host):\n{lines}\n"
            "Fix them in the inventory's group data (inventory/rigs.py), in each rig's host data "
            "or in inventory/group_data/all.py."
        )


def this_member(settings: Any) -> ClusterMember | None:
    """The current host's :class:`ClusterMember`, None when it serves alone."""
    rigs = inventory_rigs()
    rigs[host.name] = settings
    return member_of(host.name, rigs)
