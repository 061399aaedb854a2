"""git_checkout_pinned's tree check, run for real: the commands the operation yields
(tests/operations/git_checkout_pinned has them as data) against a git repository made here. A
release lock's tree id that the commit does not have is refused before the checkout, naming both
ids, with the work tree and HEAD as they were (and no clone left by a first run)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.test_operations import run_case

ENV = {
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@rigup.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@rigup.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    "PATH": "/usr/bin:/bin",
    "HOME": "/nonexistent",
}


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], env=ENV, capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.fixture
def mirror(tmp_path) -> dict:
    """A repository with two commits (``first``, ``second``) and their trees."""
    repo = tmp_path / "mirror"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "comfyui_version.py").write_text('__version__ = "1.0.0"\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "first")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "comfyui_version.py").write_text('__version__ = "1.1.0"\n')
    _git(repo, "commit", "-qam", "second")
    second = _git(repo, "rev-parse", "HEAD")
    return {
        "url": str(repo),
        "first": first,
        "second": second,
        "first_tree": _git(repo, "rev-parse", "HEAD~1^{tree}"),
        "second_tree": _git(repo, "rev-parse", "HEAD^{tree}"),
    }


def _run(path: Path, mirror: dict, commit: str, tree: str) -> subprocess.CompletedProcess:
    """The operation's commands for ``path`` as it is now, run one after the other like
    pyinfra does (stop at the first failure)."""
    state = None
    if (path / ".git").is_dir():
        head = _git(path, "rev-parse", "HEAD")
        state = {"head": head, "origin": mirror["url"], "dirty": []}
    case = {
        "kwargs": {"path": str(path), "url": mirror["url"], "commit": commit, "tree": tree},
        "facts": {"GitCheckout": {f"path={path}": state}},
    }
    commands, _ = run_case("git_checkout_pinned", case)
    for command in commands:
        proc = subprocess.run(["bash", "-c", command], env=ENV, capture_output=True, text=True)
        if proc.returncode != 0:
            return proc
    return proc


def test_the_pinned_tree_is_checked_out(tmp_path, mirror):
    src = tmp_path / "src"
    proc = _run(src, mirror, mirror["second"], mirror["second_tree"])
    assert proc.returncode == 0, proc.stderr
    assert _git(src, "rev-parse", "HEAD") == mirror["second"]
    assert (src / "comfyui_version.py").read_text() == '__version__ = "1.1.0"\n'


def test_a_first_run_refuses_another_tree_and_leaves_no_clone(tmp_path, mirror):
    src = tmp_path / "src"
    proc = _run(src, mirror, mirror["second"], mirror["first_tree"])
    assert proc.returncode == 1
    assert (
        f"commit {mirror['second']} has tree {mirror['second_tree']}, the release lock pins "
        f"tree {mirror['first_tree']}: refused" in proc.stderr
    ), proc.stderr
    assert not src.exists()


def test_a_checkout_refuses_another_tree_and_stays_as_it_was(tmp_path, mirror):
    src = tmp_path / "src"
    assert _run(src, mirror, mirror["first"], mirror["first_tree"]).returncode == 0
    proc = _run(src, mirror, mirror["second"], mirror["first_tree"])
    assert proc.returncode == 1 and mirror["second_tree"] in proc.stderr, proc.stderr
    assert _git(src, "rev-parse", "HEAD") == mirror["first"]
    assert (src / "comfyui_version.py").read_text() == '__version__ = "1.0.0"\n'
    assert _git(src, "status", "--porcelain") == ""
