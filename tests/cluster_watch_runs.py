"""Runs of the cluster supervisor's own check (files/cluster/cluster_watch.py ``check``) through
the cases the lab pair goes through, and the state files they write: tests/fixtures/cluster/
holds them (rigup-doctor's cluster section is tested on them), and tests/unit/
test_cluster_watch.py checks that the supervisor still writes them.

What runs for real: the probes (the leader's 1-token completion against an HTTP server that
answers as vLLM 0.22.1 does, or hangs as a leader whose follower died; the follower's session,
an established TCP connection read from /proc/net/tcp) and the state writer. What is given:
systemd's side (vllm.service's state, and the restart, recorded) and the clock (so the files
are the same at every run).

    .venv/bin/python -m tests.cluster_watch_runs   # writes tests/fixtures/cluster/*.json
"""

from __future__ import annotations

import importlib.util
import json
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "files" / "cluster" / "cluster_watch.py"
FIXTURE_DIR = REPO / "tests" / "fixtures" / "cluster"

#: the clock of the runs: 2026-12-02 07:00:00 UTC, and the lab pair's timing
#: (inventory/lab_rigs.py: a check every 5 s, 2 failed checks restart) with a 1 s probe
T0 = 1_796_194_800.0
INTERVAL_S, FAILURES, PROBE_S = 5, 2, 1
#: the rigs of inventory/rigs.py (the example the doctor's tests render doctor.json from)
LEADER, FOLLOWER = "rig-a.local", "rig-b.local"


def load_watch() -> ModuleType:
    """files/cluster/cluster_watch.py as a module (it is a script installed on the rig)."""
    if "cluster_watch" in sys.modules:
        return sys.modules["cluster_watch"]
    spec = importlib.util.spec_from_file_location("cluster_watch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["cluster_watch"] = module  # its dataclass looks its module up while it loads
    spec.loader.exec_module(module)
    return module


class Completions(BaseHTTPRequestHandler):
    """Answers /v1/completions as vLLM 0.22.1 does (a completion object with ``choices``)
    after ``delay`` seconds, and /health with 200, like the leader of a pair whose follower
    died when ``delay`` is long; ``status`` is the HTTP status; ``seen`` each request's
    ``(path, body, Authorization header)``."""

    delay = 0.0
    status = 200
    seen: list = []

    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, body, self.headers.get("Authorization")))
        time.sleep(self.delay)
        payload = json.dumps({"object": "text_completion", "choices": [{"text": "2"}]}).encode()
        try:
            self.send_response(self.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@contextmanager
def completions_server() -> Iterator[str]:
    """A :class:`Completions` server on loopback; yields its /v1/completions URL."""
    Completions.delay, Completions.status, Completions.seen = 0.0, 200, []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Completions)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1/completions"
    finally:
        httpd.shutdown()
        httpd.server_close()


class Pair:
    """systemd's side of one rig during the runs: vllm.service's state and start time, the
    restarts asked for, and the clock."""

    def __init__(self) -> None:
        self.now = T0
        self.state = "active"
        self.started = T0 - 600  # serving for 10 min before the first check
        self.restarts: list[tuple[str, float]] = []

    def read_unit(self, unit: str) -> tuple[str, float]:
        return self.state, self.now - self.started

    def restart(self, unit: str) -> None:
        self.restarts.append((unit, self.now))

    def clock(self) -> float:
        return self.now

    def after_restart(self, loaded_s: float) -> None:
        """vllm.service came back from the restart and has run for ``loaded_s`` seconds."""
        self.started = self.restarts[-1][1] + 25  # the broken engine's stop (measured 20-30 s)
        self.now = self.started + loaded_s


def _config(tmp: Path, role: str, url: str, port: int) -> dict:
    """What roles/cluster/watch.py ``watch_config`` renders, for one of the example's rigs."""
    return {
        "rig": LEADER if role == "leader" else FOLLOWER,
        "role": role,
        "unit": "vllm.service",
        "leader": LEADER,
        "leader_address": "127.0.0.1",
        "master_port": port,
        "completion_url": url,
        "model": "qwen3.6-27b",
        "api_key_file": str(tmp / "api-key.env"),
        "probe_timeout_s": PROBE_S,
        "failures": FAILURES,
        "grace_s": 900,
        "state_file": str(tmp / "watch-state.json"),
    }


