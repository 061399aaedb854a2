"""The lab pair's API, asked in the leader: the leader's vLLM listens on its loopback, in the
leader's own network namespace, so each request runs there over SSH, through a small client
(:data:`CLIENT`) that reads the API key, if the rig has one, from the supervisor's configuration
(the key never travels in argv or output).
"""

from __future__ import annotations

import json
import shlex
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

#: runs in the leader: POST argv[2] (JSON) to the API path argv[1] as the supervisor's
#: configuration argv[4] says; prints one JSON line {"status", "seconds", "body"} (status 0: no
#: answer within argv[3] seconds)
CLIENT = """
import json, sys, time, urllib.error, urllib.request
cfg = json.load(open(sys.argv[4]))
base = cfg["completion_url"].rsplit("/v1/", 1)[0]
body = json.loads(sys.argv[2]); body.setdefault("model", cfg["model"])
headers = {"Content-Type": "application/json"}
try:
    for line in open(cfg["api_key_file"]):
        name, _, value = line.partition("=")
        if name.strip() == "VLLM_API_KEY":
            headers["Authorization"] = "Bearer " + value.strip().strip('"')
except OSError:
    pass
req = urllib.request.Request(base + sys.argv[1], json.dumps(body).encode(), headers)
started = time.monotonic()
try:
    with urllib.request.urlopen(req, timeout=float(sys.argv[3])) as r:
        out = {"status": r.status, "body": json.load(r)}
except urllib.error.HTTPError as e:
    out = {"status": e.code, "body": e.read().decode(errors="replace")[-2000:]}
except (OSError, ValueError) as e:
    out = {"status": 0, "body": str(e)}
out["seconds"] = round(time.monotonic() - started, 3)
print(json.dumps(out))
"""


def api(leader: LabMachine, path: str, body: dict, timeout_s: float = 120) -> dict:
    """POST ``body`` to the leader's API ``path`` (``/v1/chat/completions``...): ``{"status":
    HTTP status or 0 without an answer, "seconds": float, "body": the JSON answer or the error
    text}``. ``body`` without ``model`` gets the served model's name.

    Raises:
        LabError: SSH to the leader failed.
    """
    command = shlex.join(
        ["python3", "-c", CLIENT, path, json.dumps(body), str(timeout_s), WATCH_CONFIG]
    )
    proc = leader.ssh(command, timeout=timeout_s + 30)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def completion_ok(leader: LabMachine, timeout_s: float = 15) -> bool:
    """The pair answers a 1-token completion within ``timeout_s`` (the supervisor's readiness)."""
    try:
        got = api(leader, "/v1/completions", {"prompt": "1", "max_tokens": 1}, timeout_s)
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


def decode_rate(leader: LabMachine, tokens: int = 64, timeout_s: float = 300) -> dict:
    """One greedy completion of exactly ``tokens`` tokens (``ignore_eos``): ``{"tokens",
    "seconds", "tokens_per_s"}``, the time the client waited for the whole answer (prefill of a
    short prompt included)."""
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
