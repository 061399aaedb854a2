"""The real vllm-router binary (files/router/requirements.lock, installed into a venv here) in
front of two OpenAI-compatible replicas (tests/router/openai_backend.py, stdlib processes on
127.0.0.1), started with rigup's own argv (roles/router/flags.py): requests reach both
replicas, the replicas' API key passes through the router (which holds none), and once a
replica is killed every request succeeds on the other (vllm-router's health checks, retries and
circuit breaker together take the dead one out: a threshold of 100 failed health checks passes
too, so this proves the endpoint's behaviour, not which of the three acts first).

Skipped, with the reason, only when the locked wheel cannot be installed (no index reachable).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from roles.router.flags import router_argv
from roles.router.settings import LOCK

BACKEND = Path(__file__).with_name("openai_backend.py")
KEY = "rigup-router-test-key"
#: health checks every 2 s, each waiting 1 s, one failure drops a replica (worst case to drop:
#: interval + timeout = 3 s; the test waits twice that)
INTERVAL_S, TIMEOUT_S, FAILURES = 2, 1, 1
DROP_WAIT_S = 2 * (INTERVAL_S + TIMEOUT_S)


def _uv() -> str | None:
    beside = Path(sys.executable).with_name("uv")
    return str(beside) if beside.exists() else shutil.which("uv")


@pytest.fixture(scope="module")
def vllm_router(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``bin/vllm-router`` of a venv built from files/router/requirements.lock (hashes
    required)."""
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed next to the test's Python nor on PATH")
    venv = tmp_path_factory.mktemp("router") / "venv"
    steps = (
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--require-hashes",
            "--python",
            str(venv / "bin" / "python"),
            "-r",
            str(LOCK),
        ],
    )
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        if done.returncode:
            pytest.skip(f"the locked vllm-router wheel cannot be installed: {done.stderr[-400:]}")
    return str(venv / "bin" / "vllm-router")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(port: int, path: str, body: dict | None = None, key: str | None = KEY):
    """``(status, decoded JSON or None)`` of one request to 127.0.0.1:``port``."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"}
        | ({"Authorization": f"Bearer {key}"} if key else {}),
    )
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            raw = answer.read()
            return answer.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, None
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None


def _chat(port: int) -> tuple[int, str]:
    """``(status, replica name)`` of a chat completion with a prompt shared with no other."""
    body = {
        "model": "rigup-test-model",
        "messages": [{"role": "user", "content": uuid.uuid4().hex * 4}],
        "max_tokens": 4,
    }
    status, answer = _call(port, "/v1/chat/completions", body)
    return status, (answer or {}).get("system_fingerprint", "")


def _wait_serving(router: subprocess.Popen, port: int, log: Path) -> None:
    """Wait until the router on ``port`` answers /v1/models with 200 (at most 60 s). Raises
    AssertionError with the tail of its ``log`` when it exits, or when 60 s pass."""
    deadline = time.monotonic() + 60
    while _call(port, "/v1/models")[0] != 200:
        assert router.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "router not serving /v1/models within 60 s"
        time.sleep(0.3)


def _stop(process: subprocess.Popen) -> None:
    """Stop ``process`` (SIGTERM, then SIGKILL after 10 s); one that has exited is left as is."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.mark.parametrize("policy", ["cache_aware", "round_robin"])
def test_router_spreads_and_drops_a_dead_replica(vllm_router: str, policy: str, tmp_path) -> None:
    backend_env = dict(os.environ, RIGUP_BACKEND_KEY=KEY)
    ports = {"a": _free_port(), "b": _free_port()}
    replicas = {
        name: subprocess.Popen(
            [sys.executable, str(BACKEND), str(port), name],
            env=backend_env,
            stderr=subprocess.DEVNULL,
        )
        for name, port in ports.items()
    }
    router_port, metrics_port = _free_port(), _free_port()
    settings = {
        "router_host": "127.0.0.1",
        "router_port": router_port,
        "router_metrics_port": metrics_port,  # tests run side by side (pytest-xdist)
        "router_policy": policy,
        "router_health_check_interval_s": INTERVAL_S,
        "router_health_check_timeout_s": TIMEOUT_S,
        "router_health_failure_threshold": FAILURES,
        "router_replica_startup_timeout_s": 30,
    }
    argv = router_argv(vllm_router, settings, [f"http://127.0.0.1:{p}" for p in ports.values()])
    assert KEY not in " ".join(argv)
    log = (tmp_path / "router.log").open("w")
    router = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_serving(router, router_port, tmp_path / "router.log")

        # The key is the replicas' to check: without it a replica answers 401 through the router.
        assert _call(router_port, "/v1/models", key=None)[0] == 401
        # its Prometheus metrics on the declared port, loopback only
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            assert r.status == 200

        # Concurrent requests with distinct prompts reach both replicas (cache_aware balances by
        # load once the loads drift apart; round_robin alternates).
        seen: Counter[str] = Counter()
        with ThreadPoolExecutor(8) as pool:
            for _ in range(5):
                results = list(pool.map(lambda _: _chat(router_port), range(16)))
                assert all(status == 200 for status, _ in results), results
                seen.update(name for _, name in results)
                if len(seen) == 2:
                    break
        assert set(seen) == {"a", "b"}, seen

        # Kill the replica the router last picked; after the drop window every request
        # succeeds on the other.
        _, favoured = _chat(router_port)
        replicas[favoured].kill()
        replicas[favoured].wait()
        survivor = ({"a", "b"} - {favoured}).pop()
        time.sleep(DROP_WAIT_S)
        after = [_chat(router_port) for _ in range(12)]
        assert after == [(200, survivor)] * 12, (
            after,
            (tmp_path / "router.log").read_text()[-2000:],
        )
    finally:
        for process in (router, *replicas.values()):
            _stop(process)
        log.close()


