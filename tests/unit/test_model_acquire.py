"""Model acquisition on the controller: manifests and their locks, the fetch command line, the
checks of a placed copy and the facts of roles/model. (The on-host tool itself:
tests/unit/test_model_tool.py.)"""

from __future__ import annotations

import pytest

from roles.model import PlacedModel, placed_path
from roles.model.commands import fetch_argv, placed_problems
from roles.model.facts import ModelCandidates
from roles.model.manifest import MANIFEST_DIR, ManifestError, load_manifest, parse_manifest

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
        "TMPDIR=/var/tmp/rigup HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_DISABLE_PROGRESS_BARS=1 "
        "PYTHONDONTWRITEBYTECODE=1 /opt/rigup/model/venv/bin/python"
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


def test_model_candidates_command_and_output():
    fact = ModelCandidates()
    cmd = fact.command("m", "r", "M", "models--o--M", ["/srv/mirror", "/mnt/b"])
    assert "test -d /srv/mirror/m/r" in cmd and "test -d /mnt/b/models--o--M" in cmd
    out = fact.process(["store /mnt/b/m/r", "mirror /srv/mirror/M", "hf-cache /mnt/b", "junk"])
    assert out == [("/mnt/b/m/r", "store"), ("/srv/mirror/M", "mirror"), ("/mnt/b", "hf-cache")]
    assert fact.command("m", "r", "M", "c", []) == "true"


def test_placed_problems_by_size_with_text_only_original():
    m = parse_manifest(
        _raw(files=[{"path": "config.json", "size": 10}, {"path": "w.safetensors", "size": 100}])
    )
    rec = {".rigup-manifest.json": 300}
    assert placed_problems(m, None, {"config.json": 10, "w.safetensors": 100, **rec}) == []
    # rigup's strip edit changes config.json; the kept original is what must match
    sizes = {"config.json": 7, "config.json.rigup-orig": 10, "w.safetensors": 100, **rec}
    assert placed_problems(m, None, sizes) == []
    assert placed_problems(m, None, {"config.json": 10, "w.safetensors": 99, **rec}) == [
        "w.safetensors: 99 bytes, 100 expected"
    ]
    unpinned = parse_manifest(_raw())
    record = {"files": [{"dest": "a", "path": "a", "size": 5, "sha256": "0" * 64}]}
    assert placed_problems(unpinned, record, {}) == ["a: missing"]


def test_placed_problems_name_leftovers_and_bytes_other_than_the_lock():
    """A placed model holds the model and its record, nothing else; a copy recorded with
    other bytes than its lock pins is reported (no hashing needed: the record says so)."""
    m = parse_manifest(
        _raw(
            state="locked",
            revision="c" * 40,
            files=[{"path": "w.safetensors", "size": 4, "sha256": "a" * 64}],
        )
    )
    record = {"files": [{"dest": "w.safetensors", "path": "w.safetensors", "size": 4,
                         "sha256": "b" * 64}]}  # fmt: skip
    sizes = {
        "w.safetensors": 4,
        ".rigup-manifest.json": 200,
        "w.safetensors.incomplete.bad": 4,
        "notes.txt": 3,
    }
    assert placed_problems(m, record, sizes) == [
        f"w.safetensors: placed with sha256 {'b' * 64}, {'a' * 64} expected",
        "notes.txt: not part of the model",
        "w.safetensors.incomplete.bad: not part of the model",
    ]


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


# ---- locks ------------------------------------------------------------------------------------
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _manifest_toml(tmp_path, name: str = "tiny", body: str = "") -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'format = 1\nname = "{name}"\nstate = "unpinned"\nrepo_id = "org/Tiny-Model"\n'
        f'ref = "main"\nrevision = "label-1"\n{body}'
    )
    return str(path)


def _lock(tmp_path, name: str = "tiny", lock_dir=None, **over) -> None:
    from roles.model.commands import lockfile

    args = dict(
        name=name,
        repo_id="org/Tiny-Model",
        ref="main",
        commit=COMMIT,
        files=[
            {"path": "config.json", "size": 10, "sha256": "1" * 64},
            {"path": "w.safetensors", "size": 100, "sha256": "2" * 64},
        ],
        patterns=(["*.json", "*.safetensors"], []),
    )
    args.update(over)
    ((lock_dir or tmp_path) / f"{name}.lock").write_text(lockfile.lock_text(**args))


