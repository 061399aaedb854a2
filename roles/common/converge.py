"""A converge as the controller runs it: one at a time on each host, and an interrupted one
reported as interrupted.

**One converge per host.** :func:`hold_converge_lock` (called by
:func:`roles.settings.host_settings`, once per host and run, before any change) starts a holder
on the host: a root shell that takes ``flock`` on ``/run/rigup/converge.lock`` (a root-only
directory: no other user can open the file, let alone hold it) and records who holds it in
``/run/rigup/converge.owner``. The holder lives exactly as long as this controller's connection:
it writes a heartbeat byte to its standard output every second, which is a pipe back to the
controller through the SSH session (or the local connector's subprocess), so once the controller
is gone - finished, interrupted or killed - the next heartbeat fails (EPIPE/SIGPIPE), the shell
exits and the kernel drops the lock. Nothing on the host can take it while the holder lives, and
nothing needs cleaning after a crash. A second converge of the same host refuses before any
change with "another rigup converge is running on <host>, pid N ... since T".

**An interrupted converge exits non-zero.** pyinfra 3.10 prints "Exiting upon user request!" on
SIGINT and exits 0. config.py calls :func:`report_interruptions`, which replaces that handler
(and handles SIGTERM and SIGHUP the same way): the run stops at once with exit status 128 + the
signal number (130 for SIGINT), naming the operation that was running on each host and saying the
host may be half-converged.
"""

from __future__ import annotations

import getpass
import os
import secrets
import shlex
import signal
import socket
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import gevent
from pyinfra import host, logger
from pyinfra.api import StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.exceptions import DeployError
from pyinfra.api.state import BaseStateCallback, StateStage
from pyinfra.connectors.fake import FakeConnector

LOCK_DIR = "/run/rigup"
LOCK_FILE = f"{LOCK_DIR}/converge.lock"
OWNER_FILE = f"{LOCK_DIR}/converge.owner"
#: Exit status of the holder when another process holds the lock (EX_TEMPFAIL).
BUSY = 75
#: Seconds between heartbeats: how long a holder outlives its controller at most.
HEARTBEAT_S = 1
#: Seconds to wait for the holder to report the lock taken.
ACQUIRE_TIMEOUT_S = 30.0
#: Seconds a lock whose controller is known to be gone (same controller machine, pid no longer
#: running) may take to be dropped: its holder ends at its next heartbeat.
GONE_GRACE_S = 3 * HEARTBEAT_S + 2

#: Holders started by this process: host name -> the greenlet running it.
_HELD: dict[str, gevent.Greenlet] = {}


def holder_script(record: Mapping[str, str], directory: str = LOCK_DIR) -> str:
    """The shell script that takes the converge lock on a host and holds it while this controller
    reads its output. Prints ``@busy`` and the current owner record, exit :data:`BUSY`, when the
    lock is held; otherwise writes ``record`` (plus ``since`` and ``holder``, its own pid) to the
    owner file, prints ``@held`` and heartbeats until its output pipe is gone. ``directory``:
    :data:`LOCK_DIR` on hosts (tests run it in a directory of their own)."""
    d = shlex.quote(directory)
    lines = " ".join(shlex.quote(f"{k}={v}") for k, v in record.items())
    return f"""umask 077
mkdir -p {d} && chown root:root {d} && chmod 0700 {d} || exit 70
exec 9>>{d}/converge.lock || exit 70
if ! flock -n 9; then echo @busy; cat {d}/converge.owner 2>/dev/null; exit {BUSY}; fi
printf '%s\\n' {lines} "since=$(date -u +%Y-%m-%dT%H:%M:%SZ)" "holder=$$" > {d}/converge.owner.new
mv -f {d}/converge.owner.new {d}/converge.owner
echo @held
while sleep {HEARTBEAT_S} 9>&-; do echo . || exit 0; done"""


def parse_owner(lines: list[str]) -> dict[str, str]:
    """The ``key=value`` lines of an owner record (other lines ignored)."""
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("@"))


def busy_message(host_name: str, owner: Mapping[str, str]) -> str:
    """Why a converge of ``host_name`` is refused while ``owner`` holds its lock."""
    if not owner.get("pid"):
        who = "(its owner record is not written yet)"
    else:
        who = (
            f"pid {owner['pid']} (pyinfra on {owner.get('controller', '?')} as "
            f"{owner.get('user', '?')}: {owner.get('command', '?')})"
        )
    since = f", since {owner['since']}" if owner.get("since") else ""
    holder = (
        f" Its lock holder on {host_name} is pid {owner['holder']} ({LOCK_FILE}); it ends with "
        "that run's connection, whether the run finishes, fails or is killed."
        if owner.get("holder")
        else ""
    )
    return (
        f"another rigup converge is running on {host_name}, {who}{since}; nothing was changed. "
        f"Wait for it to end, then run this one again.{holder}"
    )


def controller_gone(owner: Mapping[str, str], here: str, alive=None) -> bool:
    """True when ``owner`` names a controller process on this machine (``here``) that no longer
    runs: its holder is about to end (next heartbeat)."""
    if owner.get("controller") != here or not owner.get("pid", "").isdigit():
        return False
    if alive is None:
        alive = _pid_alive
    return not alive(int(owner["pid"]))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _controller_record() -> dict[str, str]:
    words = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
    return {
        "controller": socket.gethostname(),
        "pid": str(os.getpid()),
        "user": getpass.getuser(),
        "command": " ".join(words)[:300].replace("\n", " "),
    }


