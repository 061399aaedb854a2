"""Unit tests of the lab's suites (Debian and Ubuntu), Ubuntu's pinned archive key and each
machine's own cgroup: no root, no containers, no network (gpg and dpkg-deb run for real)."""

from __future__ import annotations

import fnmatch
import hashlib
import lzma
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# lab/ is a top-level package of the repository, not an installed distribution
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lab import cgroup, config, keyring, render  # noqa: E402
from lab.config import TEMPLATE_PACKAGES, LabConfig, LabError  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lab"
#: ubuntu-keyring 2023.11.28.1build1's usr/share/keyrings/ubuntu-archive-keyring.gpg (resolute)
UBUNTU_KEYRING = FIXTURES / "ubuntu-archive-keyring.gpg"
#: the cgroup mounts of the lab's controller: Debian 12, no systemd as PID 1, hybrid cgroups
HYBRID_MOUNTINFO = FIXTURES / "mountinfo-hybrid.txt"
UNIFIED_MOUNTINFO = (
    "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"
)
V1_MOUNTINFO = "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"

needs_gpg = pytest.mark.skipif(
    not (shutil.which("gpg") and shutil.which("gpgv") and shutil.which("dpkg-deb")),
    reason="gpg, gpgv and dpkg-deb (the lab host's tools) are not installed",
)


# -- suites ------------------------------------------------------------------------------------


def test_resolute_is_ubuntu_26_04_from_ubuntus_archive():
    cfg = LabConfig.from_env({"RIGUP_LAB_SUITE": "resolute"})
    assert cfg.suite_info.distro == "ubuntu" and cfg.suite_info.release == "Ubuntu 26.04"
    assert cfg.mirror == "http://archive.ubuntu.com/ubuntu"
    assert cfg.template_key.startswith("resolute-")
    # an Ubuntu server's kernel and its initramfs generator: the NVIDIA layer installs the driver
    # for that kernel's flavour and regenerates its initramfs
    assert cfg.packages == (*TEMPLATE_PACKAGES, "ubuntu-keyring", "linux-generic", "dracut")
    # the CPython 3.11 for VoxCPM2 still comes from Debian 12
    assert cfg.debian_mirror == "http://deb.debian.org/debian"


def test_a_mirror_replaces_the_suites_own():
    cfg = LabConfig.from_env({"RIGUP_LAB_SUITE": "resolute", "RIGUP_LAB_MIRROR": "http://m/u"})
    assert cfg.mirror == "http://m/u" and cfg.debian_mirror == "http://deb.debian.org/debian"
    cfg = LabConfig.from_env({"RIGUP_LAB_SUITE": "trixie", "RIGUP_LAB_MIRROR": "http://m/d"})
    assert cfg.mirror == "http://m/d" and cfg.debian_mirror == "http://m/d"


def test_debian_templates_are_the_bare_server_package_list():
    # Debian suites add no packages, so their templates' keys (and caches) are those of the list
    for suite in ("trixie", "forky"):
        cfg = LabConfig.from_env({"RIGUP_LAB_SUITE": suite})
        assert cfg.packages == TEMPLATE_PACKAGES
        assert cfg.template_key == config.template_key(suite, TEMPLATE_PACKAGES)


def test_debootstrap_argv_for_ubuntu_takes_gutsy_and_the_keyring(tmp_path: Path):
    key = tmp_path / "k.gpg"
    argv = render.debootstrap_argv(
        "resolute",
        tmp_path / "t",
        "http://archive.ubuntu.com/ubuntu",
        ["a", "b"],
        tmp_path / "scripts",
        script="gutsy",
        keyring=key,
    )
    assert argv == [
        "debootstrap",
        "--variant=minbase",
        "--include=a,b",
        f"--keyring={key}",
        "resolute",
        str(tmp_path / "t"),
        "http://archive.ubuntu.com/ubuntu",
        str(tmp_path / "scripts" / "gutsy"),
    ]


