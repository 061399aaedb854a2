"""Ubuntu's archive key for debootstrap, on a controller that has no Ubuntu keyring (Debian).

The key is taken from the archive's own ``ubuntu-keyring`` package and trusted only because its
fingerprint equals :data:`UBUNTU_ARCHIVE_KEY_2018`, pinned here. The chain, all before anything
is cached:

1. ``dists/<suite>/InRelease``, ``main/binary-amd64/Packages.xz`` and the ``ubuntu-keyring`` .deb
   named there are downloaded;
2. the pinned key is exported from the package's ``ubuntu-archive-keyring.gpg`` (gpg, in a
   throw-away home) and must be exactly that one key;
3. ``gpgv`` checks InRelease with it (a VALIDSIG by the pinned key), and only the signed text is
   read: Packages.xz's and then the .deb's SHA256 must match what it says.

The result, ``<cache_dir>/keyrings/ubuntu-archive-<fingerprint>.gpg``, is given to debootstrap
(``--keyring``), which checks InRelease with gpgv again for every template it builds.

Standard library only (plus the host's gpg, gpgv and dpkg-deb).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import re
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

from lab.config import LabError
from lab.host import find_tool

#: "Ubuntu Archive Automatic Signing Key (2018) <ftpmaster@ubuntu.com>", the key that signs the
#: releases since 18.10, 26.04 (resolute) included. Published at
#: https://wiki.ubuntu.com/SecurityTeam/FAQ#GPG_Keys_used_by_Ubuntu and shipped in the
#: ubuntu-keyring source package (https://launchpad.net/ubuntu/+source/ubuntu-keyring,
#: keyrings/ubuntu-archive-keyring.gpg); gpgv reported "Good signature ... (2018)" with it on
#: resolute's InRelease of 2026-04-23.
UBUNTU_ARCHIVE_KEY_2018 = "F6ECB3762474EDA9D21B7022871920D1991BC93C"
KEYRING_PACKAGE = "ubuntu-keyring"
#: The keyring file inside the package.
PACKAGE_KEYRING = "usr/share/keyrings/ubuntu-archive-keyring.gpg"
PACKAGES_INDEX = "main/binary-amd64/Packages.xz"

Fetch = Callable[[str], bytes]


def fetch(url: str, timeout: float = 60) -> bytes:
    """The body of ``url`` (http/https; the proxy variables of the environment apply).

    Raises:
        LabError: the request failed (the message names the URL).
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.read()
    except OSError as exc:
        raise LabError(f"cannot download {url}: {exc}") from exc


def release_sha256(release_text: str, path: str) -> tuple[str, int]:
    """``(sha256, size)`` of ``path`` (e.g. ``main/binary-amd64/Packages.xz``) from a Release
    file's SHA256 section.

    Raises:
        LabError: the Release has no SHA256 entry for ``path``.
    """
    match = re.search(r"^SHA256:\n((?:[ \t].*\n?)+)", release_text, re.MULTILINE)
    for line in match.group(1).splitlines() if match else []:
        fields = line.split()
        if len(fields) == 3 and fields[2] == path:
            return fields[0].lower(), int(fields[1])
    raise LabError(f"the archive's InRelease lists no SHA256 for {path}")


def package_stanza(packages_text: str, name: str) -> dict[str, str]:
    """The fields of package ``name``'s stanza in a Packages index (the first one).

    Raises:
        LabError: no stanza for ``name``.
    """
    for stanza in packages_text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z0-9-]+):[ \t]*(.*)$", stanza, re.MULTILINE))
        if fields.get("Package") == name:
            return fields
    raise LabError(f"the archive's Packages index has no {name}")


def gpg_fingerprints(colons: str) -> list[str]:
    """Primary-key fingerprints in ``gpg --with-colons`` output (the ``fpr`` after each ``pub``)."""
    found: list[str] = []
    expect = False
    for line in colons.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            expect = True
        elif fields[0] == "fpr" and expect and len(fields) > 9:
            found.append(fields[9].upper())
            expect = False
    return found


def validsig_fingerprints(status: str) -> list[str]:
    """Primary-key fingerprints of the good signatures in gpgv ``--status-fd`` output
    (``[GNUPG:] VALIDSIG <sig-key-fpr> ... <primary-key-fpr>``, see gnupg doc/DETAILS)."""
    found = []
    for line in status.splitlines():
        fields = line.split()
        if fields[:2] == ["[GNUPG:]", "VALIDSIG"] and len(fields) >= 3:
            found.append(fields[-1].upper() if len(fields) >= 12 else fields[2].upper())
    return found


