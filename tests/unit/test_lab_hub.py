"""The lab's Hugging Face-compatible server, its pure parts and its repository builder
(lab/hub_repo.py, run here with git as the lab runs it): the layout olah serves."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tomllib
from pathlib import Path

from lab import hub_lab
from lab.config import LabConfig

BUILDER = Path(hub_lab.__file__).parent / "hub_repo.py"


def _build(repo: Path, src: Path, *extra: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BUILDER), str(repo), str(src), *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout


def _files(src: Path) -> None:
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text('{"a": 1}\n')
    (src / "sub" / "w.safetensors").write_bytes(b"\x01\x02" * 5000)


def test_a_directory_becomes_main_with_weights_in_lfs(tmp_path):
    src, repo = tmp_path / "src", tmp_path / "hub" / "models" / "org" / "model"
    _files(src)
    commit = _build(repo, src)
    assert _git(repo, "rev-parse", "main").strip() == commit
    listing = _git(repo, "ls-tree", "-r", "--name-only", "main").split()
    assert listing == [".gitattributes", "config.json", "sub/w.safetensors"]
    assert _git(repo, "show", "main:config.json") == '{"a": 1}\n'
    oid = hashlib.sha256(b"\x01\x02" * 5000).hexdigest()
    pointer = _git(repo, "show", "main:sub/w.safetensors")
    assert pointer == f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize 10000\n"
    assert 121 <= len(pointer) <= 149, "olah takes a blob of this size for an LFS pointer"
    lfs = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    assert lfs.read_bytes() == b"\x01\x02" * 5000
    assert "*.safetensors filter=lfs" in _git(repo, "show", "main:.gitattributes")
    assert not [p for p in repo.iterdir() if p.name != ".git"], "the work tree stays empty"


def test_the_same_files_give_the_same_commit_and_a_change_a_child(tmp_path):
    src = tmp_path / "src"
    _files(src)
    first = _build(tmp_path / "a", src)
    assert _build(tmp_path / "b", src) == first, "the commit id depends on the files only"
    assert _build(tmp_path / "a", src) == first, "unchanged files add no commit"
    (src / "config.json").write_text('{"a": 2}\n')
    second = _build(tmp_path / "a", src, "--tag", "v2")
    assert second != first
    assert _git(tmp_path / "a", "rev-parse", f"{second}^").strip() == first
    assert _git(tmp_path / "a", "rev-parse", "v2").strip() == second


def test_each_lab_gets_its_own_port_and_an_offline_loopback_server():
    from lab.offline import cut_port
    from lab.serving import lab_vllm_port

    cfg = LabConfig(ssh_port=2260)
    others = {cfg.ssh_port + 10000, cfg.ssh_port + 20000, lab_vllm_port(cfg), cut_port(cfg)}
    assert hub_lab.hub_port(cfg) not in others and len(others) == 4, "ports of one lab collide"
    assert hub_lab.hub_port(cfg) == 27260
    assert hub_lab.hub_endpoint(cfg) == "http://127.0.0.1:27260"
    config = tomllib.loads(hub_lab.config_text(27260))
    assert config["accessibility"]["offline"] is True
    basic = config["basic"]
    assert basic["host"] == "127.0.0.1" and basic["port"] == 27260
    assert basic["hf-netloc"] == "127.0.0.1:9", "no upstream, not even for whoami"
    assert basic["mirrors-path"] == [hub_lab.HUB_REPOS]


def test_the_servers_unit_is_unprivileged_and_its_venv_locked():
    assert "DynamicUser=yes" in hub_lab.UNIT_TEXT and "User=root" not in hub_lab.UNIT_TEXT
    lock = hub_lab.LOCK.read_text()
    assert "olah==0.5.4" in lock and "--hash=sha256:" in lock
    assert "--require-hashes" in hub_lab.install_script(27260)
