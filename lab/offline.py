"""A rebuild of the lab machine with no network at all, from a backup (deploys/model_backup.py):
the disk that held rigup's software and models is lost, and the converge that rebuilds them runs
where no byte can come from a network.

The lab machine shares the controller's network, so its network cannot be switched off for it
alone; nor may the lab change the controller's firewall. Instead the converge reaches the
machine through a second SSH entrance whose sessions live in a network namespace of their own,
with no interface up, not even loopback (``unshare -n``; the machine lacks CAP_NET_ADMIN, so
it could not bring one up either). That entrance is ``sshd -i`` (inetd mode, the SSH protocol on
stdin/stdout) started for each connection by a listener on a unix socket inside that namespace;
on the controller a thread carries each TCP connection to ``127.0.0.1:<port>`` over that socket
(a unix socket is a file, reached from every namespace). Every command of the converge and all
it starts (uv, pip, the model tool, apt) runs in the empty namespace; services systemd starts run
as always.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from lab.machine import LabMachine
from lab.relay import pump
from lab.render import known_hosts_text
from lab.step import StepResult

#: the listener's socket, on the machine's disk (its /run is a tmpfs the controller cannot see)
CUT_SOCKET = "/var/lib/rigup-lab-cut/ssh.sock"
CUT_UNIT = "rigup-lab-cut.service"

#: runs in the machine, in the empty network namespace: one ``sshd -i`` per connection
LISTENER = """
import os, socket, subprocess, sys
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
if os.path.exists(path):
    os.unlink(path)
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
os.chmod(path, 0o600)
server.listen(8)
while True:
    conn, _ = server.accept()
    subprocess.Popen(["/usr/sbin/sshd", "-i"], stdin=conn.fileno(), stdout=conn.fileno(),
                     stderr=subprocess.DEVNULL, close_fds=True)
    conn.close()
"""


def cut_port(cfg) -> int:
    """The controller port of the cut entrance: ``ssh_port + 35000`` (see
    :func:`lab.hub_lab.hub_port` for the other ports that follow the SSH port)."""
    return cfg.ssh_port + 35000


class _Bridge:
    """127.0.0.1:<port> on the controller -> the machine's unix socket, one pair of threads per
    connection."""

    def __init__(self, port: int, unix_path: Path):
        self.unix_path = unix_path
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                tcp, _ = self.server.accept()
            except OSError:
                return
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                unix.connect(str(self.unix_path))
            except OSError:
                tcp.close()
                continue
            threading.Thread(target=pump, args=(tcp, unix), daemon=True).start()
            threading.Thread(target=pump, args=(unix, tcp), daemon=True).start()

    def close(self) -> None:
        self.server.close()


def _listening(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def network_cut(machine: LabMachine) -> Iterator[tuple[int, Path]]:
    """While open: an SSH entrance to the machine whose sessions have no network. Yields (port,
    known_hosts file) for pyinfra's ``ssh_port`` and ``ssh_known_hosts_file``."""
    cfg = machine.cfg
    machine.ssh(
        f"systemctl stop {CUT_UNIT} 2>/dev/null; systemd-run -q --unit={CUT_UNIT} --collect "
        f"unshare -n python3 -c {shlex.quote(LISTENER)} {CUT_SOCKET}"
    )
    unix_path = cfg.rootfs / CUT_SOCKET.lstrip("/")
    deadline = time.monotonic() + 20
    while not _listening(unix_path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cut entrance did not start: nothing listens on {unix_path}")
        time.sleep(0.2)
    port = cut_port(cfg)
    keys = sorted((cfg.rootfs / "etc" / "ssh").glob("ssh_host_*_key.pub"))
    known = cfg.state_dir / "ssh" / "known_hosts.cut"
    known.write_text(known_hosts_text(port, [k.read_text() for k in keys]))
    bridge = _Bridge(port, unix_path)
    try:
        yield port, known
    finally:
        bridge.close()
        machine.ssh(f"systemctl stop {CUT_UNIT}", check=False)


def cut_ssh(machine: LabMachine, port: int, known: Path, command: str):
    """Run ``command`` in the machine through the cut entrance."""
    cfg = machine.cfg
    argv = [
        "ssh", "-i", str(cfg.ssh_key), "-p", str(port), "-o", "IdentitiesOnly=yes",
        "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}",
        "-o", "GlobalKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
        "-T", "root@127.0.0.1", "--", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


#: what a lost disk takes away: rigup's software, models, configuration and state (the OS with
#: its apt packages and the backup disk stay)
LOST = ("/opt/rigup", "/srv/rigup", "/var/lib/rigup", "/etc/rigup")


def rebuild(machine: LabMachine, backup: str, deploys: list[str], repo: Path, bin_dir: Path):
    """Lose rigup's disk, then converge ``deploys`` with no network from ``backup`` alone.
    Returns a :class:`StepResult` with the figures (network check, seconds, what came from
    the backup)."""
    restore = json.loads(machine.ssh(f"cat {backup}/rigup-backup.json").stdout)["restore"]
    started = time.monotonic()
    machine.ssh(
        "systemctl stop voxcpm.service vllm.service comfyui.service 2>/dev/null; "
        f"rm -rf {' '.join(LOST)} /var/cache/rigup/uv-rebuild && "
        "if test -d /srv/mirror/python; then mv /srv/mirror/python /srv/mirror.python.away; fi"
    )
    data = [f"{key}={json.dumps(value)}" for key, value in restore.items()]
    data.append("uv_cache_dir=/var/cache/rigup/uv-rebuild")  # uv's cache was on the lost disk
    detail: dict = {"restore": restore, "deploys": {}}
    rc = 0
    try:
        with network_cut(machine) as (port, known):
            probe = cut_ssh(
                machine,
                port,
                known,
                "cat /proc/net/dev | tail -n +3 | cut -d: -f1; "
                "curl -sS --max-time 10 -o /dev/null https://pypi.org/simple/ 2>&1; echo rc=$?",
            )
            detail["network"] = " ".join((probe.stdout + probe.stderr).split())
            args = [a for d in data for a in ("--data", d)]
            args += ["--data", f"ssh_port={port}", "--data", f"ssh_known_hosts_file={known}"]
            for deploy in deploys:
                t = time.monotonic()
                proc = subprocess.run(
                    [str(bin_dir / "pyinfra"), "-y", "inventory/lab.py", deploy, *args],
                    cwd=repo,
                    capture_output=True,
                    text=True,
                )
                detail["deploys"][deploy] = round(time.monotonic() - t, 1)
                if proc.returncode != 0:
                    rc = proc.returncode
                    detail["output"] = (proc.stdout + proc.stderr)[-6000:]
                    break
    finally:
        machine.ssh(
            "if test -d /srv/mirror.python.away; then mv /srv/mirror.python.away /srv/mirror/python; fi"
        )
    reports = machine.ssh("cat /var/lib/rigup/model/*@*.json 2>/dev/null", check=False).stdout
    detail["models"] = [json.loads(line) for line in reports.splitlines() if line.strip()]
    return StepResult("offline rebuild", rc, time.monotonic() - started, detail)