def test_ubuntu_sources_are_an_installs_deb822():
    text = render.ubuntu_sources_text(
        "http://archive.ubuntu.com/ubuntu", "http://security.ubuntu.com/ubuntu", "resolute"
    )
    assert text.startswith("# written by rigup's lab machine")
    stanzas = [
        dict(line.split(": ", 1) for line in s.splitlines() if not line.startswith("#"))
        for s in text.split("\n\n")
    ]
    assert [s["URIs"] for s in stanzas] == [
        "http://archive.ubuntu.com/ubuntu",
        "http://security.ubuntu.com/ubuntu",
    ]
    assert stanzas[0]["Suites"] == "resolute resolute-updates resolute-backports"
    assert stanzas[1]["Suites"] == "resolute-security"
    for stanza in stanzas:
        # restricted: where Ubuntu's NVIDIA driver lives
        assert stanza["Components"] == "main restricted universe multiverse"
        assert stanza["Signed-By"] == "/usr/share/keyrings/ubuntu-archive-keyring.gpg"


def test_ssh_socket_listens_on_the_labs_loopback_port_only():
    text = render.ssh_socket_dropin_text(2241)
    lines = text.splitlines()
    assert "[Socket]" in lines
    listens = [line for line in lines if line.startswith("ListenStream=")]
    # the empty assignment drops ssh.socket's 0.0.0.0:22 and [::]:22 (the host's port 22)
    assert listens == ["ListenStream=", "ListenStream=127.0.0.1:2241"]


# -- cgroups -----------------------------------------------------------------------------------


def test_cgroup2_mount_on_a_hybrid_host_is_unified():
    assert cgroup.cgroup2_mount(HYBRID_MOUNTINFO.read_text()) == Path("/sys/fs/cgroup/unified")


def test_cgroup2_mount_on_a_unified_host_is_sys_fs_cgroup():
    assert cgroup.cgroup2_mount(UNIFIED_MOUNTINFO) == Path("/sys/fs/cgroup")


def test_a_v1_only_host_is_refused_with_the_fix():
    assert cgroup.cgroup2_mount(V1_MOUNTINFO) is None
    with pytest.raises(
        LabError, match=r"no cgroup2 file system .*`mount -t cgroup2 none /sys/fs/cgroup/unified`"
    ):
        cgroup.require_cgroup2(V1_MOUNTINFO)


def test_each_machine_has_its_own_cgroup():
    mount = cgroup.require_cgroup2(HYBRID_MOUNTINFO.read_text())
    one = cgroup.machine_cgroup(LabConfig.from_env({"RIGUP_LAB_NAME": "rigup-lab-ub"}), mount)
    two = cgroup.machine_cgroup(LabConfig.from_env({"RIGUP_LAB_NAME": "rigup-lab-ubt"}), mount)
    assert one == Path("/sys/fs/cgroup/unified/rigup-lab/rigup-lab-ub")
    assert two == Path("/sys/fs/cgroup/unified/rigup-lab/rigup-lab-ubt")
    assert one != two and one.parent == two.parent


def test_nspawn_boots_on_the_unified_hierarchy():
    assert cgroup.UNIFIED_ENV == {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}


def test_prepare_refuses_a_cgroup_that_holds_processes(tmp_path: Path):
    group = tmp_path / "rigup-lab" / "box"
    cgroup.prepare(group)  # made, with its parent
    assert group.is_dir() and cgroup.members(group) == []
    (group / "payload").mkdir()
    (group / "payload" / "cgroup.procs").write_text("4242\n4243\n")
    assert cgroup.members(group) == [4242, 4243]
    with pytest.raises(LabError, match=r"already holds processes \(4242, 4243\).*'box'"):
        cgroup.prepare(group)


def test_remove_takes_the_empty_groups_nspawn_left(tmp_path: Path):
    group = tmp_path / "rigup-lab" / "box"
    for sub in ("payload/init.scope", "payload/system.slice/ssh.service", "supervisor"):
        (group / sub).mkdir(parents=True)
    cgroup.remove(group)
    assert not group.exists() and (tmp_path / "rigup-lab").is_dir()
    cgroup.remove(group)  # absent: nothing to do


