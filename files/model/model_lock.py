#!/usr/bin/env python3
"""Lock a rigup model manifest: resolve its ``ref`` to a commit and write ``<name>.lock`` next to
it with every wanted file's path, size and sha256 at that commit. Run where the hub (or a
mirror of it) is reachable, with huggingface_hub:

    uv run --with huggingface_hub==2.4.0 python files/model/model_lock.py \\
        files/model/manifests/NAME.toml [--endpoint URL] [--token-env HF_TOKEN] [--dry-run]

The same lock is written by the first placement of an unpinned manifest from Hugging Face
(roles/model); this command makes it without placing the model. For each file the hub
publishes a hash: large (LFS/Xet) files their sha256, which is taken as it is; the others their
git blob id: those are downloaded at the commit, checked against it and hashed. The files
wanted: the manifest's ``[[files]]``, or every file its ``include``/``exclude`` patterns select.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from modeltool import hub  # noqa: E402
from modeltool.hashing import file_hashes  # noqa: E402
from modeltool.lockfile import lock_text  # noqa: E402
from modeltool.snapshot import selected  # noqa: E402


def wanted(raw: dict, repo_files: list[str]) -> list[dict]:
    """The files to lock: the manifest's list, or the repository files its patterns select."""
    if raw.get("files"):
        missing = [f["path"] for f in raw["files"] if f["path"] not in repo_files]
        if missing:
            raise SystemExit(f"not in the repository at this commit: {missing}")
        return [{"path": f["path"], "dest": f.get("dest", f["path"])} for f in raw["files"]]
    patterns = {"include": raw.get("include", ["*"]), "exclude": raw.get("exclude", [])}
    return [{"path": p, "dest": p} for p in sorted(repo_files) if selected(patterns, p)]


def lock(raw: dict, endpoint: str, token: str | None) -> tuple[str, list[dict]]:
    """(commit, files with size and sha256) of the manifest ``raw`` on the hub now."""
    commit = hub.resolve_ref(raw["repo_id"], raw.get("ref", "main"), endpoint, token)
    tree = hub.list_files(raw["repo_id"], commit, endpoint, token)
    files = wanted(raw, list(tree))
    with tempfile.TemporaryDirectory(prefix="rigup-lock-") as tmp:
        for f in files:
            h = tree[f["path"]]
            if h.sha256:
                f["size"], f["sha256"] = h.size, h.sha256
                continue
            path = hub.hf_download(raw["repo_id"], f["path"], commit, Path(tmp), endpoint, token)
            sha, blob = file_hashes(path)
            if blob != h.blob_id or path.stat().st_size != h.size:
                raise SystemExit(
                    f"{f['path']}: downloaded {path.stat().st_size} bytes with git blob id {blob}, "
                    f"the hub publishes {h.size} bytes and {h.blob_id}"
                )
            f["size"], f["sha256"] = h.size, sha
    return commit, files


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(prog="model_lock.py", description=__doc__.split("\n")[0])
    cli.add_argument("manifest", type=Path)
    cli.add_argument("--token-env", default="HF_TOKEN", help="environment variable holding a token")
    cli.add_argument("--endpoint", default="", help="a Hugging Face mirror endpoint")
    cli.add_argument("--lock-dir", type=Path, help="where to write the lock (default: beside it)")
    cli.add_argument("--dry-run", action="store_true", help="print the lock, write nothing")
    opts = cli.parse_args(argv)

    raw = tomllib.loads(opts.manifest.read_text(encoding="utf-8"))
    if raw.get("state") == "locked":
        raise SystemExit(f'{opts.manifest} is locked in the manifest itself (state = "locked")')
    commit, files = lock(raw, opts.endpoint, os.environ.get(opts.token_env) or None)
    text = lock_text(
        name=raw["name"],
        repo_id=raw["repo_id"],
        ref=raw.get("ref", "main"),
        commit=commit,
        files=files,
        patterns=None if raw.get("files") else (raw.get("include", ["*"]), raw.get("exclude", [])),
        origin=f"Locked by model_lock.py from {opts.endpoint or 'https://huggingface.co'}.",
    )
    if opts.dry_run:
        print(text, end="")
        return 0
    target = (opts.lock_dir or opts.manifest.parent) / f"{raw['name']}.lock"
    target.write_text(text, encoding="utf-8")
    total = sum(f["size"] for f in files)
    print(
        f"locked {raw['name']} at {commit}: {len(files)} files, {total / 1e9:.2f} GB -> {target}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
