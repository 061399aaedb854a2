"""``verify``: a placed model against its manifest and record, byte for byte: every file's size
and sha256, every shard its checkpoint index names, and no file that is not the model's."""

from __future__ import annotations

import json
from pathlib import Path

from modeltool.layout import RECORD
from modeltool.place import placed_problems
from modeltool.snapshot import missing_shards, recorded_files


def cmd_verify(opts) -> dict:
    directory = Path(opts.dir)
    if opts.manifest:
        manifest = json.loads(Path(opts.manifest).read_text(encoding="utf-8"))
    else:
        manifest = {"files": []}  # the record says what the model is
    problems = []
    if not directory.is_dir():
        problems.append(f"{directory}: no such directory")
    elif not (directory / RECORD).is_file():
        problems.append(f"{RECORD}: missing (not placed by rigup, or placed by hand)")
    bad, strays, checked = placed_problems(manifest, directory, full=True)
    problems += [f"{f['dest']}: {f['problem']}" for f in bad]
    problems += [
        f"{s}: not part of the model (a leftover or a file put there by hand)" for s in strays
    ]
    wanted = {f["dest"] for f in manifest["files"]} or set(recorded_files(directory))
    present = {d: directory / d for d in wanted if (directory / d).is_file()}
    problems += missing_shards(directory, present)
    return {
        "status": "ok" if not problems else "mismatch",
        "dir": str(directory),
        "sha256_checked": checked,
        "problems": problems,
    }