def test_enter_writes_the_callers_pid(tmp_path: Path):
    (tmp_path / "cgroup.procs").write_text("")
    cgroup.enter(tmp_path)
    assert (tmp_path / "cgroup.procs").read_text() == str(os.getpid())


# -- Ubuntu's archive key ------------------------------------------------------------------------

RELEASE = """Origin: Ubuntu
Suite: resolute
SHA256:
 {sha} {size:16d} main/binary-amd64/Packages.xz
 0000000000000000000000000000000000000000000000000000000000000000 10 main/i18n/Index
"""


def test_release_sha256_reads_the_sha256_section():
    text = RELEASE.format(sha="ab" * 32, size=1480032)
    assert keyring.release_sha256(text, "main/binary-amd64/Packages.xz") == ("ab" * 32, 1480032)
    with pytest.raises(LabError, match="no SHA256 for main/binary-arm64/Packages.xz"):
        keyring.release_sha256(text, "main/binary-arm64/Packages.xz")


def test_package_stanza():
    text = "Package: a\nVersion: 1\n\nPackage: ubuntu-keyring\nFilename: pool/u.deb\nSHA256: ff\n"
    assert keyring.package_stanza(text, "ubuntu-keyring")["Filename"] == "pool/u.deb"
    with pytest.raises(LabError, match="has no b"):
        keyring.package_stanza(text, "b")


def test_validsig_names_the_primary_key():
    status = (
        "[GNUPG:] GOODSIG 871920D1991BC93C Ubuntu Archive Automatic Signing Key (2018)\n"
        "[GNUPG:] VALIDSIG F6ECB3762474EDA9D21B7022871920D1991BC93C 2026-04-23 1776964050 0 4 0 "
        "1 10 01 F6ECB3762474EDA9D21B7022871920D1991BC93C\n"
    )
    assert keyring.validsig_fingerprints(status) == [keyring.UBUNTU_ARCHIVE_KEY_2018]
    assert keyring.validsig_fingerprints("[GNUPG:] BADSIG 871920D1991BC93C x\n") == []


@needs_gpg
def test_the_pinned_2018_key_is_in_ubuntus_keyring_and_exported_alone():
    exported = keyring.export_pinned_key(
        UBUNTU_KEYRING.read_bytes(), keyring.UBUNTU_ARCHIVE_KEY_2018
    )
    # the package holds the 2012 archive and CD image keys too; only the pinned one is kept
    assert 0 < len(exported) < len(UBUNTU_KEYRING.read_bytes())


