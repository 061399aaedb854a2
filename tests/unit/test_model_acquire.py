"""Model acquisition: manifests, the on-target tool (files/model/model_fetch.py) run for real on
local directories and on a constructed Hugging Face cache (huggingface_hub offline), the fetch
command line and the facts of roles/model."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.hf_cache import build_hf_cache, sha256_of
from roles.model import PlacedModel, placed_path
from roles.model.commands import fetch_argv, model_fetch, placed_mismatches
from roles.model.facts import FreeBytes, ModelCandidates
from roles.model.manifest import MANIFEST_DIR, ManifestError, load_manifest, parse_manifest

SCRIPT = Path(model_fetch.__file__)
LLM = "qwen3.6-27b-int4-autoround"


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


# ---- manifests ------------------------------------------------------------------------------
def test_every_shipped_manifest_is_valid():
    names = [p.stem for p in MANIFEST_DIR.glob("*.toml")]
    assert LLM in names
    for name in names:
        assert load_manifest(name).name == name


def test_llm_manifest_is_honestly_unpinned():
    """No commit or hub sha256 is known here: the LLM manifest must not pretend otherwise."""
    m = load_manifest(LLM)
    assert m.state == "unpinned" and not m.locked
    assert all(f.sha256 is None for f in m.files)
    assert m.selects("model-00001-of-00004.safetensors") and m.selects("config.json")
    assert not m.selects("original/consolidated.pth")


@pytest.mark.parametrize(
    "over,fragment",
    [
        (
            {"state": "locked", "files": [{"path": "a", "size": 1, "sha256": "0" * 64}]},
            "40-hex commit",
        ),
        (
            {"state": "locked", "revision": "a" * 40, "files": [{"path": "a"}]},
            "needs size and sha256",
        ),
        ({"state": "locked", "revision": "a" * 40}, "lists every file"),
        ({"files": [{"path": "../etc/passwd"}]}, "without '..'"),
        ({"files": [{"path": "a", "dest": "/abs"}]}, "dest: must be a relative path"),
        ({"files": [{"path": "a", "dest": "x"}, {"path": "b", "dest": "x"}]}, "same dest"),
        ({"files": [{"path": "a", "sha256": "ABC"}]}, "64 lowercase hex"),
        ({"files": [{"path": "a", "size": -1}]}, "byte count"),
        ({"files": [{"path": "a", "md5": "x"}]}, "unknown keys ['md5']"),
        ({"repo_id": "no-slash"}, "org/name"),
        ({"format": 2}, "format: must be 1"),
        ({"revision": "main branch"}, "revision: must be a commit or a label"),
        ({"mirror": "x"}, "unknown keys ['mirror']"),
    ],
)
def test_bad_manifest_is_refused_with_the_reason(over, fragment):
    with pytest.raises(ManifestError, match="nothing was changed") as err:
        parse_manifest(_raw(**over))
    assert fragment in str(err.value)


def test_name_must_match_file(tmp_path):
    path = tmp_path / "other.toml"
    path.write_text(
        'format = 1\nname = "tiny"\nstate = "unpinned"\nrepo_id = "a/b"\nrevision = "x"\n'
    )
    with pytest.raises(ManifestError, match=r"must equal the file name \(other.toml\)"):
        load_manifest(str(path))


def test_unknown_manifest_names_the_known_ones():
    with pytest.raises(ManifestError, match=f"known manifests: .*{LLM}"):
        load_manifest("nope")


def test_comfyui_style_dest_and_placed_path(settings):
    m = parse_manifest(
        _raw(
            files=[
                {"path": "flux.safetensors", "dest": "diffusion_models/flux.safetensors", "size": 3}
            ]
        )
    )
    assert m.files[0].dest == "diffusion_models/flux.safetensors"
    assert m.total_bytes == 3
    assert (
        placed_path(settings, LLM) == "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"
    )


# ---- the fetch command line and the token ---------------------------------------------------
def test_fetch_command_passes_the_token_file_never_the_token(settings, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_sEcReT0123456789")
    settings.update(
        model_sources=["local", "huggingface", "modelscope"],
        hf_endpoint="https://hf-mirror.com",
        model_local_dirs=["/mnt/backup/rigup models", "/srv/mirror"],
        model_replace_mismatched=True,
    )
    m = load_manifest(LLM)
    cmd = fetch_argv(settings, m, "/etc/rigup/model/manifests/x.json", "/srv/rigup/models/x/y")
    assert "hf_sEcReT" not in cmd
    assert "--hf-token-file /etc/rigup/model/secrets/hf-token" in cmd
    assert "--modelscope-token-file /etc/rigup/model/secrets/modelscope-token" in cmd
    assert "--sources local,huggingface,modelscope" in cmd
    assert "--hf-endpoint https://hf-mirror.com" in cmd
    assert "--local-dir '/mnt/backup/rigup models' --local-dir /srv/mirror" in cmd
    assert cmd.endswith("--replace-mismatched")
    assert cmd.startswith(
        "TMPDIR=/var/tmp/rigup HF_HUB_DISABLE_TELEMETRY=1 /opt/rigup/model/venv/bin/python"
    )


def test_fetch_command_without_hub_has_no_token_file(settings):
    cmd = fetch_argv(
        settings | {"model_sources": ["local"]},
        load_manifest(LLM),
        "/m.json",
        "/d",
    )
    assert "--hf-token-file" not in cmd and "--replace-mismatched" not in cmd


# ---- facts ----------------------------------------------------------------------------------
def test_free_bytes_reads_df_output():
    assert FreeBytes().process(["    Avail", "512110190592"]) == 512110190592
    assert FreeBytes().process([]) is None


def test_model_candidates_command_and_output():
    fact = ModelCandidates()
    cmd = fact.command("m", "r", "M", "models--o--M", ["/srv/mirror", "/mnt/b"])
    assert "test -d /srv/mirror/m/r" in cmd and "test -d /mnt/b/models--o--M" in cmd
    out = fact.process(["store /mnt/b/m/r", "mirror /srv/mirror/M", "hf-cache /mnt/b", "junk"])
    assert out == [("/mnt/b/m/r", "store"), ("/srv/mirror/M", "mirror"), ("/mnt/b", "hf-cache")]
    assert fact.command("m", "r", "M", "c", []) == "true"


def test_placed_mismatches_by_size_with_text_only_original():
    m = parse_manifest(
        _raw(files=[{"path": "config.json", "size": 10}, {"path": "w.safetensors", "size": 100}])
    )
    assert placed_mismatches(m, None, {"config.json": 10, "w.safetensors": 100}) == []
    # rigup's strip edit changes config.json; the kept original is what must match
    assert (
        placed_mismatches(
            m, None, {"config.json": 7, "config.json.rigup-orig": 10, "w.safetensors": 100}
        )
        == []
    )
    assert placed_mismatches(m, None, {"config.json": 10, "w.safetensors": 99}) == [
        "w.safetensors: 99 bytes, 100 expected"
    ]
    unpinned = parse_manifest(_raw())
    record = {"files": [{"dest": "a", "path": "a", "size": 5, "sha256": "0" * 64}]}
    assert placed_mismatches(unpinned, record, {}) == ["a: missing"]


def test_placed_model_shape():
    m = parse_manifest(_raw(files=[{"path": "f.safetensors", "dest": "vae/f.safetensors"}]))
    placed = PlacedModel(
        m.name,
        m.revision,
        "/s/tiny/label-1",
        {"vae/f.safetensors": "/s/tiny/label-1/vae/f.safetensors"},
        m,
    )
    assert placed.files["vae/f.safetensors"].startswith(placed.path + "/")


# ---- model_fetch.py for real, on local directories ------------------------------------------
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


SIZES = {"config.json": 100, "model-1.safetensors": 3 * 2**20 + 5, "sub/tok.json": 40}


@pytest.fixture
def mirror(tmp_path):
    files = _mirror(tmp_path / "mirror" / "Tiny-Model", SIZES)
    pinned = [
        {"path": rel, "size": p.stat().st_size, "sha256": sha256_of(p)} for rel, p in files.items()
    ]
    return tmp_path, files, pinned


def test_local_place_then_rerun_transfers_nothing(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    args = _place_args(manifest, dest, tmp / "mirror")
    rc, first, err = _fetch(*args)
    assert rc == 0, err
    assert first["status"] == "placed" and first["layout"] == "mirror"
    assert first["bytes_transferred"] == sum(SIZES.values()) == first["bytes_total"]
    assert (
        f"place: placed: {sum(SIZES.values()):,} B (3.1 MB) transferred in" in err
    )  # bytes, time, rate
    record = json.loads((dest / ".rigup-manifest.json").read_text())
    assert {f["dest"]: f["sha256"] for f in record["files"]} == {
        f["path"]: f["sha256"] for f in pinned
    }
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
    (partial / ".rigup-verified.jsonl").write_text(
        json.dumps(
            {
                "dest": "config.json",
                "path": "config.json",
                "size": 100,
                "sha256": pinned[0]["sha256"],
            }
        )
        + "\n"
    )
    half = files["model-1.safetensors"].read_bytes()[: 2**20]
    (partial / "model-1.safetensors.incomplete").write_bytes(half)
    rc, out, err = _place(manifest, dest, tmp / "mirror")
    assert rc == 0, err
    assert out["bytes_transferred"] == SIZES["model-1.safetensors"] - 2**20 + SIZES["sub/tok.json"]
    assert (dest / "model-1.safetensors").read_bytes() == files["model-1.safetensors"].read_bytes()


def test_sha256_mismatch_stops_before_anything_is_placed(mirror):
    tmp, files, pinned = mirror
    pinned[1]["sha256"] = "0" * 64
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    rc, out, _ = _place(manifest, dest, tmp / "mirror")
    assert rc == 1 and out["status"] == "error"
    assert "model-1.safetensors: sha256" in out["error"] and "0" * 64 + " expected" in out["error"]
    assert not dest.exists()
    assert (dest.parent / ".label-1.partial" / "model-1.safetensors.incomplete.bad").exists()


def test_not_enough_space_says_the_numbers(mirror, monkeypatch):
    tmp, files, pinned = mirror
    pinned[1]["size"] = 10**18  # an exabyte: no disk here has that
    manifest = _manifest_file(tmp, files=pinned)
    rc, out, _ = _place(manifest, tmp / "s" / "tiny" / "x", tmp / "mirror")
    assert rc == 3
    assert "not enough free space for tiny@label-1" in out["error"] and "GB free" in out["error"]


def test_mismatching_placed_file_is_kept_unless_replacement_is_allowed(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    dest = tmp / "store" / "tiny" / "label-1"
    base = _place_args(manifest, dest, tmp / "mirror")
    assert _fetch(*base)[0] == 0
    target = dest / "sub" / "tok.json"
    target.write_bytes(b"edited by someone")
    rc, out, _ = _fetch(*base)
    assert rc == 0 and out["status"] == "mismatch"
    assert out["kept"] == ["sub/tok.json: 17 bytes, 40 expected"]
    assert target.read_bytes() == b"edited by someone"
    rc, out, err = _fetch(*base, "--replace-mismatched")
    assert rc == 0 and out["status"] == "repaired", err
    assert target.read_bytes() == files["sub/tok.json"].read_bytes()
    (aside,) = out["kept_aside"]
    assert Path(aside).read_bytes() == b"edited by someone"


def test_unpinned_patterns_hardlink_and_verify(tmp_path):
    _mirror(tmp_path / "mirror" / "tiny", {**SIZES, "README.md": 10, "original/x.pth": 7})
    manifest = _manifest_file(tmp_path, include=["*.json", "*.safetensors"])
    dest = tmp_path / "store" / "tiny" / "label-1"
    rc, out, err = _place(manifest, dest, tmp_path / "mirror", "--link", "hardlink")
    assert rc == 0, err
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
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
    rc, verdict, _ = _fetch("verify", "--manifest", str(manifest), "--dir", str(dest))
    assert rc == 1 and verdict["problems"] == [
        f"config.json: sha256 differs from {sha256_of(tmp_path / 'mirror' / 'tiny' / 'config.json')}"
    ]


def test_backup_then_restore_from_the_backup(mirror):
    tmp, files, pinned = mirror
    manifest = _manifest_file(tmp, files=pinned)
    store = tmp / "store"
    assert _place(manifest, store / "tiny" / "label-1", tmp / "mirror")[0] == 0
    rc, backup, err = _fetch("backup", "--store", str(store), "--to", str(tmp / "backup"))
    assert rc == 0, err
    assert backup["bytes_transferred"] == sum(SIZES.values())
    assert (
        json.loads((tmp / "backup" / "rigup-backup.json").read_text())["models"][0]["status"]
        == "copied"
    )
    assert (
        _fetch("backup", "--store", str(store), "--to", str(tmp / "backup"))[1]["bytes_transferred"]
        == 0
    )
    # rebuild: a new store, the backup as the only local dir
    rc, restored, err = _place(manifest, tmp / "new" / "tiny" / "label-1", tmp / "backup")
    assert rc == 0, err
    assert restored["layout"] == "rigup store/backup" and restored["bytes_transferred"] == sum(
        SIZES.values()
    )


def test_hub_sources_refuse_an_unpinned_manifest(mirror):
    tmp, _, _ = mirror
    manifest = _manifest_file(tmp)
    rc, out, _ = _fetch(
        "place",
        "--manifest",
        str(manifest),
        "--dest",
        str(tmp / "s" / "t" / "r"),
        "--sources",
        "huggingface",
    )
    assert rc == 1
    assert (
        "huggingface: manifest tiny is unpinned" in out["error"] and "model_lock.py" in out["error"]
    )


# ---- huggingface_hub resolving a pinned snapshot offline ------------------------------------
def test_pinned_snapshot_resolved_offline_from_a_hub_cache(mirror):
    """A Hugging Face cache (as `hf download` leaves it) as the local source: huggingface_hub
    itself resolves the pinned commit with HF_HUB_OFFLINE=1; no network is touched."""
    tmp, files, pinned = mirror
    commit = build_hf_cache(tmp / "hub", "org/Tiny-Model", files)
    manifest = _manifest_file(tmp, state="locked", revision=commit, files=pinned)
    dest = tmp / "store" / "tiny" / commit
    rc, out, err = _place(
        manifest, dest, tmp / "hub", env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf-home")}
    )
    assert rc == 0, err
    assert out["layout"] == f"Hugging Face cache (snapshot {commit})"
    assert out["from"] == str(tmp / "hub" / "models--org--Tiny-Model" / "snapshots" / commit)
    assert not (dest / "config.json").is_symlink(), (
        "placed files must be real files, not cache links"
    )
    # another commit than the cache holds: huggingface_hub finds nothing, the place fails clearly
    other = _manifest_file(tmp, state="locked", revision="f" * 40, files=pinned)
    rc, out, _ = _place(
        other, tmp / "store" / "tiny" / ("f" * 40), tmp / "hub", env={"HF_HUB_OFFLINE": "1"}
    )
    assert rc == 1 and "local: no copy under" in out["error"]


def test_unpinned_manifest_resolves_the_ref_in_a_hub_cache(mirror):
    tmp, files, _ = mirror
    commit = build_hf_cache(tmp / "hub", "org/Tiny-Model", files, ref="main")
    manifest = _manifest_file(tmp, include=["*"])
    rc, out, err = _place(
        manifest, tmp / "store" / "tiny" / "label-1", tmp / "hub", env={"HF_HUB_OFFLINE": "1"}
    )
    assert rc == 0, err
    assert out["layout"].endswith(f"(snapshot {commit})") and out["files"] == 3


# ---- the lock command's pure part (its hub calls need network: not exercised here) ----------
def _lock_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("model_lock", SCRIPT.parent / "model_lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lock_writes_a_manifest_that_parses_as_locked(tmp_path):
    import tomllib

    lock = _lock_module()
    text = (MANIFEST_DIR / f"{LLM}.toml").read_text()
    raw = tomllib.loads(text)
    repo_files = ["config.json", "model-00001-of-00002.safetensors", "README.md", "original/a.pth"]
    files = lock.wanted(raw, repo_files)
    assert [f["path"] for f in files] == [
        "README.md",
        "config.json",
        "model-00001-of-00002.safetensors",
    ]
    for i, f in enumerate(files):
        f.update(size=10 + i, sha256=f"{i:064x}")
    out = lock.locked_text(raw, "c" * 40, files, lock.leading_comments(text))
    assert out.startswith("# The LLM")
    path = tmp_path / f"{LLM}.toml"
    path.write_text(out)
    m = load_manifest(str(path))
    assert m.locked and m.revision == "c" * 40 and m.total_bytes == 33
    assert list(m.include) == raw["include"] and m.description == raw["description"]


def test_lock_keeps_comfyui_dests():
    lock = _lock_module()
    raw = _raw(files=[{"path": "flux.safetensors", "dest": "diffusion_models/flux.safetensors"}])
    (f,) = lock.wanted(raw, ["flux.safetensors"])
    f.update(size=1, sha256="a" * 64)
    m = parse_manifest(tomllib_loads(lock.locked_text(raw, "d" * 40, [f])))
    assert m.files[0].dest == "diffusion_models/flux.safetensors" and m.locked


def tomllib_loads(text: str) -> dict:
    import tomllib

    return tomllib.loads(text)


# ---- hub sources: the calls into huggingface_hub / modelscope -------------------------------
# The hubs cannot be reached from here, so the network call itself is replaced by a stand-in that
# records its arguments and writes the files a download would; everything around it (token file,
# pinned revision, endpoint, verification, atomic publish) runs for real.
def _opts(manifest: Path, dest: Path, sources: str, **over):
    import argparse

    base = dict(
        manifest=str(manifest), dest=str(dest), sources=sources, local_dir=[], link="copy",
        hf_endpoint="", hf_token_file="", modelscope_endpoint="", replace_mismatched=False,
        report="", spare_bytes=0, modelscope_token_file="",
    )  # fmt: skip
    return argparse.Namespace(**{**base, **over})


def _download_stand_in(calls: list, files: dict[str, Path], real):
    import inspect

    def snapshot_download(*args, **kwargs):
        inspect.signature(real).bind(*args, **kwargs)  # TypeError on an argument it lacks
        calls.append((args, kwargs))
        target = Path(kwargs["local_dir"])
        for rel in kwargs["allow_patterns"]:
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).write_bytes(files[rel].read_bytes())
        return str(target)

    return snapshot_download


def _stand_in(monkeypatch, library, calls: list, files: dict[str, Path]) -> None:
    """Replace ``library.snapshot_download`` (the network call) by the stand-in."""
    stand_in = _download_stand_in(calls, files, library.snapshot_download)
    monkeypatch.setattr(library, "snapshot_download", stand_in)


def test_huggingface_source_pins_the_commit_and_reads_the_token_file(mirror, monkeypatch):
    import huggingface_hub

    tmp, files, pinned = mirror
    commit = "b" * 40
    manifest = _manifest_file(tmp, state="locked", revision=commit, files=pinned)
    token_file = tmp / "hf-token"
    token_file.write_text("hf_fromTheFile\n")
    calls: list = []
    _stand_in(monkeypatch, huggingface_hub, calls, files)
    dest = tmp / "store" / "tiny" / commit
    opts = _opts(
        manifest,
        dest,
        "huggingface",
        hf_token_file=str(token_file),
        hf_endpoint="https://hf-mirror.com",
    )
    result = model_fetch.cmd_place(opts)
    assert result["status"] == "placed" and result["source"] == "huggingface"
    ((args, kwargs),) = calls
    assert args == ("org/Tiny-Model",)
    assert kwargs["revision"] == commit and kwargs["token"] == "hf_fromTheFile"
    assert kwargs["endpoint"] == "https://hf-mirror.com"
    assert sorted(kwargs["allow_patterns"]) == sorted(SIZES)
    assert kwargs["local_dir"] == str(dest.parent / f".{commit}.partial" / ".download")
    assert not (dest / ".download").exists(), "the libraries' resume state is not published"
    assert (dest / "model-1.safetensors").read_bytes() == files["model-1.safetensors"].read_bytes()


def test_huggingface_download_that_does_not_match_is_not_placed(mirror, monkeypatch):
    import huggingface_hub

    tmp, files, pinned = mirror
    pinned[0]["sha256"] = "1" * 64
    manifest = _manifest_file(tmp, state="locked", revision="c" * 40, files=pinned)
    _stand_in(monkeypatch, huggingface_hub, [], files)
    dest = tmp / "store" / "tiny" / ("c" * 40)
    with pytest.raises(model_fetch.FetchError, match="config.json: sha256"):
        model_fetch.cmd_place(_opts(manifest, dest, "huggingface"))
    assert not dest.exists()


def test_modelscope_source_uses_its_own_id_and_revision(mirror, monkeypatch):
    import modelscope

    tmp, files, pinned = mirror
    manifest = _manifest_file(
        tmp,
        state="locked",
        revision="d" * 40,
        files=pinned,
        modelscope_id="ms-org/Tiny",
        modelscope_revision="v1.0",
    )
    token_file = tmp / "ms-token"
    token_file.write_text("ms-token-value\n")
    calls: list = []
    _stand_in(monkeypatch, modelscope, calls, files)
    opts = _opts(
        manifest,
        tmp / "s" / "tiny" / ("d" * 40),
        "modelscope",
        modelscope_token_file=str(token_file),
        modelscope_endpoint="https://ms-mirror.example",
    )
    result = model_fetch.cmd_place(opts)
    assert result["source"] == "modelscope"
    kwargs = calls[0][1]
    assert kwargs["model_id"] == "ms-org/Tiny" and kwargs["revision"] == "v1.0"
    assert kwargs["token"] == "ms-token-value" and kwargs["endpoint"] == "https://ms-mirror.example"


def test_lab_summary_line_of_a_transfer():
    from lab.scenario import format_transfer

    report = {
        "status": "placed",
        "dest": "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11",
        "source": "local",
        "from": "/srv/mirror/Qwen3.6-27B-int4-AutoRound",
        "layout": "mirror",
        "bytes_transferred": 466428,
        "seconds": 0.08,
        "rate_mb_s": 5.7,
    }
    assert format_transfer(report) == (
        "model qwen3.6-27b-int4-autoround@mirror-2026-11: placed from "
        "/srv/mirror/Qwen3.6-27B-int4-AutoRound (mirror), 466,428 B moved in 0.08 s, 5.7 MB/s"
    )
