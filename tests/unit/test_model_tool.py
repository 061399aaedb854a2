"""The on-host model tool (files/model/model_fetch.py and its modeltool package) run for real on
local directories, on a constructed Hugging Face cache (huggingface_hub offline) and against a
closed endpoint; its pure parts on constructed inputs. The hub downloads themselves run against
the lab's Hugging Face-compatible server (tests/lab/test_scenario.py)."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from lab.hf_cache import build_hf_cache, sha256_of
from roles.model.commands import FILES
from roles.model.manifest import parse_manifest

place = importlib.import_module("modeltool.place")
partial_area = importlib.import_module("modeltool.partial")
hub_sources = importlib.import_module("modeltool.sources")
hub = importlib.import_module("modeltool.hub")
snapshot = importlib.import_module("modeltool.snapshot")
layout = importlib.import_module("modeltool.layout")

SCRIPT = FILES / "model_fetch.py"


def _raw(**over) -> dict:
    raw = {
        "format": 1,
        "name": "tiny",
        "state": "unpinned",
        "repo_id": "org/Tiny-Model",
        "revision": "label-1",
    }
    raw.update(over)
    return raw


def _mirror(root: Path, sizes: dict[str, int]) -> dict[str, Path]:
    out = {}
    for rel, size in sizes.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(hashlib.sha256(rel.encode()).digest() * (size // 32) + b"x" * (size % 32))
        out[rel] = path
    return out


def _fetch(*args: str, env: dict | None = None) -> tuple[int, dict, str]:
    if args[0] in ("place", "backup") and "--spare-bytes" not in args:
        args = (*args, "--spare-bytes", "0")  # these tests move MBs: do not need 1 GiB free
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def _place_args(manifest: Path, dest: Path, local_dir: Path, *extra: str) -> tuple[str, ...]:
    return (
        "place",
        "--manifest",
        str(manifest),
        "--dest",
        str(dest),
        "--local-dir",
        str(local_dir),
        *extra,
    )


def _place(manifest: Path, dest: Path, local_dir: Path, *extra: str, env: dict | None = None):
    """model_fetch.py place of ``manifest`` to ``dest`` from ``local_dir``."""
    return _fetch(*_place_args(manifest, dest, local_dir, *extra), env=env)


def _manifest_file(tmp: Path, **over) -> Path:
    path = tmp / "manifest.json"
    path.write_text(json.dumps(parse_manifest(_raw(**over)).to_json()))
    return path


def _files(directory: Path) -> list[str]:
    return sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())


SIZES = {"config.json": 100, "model-1.safetensors": 3 * 2**20 + 5, "sub/tok.json": 40}


@pytest.fixture
def mirror(tmp_path):
    files = _mirror(tmp_path / "mirror" / "Tiny-Model", SIZES)
    pinned = [
        {"path": rel, "size": p.stat().st_size, "sha256": sha256_of(p)} for rel, p in files.items()
    ]
    return tmp_path, files, pinned


# ---- placing from a local copy ----------------------------------------------------------------
def test_local_place_then_rerun_transfers_nothing(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    args = _place_args(manifest, dest, tmp / "mirror")
    rc, first, err = _fetch(*args)
    assert rc == 0, err
    assert first["status"] == "placed" and first["layout"] == "mirror"
    assert first["bytes_transferred"] == sum(SIZES.values()) == first["bytes_total"]
    assert f"place: placed: {sum(SIZES.values()):,} B (3.1 MB) transferred in" in err
    record = json.loads((dest / ".rigup-manifest.json").read_text())
    assert {f["dest"]: f["sha256"] for f in record["files"]} == {
        f["path"]: f["sha256"] for f in pinned
    }
    assert _files(dest) == [".rigup-manifest.json", *sorted(SIZES)]
    assert not (dest.parent / ".label-1.partial").exists()
    rc, second, _ = _fetch(*args)
    assert rc == 0 and second == {**second, "status": "present", "bytes_transferred": 0}


def test_interrupted_copy_resumes_where_it_stopped(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    partial = dest.parent / ".label-1.partial"
    # what a run killed mid-way leaves: config.json done and verified, the shard half copied
    (partial / "sub").mkdir(parents=True)
    (partial / "config.json").write_bytes(files["config.json"].read_bytes())
    entry = {
        "dest": "config.json",
        "path": "config.json",
        "size": 100,
        "sha256": pinned[0]["sha256"],
    }
    (partial / ".rigup-verified.jsonl").write_text(json.dumps(entry) + "\n")
    half = files["model-1.safetensors"].read_bytes()[: 2**20]
    (partial / "model-1.safetensors.incomplete").write_bytes(half)
    rc, out, err = _place(manifest, dest, tmp / "mirror")
    assert rc == 0, err
    assert out["bytes_transferred"] == SIZES["model-1.safetensors"] - 2**20 + SIZES["sub/tok.json"]
    assert out["resumed"] == [
        f"model-1.safetensors: resumed after {2**20:,} bytes that match the source"
    ]
    assert (dest / "model-1.safetensors").read_bytes() == files["model-1.safetensors"].read_bytes()


def test_a_partial_file_that_is_not_a_prefix_of_the_source_is_not_trusted(tmp_path):
    """An unpinned manifest (no sha256 to check against): the partial copy an earlier run left
    has a zeroed block. It is compared with the source before the copy continues, copied again
    from the first differing byte, and the placed file and its recorded sha256 are the
    source's."""
    files = _mirror(tmp_path / "mirror" / "tiny", {"w.safetensors": 6 * 2**20})
    manifest = _manifest_file(tmp_path, include=["*.safetensors"])
    dest = tmp_path / "store" / "tiny" / "label-1"
    partial = dest.parent / ".label-1.partial"
    partial.mkdir(parents=True)
    good = files["w.safetensors"].read_bytes()
    left = bytearray(good[: 5 * 2**20])
    left[3 * 2**20 + 7 : 4 * 2**20] = bytes(2**20 - 7)  # bytes 3 MiB+7 .. 4 MiB zeroed
    (partial / "w.safetensors.incomplete").write_bytes(bytes(left))
    rc, out, err = _place(manifest, dest, tmp_path / "mirror")
    assert rc == 0, err
    assert (dest / "w.safetensors").read_bytes() == good
    record = json.loads((dest / ".rigup-manifest.json").read_text())
    assert record["files"][0]["sha256"] == hashlib.sha256(good).hexdigest()
    kept = 3 * 2**20 + 7
    assert out["bytes_transferred"] == len(good) - kept
    assert out["resumed"] == [
        f"w.safetensors: resumed after {kept:,} bytes that match the source "
        f"({5 * 2**20 - kept:,} bytes that did not were copied again)"
    ]


