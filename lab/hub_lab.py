"""The lab's Hugging Face-compatible server: the lab's models come from it through
huggingface_hub, exactly as a rig's come from huggingface.co or a mirror such as hf-mirror.com
(``hf_endpoint``).

The server is olah (PyPI, a self-hosted Hugging Face mirror) run offline: it serves local git+LFS
repositories through the Hugging Face API (``model_info``, ``list_repo_tree``, ``resolve``) and
never contacts an upstream. It is lab tooling, not a rigup role:

- its venv: ``/opt/rigup-lab/hub/venv``, from the committed, hash-pinned lab/hub/
  requirements-hub.lock, installed by pip (the wheel of the distribution's python3-pip-whl, not
  installed system-wide, so the machine stays the bare box the deploy expects; git comes from the
  distribution's archive);
- its unit: ``rigup-lab-hub.service``, an unprivileged ``DynamicUser`` on 127.0.0.1:<port>
  (:func:`hub_port`: one per lab machine, as they share the controller's network);
- its repositories: ``/srv/rigup-lab-hub/models/<org>/<name>``, built by lab/hub_repo.py from the
  directories the lab seeds (:data:`HUB_MODELS`, by name), which are then removed so that no
  local copy stands in for the hub.

Measured limits of olah 0.5.4 (docs/models.md, "What is proven where"): it holds a whole file in
memory per request and ignores Range, so the lab keeps its files small; its ``model_info`` gives
no sizes or hashes (``list_repo_tree`` does).
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from lab.machine import LabMachine
from lab.step import StepResult
from lab.voxcpm_lab import VOXCPM_MIRROR

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "lab" / "hub" / "requirements-hub.lock"
BUILDER = REPO / "lab" / "hub_repo.py"
#: the lab tooling's own tree in the machine (never a rigup path)
HUB_DIR = "/opt/rigup-lab/hub"
#: olah's mirrors-path: <HUB_REPOS>/models/<org>/<name>/.git
HUB_REPOS = "/srv/rigup-lab-hub"
HUB_CONFIG = "/etc/rigup-lab/hub.toml"
HUB_UNIT = "rigup-lab-hub.service"


def hub_port(cfg) -> int:
    """The server's port in the lab machine of ``cfg``: ``ssh_port + 25000`` (27222 for the
    default lab, 27223 for the test suite's). Labs share the controller's network; the other
    ports that follow the SSH port: VoxCPM2's + 10000, tests/voxcpm's + 20000, vLLM's + 30000,
    lab/offline.py's + 35000."""
    return cfg.ssh_port + 25000


def hub_endpoint(cfg) -> str:
    """What the lab's settings give ``hf_endpoint``: loopback, or the machine's address on a
    lab pair's link (lab/pair.py: the follower reaches the hub in the leader there)."""
    return f"http://{cfg.address or '127.0.0.1'}:{hub_port(cfg)}"


def hub_models() -> dict[str, str]:
    """The lab's model repositories: repo id (as the shipped manifests name it) -> the directory
    in the machine the lab seeds its files into."""
    from lab.scenario import LAB_MODEL_MIRROR  # the LLM-shaped checkpoint's seed directory

    return {
        "Intel/Qwen3.6-27B-int4-AutoRound": LAB_MODEL_MIRROR,
        "openbmb/VoxCPM2": VOXCPM_MIRROR,
    }


def config_text(port: int, address: str = "") -> str:
    """olah's configuration: offline, serving :data:`HUB_REPOS` on loopback, or with
    ``address`` (a lab pair's leader: its address on the pair's link) on every address of the
    machine, its links naming ``address``."""
    host = "0.0.0.0" if address else "127.0.0.1"
    netloc = f"{address or '127.0.0.1'}:{port}"
    return f"""# rigup lab: olah, offline, serving the lab's model repositories (lab/hub_lab.py)
[basic]
host = "{host}"
port = {port}
repos-path = "/var/lib/rigup-lab-hub/repos"
# no upstream: a closed loopback port, so that nothing (not even /api/whoami-v2, which olah
# forwards with the caller's token even when offline) leaves the machine
hf-scheme = "http"
hf-netloc = "127.0.0.1:9"
hf-lfs-netloc = "127.0.0.1:9"
mirror-scheme = "http"
mirror-netloc = "{netloc}"
mirror-lfs-netloc = "{netloc}"
mirrors-path = ["{HUB_REPOS}"]

[accessibility]
offline = true
"""


UNIT_TEXT = f"""# rigup lab tooling (lab/hub_lab.py), not a rigup role: the lab's Hugging Face-compatible server
[Unit]
Description=rigup lab: Hugging Face-compatible server (olah, offline) for the lab's models
After=network.target

[Service]
DynamicUser=yes
StateDirectory=rigup-lab-hub
WorkingDirectory=%S/rigup-lab-hub
# olah reads the repositories with git, which refuses repositories of another owner
Environment=HOME=%S/rigup-lab-hub GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0=*
ExecStart={HUB_DIR}/venv/bin/olah-cli -c {HUB_CONFIG}
Restart=on-failure
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
NoNewPrivileges=yes

[Install]
WantedBy=multi-user.target
"""


