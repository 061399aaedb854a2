#!/usr/bin/env python3
"""Lock a rigup model manifest: resolve its ``ref`` to a commit and record every wanted file's
size and sha256, through huggingface_hub's API. Run where Hugging Face is reachable:

    uv run --with huggingface_hub==2.4.0 python files/model/model_lock.py files/model/manifests/NAME.toml [--token-env HF_TOKEN] [--endpoint URL] [--dry-run]

- ``HfApi.model_info(repo_id, revision=ref, files_metadata=True)`` gives the commit (``.sha``)
  and, per file (``.siblings``), its size and, for LFS/Xet files, the sha256 the hub publishes
  (``.lfs.sha256``).
- Files without a published sha256 (small git files: configs, tokenizers) are downloaded at the
  commit with ``hf_hub_download`` into a temporary directory and hashed.
- The files wanted: the manifest's ``[[files]]`` (their ``dest`` kept), or, when it lists none,
  every repository file its ``include``/``exclude`` patterns select.

The manifest is rewritten with ``state = "locked"``, ``revision = <commit>`` and the files;
its leading comment block is kept. Nothing is written with --dry-run (the result is printed).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import os
import sys
import tempfile
import tomllib
from pathlib import Path

FIELDS = ("format", "name", "description", "state", "repo_id", "ref", "revision", "gated")
OPTIONAL = ("modelscope_id", "modelscope_revision")


def toml_value(value) -> str:
    """TOML for the value types a manifest uses (str, bool, int, list of str)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def locked_text(raw: dict, commit: str, files: list[dict], header: str = "") -> str:
    """The manifest ``raw`` (decoded TOML) as a locked manifest at ``commit`` with ``files``
    (dicts with path, size, sha256 and optionally dest). Pure."""
    data = {**raw, "state": "locked", "revision": commit}
    out = [header.rstrip("\n")] if header.strip() else []
    for key in (*FIELDS, *OPTIONAL):
        if key in data and data[key] is not None:
            out.append(f"{key} = {toml_value(data[key])}")
    for key in ("include", "exclude"):
        if key in data:
            out.append(f"{key} = {toml_value(data[key])}")
    for f in files:
        out += ["", "[[files]]", f"path = {toml_value(f['path'])}"]
        if f.get("dest") and f["dest"] != f["path"]:
            out.append(f"dest = {toml_value(f['dest'])}")
        out += [f"size = {f['size']}", f"sha256 = {toml_value(f['sha256'])}"]
    return "\n".join(out) + "\n"


def leading_comments(text: str) -> str:
    """The comment block at the top of a manifest (kept when it is rewritten)."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines) + ("\n" if lines else "")


def wanted(raw: dict, repo_files: list[str]) -> list[dict]:
    """The files to lock: the manifest's list, or the repository files its patterns select."""
    if raw.get("files"):
        missing = [f["path"] for f in raw["files"] if f["path"] not in repo_files]
        if missing:
            raise SystemExit(f"not in the repository at this revision: {missing}")
        return [dict(f) for f in raw["files"]]
    include, exclude = raw.get("include", ["*"]), raw.get("exclude", [])
    return [
        {"path": p}
        for p in sorted(repo_files)
        if any(fnmatch.fnmatch(p, i) for i in include)
        and not any(fnmatch.fnmatch(p, e) for e in exclude)
    ]


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(prog="model_lock.py", description=__doc__.split("\n")[0])
    cli.add_argument("manifest", type=Path)
    cli.add_argument("--token-env", default="HF_TOKEN", help="environment variable holding a token")
    cli.add_argument("--endpoint", default=None, help="a Hugging Face mirror endpoint")
    cli.add_argument("--dry-run", action="store_true")
    opts = cli.parse_args(argv)

    from huggingface_hub import HfApi, hf_hub_download

    text = opts.manifest.read_text(encoding="utf-8")
    header = leading_comments(text)
    raw = tomllib.loads(text)
    token = os.environ.get(opts.token_env) or None
    api = HfApi(endpoint=opts.endpoint, token=token)
    info = api.model_info(raw["repo_id"], revision=raw.get("ref", "main"), files_metadata=True)
    commit = info.sha
    siblings = {s.rfilename: s for s in info.siblings or []}
    files = wanted(raw, list(siblings))
    with tempfile.TemporaryDirectory(prefix="rigup-lock-") as tmp:
        for f in files:
            s = siblings[f["path"]]
            if s.lfs is not None:
                f["size"], f["sha256"] = s.lfs.size, s.lfs.sha256
                continue
            local = hf_hub_download(
                raw["repo_id"],
                f["path"],
                revision=commit,
                cache_dir=tmp,
                token=token,
                endpoint=opts.endpoint,
            )
            data = Path(local).read_bytes()
            f["size"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    result = locked_text(raw, commit, files, header)
    if opts.dry_run:
        print(result)
    else:
        opts.manifest.write_text(result, encoding="utf-8")
        total = sum(f["size"] for f in files)
        print(
            f"locked {raw['name']} at {commit}: {len(files)} files, {total / 1e9:.2f} GB",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
