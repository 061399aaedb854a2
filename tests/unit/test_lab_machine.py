"""Unit tests of the lab machine's pure parts: no root, no containers, no network."""

from __future__ import annotations

import io
import os
import socket
import sys
import tarfile
from pathlib import Path

import pytest

# lab/ is a top-level package of the repository, not an installed distribution
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lab import __main__ as cli  # noqa: E402
from lab import config, host, machine, render  # noqa: E402
from lab.config import TEMPLATE_PACKAGES, UV_CACHE_MOUNT, LabConfig, LabError  # noqa: E402
from lab.machine import LabMachine  # noqa: E402

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEJgzY4noA/MDVFfbv9v5R//J0QcIqTGCWQ/kC3Lgozq root@x"
ECDSA = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTY= root@x"
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDWdYz root@x"


@pytest.fixture
def cfg(tmp_path: Path) -> LabConfig:
    return LabConfig.from_env(
        {
            "RIGUP_LAB_NAME": "unit-lab",
            "RIGUP_LAB_SSH_PORT": "2299",
            "RIGUP_LAB_STATE_DIR": str(tmp_path / "state"),
            "RIGUP_LAB_CACHE_DIR": str(tmp_path / "cache"),
        }
    )


# -- configuration ---------------------------------------------------------------------------


def test_defaults_from_empty_env():
    cfg = LabConfig.from_env({})
    assert cfg.name == "rigup-lab"
    assert cfg.ssh_port == 2222
    assert cfg.state_dir == Path("/var/lib/rigup-lab/rigup-lab")
    assert cfg.cache_dir == Path("/var/cache/rigup-lab")
    assert cfg.suite == "resolute"  # Ubuntu 26.04, the rig's release
    assert cfg.mirror == "http://archive.ubuntu.com/ubuntu"
    assert cfg.uv_cache is True


def test_paths_derive_from_state_and_cache_dirs():
    cfg = LabConfig.from_env({"RIGUP_LAB_NAME": "box1"})
    assert cfg.state_dir == Path("/var/lib/rigup-lab/box1")
    assert cfg.ssh_key == Path("/var/lib/rigup-lab/box1/ssh/id_ed25519")
    assert cfg.known_hosts == Path("/var/lib/rigup-lab/box1/ssh/known_hosts")
    assert cfg.rootfs == Path("/var/lib/rigup-lab/box1/rootfs")
    assert cfg.pid_file == Path("/var/lib/rigup-lab/box1/nspawn.pid")
    assert cfg.uv_cache_dir == Path("/var/cache/rigup-lab/uv")
    assert cfg.template.parent == Path("/var/cache/rigup-lab/templates")
    assert cfg.template.name.startswith("resolute-")


def test_env_overrides(tmp_path: Path):
    cfg = LabConfig.from_env(
        {
            "RIGUP_LAB_NAME": "x",
            "RIGUP_LAB_SSH_PORT": "2230",
            "RIGUP_LAB_STATE_DIR": str(tmp_path / "s"),
            "RIGUP_LAB_CACHE_DIR": str(tmp_path / "c"),
            "RIGUP_LAB_MIRROR": "http://mirror.example/debian",
            "RIGUP_LAB_UV_CACHE": "0",
        }
    )
    assert (cfg.name, cfg.ssh_port, cfg.mirror) == ("x", 2230, "http://mirror.example/debian")
    assert cfg.state_dir == tmp_path / "s"
    assert cfg.cache_dir == tmp_path / "c"
    assert cfg.uv_cache is False