def _checks(watch: ModuleType, cfg: dict, pair: Pair, n: int) -> None:
    for _ in range(n):
        watch.check(cfg, read_unit=pair.read_unit, restart=pair.restart, now=pair.clock)
        pair.now += INTERVAL_S + PROBE_S


def leader_lost_its_follower(watch: ModuleType, tmp: Path) -> dict:
    """The leader's state after its follower died and the pair serves again: two checks ok,
    the follower's stage gone (every completion hangs past the probe's timeout), two failed
    checks and the restart, then the pair answering again."""
    with completions_server() as url:
        cfg, pair = _config(tmp, "leader", url, 29501), Pair()
        _checks(watch, cfg, pair, 2)
        Completions.delay = PROBE_S + 1.0
        _checks(watch, cfg, pair, FAILURES)
        assert [u for u, _ in pair.restarts] == ["vllm.service"], pair.restarts
        Completions.delay = 0.0
        pair.after_restart(120)
        _checks(watch, cfg, pair, 1)
    return json.loads(Path(cfg["state_file"]).read_text())


def leader_failing(watch: ModuleType, tmp: Path) -> dict:
    """The leader's state one failed check after its follower died: no restart yet."""
    with completions_server() as url:
        cfg, pair = _config(tmp, "leader", url, 29501), Pair()
        _checks(watch, cfg, pair, 1)
        Completions.delay = PROBE_S + 1.0
        _checks(watch, cfg, pair, 1)
        assert not pair.restarts
    return json.loads(Path(cfg["state_file"]).read_text())


def follower_lost_its_leader(watch: ModuleType, tmp: Path) -> dict:
    """The follower's state after its leader died and the pair serves again: its session to
    the leader's master port held, then closed (the leader's engine gone), two failed checks
    and the restart, then a new session to the restarted leader."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        cfg, pair = _config(tmp, "follower", "", port), Pair()
        client = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        _checks(watch, cfg, pair, 2)
        client.close()
        peer.close()
        time.sleep(0.05)
        _checks(watch, cfg, pair, FAILURES)
        assert [u for u, _ in pair.restarts] == ["vllm.service"], pair.restarts
        pair.after_restart(90)
        client = socket.create_connection(("127.0.0.1", port))
        peer, _ = server.accept()
        _checks(watch, cfg, pair, 1)
        client.close()
        peer.close()
    finally:
        server.close()
    return json.loads(Path(cfg["state_file"]).read_text())


def serving(watch: ModuleType, tmp: Path) -> dict:
    """The leader's state while the pair serves: every check answered."""
    with completions_server() as url:
        cfg, pair = _config(tmp, "leader", url, 29501), Pair()
        _checks(watch, cfg, pair, 3)
    return json.loads(Path(cfg["state_file"]).read_text())


#: fixture name -> the run that writes it
RUNS: dict[str, Callable[[ModuleType, Path], dict]] = {
    "leader-lost-its-follower": leader_lost_its_follower,
    "leader-failing": leader_failing,
    "follower-lost-its-leader": follower_lost_its_leader,
    "serving": serving,
}

_LOOPBACK_PORT = re.compile(r"127\.0\.0\.1:\d+")


def comparable(state: dict) -> dict:
    """``state`` with its loopback ports (the runs' servers take free ones) written as
    ``127.0.0.1:PORT``."""
    return json.loads(_LOOPBACK_PORT.sub("127.0.0.1:PORT", json.dumps(state)))


def main() -> None:
    import tempfile

    watch = load_watch()
    FIXTURE_DIR.mkdir(exist_ok=True)
    for name, run in RUNS.items():
        with tempfile.TemporaryDirectory() as tmp:
            state = comparable(run(watch, Path(tmp)))
        (FIXTURE_DIR / f"{name}.json").write_text(json.dumps(state) + "\n")
        print(name, state)


if __name__ == "__main__":
    main()
