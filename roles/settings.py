"""rigup's settings, read and checked once per host, before any change.

Each role declares its settings once, as a typed class in ``roles/<role>/settings.py`` (name,
type, check and, for a managed service flag, the flag: roles.common.setting), from which its
``SETTINGS``, ``RULES`` and ``OPTIONAL`` derive, and holds its rules over several keys
(``consistency``). This module sits above the roles: it gathers their declarations, adds the
rules that span roles (tensor parallel vs declared GPUs, directories, and over the GPU
services' footprints of roles/services.py: ports, model manifests, GPU indexes and the per-GPU
VRAM budget of each mode) and refuses every key that is neither a setting nor pyinfra's
own. A deploy file calls :func:`host_settings` once and hands the result to every role it runs.

The rules are pure: :func:`validate` takes a mapping (a pyinfra ``host.data`` or a plain dict) and
returns the list of problems, which the unit tests exercise directly.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from pyinfra import host
from pyinfra.api.exceptions import DeployError

from roles import services as registry
from roles.base import settings as base_settings
from roles.cluster import settings as cluster_settings
from roles.cluster.inventory import require_valid_cluster
from roles.common.checks import Check
from roles.common.converge import hold_converge_lock
from roles.common.pyinfra_keys import is_pyinfra_key, pyinfra_keys
from roles.common.setting import Checked, RuleOver, Setting, each_rule, optional, rules
from roles.doctor import settings as doctor_settings
from roles.model import settings as model_settings
from roles.model.manifest import ManifestError, load_manifest
from roles.modes import settings as modes_settings
from roles.modes.budget import budget_problems
from roles.nvidia import settings as nvidia_settings
from roles.router import settings as router_settings  # replicas behind one endpoint

__all__ = [
    "RULES",
    "SETTINGS",
    "SettingsError",
    "host_settings",
    "require_valid_settings",
    "validate",
]


class SettingsError(DeployError):
    """Raised when settings are invalid; the message lists every bad key with the reason."""


def role_settings() -> tuple[ModuleType, ...]:
    """Every role's settings module, in the order of deploys/full.py: the GPU services' from
    their footprints (roles/services.py), read at each call."""
    services = (s.settings for s in registry.SERVICES)
    return (
        base_settings,
        nvidia_settings,
        model_settings,
        *services,
        router_settings,  # the router: no GPU, so no footprint in roles/services.py
        modes_settings,
        doctor_settings,
        cluster_settings,  # many rigs: one model across rigs (roles/cluster)
    )


def declarations() -> tuple[Setting, ...]:
    """Every setting, as its role declares it (roles/<role>/settings.py ``SETTINGS``)."""
    return tuple(s for m in role_settings() for s in m.SETTINGS)


#: The roles' settings modules, every setting, its check, the optional ones (as registered now)
ROLE_SETTINGS: tuple[ModuleType, ...] = role_settings()
SETTINGS: tuple[Setting, ...] = declarations()
RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL_KEYS: tuple[str, ...] = optional(SETTINGS)

#: Settings that inventories may set for rigup's own tooling (the lab), never read by a role.
TOOLING_KEYS: tuple[str, ...] = ()


def unknown_keys(keys: set[str], known_settings: Mapping[str, Check] | None = None) -> list[str]:
    """Problems for keys that are neither a rigup setting nor pyinfra's own
    (:func:`roles.common.pyinfra_keys.pyinfra_keys`), whatever their name, with the likely
    intended key among both: ``["vlm_host: not a rigup setting (did you mean vllm_host?); ..."]``,
    ``["ssh_prot: not a rigup setting (did you mean ssh_port?); ..."]``."""
    settings = RULES if known_settings is None else known_settings
    problems = []
    known = [*settings, *sorted(pyinfra_keys())]
    for key in sorted(keys):
        if key in settings or key in TOOLING_KEYS or is_pyinfra_key(key):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        problems.append(
            f"{key}: not a rigup setting{hint}; inventory/group_data/all.py lists every setting"
        )
    return problems


def ports_distinct(values: Mapping[str, Any]) -> list[str]:
    """Each installed GPU service (roles/services.py) listens on a port of its own."""
    ports: dict[int, list[str]] = {}
    for service in registry.SERVICES:
        if service.installed(values):
            ports.setdefault(values[service.keys.port], []).append(service.keys.port)
    return [
        f"{keys[-1]}: {port} is {' and '.join(keys[:-1])} too; give each service its own port"
        for port, keys in sorted(ports.items())
        if len(keys) > 1
    ]


def manifests_fit_locks(values: Mapping[str, Any]) -> list[str]:
    """Every installed service's model manifests (its footprint's ``manifest_keys``) load with
    their locks (from model_lock_dir)."""
    problems = []
    for service in registry.SERVICES:
        for key, refs in service.manifests(values):
            for ref in refs:
                try:
                    load_manifest(ref, values["model_lock_dir"])
                except ManifestError as exc:  # a lock that does not fit its manifest
                    problems.append(f"{key}: {' '.join(str(exc).split())}")
    return problems


#: The rules over several settings (:func:`across`) each run on its own over the settings that
#: passed their own checks (roles.common.setting.each_rule).
def across() -> tuple[RuleOver, ...]:
    """Every role's ``consistency``, then each GPU service's rules over other roles' settings
    (its footprint's ``rules``), then those over every service: ports, model manifests and the
    VRAM budget with the GPU indexes."""
    return (
        *(m.consistency for m in role_settings()),
        *(rule for s in registry.SERVICES for rule in s.rules),
        ports_distinct,
        manifests_fit_locks,
        budget_problems,
    )


def validate(data: Mapping[str, Any] | Any) -> list[str]:
    """Return every problem with the settings, one ``"key: reason"`` string each ([] when valid).

    ``data`` is a mapping or a pyinfra ``HostData`` (anything with ``.get``; ``.dict()`` or the
    mapping's keys are searched for misspelled keys). Missing keys are reported too: every key
    of :data:`RULES` must be set (inventory/group_data/all.py sets them). Every problem of the
    run is listed: a value's own check, a key that is no setting, and each rule over several
    keys whose keys all passed their own checks.
    """
    declared = declarations()
    checks, optional_keys = rules(declared), optional(declared)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, check in checks.items():
        value = data.get(key)
        if value is None:
            if key not in optional_keys:
                problems.append(f"{key}: missing (set it in inventory/group_data/all.py)")
            else:
                values[key] = None
            continue
        problem = check(value)
        if problem:
            problems.append(f"{key}: {problem}")
        else:
            values[key] = value
    keys = set(data.dict() if hasattr(data, "dict") else data)
    problems.extend(unknown_keys(keys, checks))
    problems.extend(each_rule(Checked(values), across()))
    return problems


def require_valid_settings(data: Any, host_name: str = "") -> None:
    """Raise :class:`SettingsError` listing every bad setting; return None when all are valid."""
    problems = validate(data)
    if problems:
        where = f" for host {host_name}" if host_name else ""
        lines = "\n".join(f"  - {p}" for p in problems)
        raise SettingsError(
            f"invalid rigup settings{where} (nothing was changed on any host):\n{lines}\n"
            "Fix them in inventory/group_data/all.py, in the inventory file, or in the --data "
            "options of this command line."
        )


def host_settings() -> Any:
    """The current host's settings (its ``host.data``), checked, with this run holding the host's
    converge lock (:func:`roles.common.converge.hold_converge_lock`): call once at the top of a
    deploy file and pass the result to each role. Raises :class:`SettingsError` for bad settings
    and ``DeployError`` while another converge runs on the host, both before any change; a bad
    cluster of rigs in the inventory (roles/cluster/group.py) is refused the same way."""
    # many rigs (roles/cluster): every rig of each cluster, and the rules across them, at once
    require_valid_cluster(validate)
    require_valid_settings(host.data, host.name)
    hold_converge_lock()
    return host.data