def test_from_env_reads_os_environ(monkeypatch):
    monkeypatch.setenv("RIGUP_LAB_SSH_PORT", "2345")
    monkeypatch.delenv("RIGUP_LAB_NAME", raising=False)
    assert LabConfig.from_env().ssh_port == 2345


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("on", True), ("0", False), ("no", False), ("", False)],
)
def test_uv_cache_switch(value, expected):
    assert LabConfig.from_env({"RIGUP_LAB_UV_CACHE": value}).uv_cache is expected


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"RIGUP_LAB_SSH_PORT": "ssh"}, "RIGUP_LAB_SSH_PORT"),
        ({"RIGUP_LAB_SSH_PORT": "70000"}, "RIGUP_LAB_SSH_PORT"),
        ({"RIGUP_LAB_SSH_PORT": "0"}, "RIGUP_LAB_SSH_PORT"),
        ({"RIGUP_LAB_NAME": "Bad Name"}, "RIGUP_LAB_NAME"),
        ({"RIGUP_LAB_NAME": "../etc"}, "RIGUP_LAB_NAME"),
        ({"RIGUP_LAB_UV_CACHE": "maybe"}, "RIGUP_LAB_UV_CACHE"),
    ],
)
def test_bad_env_values_raise_clear_errors(env, needle):
    with pytest.raises(LabError, match=needle):
        LabConfig.from_env(env)


# -- template --------------------------------------------------------------------------------


def test_template_packages_match_a_bare_ubuntu_server():
    for pkg in ("systemd", "systemd-sysv", "dbus", "openssh-server", "ca-certificates"):
        assert pkg in TEMPLATE_PACKAGES
    for pkg in ("python3", "sudo", "iproute2", "procps", "curl"):
        assert pkg in TEMPLATE_PACKAGES
    # the deploy under test must install it itself
    assert "python3-venv" not in TEMPLATE_PACKAGES


def test_template_key_is_stable_and_tracks_suite_and_packages():
    key = config.template_key("trixie", ["b", "a"])
    assert key == config.template_key("trixie", ["a", "b"])
    assert key.startswith("trixie-") and len(key) == len("trixie-") + 12
    assert key != config.template_key("trixie", ["a", "b", "c"])
    assert key != config.template_key("bookworm", ["a", "b"])


def test_debootstrap_argv(tmp_path: Path):
    argv = render.debootstrap_argv("trixie", tmp_path / "t", "http://m/debian", ["a", "b"])
    assert argv == [
        "debootstrap",
        "--variant=minbase",
        "--include=a,b",
        "trixie",
        str(tmp_path / "t"),
        "http://m/debian",
    ]


def test_debootstrap_argv_takes_sids_script_for_a_suite_it_does_not_know(tmp_path: Path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "sid").write_text("")
    (scripts / "trixie").write_text("")
    argv = render.debootstrap_argv("forky", tmp_path / "t", "http://m/debian", ["a"], scripts)
    assert argv[3:] == ["forky", str(tmp_path / "t"), "http://m/debian", str(scripts / "sid")]
    argv = render.debootstrap_argv("trixie", tmp_path / "t", "http://m/debian", ["a"], scripts)
    assert argv[3:] == ["trixie", str(tmp_path / "t"), "http://m/debian"]


def test_suite_from_env():
    cfg = LabConfig.from_env({"RIGUP_LAB_SUITE": "forky"})
    assert cfg.suite == "forky" and cfg.template_key.startswith("forky-")
    assert cfg.template_key != LabConfig.from_env({}).template_key
    with pytest.raises(LabError, match="RIGUP_LAB_SUITE='sid' is not a suite the lab builds"):
        LabConfig.from_env({"RIGUP_LAB_SUITE": "sid"})


# -- nspawn and ssh command lines --------------------------------------------------------------


def test_nspawn_argv(cfg: LabConfig):
    argv = render.nspawn_argv(cfg)
    assert argv[0] == "systemd-nspawn"
    for arg in ("--register=no", "--keep-unit", "--boot", "--hostname=unit-lab"):
        assert arg in argv
    assert f"--directory={cfg.rootfs}" in argv
    assert "--machine=unit-lab" in argv
    # the machine's uv cache is a directory of its rootfs, linked to the lab's (lab.uvshare)
    assert not [a for a in argv if a.startswith("--bind")]
    # shares the host network: sshd must be reachable on host 127.0.0.1
    assert not [a for a in argv if a.startswith(("--network", "--private-network", "-n"))]


