"""What the lab machine needs for the VoxCPM2 role, in place of what it cannot reach.

1. A CPython 3.11 build for ``uv python install``. The rig gets python-build-standalone from
   GitHub (uv's default); the lab reaches no GitHub, so it gets an archive in the same layout
   (``python/bin/python3.11``, ``python/lib/python3.11``) made from Debian 12's own CPython 3.11.2
   packages (python3.11-minimal, libpython3.11-minimal, libpython3.11-stdlib, fetched from the
   lab's Debian mirror, or deb.debian.org on an Ubuntu lab, with a throw-away apt configuration,
   verified by apt against Debian's keys), plus a uv download list naming it with its sha256 (``UV_PYTHON_DOWNLOADS_JSON_URL``).
   The role then runs the same ``uv python install`` as on the rig. Ubuntu 26.04 (3.14) and Debian 13 (3.13), the lab's
   suites, ship none inside voxcpm 2.0.3's range.
2. A "local copy" of the VoxCPM2 checkpoint holding only a config.json with
   ``"architecture": "voxcpm2"`` (the real weights come from Hugging Face, which the lab cannot
   reach). The service there runs with the test double synthesizer
   (``voxcpm_test_double_synthesizer``), which loads no weights.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

from lab.machine import LabMachine
from lab.step import StepResult

#: Where the lab keeps its CPython builds for uv (inventory/lab.py points the role here).
PYTHON_MIRROR = "/srv/mirror/python"
PYTHON_DOWNLOADS_JSON = f"{PYTHON_MIRROR}/downloads.json"
#: Debian's archive keyring: a Debian lab's own (debian-archive-keyring is required there), and
#: the controller's (bin/lab-host installs it) pushed to :data:`PUSHED_DEBIAN_KEYRING` on Ubuntu.
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
PUSHED_DEBIAN_KEYRING = "/var/lib/rigup-lab/debian-archive-keyring.gpg"
#: The CPython of Debian 12 (bookworm): 3.11.2 for the whole life of that release.
LAB_PYTHON_VERSION = "3.11.2"
#: The lab's local copy of VoxCPM2: the model role's local source finds it (<model_local_dirs>/VoxCPM2).
VOXCPM_MIRROR = "/srv/mirror/VoxCPM2"


def lab_voxcpm_port(cfg) -> int:
    """The speech server's port in the lab machine of ``cfg`` (a :class:`lab.config.LabConfig`):
    labs share the controller's network, so it follows the SSH port (10000 + ssh_port: 12222
    for the default lab, whose SSH port is 2222)."""
    return 10000 + cfg.ssh_port


#: config.json of the stand-in checkpoint: what voxcpm 2.0.3 (core.py) and rigup's server read.
STAND_IN_CONFIG = {
    "architecture": "voxcpm2",
    "_rigup_lab": "stand-in: no VoxCPM2 weights; the lab serves the test double synthesizer",
}


def python_mirror_script(
    debian_mirror: str,
    version: str = LAB_PYTHON_VERSION,
    keyring: str = DEBIAN_KEYRING,
) -> str:
    """Shell script (run as root in the lab) that builds the CPython archive and uv's download
    list under :data:`PYTHON_MIRROR`. Idempotent: does nothing when the list exists.

    Args:
        debian_mirror: a Debian archive holding bookworm.
        version: the CPython version Debian 12 ships (checked).
        keyring: the lab's path of Debian's archive keyring apt checks bookworm with (an Ubuntu
            lab has none of its own: :func:`seed` pushes the controller's there).
    """
    archive = f"cpython-{version}-debian12-x86_64-linux-gnu.tar.gz"
    sources = f"deb [signed-by={keyring}] {debian_mirror} bookworm main"
    write_json = (
        "import hashlib, json, sys\n"
        "path, url, version = sys.argv[1:4]\n"
        "major, minor, patch = (int(x) for x in version.split('.'))\n"
        "digest = hashlib.sha256(open(path, 'rb').read()).hexdigest()\n"
        "key = f'cpython-{version}-linux-x86_64-gnu'\n"
        "entry = {'name': 'cpython', 'arch': {'family': 'x86_64', 'variant': None}, 'os': 'linux',"
        " 'libc': 'gnu', 'major': major, 'minor': minor, 'patch': patch, 'prerelease': '',"
        " 'url': url, 'sha256': digest, 'variant': None}\n"
        "json.dump({key: entry}, sys.stdout, indent=2)\n"
    )
    return f"""set -eu
test -f {PYTHON_DOWNLOADS_JSON} && exit 0
work=$(mktemp -d /var/tmp/rigup-python-mirror.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root" \\
    "$work/stage/python/bin" "$work/stage/python/lib"
echo {shlex.quote(sources)} > "$work/sources.list"
apt_get() {{
    apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \\
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" \\
        -o APT::Sandbox::User=root "$@"
}}
apt_get update >/dev/null
cd "$work/debs"
apt_get download python3.11-minimal libpython3.11-minimal libpython3.11-stdlib >/dev/null
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done
cp -a "$work/root/usr/bin/python3.11" "$work/stage/python/bin/"
cp -a "$work/root/usr/lib/python3.11" "$work/stage/python/lib/"
# absolute links into /etc (Debian's sitecustomize.py): uv refuses them in an archive
find "$work/stage" -type l -lname '/*' -delete
ln -s python3.11 "$work/stage/python/bin/python3"
ln -s python3.11 "$work/stage/python/bin/python"
got=$("$work/stage/python/bin/python3.11" -c 'import platform; print(platform.python_version())')
test "$got" = {shlex.quote(version)} || {{ echo "Debian 12 ships CPython $got, not {version}" >&2; exit 1; }}
mkdir -p {PYTHON_MIRROR}
tar -C "$work/stage" -czf {PYTHON_MIRROR}/{archive} python
python3 -c {shlex.quote(write_json)} {PYTHON_MIRROR}/{archive} file://{PYTHON_MIRROR}/{archive} \\
    {shlex.quote(version)} > {PYTHON_DOWNLOADS_JSON}.tmp
mv {PYTHON_DOWNLOADS_JSON}.tmp {PYTHON_DOWNLOADS_JSON}
"""


def seed(machine: LabMachine) -> StepResult:
    """Build the CPython archive + download list and the VoxCPM2 stand-in in the machine (the
    step "seed voxcpm")."""
    started = time.monotonic()
    cfg = machine.cfg
    keyring = DEBIAN_KEYRING
    if cfg.suite_info.distro != "debian":
        machine.push(Path(DEBIAN_KEYRING), PUSHED_DEBIAN_KEYRING)
        keyring = PUSHED_DEBIAN_KEYRING
    machine.ssh(python_mirror_script(cfg.debian_mirror, keyring=keyring), timeout=600)
    config = shlex.quote(json.dumps(STAND_IN_CONFIG, indent=2))
    machine.ssh(
        f"mkdir -p {VOXCPM_MIRROR} && test -f {VOXCPM_MIRROR}/config.json || "
        f"printf '%s\\n' {config} > {VOXCPM_MIRROR}/config.json"
    )
    size = machine.ssh(f"stat -c %s {PYTHON_MIRROR}/*.tar.gz").stdout.split()
    return StepResult(
        "seed voxcpm",
        0,
        time.monotonic() - started,
        {"bytes": int(size[0]) if size else 0},
    )
