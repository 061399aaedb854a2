"""router.service as rigup's one unit template renders it (files/common/service.unit.j2):
its :class:`roles.common.service.ServiceSpec`."""

from __future__ import annotations

from typing import Any

from roles.common.command_line import exec_line
from roles.common.service import ServiceSpec
from roles.router.flags import router_argv
from roles.router.footprint import FOOTPRINT
from roles.router.paths import RouterPaths


def router_spec(data: Any, urls: list[str]) -> ServiceSpec:
    """The unit's spec on a host with settings ``data`` (``host.data`` or a mapping) routing to
    the replica ``urls`` (roles.router.replicas.replica_urls): ExecStart is
    :func:`roles.router.flags.router_argv` (no secret in it), its environment file empty.
    Raises ValueError on no ``urls``.
    """
    paths = RouterPaths.from_data(data)
    return ServiceSpec.of(
        data,
        paths,
        FOOTPRINT,
        env={},
        description="vLLM router: one OpenAI-compatible endpoint in front of the replica rigs",
        documentation="https://github.com/vllm-project/router",
        exec_start=exec_line(router_argv(paths.executable, data, urls)),
        # vllm-router stops within a second on SIGTERM (tests/router); 30 s is ample
        stop_timeout_s=30,
        # it forwards to the replica rigs: never confined to localhost
        connects_out=True,
    )