@needs_gpg
def test_a_keyring_without_the_pinned_key_is_refused():
    with pytest.raises(LabError, match="does not hold the pinned Ubuntu archive key 0000"):
        keyring.export_pinned_key(UBUNTU_KEYRING.read_bytes(), "0" * 40)


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A throw-away signing key: (gpg home, fingerprint)."""
    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed")
    home = tmp_path_factory.mktemp("gpghome")
    home.chmod(0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    subprocess.run(
        [*gpg, "--passphrase", "", "--quick-gen-key", "lab test <t@example>", "ed25519", "sign"],
        check=True,
        capture_output=True,
    )
    colons = subprocess.run(
        [*gpg, "--with-colons", "--list-keys"], check=True, capture_output=True, text=True
    ).stdout
    return home, keyring.gpg_fingerprints(colons)[0]


def _sign(home: Path, text: str) -> bytes:
    return subprocess.run(
        ["gpg", "--homedir", str(home), "--batch", "--quiet", "--clearsign"],
        input=text.encode(),
        check=True,
        capture_output=True,
    ).stdout


def _export(home: Path, fingerprint: str) -> bytes:
    argv = ["gpg", "--homedir", str(home), "--batch", "--export", fingerprint]
    return subprocess.run(argv, check=True, capture_output=True).stdout


@needs_gpg
def test_verify_inrelease_returns_only_the_signed_text(signer, tmp_path: Path):
    home, fpr = signer
    key = tmp_path / "key.gpg"
    key.write_bytes(_export(home, fpr))
    signed = _sign(home, "Suite: resolute\n")
    assert keyring.verify_inrelease(key, signed, fpr) == "Suite: resolute\n"
    tampered = signed.replace(b"Suite: resolute", b"Suite: evil")
    with pytest.raises(LabError, match="not signed by the pinned Ubuntu archive key"):
        keyring.verify_inrelease(key, tampered, fpr)
    ubuntu = tmp_path / "ubuntu.gpg"
    ubuntu.write_bytes(
        keyring.export_pinned_key(UBUNTU_KEYRING.read_bytes(), keyring.UBUNTU_ARCHIVE_KEY_2018)
    )
    with pytest.raises(LabError, match="not signed by the pinned"):
        keyring.verify_inrelease(ubuntu, signed, keyring.UBUNTU_ARCHIVE_KEY_2018)


def _archive(home: Path, fpr: str, tmp_path: Path) -> dict[str, bytes]:
    """An archive in Ubuntu's layout, signed by ``fpr``, whose ubuntu-keyring holds that key."""
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: ubuntu-keyring\nVersion: 1\nArchitecture: all\nMaintainer: t <t@example>\n"
        "Description: test\n"
    )
    (pkg / "usr/share/keyrings").mkdir(parents=True)
    (pkg / keyring.PACKAGE_KEYRING).write_bytes(_export(home, fpr))
    subprocess.run(
        ["dpkg-deb", "--build", str(pkg), str(tmp_path / "k.deb")], check=True, capture_output=True
    )
    deb = (tmp_path / "k.deb").read_bytes()
    filename = "pool/main/u/ubuntu-keyring/ubuntu-keyring_1_all.deb"
    packages = f"Package: ubuntu-keyring\nFilename: {filename}\nSHA256: {hashlib.sha256(deb).hexdigest()}\n"
    index = lzma.compress(packages.encode())
    release = RELEASE.format(sha=hashlib.sha256(index).hexdigest(), size=len(index))
    base = "http://archive.example/ubuntu"
    return {
        f"{base}/dists/resolute/InRelease": _sign(home, release),
        f"{base}/dists/resolute/main/binary-amd64/Packages.xz": index,
        f"{base}/{filename}": deb,
    }


@needs_gpg
def test_ubuntu_keyring_verifies_the_chain_and_caches_the_key(signer, tmp_path: Path):
    home, fpr = signer
    files = _archive(home, fpr, tmp_path)
    messages: list[str] = []
    got = keyring.ubuntu_keyring(
        tmp_path / "cache",
        "http://archive.example/ubuntu/",
        "resolute",
        messages.append,
        fpr,
        files.__getitem__,
    )
    assert got == tmp_path / "cache" / "keyrings" / f"ubuntu-archive-{fpr}.gpg"
    assert got.read_bytes() == _export(home, fpr) and "verified" in messages[0]
    # cached: no download at all the next time
    assert (
        keyring.ubuntu_keyring(tmp_path / "cache", "http://x", "resolute", print, fpr, None) == got
    )


@needs_gpg
@pytest.mark.parametrize(
    "tamper, needle",
    [
        ("Packages.xz", "Packages.xz of resolute does not match its signed InRelease"),
        (".deb", "does not match the signed Packages index"),
        ("InRelease", "not signed by the pinned"),
    ],
)
def test_ubuntu_keyring_refuses_a_broken_link_and_caches_nothing(
    signer, tmp_path: Path, tamper, needle
):
    home, fpr = signer
    files = _archive(home, fpr, tmp_path)
    url = next(u for u in files if u.endswith(tamper))
    if tamper == ".deb":
        files[url] += b"\0"  # dpkg-deb still reads it; its hash no longer matches
    elif tamper == "Packages.xz":
        text = lzma.decompress(files[url]).decode()
        files[url] = lzma.compress((text + "\nPackage: extra\n").encode())
    else:
        files[url] = files[url].replace(b"Suite: resolute", b"Suite: resolutf")
    with pytest.raises(LabError, match=needle):
        keyring.ubuntu_keyring(
            tmp_path / "cache",
            "http://archive.example/ubuntu",
            "resolute",
            print,
            fpr,
            files.__getitem__,
        )
    assert not list((tmp_path / "cache" / "keyrings").glob("*"))


