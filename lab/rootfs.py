"""The lab machine's root file system: the debootstrapped template shared by machines (built
once per host, atomically, under a lock) and each machine's own copy with its settings (SSH key,
sshd port, hostname, machine-id, host keys, the host's CA certificates).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from lab.config import SSH_HOST, UBUNTU_SECURITY_MIRROR, LabConfig, LabError
from lab.host import chroot, rmtree, run, tail
from lab.keyring import ubuntu_keyring
from lab.render import (
    DRACUT_FOREIGN_KERNEL,
    NVIDIA_RELEASE_PIN,
    debootstrap_argv,
    debootstrap_failure_message,
    dracut_foreign_kernel_text,
    hosts_text,
    nvidia_release_pin_text,
    ssh_socket_dropin_text,
    sshd_dropin_text,
    ubuntu_sources_text,
)

#: receives one-line progress messages
Log = Callable[[str], None]

HOST_CA_DIR = Path("/usr/local/share/ca-certificates")

#: Units masked in the template: timers that would start apt behind the deploy's back (dpkg lock
#: races make tests flaky) and units that only fail or wait in a container.
TEMPLATE_MASKED_UNITS: tuple[str, ...] = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "apt-daily.service",
    "apt-daily-upgrade.service",
)


def ensure_template(cfg: LabConfig, log: Log) -> None:
    """Make sure the cached template of ``cfg`` exists: reuse it, or build it under a lock that
    machines sharing the cache take in turn."""
    template = cfg.template
    if template.is_dir():
        log(f"template cached (reused): {template}")
        return
    cfg.templates_dir.mkdir(parents=True, exist_ok=True)
    lock = cfg.templates_dir / f".{cfg.template_key}.lock"
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # another machine may be building the same template
        if template.is_dir():
            log(f"template cached (built meanwhile): {template}")
            return
        build_template(cfg, template, log)


def build_template(cfg: LabConfig, template: Path, log: Log) -> None:
    """Debootstrap ``template`` in a partial directory, prepare it, rename it into place.

    Raises:
        LabError: debootstrap failed (the message holds the tail of its logs; nothing is kept).
    """
    partial = template.with_name(f".{template.name}.partial")
    build_log = template.with_name(f"{template.name}.log")
    if partial.exists():  # an interrupted build: never reused
        log(f"removing interrupted template build {partial}")
        rmtree(partial, unmount=True)
    started = time.monotonic()
    log(
        f"building template {template.name} with debootstrap from {cfg.mirror} "
        f"(once per host, a few minutes; log: {build_log})"
    )
    suite = cfg.suite_info
    keyring = None
    if suite.distro == "ubuntu":
        keyring = ubuntu_keyring(cfg.cache_dir, cfg.mirror, suite.name, log)
    argv = debootstrap_argv(
        suite.name, partial, cfg.mirror, cfg.packages, script=suite.script, keyring=keyring
    )
    with open(build_log, "w") as out:
        rc = subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        ).returncode
    if rc != 0:
        detail = tail(build_log, 15)
        inner = tail(partial / "debootstrap" / "debootstrap.log", 15)
        if inner:
            detail += f"\n--- {partial}/debootstrap/debootstrap.log:\n{inner}"
        rmtree(partial, unmount=True)
        raise LabError(debootstrap_failure_message(detail, template, cfg.mirror))
    log(f"debootstrap done in {time.monotonic() - started:.1f} s; preparing template")
    prepare_template(partial)
    if suite.distro == "ubuntu":
        ubuntu_sources(partial, cfg.mirror, suite.name)
    os.rename(partial, template)  # atomic: a template dir is always complete
    log(f"template built in {time.monotonic() - started:.1f} s: {template}")


def prepare_template(root: Path) -> None:
    """Machine-neutral changes to a fresh debootstrap: no identity, no apt timers."""
    chroot(root, ["systemctl", "enable", "ssh.service"])
    chroot(root, ["systemctl", "mask", *TEMPLATE_MASKED_UNITS])
    # every machine gets its own host keys and machine-id (see configure)
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc" / "machine-id").write_text("")
    dbus_id = root / "var" / "lib" / "dbus" / "machine-id"
    if dbus_id.exists() and not dbus_id.is_symlink():
        dbus_id.unlink()
    for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()


def ubuntu_sources(root: Path, mirror: str, suite: str) -> None:
    """Replace debootstrap's one-line sources.list (``<suite> main``) with the deb822 sources of
    an installed Ubuntu: the release, -updates and -backports from ``mirror``, -security from
    security.ubuntu.com, components main, restricted (the NVIDIA driver), universe, multiverse."""
    (root / "etc" / "apt" / "sources.list").unlink(missing_ok=True)
    text = ubuntu_sources_text(mirror, UBUNTU_SECURITY_MIRROR, suite)
    (root / "etc" / "apt" / "sources.list.d" / "ubuntu.sources").write_text(text)


def ensure_rootfs(cfg: LabConfig, log: Log) -> None:
    """Copy the template to the machine's rootfs unless it has one (reflinked where possible)."""
    if cfg.rootfs.is_dir():
        log(f"rootfs exists (reused): {cfg.rootfs}")
        return
    started = time.monotonic()
    cfg.state_dir.mkdir(parents=True, exist_ok=True)
    partial = cfg.state_dir / "rootfs.partial"
    if partial.exists():
        rmtree(partial, unmount=True)
    run(["cp", "-a", "--reflink=auto", str(cfg.template), str(partial)], "copying template")
    os.rename(partial, cfg.rootfs)
    log(f"rootfs copied from template in {time.monotonic() - started:.1f} s")


