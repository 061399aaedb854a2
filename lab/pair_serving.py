"""The lab pair's API, asked in a rig or from the controller's end of the pair's link.

As one cluster (inventory/lab_rigs.py) the leader's vLLM listens on its loopback, in the leader's
own network namespace, so each request runs there over SSH, through a small client
(:data:`CLIENT`) that reads the API key, if the rig has one, from the supervisor's configuration.
As two replica rigs (inventory/lab_replicas.py) each vLLM and rig a's router listen on the rigs'
addresses on the link: the same client asks a :class:`Target` URL, in a rig (the key from the
rig's own key file) or in the link's namespace on the controller (the key from the client's
environment). The key never travels in argv or output.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import subprocess
import time
from pathlib import Path

from lab.config import LabError
from lab.machine import LabMachine

#: roles/vllm/api_checks.py: the API checks tests/infra runs against a rig (standard library
#: only), pushed into the leader and run there
API_CHECKS = Path(__file__).resolve().parents[1] / "roles" / "vllm" / "api_checks.py"
API_CHECKS_DEST = "/var/lib/rigup-lab/api_checks.py"

#: the supervisor's configuration on every rig of a cluster (roles/cluster): the API's URL,
#: the served model's name and the root-only file holding VLLM_API_KEY
WATCH_CONFIG = "/etc/rigup/cluster/watch.json"

#: roles/vllm's API key file on a rig (roles/common/paths.py ServicePaths ``api_key_file`` of
#: ``vllm`` under the shipped rigup_etc_dir; tests/unit/test_lab_pair_inventory.py checks it)
VLLM_KEY_FILE = "/etc/rigup/vllm/secrets/api-key.env"
#: the client's environment variable holding the key where no key file is read (the controller)
KEY_ENV = "RIGUP_LAB_API_KEY"


@dataclasses.dataclass(frozen=True)
class Target:
    """An OpenAI-compatible API :data:`CLIENT` asks: ``base`` (``http://10.77.0.1:8080``), the
    root-only file holding ``VLLM_API_KEY`` on the rig the client runs in (None: the key from
    :data:`KEY_ENV` in the client's environment, or none), the served model's name (None: the
    first of the API's ``/v1/models``)."""

    base: str
    key_file: str | None = VLLM_KEY_FILE
    model: str | None = None

    def spec(self) -> str:
        return json.dumps(dataclasses.asdict(self))


#: POST argv[2] (JSON; "GET": a GET with no body) to the API path argv[1] of the target argv[4]: the supervisor's
#: configuration's path (the pair as one cluster) or a :class:`Target`'s JSON; prints one JSON
#: line {"status", "seconds", "body"} (status 0: no answer within argv[3] seconds). With argv[5]
#: (seconds), it repeats the request until that many seconds have passed, one line each, with
#: "t" (the Unix time the request ended), argv[6] seconds apart (default 0): a load for the
#: router's failover
CLIENT = """
import json, os, sys, time, urllib.error, urllib.request
target = sys.argv[4]
if target.startswith("{"):
    t = json.loads(target)
    base, model, key_file = t["base"], t["model"], t["key_file"]
else:
    cfg = json.load(open(target))
    base = cfg["completion_url"].rsplit("/v1/", 1)[0]
    model, key_file = cfg["model"], cfg["api_key_file"]
headers = {"Content-Type": "application/json"}
key = os.environ.get("RIGUP_LAB_API_KEY")
try:
    for line in open(key_file) if key_file else ():
        name, _, value = line.partition("=")
        if name.strip() == "VLLM_API_KEY":
            key = value.strip().strip('"')
except OSError:
    pass
if key:
    headers["Authorization"] = "Bearer " + key
timeout = float(sys.argv[3])

def ask(path, data=None):
    req = urllib.request.Request(base + path, data, headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            out = {"status": r.status, "body": json.load(r)}
    except urllib.error.HTTPError as e:
        out = {"status": e.code, "body": e.read().decode(errors="replace")[-2000:]}
    except Exception as e:  # a broken answer too (http.client.IncompleteRead): no answer
        out = {"status": 0, "body": f"{type(e).__name__}: {e}"}
    out["seconds"] = round(time.monotonic() - started, 3)
    out["t"] = time.time()
    return out

body = None if sys.argv[2] == "GET" else json.loads(sys.argv[2])
if body is not None and "model" not in body:
    if model is None:
        got = ask("/v1/models")
        if got["status"] != 200:
            print(json.dumps(got)); sys.exit()
        model = got["body"]["data"][0]["id"]
    body["model"] = model
until = time.time() + float(sys.argv[5]) if len(sys.argv) > 5 else 0
pause = float(sys.argv[6]) if len(sys.argv) > 6 else 0
while True:
    print(json.dumps(ask(sys.argv[1], None if body is None else json.dumps(body).encode())), flush=True)
    if time.time() >= until:
        break
    time.sleep(pause)
"""


def api(
    leader: LabMachine, path: str, body: dict, timeout_s: float = 120, target: Target | None = None
) -> dict:
    """POST ``body`` to ``path`` (``/v1/chat/completions``...) of ``target``, asked in the rig
    ``leader`` (None: the pair's API as its supervisor's configuration names it): ``{"status":
    HTTP status or 0 without an answer, "seconds": float, "t": Unix time, "body": the JSON answer
    or the error text}``. ``body`` without ``model`` gets the served model's name.

    Raises:
        LabError: SSH to the rig failed.
    """
    spec = target.spec() if target else WATCH_CONFIG
    command = shlex.join(["python3", "-c", CLIENT, path, json.dumps(body), str(timeout_s), spec])
    proc = leader.ssh(command, timeout=timeout_s + 30)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def link_client(
    netns: str,
    target: Target,
    path: str,
    body: dict | None,
    timeout_s: float,
    key: str,
    for_s: float = 0,
    pause_s: float = 0,
) -> subprocess.Popen:
    """:data:`CLIENT` started on the controller in the pair's link namespace ``netns`` (the
    controller's end of the bridge), asking ``target`` with the API ``key`` (handed through its
    environment): a POST of ``body`` (None: a GET), once, or again and again for ``for_s``
    seconds, ``pause_s`` apart (one JSON line per request on its stdout, as :func:`api`
    returns). The caller waits for it (:func:`answers`)."""
    sent = "GET" if body is None else json.dumps(body)
    argv = ["ip", "netns", "exec", netns, "python3", "-c", CLIENT, path, sent]
    argv += [str(timeout_s), target.spec()] + ([str(for_s), str(pause_s)] if for_s else [])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), KEY_ENV: key}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def answers(proc: subprocess.Popen, timeout_s: float) -> list[dict]:
    """The answers a :func:`link_client` printed, once it exits within ``timeout_s``.

    Raises:
        LabError: it did not exit in time (then killed), or printed no answer.
    """
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise LabError(f"the link's client ran past {timeout_s} s") from None
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not lines:
        raise LabError(f"the link's client answered nothing: {err[-2000:]}")
    return lines


def completion_ok(leader: LabMachine, timeout_s: float = 15, target: Target | None = None) -> bool:
    """The pair (or ``target``, asked in the rig ``leader``) answers a 1-token completion within
    ``timeout_s`` (the supervisor's readiness)."""
    try:
        got = api(leader, "/v1/completions", {"prompt": "1", "max_tokens": 1}, timeout_s, target)
    except LabError:
        return False
    return got["status"] == 200 and bool(got["body"].get("choices"))


def wait_serving(leader: LabMachine, timeout_s: float, poll_s: float = 2.0) -> float | None:
    """Poll until the pair answers a 1-token completion; the seconds it took, None when it did
    not within ``timeout_s``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if completion_ok(leader):
            return time.monotonic() - started
        time.sleep(poll_s)
    return None


def decode_rate(
    leader: LabMachine, tokens: int = 64, timeout_s: float = 300, target: Target | None = None
) -> dict:
    """One greedy completion of exactly ``tokens`` tokens (``ignore_eos``) from the pair (or
    ``target``, asked in the rig ``leader``): ``{"tokens", "seconds", "tokens_per_s"}``, the time
    the client waited for the whole answer (prefill of a short prompt included)."""
    got = api(
        leader,
        "/v1/completions",
        {
            "prompt": "Count: 1 2 3",
            "max_tokens": tokens,
            "min_tokens": tokens,
            "ignore_eos": True,
            "temperature": 0,
        },
        timeout_s,
        target,
    )
    if got["status"] != 200:
        raise LabError(f"the timed completion failed: {got}")
    n = got["body"]["usage"]["completion_tokens"]
    return {"tokens": n, "seconds": got["seconds"], "tokens_per_s": round(n / got["seconds"], 2)}


#: runs in the leader beside api_checks.py: the checks named in argv[2:] against the API the
#: supervisor's configuration argv[1] names; prints api_checks.run_all's list as JSON
RUN_CHECKS = """
import json, sys
sys.path.insert(0, "/var/lib/rigup-lab")
import api_checks
cfg = json.load(open(sys.argv[1]))
key = None
try:
    for line in open(cfg["api_key_file"]):
        name, _, value = line.partition("=")
        if name.strip() == "VLLM_API_KEY":
            key = value.strip().strip('"')
except OSError:
    pass
api = api_checks.Api(cfg["completion_url"].rsplit("/v1/", 1)[0], cfg["model"], key, 300)
print(json.dumps(api_checks.run_all([(n, lambda n=n: getattr(api_checks, n)(api)) for n in sys.argv[2:]])))
"""


def run_api_checks(leader: LabMachine, names: list[str]) -> list[dict]:
    """roles/vllm/api_checks.py's checks ``names`` (``completion``, ``chat_reasoning_apart``,
    ``tool_call``, ``stream``, ``metrics``...) against the leader's API, run in the leader:
    ``[{"check", "ok", "seen" | "error"}]`` (``api_checks.run_all``)."""
    leader.push(API_CHECKS, API_CHECKS_DEST)
    command = shlex.join(["python3", "-c", RUN_CHECKS, WATCH_CONFIG, *names])
    return json.loads(leader.ssh(command, timeout=900).stdout.strip().splitlines()[-1])