def test_ubuntu_labs_cpython_comes_from_debian_12_checked_with_debians_key():
    from lab.voxcpm_lab import PUSHED_DEBIAN_KEYRING, python_mirror_script

    cfg = LabConfig.from_env({"RIGUP_LAB_SUITE": "resolute"})
    script = python_mirror_script(cfg.debian_mirror, keyring=PUSHED_DEBIAN_KEYRING)
    assert (
        f"deb [signed-by={PUSHED_DEBIAN_KEYRING}] http://deb.debian.org/debian bookworm main"
        in script
    )
    assert "archive.ubuntu.com" not in script


def test_missing_key_tools_are_named_with_their_packages():
    with pytest.raises(LabError, match=r"gpgv, dpkg-deb not found.*apt-get install dpkg gpgv"):
        keyring.check_tools(lambda tool: "/usr/bin/gpg" if tool == "gpg" else None)
    keyring.check_tools(lambda tool: f"/usr/bin/{tool}")


def test_cli_status_names_the_suite(monkeypatch, capsys, tmp_path: Path):
    from lab import __main__ as cli

    monkeypatch.setenv("RIGUP_LAB_SUITE", "resolute")
    monkeypatch.setenv("RIGUP_LAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RIGUP_LAB_CACHE_DIR", str(tmp_path / "cache"))
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "suite:       resolute (Ubuntu 26.04, from http://archive.ubuntu.com/ubuntu)" in out


def test_ubuntu_machines_take_the_nvidia_stack_from_the_release_pocket():
    """The driver, its libraries and the prebuilt modules are pinned together (the modules of a
    kernel accept only the driver they were built with), to the suite's release pocket."""
    from lab.render import NVIDIA_STACK, nvidia_release_pin_text

    text = nvidia_release_pin_text("resolute")
    stanza = dict(
        line.split(": ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert stanza == {
        "Package": " ".join(NVIDIA_STACK),
        "Pin": "release a=resolute",
        "Pin-Priority": "995",
    }
    for name in ("nvidia-driver-580-open", "libnvidia-compute-580", "nvidia-utils-580",
                 "linux-modules-nvidia-580-open-generic",
                 "linux-modules-nvidia-580-open-7.0.0-14-generic",
                 "xserver-xorg-video-nvidia-580"):  # fmt: skip
        assert any(fnmatch.fnmatch(name, glob) for glob in NVIDIA_STACK), name


@pytest.mark.parametrize("present,want", [(True, ""), (False, "yes")])
def test_dracut_builds_no_kernel_initramfs_only_for_a_kernel_not_in_the_machine(
    tmp_path, present, want
):
    """dracut sources its conf files with ``$kernel`` set: the running kernel of a container
    (its host's, no modules inside) gets an initramfs without modules, an installed one the
    usual build."""
    from lab.render import dracut_foreign_kernel_text

    conf = tmp_path / "90-rigup-lab.conf"
    conf.write_text(dracut_foreign_kernel_text())
    if present:
        (tmp_path / "lib" / "modules" / "7.0.0-14-generic").mkdir(parents=True)
    out = subprocess.run(
        ["bash", "-c", 'no_kernel=; kernel=7.0.0-14-generic; . "$1"; echo "[$no_kernel]"',
         "-", str(conf)],
        env={"dracutsysrootdir": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"[{want}]"