def test_sha256_mismatch_places_nothing_and_keeps_the_file_outside_the_model(mirror):
    tmp, files, pinned = mirror
    pinned[1]["sha256"] = "0" * 64
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    rc, out, _ = _place(manifest, dest, tmp / "mirror")
    assert rc == 1 and out["status"] == "error"
    assert "model-1.safetensors: sha256" in out["error"] and "0" * 64 + " expected" in out["error"]
    assert not dest.exists()
    rejected = dest.parent / ".label-1.rejected" / "model-1.safetensors.bad"
    assert rejected.exists() and f"kept as {rejected}" in out["error"]
    assert not list((dest.parent / ".label-1.partial").rglob("*.bad"))
    # the manifest corrected: placed, and the rejected file goes with the attempt it belonged to
    pinned[1]["sha256"] = sha256_of(files["model-1.safetensors"])
    manifest = _manifest_file(tmp, files=pinned)
    rc, out, err = _place(manifest, dest, tmp / "mirror")
    assert rc == 0, err
    assert not (dest.parent / ".label-1.rejected").exists()


def test_leftovers_in_the_partial_area_are_never_published(mirror):
    """What older runs left in the partial area (a rejected file, an orphaned download) never
    becomes part of the placed model."""
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    partial = dest.parent / ".label-1.partial"
    (partial / ".download" / ".cache").mkdir(parents=True)
    (partial / "model-1.safetensors.incomplete.bad").write_bytes(b"x" * 4096)
    (partial / "stray.bin").write_bytes(b"y")
    rc, out, err = _place(manifest, dest, tmp / "mirror")
    assert rc == 0, err
    assert _files(dest) == [".rigup-manifest.json", *sorted(SIZES)]
    assert out["removed"] == ["model-1.safetensors.incomplete.bad", "stray.bin"]


