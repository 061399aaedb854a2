"""The lab machine: a booted Debian or Ubuntu systemd-nspawn container that rigup deploys and tests over SSH.

The container shares the host's network namespace, so its sshd listens on host
``127.0.0.1:<ssh_port>``; pyinfra and pytest-testinfra reach it exactly like a real rig, with a
generated ed25519 key and a known_hosts file for strict host key checking.

:class:`LabMachine` creates, boots, reaches, stops and destroys one machine; where it lives is a
:class:`lab.config.LabConfig`, its root file system is built by :mod:`lab.rootfs`, its command
lines and files come from :mod:`lab.render`, and :mod:`lab.host` finds its processes and ports.

Standard library only: this module runs before any rigup tooling is installed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from lab import cgroup, uvshare, uvwarm
from lab.config import SSH_HOST, LabConfig, LabError
from lab.host import (
    check_root,
    check_tools,
    is_nspawn_of,
    lab_machine_on_port,
    machine_lock_path,
    pid_alive,
    port_holder,
    port_in_use,
    port_taken_message,
    proc_children,
    proc_cmdline,
    rmtree,
    tail,
    write_atomic,
)
from lab.render import dropin_port, known_hosts_text, nspawn_argv, ssh_argv
from lab.rootfs import configure, ensure_key, ensure_rootfs, ensure_template, sshd_dropin


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
            if pid_alive(pid) and is_nspawn_of(proc_cmdline(pid), rootfs):
                return pid
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                pid = int(entry.name)
                if is_nspawn_of(proc_cmdline(pid), rootfs) and pid_alive(pid):
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

        Builds or reuses the cached template (debootstrap, minutes, once per host), meanwhile
        warms the lab's uv cache with the venvs' wheels (:mod:`lab.uvwarm`, once per set of
        locks), copies the template to the machine's rootfs if that is missing (seconds),
        reapplies the per-machine settings, seeds its uv cache, boots it, waits up to 60 s for SSH and up to 90 s for systemd to finish booting, and
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
                # a pair's machine: its host port is the pair's relay's (lab/pair.py)
                if not self.cfg.netns and port_in_use(self.cfg.ssh_port):
                    other = lab_machine_on_port(self.cfg.state_dir.parent, self.cfg.ssh_port)
                    holder = f"lab machine {other!r}" if other else port_holder(self.cfg.ssh_port)
                    raise LabError(port_taken_message(self.cfg, holder))
                # the venvs' wheels into the lab's uv cache while the template builds
                warming = (
                    uvwarm.Background(self.cfg, self.log).start() if self.cfg.uv_cache else None
                )
                ensure_template(self.cfg, self.log)
                ensure_rootfs(self.cfg, self.log)
                ensure_key(self.cfg, self.log)
                configure(self.cfg, self.log)
                if warming is not None:
                    warming.join()
                uvshare.seed_machine(self.cfg, self.log)
                self._start()
            else:
                running_port = dropin_port(
                    sshd_dropin(self.cfg).read_text() if sshd_dropin(self.cfg).exists() else ""
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

    @property
    def uv_cache_linked(self) -> bool:
        """True if the machine's uv cache is its own directory linked to the lab's
        (:func:`lab.uvshare.linked`), False if the lab's is bind-mounted (or none is shared)."""
        return uvshare.linked(self.cfg)

    def _start(self) -> None:
        cfg = self.cfg
        argv = nspawn_argv(cfg, bind_uv_cache=cfg.uv_cache and not self.uv_cache_linked)
        group = cgroup.machine_cgroup(cfg, cgroup.require_cgroup2())
        cgroup.prepare(group)
        with open(cfg.nspawn_log, "w") as out:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env={**os.environ, **cgroup.UNIFIED_ENV},
                preexec_fn=lambda: cgroup.enter(group),
            )
        cfg.pid_file.write_text(f"{self._proc.pid}\n")
        self.log(
            f"booting {cfg.name} (nspawn pid {self._proc.pid} in cgroup {group}, log "
            f"{cfg.nspawn_log})"
        )

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
        write_atomic(self.cfg.known_hosts, text)

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
        What the machine's uv downloaded then joins the lab's uv cache (:mod:`lab.uvshare`).

        Raises:
            LabError: not root, or the processes survived SIGKILL.
        """
        check_root()
        with self._lock():
            self._stop(timeout)
            uvshare.harvest_machine(self.cfg, self.log)

    def _stop(self, timeout: float) -> None:
        pid = self.nspawn_pid()
        if pid is None:
            self.log(f"{self.cfg.name} is not running")
            self.cfg.pid_file.unlink(missing_ok=True)
            self._remove_cgroup()
            return
        started = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not self._wait_exit(pid, timeout):
            self.log(f"{self.cfg.name} did not power off within {timeout:.0f} s; killing it")
            for child in proc_children(pid):  # the container's init: killing it ends the namespace
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
        self._remove_cgroup()
        # nspawn v252 leaves this empty dir behind when /run is not a tmpfs; tidy it
        with contextlib.suppress(OSError):
            os.rmdir(f"/run/systemd/nspawn/propagate/{self.cfg.name}")
        self.log(f"stopped {self.cfg.name} in {time.monotonic() - started:.1f} s")

    def _remove_cgroup(self) -> None:
        mount = cgroup.cgroup2_mount()
        if mount is not None:
            cgroup.remove(cgroup.machine_cgroup(self.cfg, mount))

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

        The template cache and the uv cache are kept (what the machine's uv downloaded joins the
        lab's cache first), so the next ``up`` takes seconds.

        Raises:
            LabError: not root, the state_dir is unsafe to delete (it contains the cache, or
                something is still mounted under it).
        """
        check_root()
        cfg = self.cfg
        with self._lock():
            self._stop(self.STOP_TIMEOUT)
            uvshare.harvest_machine(self.cfg, self.log)
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
            rmtree(state)
        self.log(
            f"destroyed {cfg.name} ({state}) in {time.monotonic() - started:.1f} s; "
            f"template cache kept in {cfg.templates_dir}"
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
