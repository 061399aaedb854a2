"""The lab machine's command lines and file contents: pure functions of a :class:`LabConfig`
(or of plain values), with no side effects.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from lab.config import SSH_HOST, UV_CACHE_MOUNT, LabConfig, LabError

#: Where debootstrap keeps its suite scripts; a suite newer than the host's debootstrap (forky
#: on a Debian 12 controller) has none and is built with the one of sid (testing and unstable).
DEBOOTSTRAP_SCRIPTS = Path("/usr/share/debootstrap/scripts")


def debootstrap_argv(
    suite: str,
    target: Path,
    mirror: str,
    packages: Sequence[str],
    scripts: Path = DEBOOTSTRAP_SCRIPTS,
    *,
    script: str | None = None,
    keyring: Path | None = None,
) -> list[str]:
    """The debootstrap command line that builds a minimal template rootfs in ``target``.

    Args:
        script: the suite script to use (``gutsy`` for every Ubuntu release); None: the suite's
            own, or sid's when the host's debootstrap has none for it.
        keyring: the keyring debootstrap checks the archive's InRelease with (gpgv); None: its
            default (Debian's archive keyring).
    """
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}"]
    if keyring is not None:
        argv.append(f"--keyring={keyring}")
    argv += [suite, str(target), mirror]
    if script is not None:
        argv.append(str(scripts / script))
    elif not (scripts / suite).exists() and (scripts / "sid").exists():
        argv.append(str(scripts / "sid"))
    return argv


def nspawn_argv(cfg: LabConfig, *, bind_uv_cache: bool = False) -> list[str]:
    """The systemd-nspawn command line that boots the machine.

    ``bind_uv_cache``: bind-mount the lab's uv cache at /var/cache/rigup/uv, for a state_dir on
    another file system than the cache (otherwise the machine's cache is a directory of its own
    root file system, linked to the lab's: :mod:`lab.uvshare`).

    ``--register=no --keep-unit`` because the host need not run systemd (no machined, no scope
    units); it is started in the machine's own cgroup with :data:`lab.cgroup.UNIFIED_ENV` (see
    :mod:`lab.cgroup`). No ``--network-*`` option, so the container shares the host network
    namespace and its sshd is reachable on host ``127.0.0.1:<ssh_port>`` (and nowhere else: see
    :func:`sshd_dropin_text` and :func:`ssh_socket_dropin_text`).
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
    if cfg.uv_cache and bind_uv_cache:
        argv.append(f"--bind={cfg.uv_cache_dir}:{UV_CACHE_MOUNT}")
    if cfg.netns:
        # a lab pair's machine: its own namespace (lab/pair.py), no DNS server in it (the names
        # it needs are in its /etc/hosts: lab/rootfs.py). CAP_NET_ADMIN for the rig's firewall
        # (nft: "cache initialization failed: Operation not permitted" without it); nspawn keeps
        # it for --private-network alone, and it reaches this namespace only
        argv += [
            f"--network-namespace-path=/run/netns/{cfg.netns}",
            "--resolv-conf=off",
            "--capability=CAP_NET_ADMIN",
        ]
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


def sshd_dropin_text(port: int, address: str = SSH_HOST) -> str:
    """Content of ``/etc/ssh/sshd_config.d/rigup-lab.conf``: listen on ``address``:port (127.0.0.1
    by default; a lab pair's machine: its address on the pair's link), keys only."""
    return (
        "# written by rigup's lab machine (lab/rootfs.py); rewritten on every `up`\n"
        f"Port {port}\n"
        f"ListenAddress {address}\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\n"
    )


#: Where an Ubuntu lab machine's apt preference for the NVIDIA driver lives.
NVIDIA_RELEASE_PIN = "/etc/apt/preferences.d/rigup-lab-nvidia-release"
#: The packages of Ubuntu's NVIDIA driver stack (nvidia-graphics-drivers-580,
#: linux-restricted-modules, linux-restricted-signatures): pinned together, because the prebuilt
#: modules of a kernel accept only the driver they were built with
#: (linux-modules-nvidia-580-open-7.0.0-14-generic: nvidia-kernel-common-580 (<= 580.142-1)).
NVIDIA_STACK = (
    "nvidia-*",
    "libnvidia-*",
    "linux-modules-nvidia-*",
    "linux-objects-nvidia-*",
    "linux-signatures-nvidia-*",
    "xserver-xorg-video-nvidia-*",
)


def nvidia_release_pin_text(suite: str) -> str:
    """Content of :data:`NVIDIA_RELEASE_PIN`: the NVIDIA driver stack from the release pocket
    (``a=<suite>``), matching the release's kernel the lab's template installs. The package proxy
    this lab was built behind answers 404 for resolute-updates' prebuilt modules
    (pool/restricted/l/linux-restricted-signatures/linux-modules-nvidia-580-open-7.0.0-44-generic_
    7.0.0-44.44_amd64.deb and its meta-package, 2026-12-02) while serving the rest of -updates;
    the release's are served. The rig's operation (apt install nvidia-driver-580-open
    linux-modules-nvidia-580-open-generic) is unchanged; apt picks the release's versions."""
    return (
        "# written by rigup's lab machine (lab/rootfs.py); rewritten on every `up`.\n"
        "# The NVIDIA driver stack from the release pocket: lab/render.py says why.\n"
        f"Package: {' '.join(NVIDIA_STACK)}\n"
        f"Pin: release a={suite}\n"
        "Pin-Priority: 995\n"
    )


#: Where an Ubuntu lab machine's dracut configuration for its foreign running kernel lives.
DRACUT_FOREIGN_KERNEL = "/etc/dracut.conf.d/90-rigup-lab-foreign-kernel.conf"


def dracut_foreign_kernel_text() -> str:
    """Content of :data:`DRACUT_FOREIGN_KERNEL`: an initramfs asked for a kernel whose modules
    are not in the machine is built without kernel modules (dracut's ``no_kernel``) instead of
    failing. A container runs its host's kernel (``uname -r``), never installed in it, and
    nvidia-kernel-common-580's postinst runs ``update-initramfs -u -k $(uname -r)`` when the
    newest installed kernel is another ("This can fail when dealing with a chroot see LP:
    #556653"): dracut stopped with "Cannot find module directory" and the driver's packages
    were left unconfigured. dracut sources this file with ``$kernel`` set (dracut.sh); the
    initramfs of an installed kernel is built as on a rig."""
    return (
        "# written by rigup's lab machine (lab/rootfs.py); rewritten on every `up`.\n"
        "# The running kernel of a container is its host's, with no modules here: lab/render.py.\n"
        '[[ -d "${dracutsysrootdir-}/lib/modules/$kernel" ]] || no_kernel=yes\n'
    )


def ssh_socket_dropin_text(port: int, address: str = SSH_HOST) -> str:
    """Content of ``/etc/systemd/system/ssh.socket.d/rigup-lab.conf``: Ubuntu starts sshd from
    ``ssh.socket`` (0.0.0.0:22 and [::]:22 by default, the host's port 22 in a lab sharing the host
    network); the empty ``ListenStream=`` drops those, and any a generator derived, so the socket
    listens on ``address``:port alone (127.0.0.1 by default)."""
    return (
        "# written by rigup's lab machine (lab/rootfs.py); rewritten on every `up`\n"
        "[Socket]\n"
        "ListenStream=\n"
        f"ListenStream={address}:{port}\n"
    )


def ubuntu_sources_text(mirror: str, security: str, suite: str) -> str:
    """``/etc/apt/sources.list.d/ubuntu.sources`` of an Ubuntu ``suite`` install (deb822), signed
    by the archive keyring that ubuntu-keyring installs."""
    stanza = (
        "Types: deb\n"
        "URIs: {uri}\n"
        "Suites: {suites}\n"
        "Components: main restricted universe multiverse\n"
        "Signed-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
    )
    return (
        "# written by rigup's lab machine (lab/rootfs.py), as an Ubuntu install writes it\n"
        + stanza.format(uri=mirror, suites=f"{suite} {suite}-updates {suite}-backports")
        + "\n"
        + stanza.format(uri=security, suites=f"{suite}-security")
    )


def dropin_port(text: str) -> int | None:
    """The ``Port`` set in an sshd drop-in's text (None if there is none)."""
    match = re.search(r"^\s*Port\s+(\d+)\s*$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def hosts_text(name: str, extra: str = "") -> str:
    """Content of the container's ``/etc/hosts``: its hostname resolves (sudo wants that), then
    ``extra`` lines (a lab pair's: its relayed archives and rigs, lab/pairnet.py)."""
    return (
        "127.0.0.1\tlocalhost\n"
        f"127.0.1.1\t{name}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\tip6-allnodes\n"
        "ff02::2\tip6-allrouters\n"
    ) + extra


def debootstrap_failure_message(log_tail: str, target: Path, mirror: str) -> str:
    """The error text for a failed debootstrap, with the tail of its logs."""
    return (
        f"debootstrap failed building the lab template in {target} from {mirror}; nothing was "
        "kept, the next `up` starts over. Check the network and the mirror (RIGUP_LAB_MIRROR). "
        f"Log tail:\n{log_tail}"
    )
