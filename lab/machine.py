"""The lab machine: a booted Debian systemd-nspawn container that rigup deploys and tests over SSH.

The container shares the host's network namespace, so its sshd listens on host
``127.0.0.1:<ssh_port>``; pyinfra and pytest-testinfra reach it exactly like a real rig, with a
generated ed25519 key and a known_hosts file for strict host key checking.

Layout on the host (all paths configurable, see :class:`LabConfig`)::

    <cache_dir>/templates/<suite>-<hash>/   debootstrapped template rootfs, shared by machines
    <cache_dir>/uv/                          uv cache, bind-mounted at /var/cache/rigup/uv inside
    <state_dir>/rootfs/                      the machine's own copy of the template
    <state_dir>/ssh/id_ed25519{,.pub}        client key; root's authorized_keys inside
    <state_dir>/ssh/known_hosts              the container's host keys, for [127.0.0.1]:<port>
    <state_dir>/nspawn.pid, nspawn.log       the running systemd-nspawn and its console output

Standard library only: this module runs before any rigup tooling is installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

SUITE = "trixie"
DEFAULT_NAME = "rigup-lab"
DEFAULT_SSH_PORT = 2222
DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_CACHE_DIR = Path("/var/cache/rigup-lab")
DEFAULT_STATE_ROOT = Path("/var/lib/rigup-lab")
SSH_HOST = "127.0.0.1"
#: where the host's ``<cache_dir>/uv`` appears inside the container
UV_CACHE_MOUNT = "/var/cache/rigup/uv"
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
INSTALL_HINT = "apt-get install systemd-container debootstrap"

#: What a bare Ubuntu server already has. The deploy under test installs everything else itself
#: (python3-venv deliberately stays out, so the deploy must install it).
TEMPLATE_PACKAGES: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "libpam-systemd",
    "dbus",
    "openssh-server",
    "ca-certificates",
    "python3",
    "sudo",
    "iproute2",
    "procps",
    "curl",
    "gpg",
    "kmod",
    "less",
    "tzdata",
)

#: Units masked in the template: timers that would start apt behind the deploy's back (dpkg lock
#: races make tests flaky) and units that only fail or wait in a container.
TEMPLATE_MASKED_UNITS: tuple[str, ...] = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "apt-daily.service",
    "apt-daily-upgrade.service",
)

#: Bump when the template recipe changes (not only the package list): a new hash, a new template.
TEMPLATE_RECIPE = "1"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class LabError(Exception):
    """A lab operation failed for a reason the user can act on; the message says how."""


# --------------------------------------------------------------------------------------------
# configuration


@dataclasses.dataclass(frozen=True)
class LabConfig:
    """Where and how one lab machine lives. Build it with :meth:`from_env`.

    Attributes:
        name: machine name, also its hostname (``RIGUP_LAB_NAME``).
        ssh_port: TCP port on 127.0.0.1 where the container's sshd listens (``RIGUP_LAB_SSH_PORT``).
        state_dir: the machine's own directory: rootfs, keys, pid file, log
            (``RIGUP_LAB_STATE_DIR``).
        cache_dir: shared cache of templates and the uv cache (``RIGUP_LAB_CACHE_DIR``).
        suite: Debian suite of the template.
        mirror: Debian mirror for debootstrap (``RIGUP_LAB_MIRROR``).
        uv_cache: bind-mount ``<cache_dir>/uv`` at ``/var/cache/rigup/uv`` (``RIGUP_LAB_UV_CACHE``).
    """

    name: str = DEFAULT_NAME
    ssh_port: int = DEFAULT_SSH_PORT
    state_dir: Path = DEFAULT_STATE_ROOT / DEFAULT_NAME
    cache_dir: Path = DEFAULT_CACHE_DIR
    suite: str = SUITE
    mirror: str = DEFAULT_MIRROR
    uv_cache: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LabConfig:
        """Read the configuration from ``RIGUP_LAB_*`` variables (``os.environ`` by default).

        Raises:
            LabError: a variable holds a value that cannot be used (bad name, port, boolean).
        """
        env = os.environ if env is None else env
        name = env.get("RIGUP_LAB_NAME", "") or DEFAULT_NAME
        if not _NAME_RE.match(name):
            raise LabError(
                f"RIGUP_LAB_NAME={name!r} is not a usable machine name: use 1-63 lowercase "
                "letters, digits and dashes, starting with a letter or digit."
            )
        port_text = env.get("RIGUP_LAB_SSH_PORT", "") or str(DEFAULT_SSH_PORT)
        try:
            port = int(port_text)
        except ValueError:
            port = 0
        if not 1 <= port <= 65535:
            raise LabError(
                f"RIGUP_LAB_SSH_PORT={port_text!r} is not a TCP port: set it to a free port "
                "number between 1024 and 65535, e.g. RIGUP_LAB_SSH_PORT=2223."
            )
        uv_text = env.get("RIGUP_LAB_UV_CACHE")
        if uv_text is None:
            uv_cache = True
        elif uv_text.strip().lower() in _TRUE:
            uv_cache = True
        elif uv_text.strip().lower() in _FALSE:
            uv_cache = False
        else:
            raise LabError(
                f"RIGUP_LAB_UV_CACHE={uv_text!r} is not a boolean: use 1 to bind-mount the shared "
                f"uv cache at {UV_CACHE_MOUNT} in the machine (the default) or 0 to leave it out."
            )
        state = env.get("RIGUP_LAB_STATE_DIR", "")
        cache = env.get("RIGUP_LAB_CACHE_DIR", "")
        return cls(
            name=name,
            ssh_port=port,
            state_dir=Path(state).absolute() if state else DEFAULT_STATE_ROOT / name,
            cache_dir=Path(cache).absolute() if cache else DEFAULT_CACHE_DIR,
            suite=SUITE,
            mirror=env.get("RIGUP_LAB_MIRROR", "") or DEFAULT_MIRROR,
            uv_cache=uv_cache,
        )

    @property
    def ssh_key(self) -> Path:
        """Private ed25519 key that logs in as root (``<state_dir>/ssh/id_ed25519``, mode 0600)."""
        return self.state_dir / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """known_hosts holding the container's host keys for ``[127.0.0.1]:<ssh_port>``."""
        return self.state_dir / "ssh" / "known_hosts"

    @property
    def rootfs(self) -> Path:
        """The machine's root file system (``<state_dir>/rootfs``)."""
        return self.state_dir / "rootfs"

    @property
    def pid_file(self) -> Path:
        """File holding the PID of the running systemd-nspawn."""
        return self.state_dir / "nspawn.pid"

    @property
    def nspawn_log(self) -> Path:
        """Console output of systemd-nspawn (boot messages, errors)."""
        return self.state_dir / "nspawn.log"

    @property
    def templates_dir(self) -> Path:
        """Directory of cached template root file systems."""
        return self.cache_dir / "templates"

    @property
    def template_key(self) -> str:
        """``<suite>-<hash>``: names the template built from this suite and package list."""
        return template_key(self.suite, TEMPLATE_PACKAGES)

    @property
    def template(self) -> Path:
        """The cached template rootfs this machine is copied from."""
        return self.templates_dir / self.template_key

    @property
    def uv_cache_dir(self) -> Path:
        """Host side of the uv cache bind mount (``<cache_dir>/uv``)."""
        return self.cache_dir / "uv"