def test_nspawn_argv_binds_the_uv_cache_from_another_file_system(cfg: LabConfig):
    argv = render.nspawn_argv(cfg, bind_uv_cache=True)
    assert f"--bind={cfg.cache_dir / 'uv'}:{UV_CACHE_MOUNT}" in argv


def test_nspawn_argv_without_uv_cache(cfg: LabConfig):
    argv = render.nspawn_argv(LabConfig(**{**cfg.__dict__, "uv_cache": False}), bind_uv_cache=True)
    assert not [a for a in argv if a.startswith("--bind")]


def test_machine_uv_cache_is_in_its_rootfs(cfg: LabConfig):
    assert cfg.machine_uv_cache_dir == cfg.rootfs / "var/cache/rigup/uv"
    assert LabMachine(cfg).uv_cache_linked  # tmp_path: state and cache on one file system


def test_ssh_argv_is_strict(cfg: LabConfig):
    argv = render.ssh_argv(cfg, "systemctl is-system-running")
    assert argv[0] == "ssh"
    assert argv[argv.index("-i") + 1] == str(cfg.ssh_key)
    assert argv[argv.index("-p") + 1] == "2299"
    assert "StrictHostKeyChecking=yes" in argv
    assert f"UserKnownHostsFile={cfg.known_hosts}" in argv
    assert "BatchMode=yes" in argv
    assert argv[-3:] == ["root@127.0.0.1", "--", "systemctl is-system-running"]


def test_ssh_argv_interactive_shell(cfg: LabConfig):
    argv = render.ssh_argv(cfg, None, tty=True)
    assert argv[-1] == "root@127.0.0.1"
    assert "-t" in argv and "BatchMode=yes" not in argv


def test_is_nspawn_of(tmp_path: Path):
    root = tmp_path / "rootfs"
    assert host.is_nspawn_of(["/usr/bin/systemd-nspawn", f"--directory={root}"], root)
    assert host.is_nspawn_of(["systemd-nspawn", "-b", "-D", str(root)], root)
    assert not host.is_nspawn_of(["systemd-nspawn", "-D", str(tmp_path / "other")], root)
    assert not host.is_nspawn_of(["sleep", f"--directory={root}"], root)
    assert not host.is_nspawn_of([], root)


# -- file contents ---------------------------------------------------------------------------


def test_known_hosts_line_uses_bracketed_port_and_drops_comment():
    line = render.known_hosts_line(2222, ED25519 + "\n")
    assert line == f"[127.0.0.1]:2222 {' '.join(ED25519.split()[:2])}\n"
    assert render.known_hosts_line(22, ED25519).startswith("127.0.0.1 ssh-ed25519 ")


def test_known_hosts_line_rejects_garbage():
    with pytest.raises(LabError, match="public key"):
        render.known_hosts_line(2222, "hello")


def test_known_hosts_text_puts_ed25519_first():
    text = render.known_hosts_text(2230, [RSA, ECDSA, ED25519, ""])
    types = [line.split()[1] for line in text.splitlines()]
    assert types == ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"]
    assert all(line.startswith("[127.0.0.1]:2230 ") for line in text.splitlines())


def test_sshd_dropin():
    text = render.sshd_dropin_text(2230)
    assert "Port 2230\n" in text
    assert "ListenAddress 127.0.0.1\n" in text
    assert "PasswordAuthentication no\n" in text


def test_dropin_port_round_trip():
    assert render.dropin_port(render.sshd_dropin_text(2345)) == 2345
    assert render.dropin_port("# nothing\n") is None


def test_hosts_text_resolves_hostname():
    assert "127.0.1.1\tbox\n" in render.hosts_text("box")


def test_tail_strips_escapes_and_keeps_last_lines(tmp_path: Path):
    log = tmp_path / "log"
    log.write_text("".join(f"\x1b[0;32mline {i}\x1b[0m\n" for i in range(30)))
    assert host.tail(log, 2) == "line 28\nline 29"
    assert host.tail(tmp_path / "missing") == ""


