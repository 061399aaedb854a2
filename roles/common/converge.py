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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import gevent
from gevent import subprocess
from pyinfra import host, logger
from pyinfra.api import StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.api.exceptions import DeployError
from pyinfra.api.state import StateStage
from pyinfra.connectors.fake import FakeConnector
from pyinfra.connectors.local import LocalConnector
from pyinfra.connectors.ssh import SSHConnector
from pyinfra.connectors.util import make_unix_command_for_host

LOCK_DIR = "/run/rigup"
LOCK_FILE = f"{LOCK_DIR}/converge.lock"
OWNER_FILE = f"{LOCK_DIR}/converge.owner"
#: Exit status of the holder when another process holds the lock (EX_TEMPFAIL).
BUSY = 75
#: Seconds between heartbeats: how long a holder outlives its controller at most.
HEARTBEAT_S = 1
#: Seconds to wait for the holder to report the lock taken or busy.
ACQUIRE_TIMEOUT_S = 60.0
#: Seconds a lock whose controller is known to be gone (same controller machine, pid no longer
#: running) may take to be dropped: its holder ends at its next heartbeat.
GONE_GRACE_S = 3 * HEARTBEAT_S + 2

#: Holders started by this process: host name -> the greenlet reading its heartbeats.
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


def _holder_command(script: str) -> str:
    """``script`` as pyinfra would run it on the current host (its sudo/su settings applied)."""
    arguments, _ = pop_global_arguments(host.state, host, {})
    connector = {k: v for k, v in arguments.items() if k in CONNECTOR_ARGUMENT_KEYS}
    connector.pop("_timeout", None)
    connector.pop("_stdin", None)
    connector.pop("_success_exit_codes", None)
    connector.pop("_get_pty", None)
    return make_unix_command_for_host(
        host.state, host, StringCommand(script), **connector
    ).get_raw_value()


@dataclass
class Holder:
    """A running holder: its output lines (``readline``), exit status and closing."""

    readline: Callable[[], str]
    exit_status: Callable[[], int]
    close: Callable[[], None]


def _start_holder(script: str) -> Holder | None:
    """Start ``script`` on the current host with its standard output a pipe back to this
    process: an SSH channel of pyinfra's own connection, or a subprocess for ``@local``. None for
    other connectors (the lock is not taken there)."""
    command = _holder_command(script)
    if isinstance(host.connector, SSHConnector):
        channel = host.connector.client.get_transport().open_session()
        channel.settimeout(ACQUIRE_TIMEOUT_S)
        channel.exec_command(command)
        out = channel.makefile("r")
        return Holder(out.readline, channel.recv_exit_status, channel.close)
    if isinstance(host.connector, LocalConnector):
        proc = subprocess.Popen(
            command,
            shell=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        return Holder(proc.stdout.readline, proc.wait, proc.kill)
    return None


def _drain(holder: Holder) -> None:
    """Read the holder's heartbeats until its pipe closes (at the end of this run)."""
    while True:
        try:
            if not holder.readline():
                return
        except TimeoutError:  # a slow second: the channel's read timeout, not its end
            continue
        except Exception:  # the connection closing at exit
            return


def hold_converge_lock() -> None:
    """Hold the current host's converge lock for the rest of this run; raise ``DeployError``
    (nothing changed) when another converge holds it. A no-op on pyinfra's ``@fake`` hosts
    (plan tests: nothing there can change), on connectors other than SSH and ``@local`` (said
    so), and when this run holds it already."""
    if host.name in _HELD or isinstance(host.connector, FakeConnector):
        return
    record = {"token": secrets.token_hex(8), **_controller_record()}
    here = record["controller"]
    started = time.monotonic()
    while True:
        holder = _start_holder(holder_script(record))
        if holder is None:
            logger.warning(
                f"{host.print_prefix}no converge lock: {type(host.connector).__name__} is "
                "neither SSH nor @local"
            )
            return
        lines: list[str] = []
        try:
            while (line := holder.readline()) and line.strip() not in ("@held", "@busy"):
                lines.append(line.strip())
            first = line.strip()
            if first == "@held":
                _HELD[host.name] = gevent.spawn(_drain, holder)
                logger.info(
                    f"{host.print_prefix}converge lock held ({LOCK_FILE}, pid {record['pid']} "
                    f"on {here})"
                )
                return
            while line := holder.readline():
                lines.append(line.strip())
            status = holder.exit_status()
        except (OSError, TimeoutError) as e:  # socket.timeout is a TimeoutError
            holder.close()
            raise DeployError(
                f"could not take the converge lock on {host.name} ({LOCK_FILE}): {e}; nothing "
                "was changed"
            ) from None
        if first != "@busy" or status != BUSY:
            raise DeployError(
                f"could not take the converge lock on {host.name} ({LOCK_FILE}): exit {status}: "
                + " | ".join(lines)[-600:]
                + "; nothing was changed"
            )
        owner = parse_owner(lines)
        if controller_gone(owner, here) and time.monotonic() - started < GONE_GRACE_S:
            gevent.sleep(0.5)  # a finished run's holder, ending at its next heartbeat
            continue
        raise DeployError(busy_message(host.name, owner))


# --------------------------------------------------------------------------------------------
# interruption


@dataclass(frozen=True)
class HostProgress:
    """Where one host stood when the run was interrupted: the operation running (its names, ""
    between operations), how many had finished, how many were planned."""

    running: str
    done: int
    total: int


def interruption_message(signame: str, executing: bool, hosts: Mapping[str, HostProgress]) -> str:
    """What an interrupted run tells the user. ``executing``: pyinfra had begun running
    operations (before that, nothing was changed)."""
    if not executing:
        return (
            f"rigup: interrupted ({signame}) before any operation ran: nothing was changed on "
            "any host."
        )
    lines = [f"rigup: interrupted ({signame}) while operations were running:"]
    for name, p in sorted(hosts.items()):
        of = f"{p.done} of {p.total} operations finished"
        if p.running:
            lines.append(
                f"  {name}: interrupted during '{p.running}' ({of}). The host may be "
                "half-converged, and that operation's command may still be running there."
            )
        elif p.done:
            lines.append(f"  {name}: stopped between operations ({of}). It may be half-converged.")
        else:
            lines.append(f"  {name}: no operation had run on it; nothing was changed there.")
    lines.append("Run the same converge again to finish it.")
    return "\n".join(lines)


def progress_of(state) -> dict[str, HostProgress]:
    """Each host's :class:`HostProgress` from pyinfra's state (the operation it executes, its
    results so far, its planned operations)."""
    hosts = {}
    for h in state.inventory:
        running = h.nested_executing_op_hash or h.executing_op_hash
        names = ""
        if running:
            names = ", ".join(state.get_op_meta(running).names) or "an operation"
        results = state.results.get(h)
        done = (results.ops + results.error_ops) if results else 0
        hosts[h.name] = HostProgress(names, done, len(h.op_hash_order))
    return hosts


def report_interruptions() -> None:
    """Replace pyinfra's SIGINT handler (which exits 0) for this pyinfra run: SIGINT, SIGTERM and
    SIGHUP print :func:`interruption_message` and end the process at once with 128 + the signal
    number. Call from config.py, which pyinfra runs before it connects to any host."""
    from pyinfra import state

    def interrupted(signum, _frame):
        try:
            executing = state.initialised and state.current_stage >= StateStage.Execute
            hosts = progress_of(state) if executing else {}
            message = interruption_message(signal.Signals(signum).name, executing, hosts)
            print(f"\n{message}", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