def test_not_enough_space_says_the_numbers(mirror):
    tmp, files, pinned = mirror
    pinned[1]["size"] = 10**18  # an exabyte: no disk here has that
    manifest = _manifest_file(tmp, files=pinned)
    rc, out, _ = _place(manifest, tmp / "s" / "tiny" / "x", tmp / "mirror")
    assert rc == 3
    assert "not enough free space for tiny@label-1" in out["error"] and "GB free" in out["error"]


# ---- a copy already placed --------------------------------------------------------------------
def test_a_placed_copy_that_does_not_match_fails_unless_replacement_is_allowed(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    base = _place_args(manifest, dest, tmp / "mirror")
    assert _fetch(*base)[0] == 0
    target = dest / "sub" / "tok.json"
    target.write_bytes(b"edited by someone")
    rc, out, _ = _fetch(*base)
    assert rc == 5 and out["status"] == "mismatch"
    assert "sub/tok.json: 17 bytes, 40 expected" in out["error"]
    assert "model_replace_mismatched = True" in out["error"]
    assert target.read_bytes() == b"edited by someone"
    rc, out, err = _fetch(*base, "--replace-mismatched")
    assert rc == 0 and out["status"] == "repaired", err
    assert target.read_bytes() == files["sub/tok.json"].read_bytes()
    aside = Path(out["kept_aside"])
    assert aside.parent == dest.parent and aside.name.startswith(".label-1.replaced-")
    assert (aside / "sub" / "tok.json").read_bytes() == b"edited by someone"
    assert _files(dest) == [".rigup-manifest.json", *sorted(SIZES)]
    assert _fetch(*base)[1]["status"] == "present"


def test_same_size_bytes_changed_are_found_only_by_full_verification(mirror):
    """Two bytes changed inside a placed shard: the cheap check (sizes, record) cannot see it;
    --verify-sha256 hashes every file and fails; with replacement it repairs."""
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    base = _place_args(manifest, dest, tmp / "mirror")
    assert _fetch(*base)[0] == 0
    shard = dest / "model-1.safetensors"
    data = bytearray(shard.read_bytes())
    data[1000:1002] = b"\xff\xfe"
    shard.write_bytes(bytes(data))
    assert _fetch(*base)[1]["status"] == "present"
    rc, out, _ = _fetch(*base, "--verify-sha256")
    assert rc == 5 and "model-1.safetensors: sha256 " in out["error"]
    rc, out, err = _fetch(*base, "--verify-sha256", "--replace-mismatched")
    assert rc == 0 and out["replaced"] == ["model-1.safetensors"], err
    assert shard.read_bytes() == files["model-1.safetensors"].read_bytes()
    rc, out, _ = _fetch(*base, "--verify-sha256")
    assert rc == 0 and out["status"] == "present" and out["sha256_checked"] == 3


def test_a_stray_file_in_a_placed_model_is_reported_and_moved_out(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    base = _place_args(manifest, dest, tmp / "mirror")
    assert _fetch(*base)[0] == 0
    (dest / "model-1.safetensors.incomplete.bad").write_bytes(b"z" * 10)
    rc, out, _ = _fetch("verify", "--dir", str(dest))
    assert rc == 5 and out["problems"] == [
        "model-1.safetensors.incomplete.bad: not part of the model (a leftover or a file put "
        "there by hand)"
    ]
    rc, out, _ = _fetch(*base)
    assert rc == 5 and "model-1.safetensors.incomplete.bad: not part of the model" in out["error"]
    rc, out, err = _fetch(*base, "--replace-mismatched")
    assert rc == 0 and out["moved_out"] == ["model-1.safetensors.incomplete.bad"], err
    assert out["bytes_transferred"] == 0
    assert _fetch("verify", "--dir", str(dest))[1]["status"] == "ok"


def test_unpinned_patterns_hardlink_and_verify(tmp_path):
    _mirror(tmp_path / "mirror" / "tiny", {**SIZES, "README.md": 10, "original/x.pth": 7})
    manifest = _manifest_file(tmp_path, include=["*.json", "*.safetensors"])
    dest = tmp_path / "store" / "tiny" / "label-1"
    rc, out, err = _place(manifest, dest, tmp_path / "mirror", "--link", "hardlink")
    assert rc == 0, err
    assert _files(dest) == [
        ".rigup-manifest.json",
        "config.json",
        "model-1.safetensors",
        "sub/tok.json",
    ]
    assert out["bytes_transferred"] == 0  # hard links move no data
    rc, verdict, _ = _fetch("verify", "--manifest", str(manifest), "--dir", str(dest))
    assert rc == 0 and verdict["sha256_checked"] == 3
    (dest / "config.json").unlink()
    (dest / "config.json").write_bytes(b"y" * 100)  # same size, other bytes: only sha256 sees it
    rc, verdict, _ = _fetch("verify", "--dir", str(dest))
    want = sha256_of(tmp_path / "mirror" / "tiny" / "config.json")
    assert rc == 5 and verdict["problems"] == [
        f"config.json: sha256 {hashlib.sha256(b'y' * 100).hexdigest()}, {want} expected"
    ]


def test_backup_then_restore_from_the_backup(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    store = tmp / "store"
    assert _place(manifest, store / "tiny" / "label-1", tmp / "mirror")[0] == 0
    rc, backup, err = _fetch("backup", "--store", str(store), "--to", str(tmp / "backup"))
    assert rc == 0, err
    assert backup["bytes_transferred"] == sum(SIZES.values())
    assert backup["models"][0]["status"] == "copied"
    again = _fetch("backup", "--store", str(store), "--to", str(tmp / "backup"))[1]
    assert again["bytes_transferred"] == 0
    # rebuild: a new store, the backup as the only local dir
    rc, restored, err = _place(manifest, tmp / "new" / "tiny" / "label-1", tmp / "backup")
    assert rc == 0, err
    assert restored["layout"] == "rigup store/backup"
    assert restored["bytes_transferred"] == sum(SIZES.values())


# ---- never place a broken snapshot ------------------------------------------------------------
def _checkpoint(root: Path, shards: int = 2) -> None:
    """A sharded checkpoint's files: config, index naming ``shards`` shards, the shards."""
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    _mirror(root, {"config.json": 50, **{n: 4096 for n in names}})
    weight_map = {f"layer.{i}.weight": n for i, n in enumerate(names)}
    (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_a_local_copy_whose_index_names_a_shard_it_only_half_downloaded_is_refused(tmp_path):
    """The index names model-00002-of-00002.safetensors; only shard 1 is there, shard 2 only as
    an interrupted `hf download` (.cache/huggingface/download/<shard>.incomplete). Nothing is
    placed, and the message names the missing shard and where its download stopped."""
    src = tmp_path / "mirror" / "tiny"
    _checkpoint(src)
    shard2 = src / "model-00002-of-00002.safetensors"
    partial = src / ".cache" / "huggingface" / "download" / (shard2.name + ".incomplete")
    partial.parent.mkdir(parents=True)
    shard2.rename(partial)
    manifest = _manifest_file(tmp_path, include=["*.json", "*.safetensors"])
    dest = tmp_path / "store" / "tiny" / "label-1"
    rc, out, _ = _place(manifest, dest, tmp_path / "mirror")
    assert rc == 1 and not dest.exists()
    assert (
        f"{src} (mirror) is incomplete: model.safetensors.index.json names "
        "model-00002-of-00002.safetensors, which is missing (there is only an interrupted "
        "download of it: .cache/huggingface/download/model-00002-of-00002.safetensors.incomplete)"
    ) in out["error"]


def test_publishing_refuses_a_checkpoint_whose_index_names_a_missing_shard(tmp_path):
    """Whatever the source: a set of files whose index names a shard not among them is never
    renamed into place."""
    src = tmp_path / "mirror" / "tiny"
    _checkpoint(src)
    # a manifest listing the index and shard 1 only (a hand-written [[files]] list)
    files = [{"path": p} for p in ("config.json", "model.safetensors.index.json",
                                   "model-00001-of-00002.safetensors")]  # fmt: skip
    manifest = _manifest_file(tmp_path, files=files)
    dest = tmp_path / "store" / "tiny" / "label-1"
    rc, out, _ = _place(manifest, dest, tmp_path / "mirror")
    assert rc == 1 and not dest.exists()
    assert "model.safetensors.index.json names model-00002-of-00002.safetensors" in out["error"]


def test_verify_names_a_shard_missing_from_a_placed_checkpoint(tmp_path):
    src = tmp_path / "mirror" / "tiny"
    _checkpoint(src)
    manifest = _manifest_file(tmp_path, include=["*"])
    dest = tmp_path / "store" / "tiny" / "label-1"
    assert _place(manifest, dest, tmp_path / "mirror")[0] == 0
    (dest / "model-00002-of-00002.safetensors").unlink()
    rc, out, _ = _fetch("verify", "--dir", str(dest))
    assert rc == 5
    assert "model-00002-of-00002.safetensors: missing" in out["problems"]
    assert (
        "model.safetensors.index.json names model-00002-of-00002.safetensors, which is missing"
        in out["problems"]
    )


# ---- Hugging Face caches and the hub source ---------------------------------------------------
def test_pinned_snapshot_resolved_offline_from_a_hub_cache(mirror):
    """A Hugging Face cache (as `hf download` leaves it) as the local source: huggingface_hub
    itself resolves the pinned commit without the network."""
    tmp, files, pinned = mirror
    commit = build_hf_cache(tmp / "hub", "org/Tiny-Model", files)
    manifest = _manifest_file(tmp, state="locked", revision=commit, files=pinned)
    dest = tmp / "store" / "tiny" / commit
    rc, out, err = _place(manifest, dest, tmp / "hub", env={"HF_HOME": str(tmp / "hf-home")})
    assert rc == 0, err
    assert out["layout"] == f"Hugging Face cache (snapshot {commit})"
    assert out["from"] == str(tmp / "hub" / "models--org--Tiny-Model" / "snapshots" / commit)
    assert out["commit"] == commit
    assert not (dest / "config.json").is_symlink(), "placed files are real files, not links"
    # another commit than the cache holds: huggingface_hub finds nothing, the place fails clearly
    other = _manifest_file(tmp, state="locked", revision="f" * 40, files=pinned)
    rc, out, _ = _place(other, tmp / "store" / "tiny" / ("f" * 40), tmp / "hub")
    assert rc == 1 and "local: no copy under" in out["error"]


def test_unpinned_manifest_resolves_the_ref_in_a_hub_cache(mirror):
    tmp, files, _ = mirror
    commit = build_hf_cache(tmp / "hub", "org/Tiny-Model", files, ref="main")
    manifest = _manifest_file(tmp, include=["*"])
    rc, out, err = _place(manifest, tmp / "store" / "tiny" / "label-1", tmp / "hub")
    assert rc == 0, err
    assert out["layout"].endswith(f"(snapshot {commit})") and out["files"] == 3


class _Endpoint:
    """A TCP port on loopback that records the request line of each request made to it and
    answers 404: where a hub source sends its requests, it shows whether any were sent."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head and (chunk := conn.recv(4096)):
                    head += chunk
                self.requests.append(head.split(b"\r\n", 1)[0].decode())
                conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


def test_a_local_root_with_only_refs_leaves_the_hub_source_online(mirror):
    """model_sources = local, huggingface; the local root holds only
    models--org--Tiny-Model/refs/main (no snapshot): the local probe finds nothing, and the
    Hugging Face source then really contacts the endpoint (the probe must not have switched
    huggingface_hub offline in this process: it reads HF_HUB_OFFLINE once, at import)."""
    tmp, _, _ = mirror
    refs = tmp / "cache" / "models--org--Tiny-Model" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text("a" * 40)
    endpoint = _Endpoint()
    manifest = _manifest_file(tmp, include=["*"])
    rc, out, _ = _place(
        manifest,
        tmp / "store" / "tiny" / "label-1",
        tmp / "cache",
        "--sources",
        "local,huggingface",
        "--hf-endpoint",
        endpoint.url,
    )
    assert rc == 1
    assert "outgoing traffic has been disabled" not in out["error"], out["error"]
    assert endpoint.requests[:1] == ["GET /api/models/org/Tiny-Model/revision/main HTTP/1.1"]
    local_error, hub_error = out["error"].split(" | ")
    assert "local: no copy under" in local_error
    assert hub_error.startswith("huggingface: HfHubHTTPError: Client error '404 Not Found' for ")
    assert f"{endpoint.url}/api/models/org/Tiny-Model/revision/main" in hub_error


def test_the_local_probe_leaves_huggingface_hub_online_in_the_process(mirror):
    tmp, files, _ = mirror
    build_hf_cache(tmp / "hub", "org/Tiny-Model", files)
    code = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(FILES)!r})
        from modeltool.local import local_candidates
        m = {{"name": "tiny", "revision": "x", "repo_id": "org/Tiny-Model", "ref": "main",
              "commit": None}}
        found = local_candidates(m, [{str(tmp / "hub")!r}])
        import huggingface_hub.constants as c
        print(len(found), c.HF_HUB_OFFLINE, os.environ.get("HF_HUB_OFFLINE"))
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["1", "False", "None"], out.stderr


def test_modelscope_needs_a_lock(mirror):
    tmp, _, _ = mirror
    manifest = _manifest_file(tmp, modelscope_id="ms-org/Tiny")
    rc, out, _ = _fetch(
        "place", "--manifest", str(manifest), "--dest", str(tmp / "s" / "t" / "r"),
        "--sources", "modelscope",
    )  # fmt: skip
    assert rc == 1
    assert "modelscope: manifest tiny has no lock" in out["error"]


def test_hub_expectations_of_a_first_placement():
    """First-run locking, host side: at the resolved commit each wanted file is expected to have
    the size and hash the hub publishes (the LFS sha256, else the git blob id)."""
    tree = {
        "config.json": hub.HubFile("config.json", 50, blob_id="b" * 40),
        "w.safetensors": hub.HubFile("w.safetensors", 4096, sha256="c" * 64),
        "README.md": hub.HubFile("README.md", 9, blob_id="d" * 40),
    }
    m = parse_manifest(_raw(include=["*.json", "*.safetensors"])).to_json()
    got = hub_sources.hub_expectations(m, "e" * 40, tree)
    assert [(f["dest"], e) for f, e in got] == [
        ("config.json", {"size": 50, "sha256": None, "blob_id": "b" * 40}),
        ("w.safetensors", {"size": 4096, "sha256": "c" * 64, "blob_id": None}),
    ]
    listed = parse_manifest(_raw(files=[{"path": "vae.safetensors"}])).to_json()
    with pytest.raises(layout.SourceError, match="at e{40} has no vae.safetensors"):
        hub_sources.hub_expectations(listed, "e" * 40, tree)


def test_a_downloaded_file_that_differs_from_the_hubs_blob_id_is_rejected(tmp_path):
    partial = tmp_path / ".label-1.partial"
    partial.mkdir()
    (partial / "config.json.incomplete").write_bytes(b"{}")
    f = {"path": "config.json", "dest": "config.json"}
    with pytest.raises(layout.FetchError, match="git blob id .*expected \\(the hub's\\)"):
        partial_area.finish_file(
            partial, f, "huggingface@x", size=2, sha256=None, got_sha256="0" * 64,
            blob_id="1" * 40, got_blob_id="2" * 40,
        )  # fmt: skip
    assert (tmp_path / ".label-1.rejected" / "config.json.bad").exists()


# ---- one transfer at a time; interruptions -----------------------------------------------------
def test_a_second_transfer_of_the_same_model_waits_then_refuses(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    lock = partial_area._lock_path(dest, str(tmp))
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("pid 4242, since 2026-11-30T12:00:00Z\n")
        held.flush()
        rc, out, err = _place(
            manifest, dest, tmp / "mirror", "--lock-dir", str(tmp), "--lock-wait", "1"
        )
    assert rc == 4 and not dest.exists()
    assert (
        f"another transfer of {dest} is running (pid 4242, since 2026-11-30T12:00:00Z)"
        in (out["error"])
    )
    assert "waiting for another transfer" in err


_GUARDED = """
import json, sys, time
sys.path.insert(0, {files!r})
from modeltool.progress import Guard, Progress
def record(reason):
    open({report!r}, "w").write(json.dumps({{"status": "interrupted", "reason": reason}}))
with Guard(record):
    print("ready", flush=True)
    time.sleep(30)
"""


def _guarded(tmp_path) -> tuple[subprocess.Popen, Path]:
    report = tmp_path / "report.json"
    code = _GUARDED.format(files=str(FILES), report=str(report))
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout.readline() == b"ready\n"
    return proc, report


def test_a_signal_is_recorded_as_an_interruption(tmp_path):
    proc, report = _guarded(tmp_path)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 130
    assert json.loads(report.read_text()) == {"status": "interrupted", "reason": "signal SIGTERM"}


def test_the_loss_of_the_controller_is_recorded_as_an_interruption(tmp_path):
    """The controller is killed: the pipes its SSH session gave the tool close. The tool sees it
    within a second and records an interruption, not a failure of the source it was using."""
    proc, report = _guarded(tmp_path)
    proc.stdout.close()
    proc.stderr.close()
    assert proc.wait(timeout=10) == 130
    assert json.loads(report.read_text())["reason"].startswith("the controller's connection closed")


def test_an_interrupted_result_says_where_it_stopped(tmp_path):
    cli = importlib.import_module("modeltool.cli")
    progress = importlib.import_module("modeltool.progress").Progress("x", 100)
    progress.done = 42
    place.current.clear()
    place.current.update(progress=progress, dest="/s/m/r", partial="/s/m/.r.partial")
    result = cli.interrupted_result("place", "signal SIGINT", 0.0)
    assert result["status"] == "interrupted" and result["bytes_transferred"] == 42
    assert result["partial"] == "/s/m/.r.partial" and result["reason"] == "signal SIGINT"
    place.current.clear()


# ---- pure parts -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rel,transient",
    [
        (".cache/huggingface/download/w.safetensors.metadata", True),
        ("w.safetensors.incomplete", True),
        ("w.safetensors.incomplete.bad", True),
        ("w.safetensors.a1b2c3d4.incomplete", True),
        (".rigup-verified.jsonl", True),
        ("model-00001-of-00002.safetensors", False),
        ("tokenizer.json", False),
    ],
)
def test_what_is_a_transfers_leftover(rel, transient):
    assert snapshot.is_transient(rel) is transient


def test_opts_of_the_command_line_match_what_the_tool_reads():
    """The options the tool's functions read exist on the command line (a renamed option
    would otherwise surface only on a host)."""
    cli = importlib.import_module("modeltool.cli")
    opts = cli.build_parser().parse_args(["place", "--manifest", "m", "--dest", "d"])
    assert isinstance(opts, argparse.Namespace)
    for name in ("local_dir", "link", "hf_endpoint", "hf_token_file", "modelscope_endpoint",
                 "modelscope_token_file", "replace_mismatched", "verify_sha256", "report",
                 "spare_bytes", "lock_dir", "lock_wait"):  # fmt: skip
        assert hasattr(opts, name), name
