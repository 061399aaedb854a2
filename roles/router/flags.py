"""The router's command line: ``vllm-router`` (vllm_router/launch_router.py, 0.1.17) with the
replica URLs and the settings' flags. No API key is on it: vllm-router forwards the client's
``Authorization`` header to the replica it picks, and each replica's vLLM checks it against its
own key (vllm_api_key, stored 0600), so the router holds no secret (tests/router shows a replica
answering 401 through the router without the key and 200 with it)."""

from __future__ import annotations

from typing import Any

from roles.router.settings import RouterSettings

#: vLLM's liveness probe, open without the API key (vllm/entrypoints/openai/api_server.py).
HEALTH_PATH = "/health"


def replica_drop_bound_s(data: Any) -> int:
    """Seconds (int) from a replica's death until vllm-router has taken it out of the rotation
    for every route, at worst, from the settings ``data``: the death just after a passed check,
    then ``router_health_failure_threshold`` failed checks ``router_health_check_interval_s``
    apart, the last waiting up to ``router_health_check_timeout_s``: threshold × interval +
    timeout (shipped: 3 × 10 + 5 = 35 s).

    Why a client cares: vllm-router 0.1.17 sends ``GET /v1/models`` to one replica of its own
    choosing (its first registered worker, which differs between starts) with no retry, so while
    that replica is dead and not yet out it answers 500 ``Request failed: error sending request
    for url (<replica>/v1/models)`` (vllm-project/router#135, measured in the lab pair:
    docs/many-rigs.md "A replica down"); completions and chat completions are retried on another
    replica. A failed inference request also counts towards that replica's circuit breaker
    (vllm-router's ``--cb-failure-threshold``, 10), which takes it out sooner under load; a
    failed ``/v1/models`` does not."""
    s = RouterSettings.of(data)
    return (
        s.router_health_failure_threshold * s.router_health_check_interval_s
        + s.router_health_check_timeout_s
    )


def router_argv(executable: str, data: Any, urls: list[str]) -> list[str]:
    """The argv of the router: ``executable`` (the venv's ``bin/vllm-router``), the settings
    ``data`` (``host.data`` or a mapping of the router role's settings), the replica ``urls``
    (:func:`roles.router.replicas.replica_urls`).

    Health checks (vllm-router's own, per replica): ``GET /health`` every
    ``router_health_check_interval_s`` s, each waiting at most ``router_health_check_timeout_s``;
    ``router_health_failure_threshold`` failures in a row take the replica out of the rotation
    and 2 successes (vllm-router's ``--health-success-threshold`` default) put it back.
    At start it waits at most ``router_replica_startup_timeout_s`` for the replicas to answer,
    then serves those that do (vllm-router's default, 600 s, is past systemd's start timeout).
    Its Prometheus metrics: ``127.0.0.1:router_metrics_port``.
    Raises ValueError on an empty ``urls`` (the settings check refuses that run earlier).
    """
    if not urls:
        raise ValueError("router_replica_group: no replica URL to route to")
    s = RouterSettings.of(data)
    return [
        executable,
        "--host",
        s.router_host,
        "--port",
        str(s.router_port),
        "--worker-urls",
        *urls,
        "--policy",
        s.router_policy,
        "--health-check-endpoint",
        HEALTH_PATH,
        "--health-check-interval-secs",
        str(s.router_health_check_interval_s),
        "--health-check-timeout-secs",
        str(s.router_health_check_timeout_s),
        "--health-failure-threshold",
        str(s.router_health_failure_threshold),
        "--worker-startup-timeout-secs",
        str(s.router_replica_startup_timeout_s),
        # vllm-router always serves Prometheus metrics (default 127.0.0.1:29000); named here so
        # the port is declared, and bound to loopback whatever vllm-router's default becomes
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(s.router_metrics_port),
    ]