def _gpg(home: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--no-tty", "--quiet", *args],
        input=stdin,
        capture_output=True,
    )
    if proc.returncode != 0:
        raise LabError(f"gpg {args[0]} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def export_pinned_key(keyring: bytes, fingerprint: str) -> bytes:
    """The key ``fingerprint`` alone, exported from ``keyring`` (binary OpenPGP keys).

    Raises:
        LabError: ``keyring`` does not hold that key, or the export holds anything else.
    """
    with tempfile.TemporaryDirectory(prefix="rigup-lab-gpg-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        _gpg(home, "--import", stdin=keyring)
        listed = _gpg(home, "--with-colons", "--fingerprint", "--list-keys").decode()
        if fingerprint not in gpg_fingerprints(listed):
            raise LabError(
                f"the package's keyring does not hold the pinned Ubuntu archive key {fingerprint} "
                f"(it holds {', '.join(gpg_fingerprints(listed)) or 'no key'}): refusing it"
            )
        exported = _gpg(home, "--export", fingerprint)
    with tempfile.TemporaryDirectory(prefix="rigup-lab-gpg-") as tmp:
        home = Path(tmp)
        home.chmod(0o700)
        shown = _gpg(home, "--with-colons", "--show-keys", stdin=exported).decode()
    if gpg_fingerprints(shown) != [fingerprint]:
        raise LabError(f"exporting {fingerprint} gave keys {gpg_fingerprints(shown)}: refusing it")
    return exported


def verify_inrelease(keyring: Path, inrelease: bytes, fingerprint: str) -> str:
    """The signed text of ``inrelease`` after gpgv checked it with ``keyring``.

    Raises:
        LabError: the signature is bad, or not made by ``fingerprint``.
    """
    with tempfile.TemporaryDirectory(prefix="rigup-lab-gpgv-") as tmp:
        signed = Path(tmp) / "InRelease"
        signed.write_bytes(inrelease)
        out = Path(tmp) / "Release"
        proc = subprocess.run(
            [
                "gpgv",
                "--status-fd",
                "1",
                "--keyring",
                str(keyring),
                "--output",
                str(out),
                str(signed),
            ],
            capture_output=True,
            text=True,
        )
        good = validsig_fingerprints(proc.stdout)
        if proc.returncode != 0 or fingerprint not in good:
            raise LabError(
                f"InRelease is not signed by the pinned Ubuntu archive key {fingerprint} "
                f"(gpgv exited {proc.returncode}; good signatures by {good or 'none'}): "
                f"{proc.stderr.strip()[-500:]}"
            )
        return out.read_text()


def _extract_keyring(deb: bytes) -> bytes:
    with tempfile.TemporaryDirectory(prefix="rigup-lab-deb-") as tmp:
        path = Path(tmp) / "keyring.deb"
        path.write_bytes(deb)
        root = Path(tmp) / "root"
        proc = subprocess.run(["dpkg-deb", "-x", str(path), str(root)], capture_output=True)
        keyring = root / PACKAGE_KEYRING
        if proc.returncode != 0 or not keyring.is_file():
            raise LabError(
                f"{KEYRING_PACKAGE}'s .deb holds no {PACKAGE_KEYRING}: "
                f"{proc.stderr.decode(errors='replace').strip()}"
            )
        return keyring.read_bytes()


#: The host tools the chain runs, and the packages that hold them (Debian and Ubuntu).
TOOLS = {"gpg": "gpg", "gpgv": "gpgv", "dpkg-deb": "dpkg"}


def check_tools(which: Callable[[str], str | None] = find_tool) -> None:
    """Check the host tools :func:`ubuntu_keyring` runs.

    Raises:
        LabError: any of gpg, gpgv, dpkg-deb is missing (all named, with the packages to install).
    """
    missing = [tool for tool in TOOLS if not which(tool)]
    if missing:
        packages = " ".join(sorted({TOOLS[t] for t in missing}))
        raise LabError(
            f"{', '.join(missing)} not found: an Ubuntu lab machine's archive key is checked with "
            f"them. Install them with `apt-get install {packages}` (bin/lab-host does) and run again."
        )


def ubuntu_keyring(
    cache_dir: Path,
    mirror: str,
    suite: str,
    log: Callable[[str], None],
    fingerprint: str = UBUNTU_ARCHIVE_KEY_2018,
    get: Fetch = fetch,
) -> Path:
    """The verified keyring holding only ``fingerprint``, for debootstrap of ``suite``.

    Reused from ``<cache_dir>/keyrings/`` when present; otherwise built from ``mirror``'s
    ``ubuntu-keyring`` package and the chain of the module docstring, then written atomically.

    Raises:
        LabError: gpg, gpgv or dpkg-deb missing, a download failed, or any link of the chain did
            not verify (nothing cached).
    """
    dest = cache_dir / "keyrings" / f"ubuntu-archive-{fingerprint}.gpg"
    if dest.is_file():
        return dest
    check_tools()
    base = mirror.rstrip("/")
    inrelease = get(f"{base}/dists/{suite}/InRelease")
    packages_xz = get(f"{base}/dists/{suite}/{PACKAGES_INDEX}")
    try:
        packages = lzma.decompress(packages_xz).decode()
    except lzma.LZMAError as exc:
        raise LabError(f"{base}/dists/{suite}/{PACKAGES_INDEX} is not an xz file: {exc}") from exc
    stanza = package_stanza(packages, KEYRING_PACKAGE)
    deb = get(f"{base}/{stanza['Filename']}")
    key = export_pinned_key(_extract_keyring(deb), fingerprint)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    partial.write_bytes(key)
    try:
        release = verify_inrelease(partial, inrelease, fingerprint)
        want, size = release_sha256(release, PACKAGES_INDEX)
        got = hashlib.sha256(packages_xz).hexdigest()
        if (got, len(packages_xz)) != (want, size):
            raise LabError(
                f"{PACKAGES_INDEX} of {suite} does not match its signed InRelease "
                f"(sha256 {got}, {len(packages_xz)} bytes; signed: {want}, {size} bytes)"
            )
        got = hashlib.sha256(deb).hexdigest()
        if got != stanza.get("SHA256", "").lower():
            raise LabError(
                f"{stanza['Filename']} does not match the signed Packages index "
                f"(sha256 {got}; signed: {stanza.get('SHA256')})"
            )
    except LabError:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)
    log(
        f"Ubuntu archive key {fingerprint} taken from {stanza['Filename']} and verified "
        f"(InRelease of {suite} good): {dest}"
    )
    return dest