def template_key(suite: str, packages: Sequence[str]) -> str:
    """Name of the template for ``suite`` and ``packages``: ``<suite>-<12 hex digits>``.

    The hash covers the suite, the sorted package list and :data:`TEMPLATE_RECIPE`, so changing
    any of them builds a fresh template instead of reusing a stale one.
    """
    material = "\n".join([f"recipe={TEMPLATE_RECIPE}", f"suite={suite}", *sorted(set(packages))])
    return f"{suite}-{hashlib.sha256(material.encode()).hexdigest()[:12]}"


# --------------------------------------------------------------------------------------------
# pure helpers (argument building, file contents, checks)


def debootstrap_argv(suite: str, target: Path, mirror: str, packages: Sequence[str]) -> list[str]:
    """The debootstrap command line that builds a minimal template rootfs in ``target``."""
    return [
        "debootstrap",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        suite,
        str(target),
        mirror,
    ]


def nspawn_argv(cfg: LabConfig) -> list[str]:
    """The systemd-nspawn command line that boots the machine.

    ``--register=no --keep-unit`` because the host need not run systemd (no machined, no scope
    units); no ``--network-*`` option, so the container shares the host network namespace and
    its sshd is reachable on host ``127.0.0.1:<ssh_port>``.
    """
    argv = [
        "systemd-nspawn",
        "--register=no",
        "--keep-unit",
        "--boot",
        "--console=read-only",
        f"--directory={cfg.rootfs}",
        f"--machine={cfg.name}",
        f"--hostname={cfg.name}",
        "--kill-signal=SIGRTMIN+3",
    ]
    if cfg.uv_cache:
        argv.append(f"--bind={cfg.uv_cache_dir}:{UV_CACHE_MOUNT}")
    return argv


def ssh_argv(cfg: LabConfig, command: str | None = None, *, tty: bool = False) -> list[str]:
    """The ssh command line that runs ``command`` (or a login shell) as root in the machine.

    Host keys are checked strictly against :attr:`LabConfig.known_hosts`.
    """
    argv = [
        "ssh",
        "-i",
        str(cfg.ssh_key),
        "-p",
        str(cfg.ssh_port),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        f"UserKnownHostsFile={cfg.known_hosts}",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "ConnectTimeout=5",
        "-o",
        "LogLevel=ERROR",
    ]
    argv += ["-t"] if tty else ["-o", "BatchMode=yes", "-T"]
    argv.append(f"root@{SSH_HOST}")
    if command is not None:
        argv += ["--", command]
    return argv


