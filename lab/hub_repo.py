#!/usr/bin/env python3
"""Make a directory of model files the latest commit on ``main`` of a git repository laid out as
a Hugging Face model repository: large files (weights) in Git LFS, the rest in git. The lab's
hub server (olah, lab/hub_lab.py) serves such repositories through the Hugging Face API.

    hub_repo.py REPO_DIR SRC_DIR [--tag TAG] [--message MSG]

Layout, as git-lfs leaves it and as olah reads it (olah's LocalMirrorRepo): ``REPO_DIR/.git``, a
normal (non-bare) repository whose work tree is left empty; a large file's blob is its LFS
pointer (``version https://git-lfs.github.com/spec/v1`` / ``oid sha256:<oid>`` / ``size <n>``),
its bytes are ``.git/lfs/objects/<oid[0:2]>/<oid[2:4]>/<oid>``; ``.gitattributes`` marks the
LFS patterns, as on the Hub. Built with git's plumbing only (no git-lfs, no work tree), with a
fixed author and date: the same files give the same commit id on every machine, and files equal
to main's tree add no commit. Prints the commit main points to. Standard library and ``git``.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: what the Hub stores in LFS (its default .gitattributes, the weight formats)
LFS_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.onnx", "*.msgpack", "*.h5")
IDENTITY = {
    "GIT_AUTHOR_NAME": "rigup-lab",
    "GIT_AUTHOR_EMAIL": "lab@rigup.invalid",
    "GIT_COMMITTER_NAME": "rigup-lab",
    "GIT_COMMITTER_EMAIL": "lab@rigup.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def lfs_pointer(oid: str, size: int) -> bytes:
    """The Git LFS pointer of a file (git-lfs spec v1)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n".encode()


def is_lfs(rel: str) -> bool:
    return any(fnmatch.fnmatch(Path(rel).name, p) for p in LFS_PATTERNS)


def _git(repo: Path, *args: str, stdin: bytes | None = None, env: dict | None = None) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=stdin,
        capture_output=True,
        env={**os.environ, **IDENTITY, **(env or {})},
    )
    if proc.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {proc.stderr.decode().strip()}")
    return proc.stdout.decode().strip()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def store_lfs_object(repo: Path, src: Path) -> tuple[str, int]:
    """Put ``src``'s bytes into the repository's LFS store; returns (oid, size)."""
    oid, size = _sha256(src), src.stat().st_size
    target = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{oid}.tmp")
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o644)
        tmp.replace(target)
    return oid, size


def commit_tree(repo: Path, src: Path, message: str, tag: str = "") -> str:
    """Make ``src``'s files the tree of ``main``'s latest commit (see the module docstring)."""
    repo.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").is_dir():
        _git(repo, "init", "-q", "-b", "main")
    files = sorted(
        p.relative_to(src).as_posix()
        for p in src.rglob("*")
        if p.is_file() and ".cache" not in p.relative_to(src).parts
    )
    if not files:
        raise SystemExit(f"{src} holds no file")
    with tempfile.TemporaryDirectory(prefix="rigup-hub-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "read-tree", "--empty", env=env)
        attributes = "".join(f"{p} filter=lfs diff=lfs merge=lfs -text\n" for p in LFS_PATTERNS)
        entries = {".gitattributes": attributes.encode()}
        for rel in files:
            if is_lfs(rel):
                entries[rel] = lfs_pointer(*store_lfs_object(repo, src / rel))
            else:
                entries[rel] = (src / rel).read_bytes()
        for rel, data in entries.items():
            blob = _git(repo, "hash-object", "-w", "--stdin", stdin=data)
            _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", env=env)
        tree = _git(repo, "write-tree", env=env)
    parent = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "-q", "--verify", "refs/heads/main"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if parent and _git(repo, "rev-parse", f"{parent}^{{tree}}") == tree:
        commit = parent
    else:
        commit = _git(repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", message)
        _git(repo, "update-ref", "refs/heads/main", commit)
    if tag:
        _git(repo, "tag", "-f", tag, commit)
    return commit


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(prog="hub_repo.py", description=__doc__.split("\n")[0])
    cli.add_argument("repo", type=Path)
    cli.add_argument("src", type=Path)
    cli.add_argument("--tag", default="")
    cli.add_argument("--message", default="")
    opts = cli.parse_args(argv)
    message = opts.message or f"{opts.src.name}: the lab's files"
    print(commit_tree(opts.repo, opts.src, message, opts.tag))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
