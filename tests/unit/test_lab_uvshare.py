"""The lab's uv cache shared with its machines as hard links (lab/uvshare.py), on a cache laid
out as uv 0.13 lays it out: unpacked wheels under archive-v0/<id>, a pointer per wheel under
wheels-v8 that names its archive id, index pages under simple-v28."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lab import uvshare  # noqa: E402

#: a pointer as uv 0.13.9 writes it (bytes of a real .http entry of the lab's cache, shortened):
#: msgpack with the archive id, the wheel's sha256 and its URL
POINTER = (
    b"\x93\xb0{id}\x91\x92\xa6Sha256\xd9@56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b1"
    b"64761b380f03\xd9Pnvidia_cuda_nvcc-13.0.88-py3-none-manylinux2014_x86_64.whl"
)


def wheel(cache: Path, archive_id: str, name: str, body: bytes = b"x = 1\n") -> None:
    """A wheel ``name`` unpacked under ``archive_id`` and the pointer that names it."""
    pkg = cache / "archive-v0" / archive_id / name
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_bytes(body)
    (cache / "archive-v0" / archive_id / "bin").mkdir()
    os.symlink("../lib/tool", cache / "archive-v0" / archive_id / "bin" / "tool")
    pointer = cache / "wheels-v8" / "pypi" / name / "1.0-py3-none-any.http"
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_bytes(POINTER.replace(b"{id}", archive_id.encode()))


def test_seed_links_archives_and_copies_the_rest(tmp_path: Path):
    shared, machine = tmp_path / "shared", tmp_path / "rootfs/var/cache/rigup/uv"
    wheel(shared, "I28fS_QqDUH5paMs", "torch")
    (shared / "simple-v28" / "pypi").mkdir(parents=True)
    (shared / "simple-v28" / "pypi" / "torch.rkyv").write_bytes(b"index page")
    (shared / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (shared / ".tmpAbC123").mkdir()  # uv's work in progress
    (shared / ".tmpAbC123" / "half").write_text("partial")

    done = uvshare.seed(shared, machine)

    src = shared / "archive-v0/I28fS_QqDUH5paMs/torch/__init__.py"
    dst = machine / "archive-v0/I28fS_QqDUH5paMs/torch/__init__.py"
    assert dst.stat().st_ino == src.stat().st_ino  # linked: no second copy of the bytes
    assert os.readlink(machine / "archive-v0/I28fS_QqDUH5paMs/bin/tool") == "../lib/tool"
    pointer = machine / "wheels-v8/pypi/torch/1.0-py3-none-any.http"
    assert (
        pointer.read_bytes() == (shared / "wheels-v8/pypi/torch/1.0-py3-none-any.http").read_bytes()
    )
    # copied, not linked: the machine may rewrite it without touching the shared cache
    assert (
        pointer.stat().st_ino
        != (shared / "wheels-v8/pypi/torch/1.0-py3-none-any.http").stat().st_ino
    )
    assert (machine / "CACHEDIR.TAG").exists() and (machine / "simple-v28/pypi/torch.rkyv").exists()
    assert not (machine / ".tmpAbC123").exists()
    assert (done.archives, done.linked, done.copied) == (1, 2, 3)
    # a second seed changes nothing
    assert uvshare.seed(shared, machine) == uvshare.Shared()


def test_seed_keeps_what_the_machine_has(tmp_path: Path):
    shared, machine = tmp_path / "shared", tmp_path / "machine"
    wheel(shared, "aaaaaaaaaaaaaaaa", "torch")
    wheel(machine, "bbbbbbbbbbbbbbbb", "torch", body=b"x = 2\n")
    mine = (machine / "wheels-v8/pypi/torch/1.0-py3-none-any.http").read_bytes()
    uvshare.seed(shared, machine)
    assert (machine / "wheels-v8/pypi/torch/1.0-py3-none-any.http").read_bytes() == mine


def test_harvest_brings_new_wheels_back_and_leaves_duplicates_out(tmp_path: Path):
    shared, machine = tmp_path / "shared", tmp_path / "machine"
    # both unpacked torch at once on a cold cache, each under its own id; the machine also has
    # a wheel the shared cache lacks
    wheel(shared, "aaaaaaaaaaaaaaaa", "torch")
    wheel(machine, "bbbbbbbbbbbbbbbb", "torch")
    wheel(machine, "cccccccccccccccc", "vllm")

    done = uvshare.harvest(machine, shared)

    assert (shared / "archive-v0/cccccccccccccccc/vllm/__init__.py").stat().st_ino == (
        machine / "archive-v0/cccccccccccccccc/vllm/__init__.py"
    ).stat().st_ino
    assert (
        b"cccccccccccccccc" in (shared / "wheels-v8/pypi/vllm/1.0-py3-none-any.http").read_bytes()
    )
    # the shared cache's torch pointer still names its own archive; the machine's is left out
    assert (
        b"aaaaaaaaaaaaaaaa" in (shared / "wheels-v8/pypi/torch/1.0-py3-none-any.http").read_bytes()
    )
    assert not (shared / "archive-v0/bbbbbbbbbbbbbbbb").exists()
    assert (done.archives, done.skipped_archives) == (1, 1)
    assert "1 duplicate archives left out" in str(done)


def test_harvest_of_an_absent_cache_does_nothing(tmp_path: Path):
    assert uvshare.harvest(tmp_path / "none", tmp_path / "shared") == uvshare.Shared()


def test_same_filesystem(tmp_path: Path):
    assert uvshare.same_filesystem(tmp_path / "a/not/yet", tmp_path / "b")
    if os.stat("/proc").st_dev != os.stat(tmp_path).st_dev:
        assert not uvshare.same_filesystem(Path("/proc/self"), tmp_path)


def test_links_fail_loudly_across_file_systems(tmp_path: Path):
    shared = Path("/dev/shm") / f"rigup-uvshare-{os.getpid()}"
    if not Path("/dev/shm").is_dir() or uvshare.same_filesystem(Path("/dev/shm"), tmp_path):
        pytest.skip("no second file system to link across")
    try:
        wheel(shared, "dddddddddddddddd", "numpy")
        with pytest.raises(OSError):
            uvshare.seed(shared, tmp_path / "machine")
    finally:
        import shutil

        shutil.rmtree(shared, ignore_errors=True)


def test_a_machine_is_seeded_before_boot_and_harvested_when_stopped(tmp_path: Path):
    from lab.config import LabConfig

    cfg = LabConfig.from_env(
        {"RIGUP_LAB_STATE_DIR": str(tmp_path / "state"), "RIGUP_LAB_CACHE_DIR": str(tmp_path / "c")}
    )
    wheel(cfg.uv_cache_dir, "aaaaaaaaaaaaaaaa", "torch")
    said: list[str] = []
    uvshare.seed_machine(cfg, said.append)
    assert (cfg.machine_uv_cache_dir / "archive-v0/aaaaaaaaaaaaaaaa/torch/__init__.py").exists()
    wheel(cfg.machine_uv_cache_dir, "cccccccccccccccc", "vllm")  # what the converge downloaded
    uvshare.harvest_machine(cfg, said.append)
    assert (cfg.uv_cache_dir / "archive-v0/cccccccccccccccc/vllm/__init__.py").exists()
    assert said[0].startswith("uv cache seeded in") and said[1].startswith("uv cache shared back")
    off = LabConfig(**{**cfg.__dict__, "uv_cache": False})
    assert not uvshare.linked(off)