def known_hosts_line(port: int, pubkey: str, host: str = SSH_HOST) -> str:
    """One known_hosts line for ``host:port`` from a ``.pub`` file's text (comment dropped).

    Raises:
        LabError: ``pubkey`` is not an OpenSSH public key.
    """
    fields = pubkey.split()
    if len(fields) < 2 or not fields[0].startswith(("ssh-", "ecdsa-", "sk-")):
        raise LabError(f"not an OpenSSH public key: {pubkey.strip()[:60]!r}")
    hostpart = host if port == 22 else f"[{host}]:{port}"
    return f"{hostpart} {fields[0]} {fields[1]}\n"


def known_hosts_text(port: int, pubkeys: Sequence[str], host: str = SSH_HOST) -> str:
    """known_hosts content for ``host:port``: one line per public key, ed25519 first."""
    order = {"ssh-ed25519": 0, "ecdsa-sha2-nistp256": 1}
    lines = [known_hosts_line(port, k, host) for k in pubkeys if k.strip()]
    return "".join(sorted(lines, key=lambda line: order.get(line.split()[1], 9)))


def sshd_dropin_text(port: int) -> str:
    """Content of ``/etc/ssh/sshd_config.d/rigup-lab.conf``: listen on 127.0.0.1:port, keys only."""
    return (
        "# written by rigup's lab machine (lab/machine.py); rewritten on every `up`\n"
        f"Port {port}\n"
        f"ListenAddress {SSH_HOST}\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
    )


