"""router: vLLM's own router (PyPI vllm-router) as one OpenAI-compatible endpoint in front of
several replica rigs that each serve the model (docs/router.md). Settings: every ``router_*``
key (rules in roles/router/settings.py). What it converges, when ``router_enabled``:
- the venv from files/router/requirements.lock (vllm-router==0.1.17 and its launcher's imports,
  hashed), built with the host's ``python3`` (the wheel is cp38-abi3);
- ``router.service`` through rigup's one unit template: no GPU (roles/router/footprint.py),
  started at boot, its replica URLs derived from the inventory group ``router_replica_group``
  (roles/router/replicas.py), no API key (roles/router/flags.py says why).
And on every replica rig (``replica_firewall``), with ``router_replica_firewall``: the nftables
table that lets its vLLM port in from the router rigs only (roles/router/firewall.py); removed
from a rig no router routes to any more.
"""

from __future__ import annotations

from io import StringIO

from pyinfra import host, inventory, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError
from pyinfra.operations import apt, systemd
from pyinfra.operations.util import any_changed

from roles.cluster.firewall import unit as firewall_unit
from roles.common.placed import directory_placed, file_absent, file_placed, path_state, survey
from roles.common.service import GpuService
from roles.common.urls import is_loopback
from roles.router.firewall import TABLE, UNIT, ruleset
from roles.router.paths import RouterPaths
from roles.router.replicas import replica_urls, router_addresses
from roles.router.settings import LOCK, RouterSettings
from roles.router.unit import router_spec


def group_replica_urls(group: str) -> list[str]:
    """The replica URLs of the rigs of inventory group ``group``; raises ``DeployError`` naming
    every bad rig and key (or the missing group) before any change."""
    rigs = inventory.get_group(group, default=None)
    if rigs is None:
        raise DeployError(
            f"router_replica_group: no inventory group {group!r}; list the replica rigs in it"
        )
    urls, problems = replica_urls((rig.name, rig.data) for rig in rigs)
    if problems:
        raise DeployError("Router replicas refused:\n  " + "\n  ".join(problems))
    return urls


@deploy("vLLM router")
def router(settings) -> None:
    """Locked venv and router.service, started at boot; nothing (and says so) when
    ``router_enabled`` is False. Raises ``DeployError`` before any change on bad replicas."""
    cfg = RouterSettings.of(settings)
    if not cfg.router_enabled:
        logger.info(f"[{host.name}] vLLM router: router_enabled is False; not installed")
        return
    urls = group_replica_urls(cfg.router_replica_group)
    p = RouterPaths.from_data(settings)
    svc = GpuService(settings, router_spec(settings, urls))
    svc.account("rigup vLLM router service")
    svc.directories(root_owned=(p.root, p.etc))
    svc.venv(
        what="vLLM router",
        contents=f"vllm-router {cfg.router_version}",
        lock_src=LOCK,
        lock=p.lock,
        venv=p.venv,
        python="python3",
    )
    svc.install(None)


UNIT_DIR = "/etc/systemd/system"


def routers_of(replica: str) -> list[tuple[str, object]]:
    """``[(inventory name, host.data)]`` of the inventory's rigs with ``router_enabled`` whose
    ``router_replica_group`` holds rig ``replica`` (every host, ``--limit`` or not: pyinfra 3
    keeps them all in its inventory), in inventory order."""
    routers = []
    for rig in inventory:
        if not rig.data.get("router_enabled"):
            continue
        group = inventory.get_group(rig.data.get("router_replica_group"), default=None) or []
        if any(member.name == replica for member in group):
            routers.append((rig.name, rig.data))
    return routers


@deploy("Replica firewall")
def replica_firewall(settings) -> None:
    """On a replica rig (a router routes to it) whose ``vllm_host`` is not loopback, with
    ``router_replica_firewall``: table ``inet rigup_replica`` in
    ``<rigup_etc_dir>/replica/firewall.nft``, loaded by rigup-replica-firewall.service (before
    vllm.service). Elsewhere: both removed where an earlier run made them. Raises
    ``DeployError`` before any change, naming each router rig whose address it cannot use."""
    etc = f"{settings.get('rigup_etc_dir')}/replica"
    nft_file = f"{etc}/firewall.nft"
    unit_file = f"{UNIT_DIR}/{UNIT}"
    survey([etc, nft_file, unit_file])
    routers = routers_of(host.name)
    bind = str(settings.get("vllm_host"))
    if not (routers and settings.get("router_replica_firewall") and not is_loopback(bind)):
        if path_state(unit_file) is not None:
            systemd.service(
                name=f"{UNIT} stopped and disabled", service=UNIT, running=False, enabled=False
            )
            file_absent(name=f"{unit_file} absent", path=unit_file)
        file_absent(name=f"{nft_file} absent", path=nft_file)
        return
    addresses, problems = router_addresses(host.name, routers)
    if problems:
        raise DeployError("Replica firewall refused:\n  " + "\n  ".join(problems))
    port = int(settings.get("vllm_port"))
    apt.packages(name="nftables (Ubuntu's own)", packages=["nftables"])
    directory_placed(name="Replica firewall directory", path=etc, mode="755")
    rules = file_placed(
        name=f"Firewall table inet {TABLE} (vLLM port {port}: the router rigs only)",
        src=StringIO(ruleset(host.name, port, addresses)),
        dest=nft_file,
        mode="600",
    )
    unit = file_placed(
        name=f"Unit {UNIT}",
        src=StringIO(
            firewall_unit(
                nft_file,
                table=TABLE,
                what="the replica's firewall",
                allowed="vLLM's port from the router rigs only",
                role="roles/router",
            )
        ),
        dest=unit_file,
        mode="644",
    )
    systemd.daemon_reload(name="systemd daemon-reload (replica firewall)", _if=unit.did_change)
    systemd.service(
        name=f"{UNIT} enabled and loaded",
        service=UNIT,
        running=True,
        enabled=True,
        restarted=True,
        _if=any_changed(rules, unit),
    )
    systemd.service(name=f"{UNIT} enabled and running", service=UNIT, running=True, enabled=True)