def test_an_unpinned_manifest_with_its_lock_is_pinned_to_the_commit(tmp_path):
    path = _manifest_toml(tmp_path, body='include = ["*.json", "*.safetensors"]\n')
    assert not load_manifest(path).locked
    _lock(tmp_path)
    m = load_manifest(path)
    assert m.locked and m.commit == COMMIT and m.state == "unpinned"
    assert m.revision == "label-1", "the placed directory keeps its name"
    assert m.lock_file == str(tmp_path / "tiny.lock")
    assert m.total_bytes == 110
    assert m.to_json()["commit"] == COMMIT
    assert [f["sha256"] for f in m.to_json()["files"]] == ["1" * 64, "2" * 64]


def test_a_lock_in_model_lock_dir_is_used_instead_of_one_beside_the_manifest(tmp_path):
    path = _manifest_toml(tmp_path, body='include = ["*.json", "*.safetensors"]\n')
    locks = tmp_path / "locks"
    locks.mkdir()
    _lock(tmp_path, lock_dir=locks)
    assert not load_manifest(path).locked
    assert load_manifest(path, str(locks)).commit == COMMIT


def test_a_lock_keeps_the_manifests_dests(tmp_path):
    body = '[[files]]\npath = "split/f.safetensors"\ndest = "vae/f.safetensors"\n'
    path = _manifest_toml(tmp_path, body=body)
    _lock(
        tmp_path,
        files=[{"path": "split/f.safetensors", "size": 3, "sha256": "3" * 64}],
        patterns=None,
    )
    (f,) = load_manifest(path).files
    assert (f.path, f.dest, f.size) == ("split/f.safetensors", "vae/f.safetensors", 3)


@pytest.mark.parametrize(
    "over,fragment",
    [
        ({"ref": "v2"}, "ref: the lock is for 'v2', the manifest says 'main'"),
        ({"repo_id": "other/Model"}, "repo_id: the lock is for 'other/Model'"),
        ({"commit": "main"}, "commit: must be the 40-hex commit"),
        ({"patterns": (["*"], [])}, "include: the lock was made for ['*']"),
        (
            {"files": [{"path": "README.md", "size": 1, "sha256": "4" * 64}]},
            "the manifest's patterns do not select ['README.md']",
        ),
    ],
)
def test_a_lock_made_for_another_manifest_is_refused(tmp_path, over, fragment):
    path = _manifest_toml(tmp_path, body='include = ["*.json", "*.safetensors"]\n')
    _lock(tmp_path, **over)
    with pytest.raises(ManifestError, match="nothing was changed") as err:
        load_manifest(path)
    assert fragment in str(err.value) and "Delete the lock" in str(err.value)


def test_settings_name_a_lock_that_does_not_fit(settings, tmp_path):
    from roles.settings import validate

    path = _manifest_toml(tmp_path, body='include = ["*.json", "*.safetensors"]\n')
    _lock(tmp_path, ref="v2")
    settings["model_llm_manifest"] = path
    (problem,) = validate(settings)
    assert problem.startswith("model_llm_manifest: model lock ") and "ref:" in problem


def test_the_lock_written_after_a_first_placement_pins_what_was_placed(tmp_path):
    """First-run locking, controller side: the record of a placement from Hugging Face (commit,
    every file's size and sha256) becomes a lock that load_manifest accepts and pins."""
    from roles.model.operations import lock_from_record

    path = _manifest_toml(tmp_path, body='include = ["*.json", "*.safetensors"]\n')
    record = {
        "source": "huggingface",
        "commit": COMMIT,
        "endpoint": "http://127.0.0.1:22222",
        "placed_at": "2026-11-30T12:00:00Z",
        "files": [
            {"path": "w.safetensors", "dest": "w.safetensors", "size": 7, "sha256": "5" * 64},
            {"path": "config.json", "dest": "config.json", "size": 2, "sha256": "6" * 64},
        ],
    }
    text = lock_from_record(load_manifest(path), record, "rig-1")
    assert "# Locked on rig-1 at 2026-11-30T12:00:00Z, from http://127.0.0.1:22222." in text
    (tmp_path / "tiny.lock").write_text(text)
    m = load_manifest(path)
    assert m.locked and m.commit == COMMIT
    assert {f.path: f.sha256 for f in m.files} == {
        "config.json": "6" * 64,
        "w.safetensors": "5" * 64,
    }


def test_fetch_command_asks_for_full_verification_when_set(settings):
    settings["model_verify_sha256"] = True
    cmd = fetch_argv(settings, load_manifest(LLM), "/m.json", "/d")
    assert cmd.endswith("--verify-sha256")