def _connector_arguments() -> dict:
    arguments, _ = pop_global_arguments(host.state, host, {})
    return {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}


def _run(command: str) -> tuple[bool, list[str]]:
    status, output = host.run_shell_command(
        StringCommand(command), print_output=False, **_connector_arguments()
    )
    return status, output.stdout_lines


def hold_converge_lock() -> None:
    """Hold the current host's converge lock for the rest of this run; raise ``DeployError``
    (nothing changed) when another converge holds it. A no-op on pyinfra's ``@fake`` hosts
    (plan tests: nothing there can change) and when this run holds it already."""
    if host.name in _HELD or isinstance(host.connector, FakeConnector):
        return
    token = secrets.token_hex(8)
    record = {"token": token, **_controller_record()}
    here = record["controller"]
    started = time.monotonic()
    while True:
        holder = gevent.spawn(
            host.run_shell_command,
            StringCommand(holder_script(record)),
            print_output=False,
            **_connector_arguments(),
        )
        while not holder.ready():
            ok, lines = _run(f"cat {OWNER_FILE} 2>/dev/null || true")
            if parse_owner(lines).get("token") == token:
                _HELD[host.name] = holder
                logger.info(
                    f"{host.print_prefix}converge lock held ({LOCK_FILE}, pid {record['pid']} "
                    f"on {here})"
                )
                return
            if time.monotonic() - started > ACQUIRE_TIMEOUT_S:
                holder.kill()
                raise DeployError(
                    f"could not take the converge lock on {host.name} within "
                    f"{ACQUIRE_TIMEOUT_S:.0f} s ({LOCK_FILE}); nothing was changed"
                )
            gevent.sleep(0.2)
        _status, output = holder.get()
        lines = output.stdout_lines
        if "@busy" not in lines:
            raise DeployError(
                f"could not take the converge lock on {host.name} ({LOCK_FILE}): "
                + " | ".join(output.stdout_lines + output.stderr_lines)[-600:]
                + "; nothing was changed"
            )
        owner = parse_owner(lines[lines.index("@busy") + 1 :])
        if controller_gone(owner, here) and time.monotonic() - started < GONE_GRACE_S:
            gevent.sleep(0.5)  # a finished run's holder, ending at its next heartbeat
            continue
        raise DeployError(busy_message(host.name, owner))


# --------------------------------------------------------------------------------------------
# interruption


@dataclass
class HostProgress:
    """What one host is doing: the operation running (names), when it started, how many
    operations finished, the last one that did."""

    running: str = ""
    since: float = 0.0
    done: int = 0
    last: str = ""


@dataclass
class ConvergeProgress(BaseStateCallback):
    """pyinfra state callbacks that keep :class:`HostProgress` per host name."""

    hosts: dict[str, HostProgress] = field(default_factory=dict)

    def operation_host_start(self, state, host, op_hash):  # type: ignore[override]
        p = self.hosts.setdefault(host.name, HostProgress())
        p.running = ", ".join(state.get_op_meta(op_hash).names) or "an operation"
        p.since = time.monotonic()

    def _finished(self, host) -> None:
        p = self.hosts.setdefault(host.name, HostProgress())
        p.done += 1
        p.last, p.running = p.running, ""

    def operation_host_success(self, state, host, op_hash, retry_count=0):  # type: ignore[override]
        self._finished(host)

    def operation_host_error(self, state, host, op_hash, retry_count=0, max_retries=0):  # type: ignore[override]
        self._finished(host)


def interruption_message(
    signame: str, executing: bool, progress: Mapping[str, HostProgress], totals: Mapping[str, int]
) -> str:
    """What an interrupted run tells the user. ``executing``: pyinfra had begun running
    operations; ``totals``: operations planned per host."""
    if not executing:
        return (
            f"rigup: interrupted ({signame}) before any operation ran: nothing was changed on "
            "any host."
        )
    lines = [f"rigup: interrupted ({signame}) while operations were running:"]
    now = time.monotonic()
    for name in sorted(totals):
        p = progress.get(name, HostProgress())
        of = f"{p.done} of {totals[name]} operations finished"
        if p.running:
            lines.append(
                f"  {name}: interrupted during '{p.running}' (running for {now - p.since:.0f} s; "
                f"{of}). The host may be half-converged, and that operation's command may still "
                "be running there."
            )
        elif p.done:
            lines.append(
                f"  {name}: stopped between operations, after '{p.last}' ({of}). The host may "
                "be half-converged."
            )
        else:
            lines.append(f"  {name}: no operation had run on it; nothing was changed there.")
    lines.append("Run the same converge again to finish it.")
    return "\n".join(lines)


def report_interruptions() -> None:
    """Replace pyinfra's SIGINT handler (which exits 0) for this pyinfra run: SIGINT, SIGTERM and
    SIGHUP print :func:`interruption_message` and end the process at once with 128 + the signal
    number. Call from config.py, which pyinfra runs before it connects to any host."""
    from pyinfra import state

    progress = ConvergeProgress()
    state.add_callback_handler(progress)

    def interrupted(signum, _frame):
        executing = state.initialised and state.current_stage >= StateStage.Execute
        totals = {h.name: len(h.op_hash_order) for h in state.inventory} if executing else {}
        name = signal.Signals(signum).name
        try:
            print(
                f"\n{interruption_message(name, executing, progress.hosts, totals)}",
                file=sys.stderr,
            )
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
