"""Resuming a placement (files/model/modeltool/partial.py, place.py): a file an earlier run
verified is kept only when its bytes are proven to be the ones hashed (its stat fingerprint is
unchanged, or it hashes to the lock's sha256 again); publishing re-checks every file. Real partial
areas on disk, placed by model_fetch.py itself."""

from __future__ import annotations

import json
import os
import time

from tests.unit.test_model_tool import SIZES, _manifest_file, _place, mirror, partial_area

__all__ = ["mirror"]  # the fixture, used by name

SHARD = "model-1.safetensors"


def _resume_area(tmp, files, pinned, *, stat: bool):
    """A partial area as an interrupted run leaves it: the shard in place and listed in
    .rigup-verified.jsonl with the lock's sha256 (with the fingerprint taken then, when
    ``stat``)."""
    dest = tmp / "store" / "tiny" / "label-1"
    partial = dest.parent / ".label-1.partial"
    partial.mkdir(parents=True)
    shard = partial / SHARD
    shard.write_bytes(files[SHARD].read_bytes())
    sha = next(p["sha256"] for p in pinned if p["path"] == SHARD)
    entry = {"dest": SHARD, "path": SHARD, "size": SIZES[SHARD], "sha256": sha, "from": "x"}
    if stat:
        entry["stat"] = partial_area.fingerprint(shard)
    (partial / ".rigup-verified.jsonl").write_text(json.dumps(entry) + "\n")
    return dest, shard


def _zero_keeping_size_and_mtime(path) -> None:
    before = path.stat()
    time.sleep(0.05)  # past the kernel's coarse clock tick, which stamps ctime
    with open(path, "r+b") as fh:
        fh.write(bytes(before.st_size))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size and path.stat().st_mtime_ns == before.st_mtime_ns


def _placed_shard_is_the_locks(dest, files) -> None:
    assert (dest / SHARD).read_bytes() == files[SHARD].read_bytes()


def test_a_zeroed_shard_listed_as_verified_without_a_fingerprint_is_hashed_and_replaced(mirror):
    tmp, files, pinned = mirror
    dest, shard = _resume_area(tmp, files, pinned, stat=False)
    shard.write_bytes(bytes(SIZES[SHARD]))
    rc, out, err = _place(_manifest_file(tmp, files=pinned), dest, tmp / "mirror")
    assert rc == 0, err
    assert out["bytes_transferred"] == sum(SIZES.values()), "the shard is transferred again"
    assert f"{SHARD}: sha256 " in err and "transferring it again" in err
    _placed_shard_is_the_locks(dest, files)


def test_zeroed_bytes_with_size_and_mtime_put_back_are_caught_by_the_fingerprint(mirror):
    tmp, files, pinned = mirror
    dest, shard = _resume_area(tmp, files, pinned, stat=True)
    _zero_keeping_size_and_mtime(shard)
    rc, out, err = _place(_manifest_file(tmp, files=pinned), dest, tmp / "mirror")
    assert rc == 0, err
    assert out["bytes_transferred"] == sum(SIZES.values())
    assert "not proven unchanged: hashing again" in err
    _placed_shard_is_the_locks(dest, files)


def test_an_unchanged_verified_shard_is_kept_without_hashing_it_again(mirror):
    tmp, files, pinned = mirror
    dest, _ = _resume_area(tmp, files, pinned, stat=True)
    rc, out, err = _place(_manifest_file(tmp, files=pinned), dest, tmp / "mirror")
    assert rc == 0, err
    assert out["bytes_transferred"] == sum(SIZES.values()) - SIZES[SHARD]
    assert "hashing again" not in err
    _placed_shard_is_the_locks(dest, files)