def install_script(port: int, address: str = "") -> str:
    """Shell script (run as root in the lab) that installs and starts the server (``address``:
    see :func:`config_text`); the venv is rebuilt only when the lock changed. Idempotent."""
    return f"""set -eu
hub={HUB_DIR}
want=$(sha256sum $hub/requirements-hub.lock | cut -d' ' -f1)
if [ "$(cat $hub/venv/.rigup-lab-lock.sha256 2>/dev/null)" != "$want" ]; then
    export DEBIAN_FRONTEND=noninteractive
    command -v git >/dev/null || apt-get install -y -qq --no-install-recommends git >/dev/null \\
        || {{ apt-get update -qq && apt-get install -y -qq --no-install-recommends git >/dev/null; }}
    work=$(mktemp -d /var/tmp/rigup-lab-hub.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    # the package lists may predate the machine's sources (Ubuntu's python3-pip-whl is in
    # universe, which debootstrap's lists lack): refreshed when the package is not found
    download="apt-get download -o APT::Sandbox::User=root python3-pip-whl"
    (cd "$work" && {{ $download >/dev/null || {{ apt-get update -qq && $download >/dev/null; }}; }} \\
        && dpkg-deb -x python3-pip-whl_*.deb root)
    pip=$(ls "$work"/root/usr/share/python-wheels/pip-*.whl)
    rm -rf $hub/venv
    python3 -m venv --without-pip $hub/venv
    $hub/venv/bin/python "$pip/pip" install -q --no-cache-dir --disable-pip-version-check \\
        --require-hashes --only-binary=:all: -r $hub/requirements-hub.lock
    echo "$want" > $hub/venv/.rigup-lab-lock.sha256
    changed=1
fi
mkdir -p {HUB_REPOS}/models $(dirname {HUB_CONFIG})
printf '%s' {shlex.quote(config_text(port, address))} > {HUB_CONFIG}.new
printf '%s' {shlex.quote(UNIT_TEXT)} > /etc/systemd/system/{HUB_UNIT}.new
for f in {HUB_CONFIG} /etc/systemd/system/{HUB_UNIT}; do
    if cmp -s "$f.new" "$f"; then rm "$f.new"; else mv "$f.new" "$f"; changed=1; fi
done
systemctl daemon-reload
systemctl enable -q {HUB_UNIT}
if [ "${{changed:-0}}" = 1 ]; then systemctl restart {HUB_UNIT}; else systemctl start {HUB_UNIT}; fi
"""


def ready_script(port: int, repo_id: str, timeout_s: int = 60) -> str:
    """Wait until the server answers for ``repo_id`` (its refs)."""
    url = f"http://127.0.0.1:{port}/api/models/{repo_id}/refs"
    return (
        f"for i in $(seq {timeout_s * 2}); do curl -sf -o /dev/null {url} && exit 0; sleep 0.5; "
        f"done; echo 'the lab hub did not answer {url}' >&2; "
        f"journalctl -u {HUB_UNIT} -n 30 --no-pager >&2; exit 1"
    )


def publish(machine: LabMachine, repo_id: str, src: str, message: str = "") -> str:
    """Make the files under ``src`` (in the machine) the latest commit of ``repo_id`` on the
    lab's hub; returns the commit."""
    args = [f"{HUB_DIR}/hub_repo.py", f"{HUB_REPOS}/models/{repo_id}", src]
    if message:
        args += ["--message", message]
    out = machine.ssh(f"python3 {shlex.join(args)}", timeout=900).stdout.split()
    return out[-1]


def commit_of(machine: LabMachine, repo_id: str, ref: str = "main") -> str:
    """The commit ``ref`` names in ``repo_id`` on the lab's hub, as the hub answers."""
    port = hub_port(machine.cfg)
    refs = json.loads(
        machine.ssh(f"curl -sf http://127.0.0.1:{port}/api/models/{repo_id}/refs").stdout
    )
    for branch in refs["branches"] + refs["tags"]:
        if branch["name"] == ref:
            return branch["targetCommit"]
    raise KeyError(f"{repo_id} has no ref {ref}")


def seed(machine: LabMachine) -> StepResult:
    """Install and start the server, and publish every seeded model directory as its
    repository (the step "seed hub")."""
    started = time.monotonic()
    port = hub_port(machine.cfg)
    machine.ssh(f"mkdir -p {HUB_DIR}")
    machine.push(LOCK, f"{HUB_DIR}/requirements-hub.lock")
    machine.push(BUILDER, f"{HUB_DIR}/hub_repo.py")
    machine.ssh(install_script(port, machine.cfg.address), timeout=900)
    commits = {}
    for repo_id, src in hub_models().items():
        if machine.ssh(f"test -d {shlex.quote(src)}", check=False).returncode == 0:
            commits[repo_id] = publish(machine, repo_id, src)
            machine.ssh(f"rm -rf {shlex.quote(src)}")  # the hub holds it now
    machine.ssh(ready_script(port, next(iter(hub_models()))), timeout=120)
    size = machine.ssh(f"du -sb {HUB_REPOS} | cut -f1").stdout.strip()
    detail = {"endpoint": hub_endpoint(machine.cfg), "commits": commits, "bytes": int(size or 0)}
    return StepResult("seed hub", 0, time.monotonic() - started, detail)
