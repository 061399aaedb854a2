"""cluster: a rig's part in serving one model across several rigs (docs/many-rigs.md).

Settings: roles/cluster/settings.py (``cluster_*``, ``vllm_nnodes``, ``vllm_node_rank``,
``vllm_pipeline_parallel_size``, ``vllm_master_port``); the rules across the rigs of a cluster
run before any change (roles/cluster/group.py, from roles/settings.py ``host_settings``).
vllm.service renders the multi-node flags and addresses itself (roles/vllm, through
roles/cluster/member.py); this role adds, on each rig of a cluster, the firewall
(roles/cluster/firewall.py) and the supervisor (roles/cluster/watch.py,
files/cluster/cluster_watch.py). On a rig that serves alone it removes them, if an earlier run
made them.
"""

from __future__ import annotations

import json
import posixpath
from io import StringIO
from pathlib import Path

from pyinfra.api import deploy
from pyinfra.operations import apt, systemd
from pyinfra.operations.util import any_changed

from roles.cluster.firewall import TABLE, ruleset
from roles.cluster.firewall import unit as firewall_unit
from roles.cluster.inventory import this_member
from roles.cluster.unit import FIREWALL_UNIT, watch_script
from roles.cluster.watch import WATCH, state_path, watch_config, watch_units
from roles.common.placed import directory_placed, file_absent, file_placed, path_state, survey
from roles.common.urls import is_loopback

WATCH_SCRIPT = Path(__file__).resolve().parents[2] / "files" / "cluster" / "cluster_watch.py"
UNIT_DIR = "/etc/systemd/system"


@deploy("Cluster")
def cluster(settings) -> None:
    """The firewall (with ``cluster_firewall``) and the supervisor of this rig's part of its
    cluster; both removed on a rig that serves alone."""
    member = this_member(settings)
    etc = f"{settings.get('rigup_etc_dir')}/cluster"
    nft_file = f"{etc}/firewall.nft"
    state_dir = posixpath.dirname(state_path(settings))
    script = watch_script(settings)
    config = f"{etc}/watch.json"
    units = (FIREWALL_UNIT, f"{WATCH}.timer", f"{WATCH}.service")
    survey([etc, state_dir, nft_file, script, config, *(f"{UNIT_DIR}/{u}" for u in units)])
    if member is None:
        _removed(nft_file, script, config)
        return
    directory_placed(name="Cluster configuration directory", path=etc, mode="755")
    directory_placed(name="Cluster supervisor state", path=state_dir, mode="700")
    changed = []
    if member.firewall:
        apt.packages(name="nftables (Ubuntu's own)", packages=["nftables"])
        api = settings.get("vllm_port") if member.is_leader else None
        if api and is_loopback(str(settings.get("vllm_host"))):
            api = None
        rules = file_placed(
            name=f"Firewall table inet {TABLE} (peer rigs only on the private link)",
            src=StringIO(ruleset(member, int(settings.get("ssh_port") or 22), api)),
            dest=nft_file,
            mode="600",
        )
        unit = file_placed(
            name=f"Unit {FIREWALL_UNIT}",
            src=StringIO(firewall_unit(nft_file)),
            dest=f"{UNIT_DIR}/{FIREWALL_UNIT}",
            mode="644",
        )
        changed.append(unit)
        systemd.daemon_reload(name="systemd daemon-reload (firewall)", _if=unit.did_change)
        systemd.service(
            name=f"{FIREWALL_UNIT} enabled and loaded",
            service=FIREWALL_UNIT,
            running=True,
            enabled=True,
            restarted=True,
            _if=any_changed(rules, unit),
        )
        systemd.service(
            name=f"{FIREWALL_UNIT} enabled and running",
            service=FIREWALL_UNIT,
            running=True,
            enabled=True,
        )
    else:
        _firewall_removed(nft_file)
    watch = file_placed(
        name="Supervisor rigup-cluster-watch", src=str(WATCH_SCRIPT), dest=script, mode="755"
    )
    cfg = file_placed(
        name="Supervisor configuration",
        src=StringIO(
            json.dumps(watch_config(settings, member, state_path(settings)), indent=2) + "\n"
        ),
        dest=config,
        mode="600",
    )
    units = [
        file_placed(name=f"Unit {name}", src=StringIO(text), dest=f"{UNIT_DIR}/{name}", mode="644")
        for name, text in watch_units(
            script, config, state_dir, settings.get("cluster_watch_interval_s")
        ).items()
    ]
    systemd.daemon_reload(name="systemd daemon-reload (supervisor)", _if=any_changed(*units))
    systemd.service(
        name=f"{WATCH}.timer enabled and running",
        service=f"{WATCH}.timer",
        running=True,
        enabled=True,
        restarted=True,
        _if=any_changed(watch, cfg, *units),
    )
    systemd.service(
        name=f"{WATCH}.timer running", service=f"{WATCH}.timer", running=True, enabled=True
    )


def _unit_removed(name: str) -> None:
    """``name`` stopped, disabled and its unit file removed, where an earlier run installed it."""
    path = f"{UNIT_DIR}/{name}"
    if path_state(path) is not None:
        systemd.service(
            name=f"{name} stopped and disabled", service=name, running=False, enabled=False
        )
        file_absent(name=f"{path} absent", path=path)


def _firewall_removed(nft_file: str) -> None:
    """No cluster firewall: its unit stopped (its ExecStop deletes table inet rigup_cluster)
    and removed, with its ruleset."""
    _unit_removed(FIREWALL_UNIT)
    file_absent(name=f"{nft_file} absent", path=nft_file)


def _removed(nft_file: str, script: str, config: str) -> None:
    """A rig that serves alone: no supervisor and no cluster firewall left from a cluster."""
    for name in (f"{WATCH}.timer", f"{WATCH}.service"):
        _unit_removed(name)
    _firewall_removed(nft_file)
    for path in (script, config):
        file_absent(name=f"{path} absent", path=path)
