"""base role: apt baseline, directories, pinned uv."""

import pytest


def test_host_is_debian_family_with_systemd(host):
    assert host.system_info.distribution in ("ubuntu", "debian"), (
        f"rigup supports Ubuntu and Debian, not {host.system_info.distribution}"
    )
    assert host.file("/run/systemd/system").is_directory, "systemd is not PID 1"


def test_apt_baseline_installed(host, data):
    missing = [p for p in data.get("base_apt_packages") if not host.package(p).is_installed]
    assert not missing, f"apt packages not installed: {missing} (run deploys/base.py)"


@pytest.mark.parametrize(
    "attr,mode",
    [
        ("prefix", 0o755),
        ("etc", 0o755),
        ("state", 0o755),
        ("checks", 0o755),
        ("tmp", 0o700),
        ("uv_cache", 0o700),
    ],
)
def test_directories(host, paths, attr, mode):
    d = host.file(getattr(paths, attr))
    assert d.is_directory, f"{d.path} is missing"
    assert (d.user, d.group) == ("root", "root"), f"{d.path} owned by {d.user}:{d.group}"
    assert d.mode == mode, f"{d.path} has mode {oct(d.mode)}, expected {oct(mode)}"


def test_uv_pinned(host, paths, data):
    out = host.run(f"{paths.uv} --version")
    assert out.rc == 0, f"uv missing or broken at {paths.uv}: {out.stderr}"
    assert out.stdout.split()[1] == data.get("uv_version"), (
        f"uv {out.stdout.split()[1]} installed, {data.get('uv_version')} expected"
    )