def test_a_touched_shard_with_its_bytes_intact_is_hashed_and_kept(mirror):
    tmp, files, pinned = mirror
    dest, shard = _resume_area(tmp, files, pinned, stat=True)
    time.sleep(0.05)
    os.utime(shard)  # another mtime and ctime: the bytes are unproven until hashed
    rc, out, err = _place(_manifest_file(tmp, files=pinned), dest, tmp / "mirror")
    assert rc == 0, err
    assert "hashing again" in err and "transferring it again" not in err
    assert out["bytes_transferred"] == sum(SIZES.values()) - SIZES[SHARD]
    _placed_shard_is_the_locks(dest, files)


def test_a_record_whose_sha256_is_not_the_locks_is_not_kept(mirror):
    tmp, files, pinned = mirror
    dest, _ = _resume_area(tmp, files, pinned, stat=True)
    verified = dest.parent / ".label-1.partial" / ".rigup-verified.jsonl"
    entry = json.loads(verified.read_text())
    verified.write_text(json.dumps({**entry, "sha256": "0" * 64}) + "\n")
    rc, out, err = _place(_manifest_file(tmp, files=pinned), dest, tmp / "mirror")
    assert rc == 0, err
    assert out["bytes_transferred"] == sum(SIZES.values())


def test_publishing_rechecks_each_file_against_what_was_hashed_in_this_run(tmp_path):
    """unproven(): a file whose fingerprint moved after it was verified is hashed; other bytes
    are named (the placement is refused), the same bytes pass."""
    path = tmp_path / "w.bin"
    path.write_bytes(b"a" * 64)
    import hashlib

    entry = {"dest": "w.bin", "sha256": hashlib.sha256(b"a" * 64).hexdigest()}
    entry["stat"] = partial_area.fingerprint(path)
    assert partial_area.unproven(tmp_path, [entry]) == []
    _zero_keeping_size_and_mtime(path)
    (problem,) = partial_area.unproven(tmp_path, [entry])
    assert problem.startswith("w.bin: changed after it was verified: sha256 ")
    path.write_bytes(b"a" * 64)
    assert partial_area.unproven(tmp_path, [entry]) == []
    path.unlink()
    assert partial_area.unproven(tmp_path, [entry]) == ["w.bin: missing"]


def test_place_into_an_existing_empty_directory_places_the_model(mirror):
    tmp, files, pinned = mirror
    dest = tmp / "store" / "tiny" / "label-1"
    dest.mkdir(parents=True)
    rc, out, err = _place(_manifest_file(tmp, files=pinned), dest, tmp / "mirror")
    assert rc == 0, err
    assert out["status"] == "placed" and out["bytes_transferred"] == sum(SIZES.values())
    _placed_shard_is_the_locks(dest, files)


def test_place_of_patterns_into_an_existing_empty_directory_places_the_model(mirror):
    """An unpinned manifest selecting by patterns lists no files, so nothing looked missing."""
    tmp, files, _ = mirror
    dest = tmp / "store" / "tiny" / "label-1"
    dest.mkdir(parents=True)
    rc, out, err = _place(_manifest_file(tmp), dest, tmp / "mirror")
    assert rc == 0, err
    assert out["status"] == "placed"
    _placed_shard_is_the_locks(dest, files)


def test_a_record_naming_a_path_outside_the_model_is_ignored(mirror):
    """A record is data from disk: a dest outside the partial area is neither trusted nor
    touched, even from the same origin (an unpinned manifest, whose files come from patterns)."""
    tmp, files, _ = mirror
    dest = tmp / "store" / "tiny" / "label-1"
    partial = dest.parent / ".label-1.partial"
    partial.mkdir(parents=True)
    outside = tmp / "store" / "keep.bin"
    outside.write_bytes(b"k" * 8)
    origin = f"local:{files['config.json'].parent}"
    bad = {"dest": "../../keep.bin", "path": "x", "size": 8, "sha256": "0" * 64, "from": origin}
    (partial / ".rigup-verified.jsonl").write_text(json.dumps(bad) + "\n")
    rc, out, err = _place(_manifest_file(tmp), dest, tmp / "mirror")
    assert rc == 0, err
    assert outside.read_bytes() == b"k" * 8, "a file outside the model was removed"
    _placed_shard_is_the_locks(dest, files)
