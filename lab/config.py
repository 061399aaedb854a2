"""Where one lab machine lives and what its template is made of: :class:`LabConfig`, read from
``RIGUP_LAB_*`` environment variables, and :class:`LabError`, the error every lab step raises.

Layout on the host (all paths configurable, see :class:`LabConfig`)::

    <cache_dir>/templates/<suite>-<hash>/   debootstrapped template rootfs, shared by machines
    <cache_dir>/uv/                          uv cache, shared with each machine's /var/cache/rigup/uv
                                             as hard links (lab.uvshare)
    <state_dir>/rootfs/                      the machine's own copy of the template
    <state_dir>/ssh/id_ed25519{,.pub}        client key; root's authorized_keys inside
    <state_dir>/ssh/known_hosts              the container's host keys, for [127.0.0.1]:<port>
    <state_dir>/nspawn.pid, nspawn.log       the running systemd-nspawn and its console output

Standard library only (as are lab.render, lab.host, lab.rootfs and lab.machine): the lab machine
is built before any rigup tooling is installed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

SUITE = "resolute"
DEFAULT_NAME = "rigup-lab"
DEFAULT_SSH_PORT = 2222
DEFAULT_MIRROR = "http://deb.debian.org/debian"
UBUNTU_MIRROR = "http://archive.ubuntu.com/ubuntu"
#: Where Ubuntu publishes its security updates (not mirrored on archive.ubuntu.com's mirrors).
UBUNTU_SECURITY_MIRROR = "http://security.ubuntu.com/ubuntu"


@dataclasses.dataclass(frozen=True)
class Suite:
    """A release the lab machine can run.

    Attributes:
        name: the archive's codename (debootstrap's SUITE argument).
        distro: ``debian`` or ``ubuntu``.
        release: what a user calls it ("Ubuntu 26.04").
        mirror: default archive (``RIGUP_LAB_MIRROR`` replaces it).
        script: debootstrap's suite script for it (None: the one named after the suite, or sid's
            where the host's debootstrap predates the suite).
        packages: added to :data:`TEMPLATE_PACKAGES` for this release.
    """

    name: str
    distro: str
    release: str
    mirror: str
    script: str | None = None
    packages: tuple[str, ...] = ()


#: Suites a lab machine can run: resolute (Ubuntu 26.04 LTS, the rig's own release, python3 3.14:
#: the default), trixie (Debian 13, python3 3.13) and forky (Debian testing, python3 3.14).
#: Ubuntu's codenames all build with debootstrap's ``gutsy`` script (debootstrap's own
#: scripts/resolute is a link to it). ubuntu-keyring holds the archive key apt checks with;
#: linux-generic is the kernel meta-package of an Ubuntu server install (the rig's), whose flavour
#: picks Canonical's prebuilt NVIDIA modules (roles/nvidia/kernel.py), and dracut its initramfs
#: generator (Ubuntu 26.04's default: the first of linux-image's Recommends, which debootstrap
#: leaves out). The lab never boots that kernel (a container runs the host's), but the NVIDIA
#: layer installs the driver for it and regenerates its initramfs.
SUITE_INFO: dict[str, Suite] = {
    "trixie": Suite("trixie", "debian", "Debian 13", DEFAULT_MIRROR),
    "forky": Suite("forky", "debian", "Debian testing (forky)", DEFAULT_MIRROR),
    "resolute": Suite(
        "resolute",
        "ubuntu",
        "Ubuntu 26.04",
        UBUNTU_MIRROR,
        "gutsy",
        ("ubuntu-keyring", "linux-generic", "dracut"),
    ),
}
SUITES = tuple(SUITE_INFO)
DEFAULT_CACHE_DIR = Path("/var/cache/rigup-lab")
DEFAULT_STATE_ROOT = Path("/var/lib/rigup-lab")
SSH_HOST = "127.0.0.1"
#: where the host's ``<cache_dir>/uv`` appears inside the container
UV_CACHE_MOUNT = "/var/cache/rigup/uv"

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

#: Bump when the template recipe changes (not only the package list): a new hash, a new template.
TEMPLATE_RECIPE = "1"

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class LabError(Exception):
    """A lab operation failed for a reason the user can act on; the message says how."""


@dataclasses.dataclass(frozen=True)
class LabConfig:
    """Where and how one lab machine lives. Build it with :meth:`from_env`.

    Attributes:
        name: machine name, also its hostname (``RIGUP_LAB_NAME``).
        ssh_port: TCP port on 127.0.0.1 where the container's sshd listens (``RIGUP_LAB_SSH_PORT``).
        state_dir: the machine's own directory: rootfs, keys, pid file, log
            (``RIGUP_LAB_STATE_DIR``).
        cache_dir: shared cache of templates and the uv cache (``RIGUP_LAB_CACHE_DIR``).
        suite: the machine's release (``RIGUP_LAB_SUITE``: one of :data:`SUITES`, resolute by
            default).
        mirror: the suite's archive for debootstrap and apt (``RIGUP_LAB_MIRROR``; default: the
            suite's :attr:`Suite.mirror`).
        uv_cache: share ``<cache_dir>/uv`` with the machine's ``/var/cache/rigup/uv``
            (``RIGUP_LAB_UV_CACHE``): hard links in and out (:mod:`lab.uvshare`), or a bind mount
            where the state_dir is on another file system.
        netns: "" (the default): the machine shares the controller's network and its sshd listens
            on 127.0.0.1:<ssh_port>. Otherwise the network namespace (``/run/netns/<netns>``) it
            boots in, made by :mod:`lab.pair`; its sshd listens on :attr:`address`, and the
            controller's 127.0.0.1:<ssh_port> reaches it through the pair's relay.
        address: the machine's address in ``netns`` (sshd's ListenAddress there).
        extra_hosts: lines added to the machine's /etc/hosts (the pair's relayed archives).
    """

    name: str = DEFAULT_NAME
    ssh_port: int = DEFAULT_SSH_PORT
    state_dir: Path = DEFAULT_STATE_ROOT / DEFAULT_NAME
    cache_dir: Path = DEFAULT_CACHE_DIR
    suite: str = SUITE
    mirror: str = DEFAULT_MIRROR
    uv_cache: bool = True
    netns: str = ""
    address: str = ""
    extra_hosts: str = ""

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
                f"RIGUP_LAB_UV_CACHE={uv_text!r} is not a boolean: use 1 to share the lab's uv "
                f"cache with the machine's {UV_CACHE_MOUNT} (the default) or 0 to leave it out."
            )
        suite = env.get("RIGUP_LAB_SUITE", "") or SUITE
        if suite not in SUITES:
            raise LabError(
                f"RIGUP_LAB_SUITE={suite!r} is not a suite the lab builds: use one of "
                f"{', '.join(SUITES)} (resolute: Ubuntu 26.04, the rig's release; forky: Debian "
                "testing; both with python3 3.14)."
            )
        state = env.get("RIGUP_LAB_STATE_DIR", "")
        cache = env.get("RIGUP_LAB_CACHE_DIR", "")
        return cls(
            name=name,
            ssh_port=port,
            state_dir=Path(state).absolute() if state else DEFAULT_STATE_ROOT / name,
            cache_dir=Path(cache).absolute() if cache else DEFAULT_CACHE_DIR,
            suite=suite,
            mirror=env.get("RIGUP_LAB_MIRROR", "") or SUITE_INFO[suite].mirror,
            uv_cache=uv_cache,
        )

    @property
    def suite_info(self) -> Suite:
        """What :attr:`suite` is: distro, release name, debootstrap script, extra packages."""
        return SUITE_INFO[self.suite]

    @property
    def packages(self) -> tuple[str, ...]:
        """Packages of the template: :data:`TEMPLATE_PACKAGES` and the suite's own."""
        return (*TEMPLATE_PACKAGES, *self.suite_info.packages)

    @property
    def debian_mirror(self) -> str:
        """A Debian archive (the lab's CPython 3.11 comes from Debian 12): :attr:`mirror` on a
        Debian suite, deb.debian.org on Ubuntu."""
        return self.mirror if self.suite_info.distro == "debian" else DEFAULT_MIRROR

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
        return template_key(self.suite, self.packages)

    @property
    def template(self) -> Path:
        """The cached template rootfs this machine is copied from."""
        return self.templates_dir / self.template_key

    @property
    def uv_cache_dir(self) -> Path:
        """The lab's shared uv cache on the host (``<cache_dir>/uv``)."""
        return self.cache_dir / "uv"

    @property
    def machine_uv_cache_dir(self) -> Path:
        """The machine's own uv cache, seen from the host (in its rootfs)."""
        return self.rootfs / UV_CACHE_MOUNT.lstrip("/")


def template_key(suite: str, packages: Sequence[str]) -> str:
    """Name of the template for ``suite`` and ``packages``: ``<suite>-<12 hex digits>``.

    The hash covers the suite, the sorted package list and :data:`TEMPLATE_RECIPE`, so changing
    any of them builds a fresh template instead of reusing a stale one.
    """
    material = "\n".join([f"recipe={TEMPLATE_RECIPE}", f"suite={suite}", *sorted(set(packages))])
    return f"{suite}-{hashlib.sha256(material.encode()).hexdigest()[:12]}"