def dropin_port(text: str) -> int | None:
    """The ``Port`` set in an sshd drop-in's text (None if there is none)."""
    match = re.search(r"^\s*Port\s+(\d+)\s*$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def hosts_text(name: str) -> str:
    """Content of the container's ``/etc/hosts``: its hostname resolves (sudo wants that)."""
    return (
        "127.0.0.1\tlocalhost\n"
        f"127.0.1.1\t{name}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\tip6-allnodes\n"
        "ff02::2\tip6-allrouters\n"
    )


def port_in_use(port: int, host: str = SSH_HOST) -> bool:
    """True if a TCP socket already holds ``host:port`` (bound or listening), by trying to bind it.

    SO_REUSEADDR is set so that connections lingering in TIME_WAIT do not count as "in use".
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_taken_message(cfg: LabConfig, holder: str | None = None) -> str:
    """The error text for "the SSH port is held by something that is not this lab machine"."""
    who = f" (held by {holder})" if holder else ""
    free = next((p for p in range(2230, 2300) if not port_in_use(p)), 2230)
    return (
        f"TCP port {cfg.ssh_port} on {SSH_HOST} is already in use{who}, and not by lab machine "
        f"{cfg.name!r}: its sshd shares the host network and must listen there. Stop whatever "
        f"holds the port, or choose another port with RIGUP_LAB_SSH_PORT, e.g. "
        f"`RIGUP_LAB_SSH_PORT={free} .venv/bin/python -m lab up`, and export the same "
        "RIGUP_LAB_NAME and RIGUP_LAB_SSH_PORT for pyinfra and pytest (inventory/lab.py reads "
        "them)."
    )


def lab_machine_on_port(state_root: Path, port: int) -> str | None:
    """Name of a lab machine under ``state_root`` (e.g. /var/lib/rigup-lab) configured to listen
    on ``port``, or None: lets a port clash name the lab that holds it."""
    for dropin in sorted(state_root.glob("*/rootfs/etc/ssh/sshd_config.d/rigup-lab.conf")):
        try:
            if dropin_port(dropin.read_text()) == port:
                return dropin.parents[4].name
        except OSError:
            continue
    return None


def port_holder(port: int) -> str | None:
    """Best effort: ``"name (pid N)"`` of the process listening on TCP ``port``, else None."""
    if not shutil.which("ss"):
        return None
    try:
        out = subprocess.run(
            ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, timeout=5
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r'users:\(\("([^"]+)",pid=(\d+)', out)
    return f"{match.group(1)} (pid {match.group(2)})" if match else None


def machine_lock_path(cfg: LabConfig, run_lock: Path = Path("/run/lock")) -> Path:
    """Lock file that serializes up/stop/destroy of one machine: in /run/lock (cleared at boot),
    named after the machine and its state_dir, so destroy leaves nothing behind in state dirs."""
    digest = hashlib.sha256(str(cfg.state_dir).encode()).hexdigest()[:8]
    base = run_lock if run_lock.is_dir() else Path(tempfile.gettempdir())
    return base / f"rigup-lab-{cfg.name}-{digest}.lock"


def tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ("" when it cannot be read), escapes stripped."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    return "\n".join(text.splitlines()[-lines:])


def find_tool(name: str) -> str | None:
    """Path of executable ``name`` on PATH or in the sbin directories (PATH may lack them)."""
    extra = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin"])
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + extra)


def check_tools(which: Callable[[str], str | None] = find_tool) -> None:
    """Check the host tools the lab needs.

    Raises:
        LabError: systemd-nspawn, debootstrap or the OpenSSH client tools are missing.
    """
    missing = [t for t in ("systemd-nspawn", "debootstrap") if not which(t)]
    if missing:
        raise LabError(
            f"{' and '.join(missing)} not found: the lab machine is a systemd-nspawn container "
            f"built with debootstrap. Install them with `{INSTALL_HINT}` and run again."
        )
    missing = [t for t in ("ssh", "ssh-keygen") if not which(t)]
    if missing:
        raise LabError(
            f"{' and '.join(missing)} not found: the lab machine is reached over SSH with a "
            "generated key. Install them with `apt-get install openssh-client` and run again."
        )


def check_root(euid: int | None = None) -> None:
    """Check that we run as root.

    Raises:
        LabError: not root (systemd-nspawn, debootstrap and chroot need it).
    """
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        raise LabError(
            "the lab machine needs root: debootstrap, chroot and systemd-nspawn create and boot "
            "a container. Run it as root, e.g. `sudo .venv/bin/python -m lab up` "
            "(sudo -E keeps RIGUP_LAB_* settings)."
        )


def debootstrap_failure_message(log_tail: str, target: Path, mirror: str) -> str:
    """The error text for a failed debootstrap, with the tail of its logs."""
    return (
        f"debootstrap failed building the lab template in {target} from {mirror}; nothing was "
        "kept, the next `up` starts over. Check the network and the mirror (RIGUP_LAB_MIRROR). "
        f"Log tail:\n{log_tail}"
    )


def _reset_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def write_tar(src: Path, arcname: str, fileobj) -> None:
    """Stream ``src`` (a file, or a directory tree) as an uncompressed tar into ``fileobj``.

    Entries are named ``arcname`` (and below it), owned by root; modes are kept.
    """
    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.add(str(src), arcname=arcname, recursive=True, filter=_reset_owner)


# --------------------------------------------------------------------------------------------
# processes


def _proc_state(pid: int) -> str | None:
    """One-letter state of ``pid`` from /proc (None if it does not exist)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (a zombie child is reaped here)."""
    state = _proc_state(pid)
    if state is None:
        return False
    if state in ("Z", "X"):
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
        return False
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_nspawn_of(cmdline: Sequence[str], rootfs: Path) -> bool:
    """True if ``cmdline`` is a systemd-nspawn booting ``rootfs``."""
    if not cmdline or os.path.basename(cmdline[0]) != "systemd-nspawn":
        return False
    root = str(rootfs)
    args = list(cmdline[1:])
    for i, arg in enumerate(args):
        if arg in (f"--directory={root}", f"-D{root}"):
            return True
        if arg in ("-D", "--directory") and i + 1 < len(args) and args[i + 1] == root:
            return True
    return False


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            kids += [int(k) for k in task.read_text().split()]
    return kids


# --------------------------------------------------------------------------------------------
# the machine


def _stderr_log(message: str) -> None:
    print(f"lab: {message}", file=sys.stderr, flush=True)


class LabMachine:
    """One lab machine: create, boot, reach, stop and destroy it.

    Args:
        cfg: where it lives and how it is reached.
        log: receives one-line progress messages (default: ``lab: ...`` on stderr);
            pass ``lambda _: None`` for silence.
    """

    SSH_TIMEOUT = 60.0
    BOOT_TIMEOUT = 90.0
    STOP_TIMEOUT = 30.0

    def __init__(self, cfg: LabConfig, log: Callable[[str], None] | None = None) -> None:
        self.cfg = cfg
        self.log = log or _stderr_log
        self._proc: subprocess.Popen | None = None

    # -- state -------------------------------------------------------------------------------

    def nspawn_pid(self) -> int | None:
        """PID of the systemd-nspawn running this machine, or None if it is not running.

        Checks the pid file first (and that the PID really is nspawn booting our rootfs, so a
        recycled PID is never mistaken for the machine), then scans /proc in case the pid file
        was lost.
        """
        rootfs = self.cfg.rootfs
        with contextlib.suppress(OSError, ValueError):
            pid = int(self.cfg.pid_file.read_text().strip())
            if pid_alive(pid) and is_nspawn_of(_cmdline(pid), rootfs):
                return pid
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                pid = int(entry.name)
                if is_nspawn_of(_cmdline(pid), rootfs) and pid_alive(pid):
                    return pid
        return None

    def state(self) -> str:
        """``running`` (nspawn up), ``stopped`` (rootfs exists) or ``absent``."""
        if self.nspawn_pid() is not None:
            return "running"
        return "stopped" if self.cfg.rootfs.is_dir() else "absent"

    def status(self) -> dict:
        """Where the machine stands: name, state, ssh_port, rootfs, ssh_key, known_hosts, pid,
        template (path, and whether it is cached), uv_cache (host dir or None)."""
        cfg = self.cfg
        return {
            "name": cfg.name,
            "state": self.state(),
            "ssh_port": cfg.ssh_port,
            "rootfs": str(cfg.rootfs),
            "ssh_key": str(cfg.ssh_key),
            "known_hosts": str(cfg.known_hosts),
            "pid": self.nspawn_pid(),
            "template": str(cfg.template),
            "template_cached": cfg.template.is_dir(),
            "uv_cache": str(cfg.uv_cache_dir) if cfg.uv_cache else None,
        }

    # -- up ----------------------------------------------------------------------------------

    def up(self) -> None:
        """Bring the machine to SSH-ready; a no-op (about a second) if it already is.

        Builds or reuses the cached template (debootstrap, minutes, once per host), copies it to
        the machine's rootfs if that is missing (seconds), reapplies the per-machine settings,
        boots it, waits up to 60 s for SSH and up to 90 s for systemd to finish booting, and
        writes known_hosts.

        Raises:
            LabError: not root, tools missing, the SSH port taken by something else, debootstrap
                failed, or the machine did not boot or answer SSH in time.
        """
        started = time.monotonic()
        check_root()
        with self._lock():
            pid = self.nspawn_pid()
            if pid is not None and self.cfg.known_hosts.exists() and self._ssh_ok():
                self.log(
                    f"{self.cfg.name} already running (pid {pid}), SSH on port "
                    f"{self.cfg.ssh_port} answers"
                )
                return
            check_tools()
            if pid is None:
                if port_in_use(self.cfg.ssh_port):
                    other = lab_machine_on_port(self.cfg.state_dir.parent, self.cfg.ssh_port)
                    holder = f"lab machine {other!r}" if other else port_holder(self.cfg.ssh_port)
                    raise LabError(port_taken_message(self.cfg, holder))
                self._ensure_template()
                self._ensure_rootfs()
                self._ensure_key()
                self._configure()
                self._start()
            else:
                running_port = dropin_port(
                    self._dropin().read_text() if self._dropin().exists() else ""
                )
                if running_port not in (None, self.cfg.ssh_port):
                    raise LabError(
                        f"{self.cfg.name} is running with SSH on port {running_port}, not "
                        f"RIGUP_LAB_SSH_PORT={self.cfg.ssh_port}: use port {running_port}, or "
                        "run `python -m lab stop` and `up` again to move it."
                    )
                self.log(f"{self.cfg.name} running (pid {pid}) but SSH does not answer yet")
            self.wait_ssh(self.SSH_TIMEOUT)
            self._wait_booted(self.BOOT_TIMEOUT)
            self._write_known_hosts()
        self.log(
            f"up in {time.monotonic() - started:.1f} s: ssh -i {self.cfg.ssh_key} "
            f"-p {self.cfg.ssh_port} root@{SSH_HOST}"
        )

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """Serialize up/stop/destroy of this machine between processes (e.g. xdist workers)."""
        lock = machine_lock_path(self.cfg)
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            yield

    def _ensure_template(self) -> None:
        cfg = self.cfg
        template = cfg.template
        if template.is_dir():
            self.log(f"template cached (reused): {template}")
            return
        cfg.templates_dir.mkdir(parents=True, exist_ok=True)
        lock = cfg.templates_dir / f".{cfg.template_key}.lock"
        with open(lock, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # another machine may be building the same template
            if template.is_dir():
                self.log(f"template cached (built meanwhile): {template}")
                return
            self._build_template(template)

    def _build_template(self, template: Path) -> None:
        cfg = self.cfg
        partial = template.with_name(f".{template.name}.partial")
        log = template.with_name(f"{template.name}.log")
        if partial.exists():  # an interrupted build: never reused
            self.log(f"removing interrupted template build {partial}")
            _rmtree(partial, unmount=True)
        started = time.monotonic()
        self.log(
            f"building template {template.name} with debootstrap from {cfg.mirror} "
            f"(once per host, a few minutes; log: {log})"
        )
        argv = debootstrap_argv(cfg.suite, partial, cfg.mirror, TEMPLATE_PACKAGES)
        with open(log, "w") as out:
            rc = subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            ).returncode
        if rc != 0:
            detail = tail(log, 15)
            inner = tail(partial / "debootstrap" / "debootstrap.log", 15)
            if inner:
                detail += f"\n--- {partial}/debootstrap/debootstrap.log:\n{inner}"
            _rmtree(partial, unmount=True)
            raise LabError(debootstrap_failure_message(detail, template, cfg.mirror))
        self.log(f"debootstrap done in {time.monotonic() - started:.1f} s; preparing template")
        self._prepare_template(partial)
        os.rename(partial, template)  # atomic: a template dir is always complete
        self.log(f"template built in {time.monotonic() - started:.1f} s: {template}")

    def _prepare_template(self, root: Path) -> None:
        """Machine-neutral changes to a fresh debootstrap: no identity, no apt timers."""
        _chroot(root, ["systemctl", "enable", "ssh.service"])
        _chroot(root, ["systemctl", "mask", *TEMPLATE_MASKED_UNITS])
        # every machine gets its own host keys and machine-id (see _configure)
        for key in (root / "etc" / "ssh").glob("ssh_host_*"):
            key.unlink()
        (root / "etc" / "machine-id").write_text("")
        dbus_id = root / "var" / "lib" / "dbus" / "machine-id"
        if dbus_id.exists() and not dbus_id.is_symlink():
            dbus_id.unlink()
        for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
            deb.unlink()

    def _ensure_rootfs(self) -> None:
        cfg = self.cfg
        if cfg.rootfs.is_dir():
            self.log(f"rootfs exists (reused): {cfg.rootfs}")
            return
        started = time.monotonic()
        cfg.state_dir.mkdir(parents=True, exist_ok=True)
        partial = cfg.state_dir / "rootfs.partial"
        if partial.exists():
            _rmtree(partial, unmount=True)
        _run(["cp", "-a", "--reflink=auto", str(cfg.template), str(partial)], "copying template")
        os.rename(partial, cfg.rootfs)
        self.log(f"rootfs copied from template in {time.monotonic() - started:.1f} s")

    def _ensure_key(self) -> None:
        key = self.cfg.ssh_key
        key.parent.mkdir(parents=True, exist_ok=True)
        key.parent.chmod(0o700)
        if key.exists() and key.with_suffix(".pub").exists():
            return
        for stale in (key, key.with_suffix(".pub")):
            stale.unlink(missing_ok=True)
        _run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                f"rigup-lab@{self.cfg.name}",
                "-f",
                str(key),
            ],
            "generating the SSH key",
        )
        key.chmod(0o600)
        self.log(f"generated SSH key {key}")

    def _configure(self) -> None:
        """(Re)apply per-machine settings to the rootfs: CA certificates, root's authorized key,
        sshd port, hostname, machine-id, host keys."""
        cfg, root = self.cfg, self.cfg.rootfs
        started = time.monotonic()
        # CA certificates: the host may sit behind a TLS-intercepting proxy
        cas = [p for p in HOST_CA_DIR.rglob("*.crt")] if HOST_CA_DIR.is_dir() else []
        if cas:
            dest = root / HOST_CA_DIR.relative_to("/")
            shutil.copytree(HOST_CA_DIR, dest, dirs_exist_ok=True)
            _chroot(root, ["update-ca-certificates"])
        # root's authorized key
        ssh_dir = root / "root" / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        ssh_dir.chmod(0o700)
        auth = ssh_dir / "authorized_keys"
        auth.write_text(cfg.ssh_key.with_suffix(".pub").read_text())
        auth.chmod(0o600)
        # sshd: port and address
        dropin = self._dropin()
        dropin.parent.mkdir(parents=True, exist_ok=True)
        dropin.write_text(sshd_dropin_text(cfg.ssh_port))
        # identity
        (root / "etc" / "hostname").write_text(f"{cfg.name}\n")
        (root / "etc" / "hosts").write_text(hosts_text(cfg.name))
        machine_id = root / "etc" / "machine-id"
        if not machine_id.exists() or len(machine_id.read_text().strip()) != 32:
            machine_id.write_text(uuid.uuid4().hex + "\n")
        if not (root / "etc" / "ssh" / "ssh_host_ed25519_key").exists():
            _chroot(root, ["ssh-keygen", "-A"])
        self.log(
            f"configured {cfg.name} (CA certs: {len(cas)}, port {cfg.ssh_port}) in "
            f"{time.monotonic() - started:.1f} s"
        )

    def _dropin(self) -> Path:
        return self.cfg.rootfs / "etc" / "ssh" / "sshd_config.d" / "rigup-lab.conf"

    def _start(self) -> None:
        cfg = self.cfg
        if cfg.uv_cache:
            cfg.uv_cache_dir.mkdir(parents=True, exist_ok=True)
        argv = nspawn_argv(cfg)
        with open(cfg.nspawn_log, "w") as out:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        cfg.pid_file.write_text(f"{self._proc.pid}\n")
        self.log(f"booting {cfg.name} (nspawn pid {self._proc.pid}, log {cfg.nspawn_log})")

    # -- waiting -----------------------------------------------------------------------------

    def _ssh_ok(self) -> bool:
        try:
            return (
                subprocess.run(
                    ssh_argv(self.cfg, "true"),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=15,
                ).returncode
                == 0
            )
        except subprocess.TimeoutExpired:
            return False

    def wait_ssh(self, timeout: float = SSH_TIMEOUT) -> None:
        """Wait until root can log in over SSH, polling every 0.5 s for up to ``timeout`` seconds.

        Writes known_hosts from the rootfs first, so the check is strict.

        Raises:
            LabError: nspawn exited, or SSH did not answer in time (with the tail of nspawn.log).
        """
        self._write_known_hosts()
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            if self.nspawn_pid() is None:
                raise LabError(
                    f"systemd-nspawn for {self.cfg.name} exited while booting. Last lines of "
                    f"{self.cfg.nspawn_log}:\n{tail(self.cfg.nspawn_log)}"
                )
            if self._ssh_ok():
                self.log(f"SSH answers after {time.monotonic() - started:.1f} s")
                return
            if time.monotonic() > deadline:
                raise LabError(
                    f"{self.cfg.name} did not answer SSH on {SSH_HOST}:{self.cfg.ssh_port} within "
                    f"{timeout:.0f} s; it is left running for inspection (`python -m lab stop` "
                    f"ends it). Last lines of {self.cfg.nspawn_log}:\n{tail(self.cfg.nspawn_log)}"
                )
            time.sleep(0.5)

    def _wait_booted(self, timeout: float) -> None:
        proc = self.ssh("systemctl is-system-running --wait", check=False, timeout=timeout)
        state = proc.stdout.strip()
        if state == "running":
            return
        if state == "degraded":
            failed = self.ssh("systemctl --failed --no-legend --plain", check=False).stdout
            units = ", ".join(line.split()[0] for line in failed.splitlines() if line.split())
            self.log(f"booted degraded; failed units: {units or '?'}")
            return
        raise LabError(
            f"{self.cfg.name} answers SSH but systemd reports {state or proc.stderr.strip()!r} "
            f"instead of running. Look inside with `python -m lab ssh -- systemctl --failed`. "
            f"Last lines of {self.cfg.nspawn_log}:\n{tail(self.cfg.nspawn_log)}"
        )

    def _write_known_hosts(self) -> None:
        keys = sorted((self.cfg.rootfs / "etc" / "ssh").glob("ssh_host_*_key.pub"))
        if not keys:
            raise LabError(
                f"no SSH host keys in {self.cfg.rootfs}/etc/ssh: run `python -m lab "
                "destroy` and `python -m lab up` to rebuild the machine."
            )
        text = known_hosts_text(self.cfg.ssh_port, [k.read_text() for k in keys])
        _write_atomic(self.cfg.known_hosts, text)

    # -- using it ----------------------------------------------------------------------------

    def ssh(
        self,
        command: str,
        check: bool = True,
        *,
        capture: bool = True,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess:
        """Run shell ``command`` as root in the machine over SSH.

        Args:
            command: shell command line (run by root's login shell).
            check: raise :class:`LabError` if it exits non-zero.
            capture: capture stdout/stderr as text (False: they go to ours).
            timeout: seconds before giving up (None: no limit).

        Returns:
            the completed ssh process (its returncode is the command's, or 255 for SSH errors).

        Raises:
            LabError: ``check`` and a non-zero exit, or the timeout expired.
        """
        try:
            proc = subprocess.run(
                ssh_argv(self.cfg, command),
                stdin=subprocess.DEVNULL,
                capture_output=capture,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise LabError(f"`{command}` in {self.cfg.name} took longer than {timeout} s") from exc
        if check and proc.returncode != 0:
            err = (proc.stderr or "").strip()[-2000:] if capture else ""
            raise LabError(
                f"`{command}` in {self.cfg.name} exited {proc.returncode}"
                + (f":\n{err}" if err else "")
            )
        return proc

    def push(self, src: Path, dest: str) -> None:
        """Copy ``src`` from the host to absolute path ``dest`` in the machine, keeping modes.

        A file lands at ``dest`` itself; a directory's contents are merged into directory
        ``dest``. Files end up owned by root. A running machine gets the copy over SSH (so
        /tmp and /run, which are tmpfs inside, work); a stopped one directly in its rootfs
        (through chroot, so symlinks resolve inside it).

        Raises:
            LabError: ``src`` missing, ``dest`` not absolute, the machine absent, or the copy
                failed.
        """
        src = Path(src)
        if not src.exists():
            raise LabError(f"cannot push {src}: no such file or directory")
        if not dest.startswith("/"):
            raise LabError(f"push destination must be an absolute path in the machine: {dest!r}")
        dest = os.path.normpath(dest)
        if src.is_dir():
            where, arcname = dest, "."
        else:
            where, arcname = os.path.dirname(dest) or "/", os.path.basename(dest)
        script = f"mkdir -p -- {shlex.quote(where)} && tar -xpf - -C {shlex.quote(where)}"
        state = self.state()
        if state == "absent":
            raise LabError(f"{self.cfg.name} does not exist: run `python -m lab up` first")
        if state == "running":
            argv = ssh_argv(self.cfg, script)
        else:
            argv = ["chroot", str(self.cfg.rootfs), "/bin/sh", "-c", script]
        started = time.monotonic()
        with tempfile.TemporaryFile() as errfile:
            # stderr to a file, not a pipe: a chatty receiver can never block our tar stream
            proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=errfile
            )
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                write_tar(src, arcname, proc.stdin)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
            rc = proc.wait()
            errfile.seek(0)
            err = errfile.read().decode(errors="replace").strip()[-2000:]
        if rc != 0:
            raise LabError(f"pushing {src} to {self.cfg.name}:{dest} failed (exit {rc}): {err}")
        self.log(f"pushed {src} -> {dest} in {time.monotonic() - started:.1f} s")

    # -- stop / destroy ----------------------------------------------------------------------

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Shut the machine down; a no-op if it is not running.

        SIGTERM to systemd-nspawn, which passes SIGRTMIN+3 to the container's systemd for an
        orderly poweroff; after ``timeout`` seconds the container's init and nspawn are killed.

        Raises:
            LabError: not root, or the processes survived SIGKILL.
        """
        check_root()
        with self._lock():
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        pid = self.nspawn_pid()
        if pid is None:
            self.log(f"{self.cfg.name} is not running")
            self.cfg.pid_file.unlink(missing_ok=True)
            return
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            self.log(f"{self.cfg.name} did not power off within {timeout:.0f} s; killing it")
            for child in _children(pid):  # the container's init: killing it ends the namespace
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                pgid = os.getpgid(pid)
                if pgid == pid and pgid != os.getpgrp():
                    os.killpg(pgid, signal.SIGKILL)
                else:
                    os.kill(pid, signal.SIGKILL)
            if not self._wait_exit(pid, 10):
                raise LabError(f"systemd-nspawn pid {pid} of {self.cfg.name} survived SIGKILL")
        self.cfg.pid_file.unlink(missing_ok=True)
        self._proc = None
        # nspawn v252 leaves this empty dir behind when /run is not a tmpfs; tidy it
        with contextlib.suppress(OSError):
            os.rmdir(f"/run/systemd/nspawn/propagate/{self.cfg.name}")
        self.log(f"stopped {self.cfg.name} in {time.monotonic() - started:.1f} s")

    def _wait_exit(self, pid: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                if self._proc.poll() is not None:
                    return True
            elif not pid_alive(pid):
                return True
            time.sleep(0.2)
        return False

    def destroy(self) -> None:
        """Stop the machine and delete its state_dir (rootfs, keys, logs).

        The template cache and the uv cache are kept, so the next ``up`` takes seconds.

        Raises:
            LabError: not root, the state_dir is unsafe to delete (it contains the cache, or
                something is still mounted under it).
        """
        check_root()
        cfg = self.cfg
        with self._lock():
            self._stop(self.STOP_TIMEOUT)
            state = cfg.state_dir.absolute()
            if not state.exists():
                self.log(f"{cfg.name} is absent; nothing to remove")
                return
            cache = cfg.cache_dir.absolute()
            if state == Path("/") or state == cache or state in cache.parents:
                raise LabError(
                    f"refusing to delete {state}: it holds the lab cache {cache}. "
                    "Point RIGUP_LAB_STATE_DIR at a directory of its own."
                )
            started = time.monotonic()
            _rmtree(state)
        self.log(
            f"destroyed {cfg.name} ({state}) in {time.monotonic() - started:.1f} s; "
            f"template cache kept in {cfg.templates_dir}"
        )


# --------------------------------------------------------------------------------------------
# small utilities


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if proc.returncode != 0:
        raise LabError(
            f"{what} failed: `{shlex.join(argv)}` exited {proc.returncode}:\n"
            f"{(proc.stdout + proc.stderr).strip()[-2000:]}"
        )


def _chroot(root: Path, argv: list[str]) -> None:
    _run(["chroot", str(root), *argv], f"in {root}: {argv[0]}")


def _rmtree(path: Path, *, unmount: bool = False) -> None:
    """Delete a tree without ever descending into a file system mounted inside it.

    Args:
        unmount: first lazily unmount what is mounted below ``path`` (a killed debootstrap
            leaves /proc and /sys mounted in its target).

    Raises:
        LabError: something is still mounted below ``path``.
    """
    mounts = mounts_under(path)
    if mounts and unmount:
        for mount in mounts:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        mounts = mounts_under(path)
    if mounts:
        raise LabError(
            f"refusing to delete {path}: file systems are still mounted there "
            f"({', '.join(map(str, mounts))}). Unmount them (`umount -R PATH`) and run again."
        )
    shutil.rmtree(path)


def _write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def mounts_under(path: Path, mountinfo: str | None = None) -> list[Path]:
    """Mount points at or below ``path``, deepest first (from /proc/self/mountinfo by default)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    base = Path(os.path.realpath(path))
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        point = Path(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
        if point == base or base in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)
