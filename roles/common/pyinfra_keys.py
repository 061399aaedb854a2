"""The host data keys pyinfra itself reads, so rigup's settings validation lets them through.

An inventory host's data mixes rigup's settings with pyinfra's own keys: the connection of its
connector (``ssh_port``, ``docker_identifier``, ...) and the defaults of pyinfra's global
operation arguments (``_sudo``, ``_env``, ...: host data may set any of them, pyinfra 3.10
``pop_global_arguments`` in pyinfra/api/arguments.py). Both lists are read from the installed
pyinfra, so an upgrade that adds a key needs no change here.
"""

from __future__ import annotations

from functools import cache

from pyinfra.api.arguments import all_argument_meta
from pyinfra.api.connectors import get_all_connectors

#: Keys pyinfra 3.10's connectors read from host data without declaring them in their
#: ``data_meta``: pyinfra/connectors/chroot.py (``host.data.chroot_directory``) and
#: pyinfra/connectors/dockerssh.py (``host.data.docker_image``, ``host_data["docker_container_id"]``).
#: tests/unit/test_pyinfra_keys.py reads the connectors' source and fails on a key missing here.
UNDECLARED_CONNECTOR_KEYS: tuple[str, ...] = (
    "chroot_directory",
    "docker_image",
    "docker_container_id",
)


@cache
def pyinfra_keys() -> frozenset[str]:
    """Every host data key the installed pyinfra reads: its global arguments
    (``all_argument_meta``), each installed connector's ``data_meta`` (entry points
    ``pyinfra.connectors``) and :data:`UNDECLARED_CONNECTOR_KEYS`."""
    keys = set(all_argument_meta) | set(UNDECLARED_CONNECTOR_KEYS)
    for connector in get_all_connectors().values():
        keys |= set(getattr(connector, "data_meta", {}) or {})
    return frozenset(keys)


def is_pyinfra_key(key: str) -> bool:
    """True when ``key`` is a host data key of pyinfra's own (:func:`pyinfra_keys`)."""
    return key in pyinfra_keys()