def test_write_tar_keeps_modes_and_owns_by_root(tmp_path: Path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (src / "sub" / "run.sh").chmod(0o750)
    (src / "secret").write_text("x")
    (src / "secret").chmod(0o600)
    buf = io.BytesIO()
    machine.write_tar(src, ".", buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["./sub/run.sh"].mode & 0o777 == 0o750
    assert members["./secret"].mode & 0o777 == 0o600
    assert {(m.uid, m.gid, m.uname) for m in members.values()} == {(0, 0, "root")}


def test_write_tar_single_file_renamed(tmp_path: Path):
    src = tmp_path / "a.txt"
    src.write_text("hi")
    buf = io.BytesIO()
    machine.write_tar(src, "b.conf", buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tar:
        assert tar.getnames() == ["b.conf"]


# -- ports -----------------------------------------------------------------------------------


def test_port_in_use_detects_a_listener():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert host.port_in_use(port) is True
    # closed: free again (SO_REUSEADDR ignores TIME_WAIT)
    assert host.port_in_use(port) is False


def test_port_in_use_detects_a_wildcard_listener():
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        sock.listen()
        assert host.port_in_use(sock.getsockname()[1]) is True


def test_port_in_use_detects_a_bound_socket():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        assert host.port_in_use(sock.getsockname()[1]) is True


def test_port_taken_message(cfg: LabConfig):
    msg = host.port_taken_message(cfg, "python3 (pid 42)")
    assert "2299" in msg and "RIGUP_LAB_SSH_PORT" in msg and "python3 (pid 42)" in msg
    assert "unit-lab" in msg


# -- preflight -------------------------------------------------------------------------------


def test_check_root():
    host.check_root(0)
    with pytest.raises(LabError, match="needs root"):
        host.check_root(1000)


def test_check_tools_missing_nspawn_or_debootstrap():
    with pytest.raises(LabError, match="apt-get install systemd-container debootstrap"):
        host.check_tools(lambda t: None if t == "debootstrap" else f"/usr/bin/{t}")
    with pytest.raises(LabError, match="systemd-nspawn"):
        host.check_tools(lambda t: None if t == "systemd-nspawn" else f"/usr/bin/{t}")


def test_check_tools_missing_ssh():
    with pytest.raises(LabError, match="openssh-client"):
        host.check_tools(lambda t: None if t == "ssh" else f"/usr/bin/{t}")
    host.check_tools(lambda t: f"/usr/bin/{t}")


def test_debootstrap_failure_message_shows_log_tail(tmp_path: Path):
    msg = render.debootstrap_failure_message("E: Failed getting release file", tmp_path, "http://m")
    assert "debootstrap failed" in msg and "E: Failed getting release file" in msg
    assert "RIGUP_LAB_MIRROR" in msg


# -- machine state without root --------------------------------------------------------------


def test_status_of_absent_and_stopped_machine(cfg: LabConfig):
    lab = LabMachine(cfg, log=lambda _: None)
    st = lab.status()
    assert st["state"] == "absent" and st["pid"] is None
    assert (st["name"], st["ssh_port"]) == ("unit-lab", 2299)
    assert st["rootfs"] == str(cfg.rootfs) and st["ssh_key"] == str(cfg.ssh_key)
    cfg.rootfs.mkdir(parents=True)
    assert lab.status()["state"] == "stopped"


def test_stale_pid_file_is_not_running(cfg: LabConfig):
    cfg.state_dir.mkdir(parents=True)
    cfg.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not nspawn booting our rootfs
    assert LabMachine(cfg, log=lambda _: None).nspawn_pid() is None


def test_pid_alive():
    assert host.pid_alive(os.getpid())
    assert not host.pid_alive(2**22 + 1)


def test_push_errors(cfg: LabConfig, tmp_path: Path):
    lab = LabMachine(cfg, log=lambda _: None)
    with pytest.raises(LabError, match="no such file"):
        lab.push(tmp_path / "missing", "/etc/x")
    (tmp_path / "f").write_text("x")
    with pytest.raises(LabError, match="absolute"):
        lab.push(tmp_path / "f", "etc/x")
    with pytest.raises(LabError, match="does not exist"):
        lab.push(tmp_path / "f", "/etc/x")


def test_mounts_under_finds_leftover_mounts_deepest_first(tmp_path: Path):
    root = tmp_path / "rootfs"
    info = (
        "22 1 0:21 / / rw - ext4 /dev/vda rw\n"
        f"30 22 0:5 / {root}/proc rw - proc proc rw\n"
        f"31 30 0:6 / {root}/proc/sys/fs/binfmt_misc rw - binfmt_misc x rw\n"
        f"32 22 0:7 / {tmp_path}/rootfs-other rw - tmpfs t rw\n"
        f"33 22 0:8 / {root}/with\\040space rw - tmpfs t rw\n"
    )
    found = host.mounts_under(root, info)
    assert found[0] == root / "proc/sys/fs/binfmt_misc"
    assert set(found) == {root / "proc", root / "proc/sys/fs/binfmt_misc", root / "with space"}


def test_rmtree_deletes_plain_trees(tmp_path: Path):
    tree = tmp_path / "t"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "f").write_text("x")
    host.rmtree(tree)
    assert not tree.exists()


def test_machine_lock_path(cfg: LabConfig, tmp_path: Path):
    path = host.machine_lock_path(cfg, run_lock=tmp_path)
    assert path.parent == tmp_path and path.name.startswith("rigup-lab-unit-lab-")
    assert not str(path).startswith(str(cfg.state_dir))


# -- CLI -------------------------------------------------------------------------------------


@pytest.fixture
def lab_env(monkeypatch, tmp_path: Path):
    monkeypatch.setenv("RIGUP_LAB_NAME", "unit-lab")
    monkeypatch.setenv("RIGUP_LAB_SSH_PORT", "2299")
    monkeypatch.setenv("RIGUP_LAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RIGUP_LAB_CACHE_DIR", str(tmp_path / "cache"))


def test_cli_status(lab_env, capsys, tmp_path: Path):
    assert cli.main(["status"]) == 0
    out = capsys.readouterr().out
    assert "name:        unit-lab" in out
    assert "state:       absent" in out
    assert "127.0.0.1:2299" in out
    assert str(tmp_path / "state" / "ssh" / "id_ed25519") in out


def test_cli_bad_config_exits_2_without_traceback(lab_env, monkeypatch, capsys):
    monkeypatch.setenv("RIGUP_LAB_SSH_PORT", "nope")
    assert cli.main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab: error: RIGUP_LAB_SSH_PORT")
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["up", "stop", "destroy"])
def test_cli_needs_root(lab_env, monkeypatch, capsys, command):
    monkeypatch.setattr(host.os, "geteuid", lambda: 1000)
    assert cli.main([command]) == 2
    assert "needs root" in capsys.readouterr().err


def test_cli_ssh_when_not_running(lab_env, capsys):
    assert cli.main(["ssh", "--", "true"]) == 2
    assert "not running" in capsys.readouterr().err


def test_cli_push_parses_arguments():
    args = cli.build_parser().parse_args(["push", "files/base", "/opt/rigup"])
    assert (args.src, args.dest) == (Path("files/base"), "/opt/rigup")
    args = cli.build_parser().parse_args(["ssh", "--", "ls", "-l", "/"])
    assert args.cmd[-3:] == ["ls", "-l", "/"]


def test_port_clash_names_the_lab_machine_holding_it(tmp_path: Path):
    dropin = tmp_path / "rigup-lab" / "rootfs" / "etc" / "ssh" / "sshd_config.d" / "rigup-lab.conf"
    dropin.parent.mkdir(parents=True)
    dropin.write_text(render.sshd_dropin_text(2222))
    assert host.lab_machine_on_port(tmp_path, 2222) == "rigup-lab"
    assert host.lab_machine_on_port(tmp_path, 2224) is None
