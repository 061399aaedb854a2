"""lab/comfyui_source.py with an sdist made here (the real one is read by
tests/unit/test_pinned_comfyui.py): download (a file:// URL), sha256, extraction of the tree
folder alone, tree id of all its files (ignored ones too, modes kept), the fixed commit, reuse of
the cache, and refusals (sha256, tree, commit) that leave nothing in the cache."""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from lab.comfyui_source import SdistSource, sha256_of, source_repo
from lab.config import LabError

#: The tree of FILES' tree folder and its commit by lab/comfyui_source.py's fixed author, dates
#: and message: computed once by hand with git 2.39 (`git init && git add -A -f && git
#: write-tree`, then `git commit-tree` with those variables) in a folder holding exactly these
#: files and modes. With run.sh at 644 the tree is 1961dcd7...: the mode counts.
TREE = "a92ca516bfb334acddc9a8e62753294705d641db"
COMMIT = "c5e149dc59629b590008b7302e2d14e942e6f701"
FILES = {
    "pkg-1.0/vendor/ComfyUI/main.py": (b"print('hi')\n", 0o644),
    "pkg-1.0/vendor/ComfyUI/.gitignore": (b"*.log\n", 0o644),
    "pkg-1.0/vendor/ComfyUI/notes.log": (b"ignored, still part of the tree\n", 0o644),
    "pkg-1.0/vendor/ComfyUI/run.sh": (b"#!/bin/sh\n", 0o755),
    "pkg-1.0/PKG-INFO": (b"Name: pkg\n", 0o644),  # outside the tree folder
}


def _sdist(path: Path, files: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), mode, 1234, 1234
            tar.addfile(info, io.BytesIO(data))
    return path


def _git(git_dir: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _source(sdist: Path, **pins: str) -> SdistSource:
    return SdistSource(
        url=sdist.as_uri(),
        sha256=pins["sha256"] if "sha256" in pins else sha256_of(sdist),
        member="pkg-1.0/vendor/ComfyUI",
        tree=pins.get("tree", TREE),
        commit=pins.get("commit", COMMIT),
        name="ComfyUI-1.0",
    )


@pytest.fixture
def sdist(tmp_path) -> Path:
    """The sdist at a download location of its own (a file:// URL), outside the cache."""
    return _sdist(tmp_path / "pypi" / "pkg-1.0.tar.gz", FILES)


def test_the_source_is_downloaded_checked_and_committed(tmp_path, sdist):
    cache = tmp_path / "cache"
    repo = source_repo(_source(sdist), cache)
    assert (repo.commit, repo.tree) == (COMMIT, TREE)
    assert repo.archive == cache / "pkg-1.0.tar.gz" and sha256_of(repo.archive) == sha256_of(sdist)
    for git_dir in (repo.work_tree / ".git", repo.bare):
        assert _git(git_dir, "rev-parse", "rigup-lab", "rigup-lab^{tree}").split() == [COMMIT, TREE]
    files = _git(repo.bare, "ls-tree", "-r", "--format=%(objectmode) %(path)", COMMIT)
    assert files.splitlines() == [
        "100644 .gitignore", "100644 main.py", "100644 notes.log", "100755 run.sh"
    ]  # fmt: skip
    assert not (repo.work_tree / "PKG-INFO").exists()
    status = subprocess.run(
        ["git", "-C", str(repo.work_tree), "status", "--porcelain", "--ignored"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert status == "", status
    assert all(s >= 0 for s in repo.seconds.values()) and repo.seconds["download_s"] > 0


def test_a_complete_cache_is_reused(tmp_path, sdist):
    cache = tmp_path / "cache"
    source_repo(_source(sdist), cache)
    sdist.unlink()  # no download possible now
    again = source_repo(_source(sdist, sha256=sha256_of(cache / "pkg-1.0.tar.gz")), cache)
    assert again.seconds == {"download_s": 0.0, "extract_s": 0.0, "tree_check_s": 0.0}
    assert again.commit == COMMIT


def test_a_tampered_tree_is_refused_naming_both_ids(tmp_path):
    files = dict(FILES)
    files["pkg-1.0/vendor/ComfyUI/run.sh"] = (b"#!/bin/sh\n", 0o644)
    sdist = _sdist(tmp_path / "pypi" / "pkg-1.0.tar.gz", files)
    cache = tmp_path / "cache"
    with pytest.raises(LabError) as err:
        source_repo(_source(sdist), cache)
    assert (
        f"has tree id 1961dcd79f949c222861daa007cc90f001395f27, the lab's release lock pins {TREE}"
        in str(err.value)
    )
    assert sorted(p.name for p in cache.iterdir()) == [".ComfyUI-1.0.lock", "pkg-1.0.tar.gz"]


def test_a_commit_that_is_not_pinned_is_refused(tmp_path, sdist):
    cache = tmp_path / "cache"
    with pytest.raises(LabError, match=f"the commit of tree {TREE} is {COMMIT}, the lab's"):
        source_repo(_source(sdist, commit="e" * 40), cache)
    assert sorted(p.name for p in cache.iterdir()) == [".ComfyUI-1.0.lock", "pkg-1.0.tar.gz"]


def test_an_archive_with_another_sha256_is_refused(tmp_path, sdist):
    cache = tmp_path / "cache"
    with pytest.raises(LabError, match=f"has sha256 {sha256_of(sdist)}, the pinned sdist is 0000"):
        source_repo(_source(sdist, sha256="0" * 64), cache)
    assert [p.name for p in cache.iterdir()] == [".ComfyUI-1.0.lock"]


def test_a_cached_archive_that_changed_is_refused_and_kept(tmp_path, sdist):
    cache = tmp_path / "cache"
    source_repo(_source(sdist), cache)
    pinned = sha256_of(sdist)
    (cache / "pkg-1.0.tar.gz").write_bytes(b"not the sdist")
    with pytest.raises(LabError, match="delete it to download it again"):
        source_repo(_source(sdist, sha256=pinned), cache)
    assert (cache / "pkg-1.0.tar.gz").read_bytes() == b"not the sdist"