def test_router_serves_the_replicas_up_when_one_is_down_at_start(vllm_router: str, tmp_path):
    """router_replica_startup_timeout_s: it waits that long for a replica that never answers,
    then serves the one that does (the unit's start must not wait for every replica)."""
    up, down, router_port = _free_port(), _free_port(), _free_port()
    replica = subprocess.Popen(
        [sys.executable, str(BACKEND), str(up), "up"],
        env=dict(os.environ, RIGUP_BACKEND_KEY=KEY),
        stderr=subprocess.DEVNULL,
    )
    settings = {
        "router_host": "127.0.0.1",
        "router_port": router_port,
        "router_metrics_port": _free_port(),
        "router_policy": "cache_aware",
        "router_health_check_interval_s": INTERVAL_S,
        "router_health_check_timeout_s": TIMEOUT_S,
        "router_health_failure_threshold": FAILURES,
        "router_replica_startup_timeout_s": 3,
    }
    urls = [f"http://127.0.0.1:{up}", f"http://127.0.0.1:{down}"]
    log = (tmp_path / "router.log").open("w")
    router = subprocess.Popen(
        router_argv(vllm_router, settings, urls), stdout=log, stderr=subprocess.STDOUT
    )
    try:
        started = time.monotonic()
        while _call(router_port, "/v1/models")[0] != 200:
            assert router.poll() is None, (tmp_path / "router.log").read_text()[-2000:]
            assert time.monotonic() - started < 30, "router not serving within 30 s"
            time.sleep(0.3)
        assert [_chat(router_port) for _ in range(6)] == [(200, "up")] * 6
    finally:
        _stop(router)
        _stop(replica)
        log.close()


#: the routes a client uses, each with its body (None: a GET)
ROUTES = {
    "/v1/models": None,
    "/v1/completions": {"model": "rigup-test-model", "prompt": "1", "max_tokens": 1},
    "/v1/chat/completions": {
        "model": "rigup-test-model",
        "messages": [{"role": "user", "content": "1"}],
        "max_tokens": 1,
    },
}


def _load(port: int, path: str, body: dict | None, until: float) -> list[dict]:
    """Requests to ``path`` every 0.2 s until the monotonic time ``until``: each answer as
    lab/router_failover.py reads it (status, seconds, Unix time it ended, body)."""
    out = []
    while time.monotonic() < until:
        started = time.monotonic()
        status, answer = _call(port, path, body)
        out.append(
            {
                "status": status,
                "seconds": time.monotonic() - started,
                "t": time.time(),
                "body": answer,
            }
        )
        time.sleep(0.2)
    return out


@pytest.mark.parametrize("down", ["a", "b"])
def test_every_route_answers_once_a_dead_replica_is_out(vllm_router: str, down: str, tmp_path):
    """vllm-project/router#135, the whole kind: either replica killed under requests on every
    route a client uses; a route may fail only within the drop bound rigup states
    (replica_drop_bound_s: /v1/models goes to one replica with no retry, so it answers 500 while
    that replica is dead and still in), completions and chat never; after the bound every
    route answers 200 from the replica left. (Its return is the lab pair's test: the failed
    inference requests opened the dead replica's circuit breaker, which stays open 60 s,
    vllm-router's ``--cb-timeout-duration-secs``.)"""
    from lab.router_failover import route_outcome
    from roles.router.flags import replica_drop_bound_s

    ports = {"a": _free_port(), "b": _free_port()}
    backend_env = dict(os.environ, RIGUP_BACKEND_KEY=KEY)

    def replica(name: str) -> subprocess.Popen:
        argv = [sys.executable, str(BACKEND), str(ports[name]), name]
        return subprocess.Popen(argv, env=backend_env, stderr=subprocess.DEVNULL)

    replicas = {name: replica(name) for name in ports}
    router_port = _free_port()
    settings = {
        "router_host": "127.0.0.1",
        "router_port": router_port,
        "router_metrics_port": _free_port(),
        "router_policy": "round_robin",
        "router_health_check_interval_s": INTERVAL_S,
        "router_health_check_timeout_s": TIMEOUT_S,
        "router_health_failure_threshold": 2,
        "router_replica_startup_timeout_s": 30,
    }
    bound = replica_drop_bound_s(settings)
    argv = router_argv(vllm_router, settings, [f"http://127.0.0.1:{p}" for p in ports.values()])
    log = (tmp_path / "router.log").open("w")
    router = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_serving(router, router_port, tmp_path / "router.log")
        until = time.monotonic() + 2 + bound + 4
        with ThreadPoolExecutor(len(ROUTES)) as pool:
            loads = {p: pool.submit(_load, router_port, p, b, until) for p, b in ROUTES.items()}
            time.sleep(2)
            stopped = time.time()
            replicas[down].kill()
            replicas[down].wait()
            seen = {
                p: route_outcome(f.result(), stopped, stopped + bound) for p, f in loads.items()
            }
        for path, outcome in seen.items():
            assert outcome["before"] and outcome["before_ok"], (path, outcome)
            assert outcome["settled"] >= 5 and outcome["settled_ok"], (path, outcome)
            if path == "/v1/models":
                assert all(f["status"] == 500 for f in outcome["failed"]), outcome
                assert (outcome["last_failure_s"] or 0) <= bound, outcome
            else:
                assert outcome["failed"] == [], (path, outcome)
    finally:
        for process in (router, *replicas.values()):
            _stop(process)
        log.close()