def ensure_key(cfg: LabConfig, log: Log) -> None:
    """Generate the machine's client SSH key pair unless both halves exist."""
    key = cfg.ssh_key
    key.parent.mkdir(parents=True, exist_ok=True)
    key.parent.chmod(0o700)
    if key.exists() and key.with_suffix(".pub").exists():
        return
    for stale in (key, key.with_suffix(".pub")):
        stale.unlink(missing_ok=True)
    run(
        [
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"rigup-lab@{cfg.name}",
            "-f",
            str(key),
        ],
        "generating the SSH key",
    )
    key.chmod(0o600)
    log(f"generated SSH key {key}")


def configure(cfg: LabConfig, log: Log) -> None:
    """(Re)apply per-machine settings to the rootfs: CA certificates, root's authorized key,
    sshd port, hostname, machine-id, host keys."""
    root = cfg.rootfs
    started = time.monotonic()
    # CA certificates: the host may sit behind a TLS-intercepting proxy
    cas = [p for p in HOST_CA_DIR.rglob("*.crt")] if HOST_CA_DIR.is_dir() else []
    if cas:
        dest = root / HOST_CA_DIR.relative_to("/")
        shutil.copytree(HOST_CA_DIR, dest, dirs_exist_ok=True)
        chroot(root, ["update-ca-certificates"])
    # root's authorized key
    ssh_dir = root / "root" / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    ssh_dir.chmod(0o700)
    auth = ssh_dir / "authorized_keys"
    auth.write_text(cfg.ssh_key.with_suffix(".pub").read_text())
    auth.chmod(0o600)
    # sshd: port and address
    dropin = sshd_dropin(cfg)
    dropin.parent.mkdir(parents=True, exist_ok=True)
    listen = cfg.address or SSH_HOST
    dropin.write_text(sshd_dropin_text(cfg.ssh_port, listen))
    # a socket-activated sshd (Ubuntu's default) listens where ssh.socket says, not sshd_config
    socket_dropin = root / "etc" / "systemd" / "system" / "ssh.socket.d" / "rigup-lab.conf"
    socket_dropin.parent.mkdir(parents=True, exist_ok=True)
    socket_dropin.write_text(ssh_socket_dropin_text(cfg.ssh_port, listen))
    # Ubuntu's NVIDIA driver stack from the release pocket (lab/render.py says why)
    if cfg.suite_info.distro == "ubuntu":
        pin = root / NVIDIA_RELEASE_PIN.lstrip("/")
        pin.parent.mkdir(parents=True, exist_ok=True)
        pin.write_text(nvidia_release_pin_text(cfg.suite))
        dracut = root / DRACUT_FOREIGN_KERNEL.lstrip("/")
        dracut.parent.mkdir(parents=True, exist_ok=True)
        dracut.write_text(dracut_foreign_kernel_text())
    # identity
    (root / "etc" / "hostname").write_text(f"{cfg.name}\n")
    (root / "etc" / "hosts").write_text(hosts_text(cfg.name, cfg.extra_hosts))
    if cfg.netns:
        # no DNS server in a pair's namespace: an empty resolv.conf makes a lookup fail at once
        # (the resolver's default, 127.0.0.1:53, refuses) instead of waiting for a timeout
        resolv = root / "etc" / "resolv.conf"
        if resolv.is_symlink() or resolv.exists():
            resolv.unlink()
        resolv.write_text("# lab pair: no DNS; names are in /etc/hosts (lab/pairnet.py)\n")
    machine_id = root / "etc" / "machine-id"
    if not machine_id.exists() or len(machine_id.read_text().strip()) != 32:
        machine_id.write_text(uuid.uuid4().hex + "\n")
    if not (root / "etc" / "ssh" / "ssh_host_ed25519_key").exists():
        chroot(root, ["ssh-keygen", "-A"])
    log(
        f"configured {cfg.name} (CA certs: {len(cas)}, port {cfg.ssh_port}) in "
        f"{time.monotonic() - started:.1f} s"
    )


def sshd_dropin(cfg: LabConfig) -> Path:
    """The sshd drop-in in the machine's rootfs that sets its port (see :func:`sshd_dropin_text`)."""
    return cfg.rootfs / "etc" / "ssh" / "sshd_config.d" / "rigup-lab.conf"
