"""router: vLLM's own router (PyPI vllm-router) as one OpenAI-compatible endpoint in front of
several replica rigs that each serve the model (docs/router.md). Settings: every ``router_*``
key (rules in roles/router/settings.py). What it converges, when ``router_enabled``:
- the venv from files/router/requirements.lock (vllm-router==0.1.17 and its launcher's imports,
  hashed), built with the host's ``python3`` (the wheel is cp38-abi3);
- ``router.service`` through rigup's one unit template: no GPU (roles/router/footprint.py),
  started at boot, its replica URLs derived from the inventory group ``router_replica_group``
  (roles/router/replicas.py), no API key (roles/router/flags.py says why).
"""

from __future__ import annotations

from pyinfra import host, inventory, logger
from pyinfra.api import deploy
from pyinfra.api.exceptions import DeployError

from roles.common.service import GpuService
from roles.router.paths import RouterPaths
from roles.router.replicas import replica_urls
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
