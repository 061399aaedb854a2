"""``backup``: every placed model of a store copied to a backup directory, each file checked
against the sha256 recorded when it was placed, each model renamed into place when complete;
models already in the backup are skipped. With ``--prefix``, also what the venvs need to be
rebuilt without a network: a wheelhouse (``<to>/wheels``) and the CPython builds
(``<to>/python``) (modeltool.wheelhouse). The summary ``<to>/rigup-backup.json`` ends with the
settings a rebuild from this backup uses."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from modeltool.hashing import copy_resuming
from modeltool.layout import RECORD, VERIFIED, FetchError, partial_dir
from modeltool.partial import (
    check_free_space,
    current,
    finish_file,
    unproven,
    verified_before,
)
from modeltool.progress import Progress
from modeltool.snapshot import mismatches
from modeltool.wheelhouse import fill, python_builds


def backup_model(placed: Path, target: Path, spare: int) -> int:
    """Copy the placed model ``placed`` to ``target``; returns the bytes copied."""
    record = json.loads((placed / RECORD).read_text(encoding="utf-8"))
    label = f"{placed.parent.name}@{placed.name}"
    partial = partial_dir(target)
    partial.mkdir(parents=True, exist_ok=True)
    files = [{k: f[k] for k in ("path", "dest", "size", "sha256")} for f in record["files"]]
    origin = f"backup:{placed}"
    done = verified_before(partial, origin, {"files": files})
    needed = 0
    for f in files:
        tmp = partial / (f["dest"] + ".incomplete")
        if f["dest"] not in done:
            needed += max(f["size"] - (tmp.stat().st_size if tmp.exists() else 0), 0)
    check_free_space(partial, needed, label, spare)
    progress = Progress(f"backup {label}", needed)
    current.update(progress=progress, dest=str(target), partial=str(partial))
    entries = list(done.values())
    for f in files:
        if f["dest"] in done:
            continue
        src = placed / f["dest"]
        if (placed / (f["dest"] + ".rigup-orig")).is_file():
            src = placed / (f["dest"] + ".rigup-orig")  # the original, not rigup's edit
        final = partial / f["dest"]
        final.parent.mkdir(parents=True, exist_ok=True)
        copied = copy_resuming(src, final.with_name(final.name + ".incomplete"), progress)
        entries.append(
            finish_file(
                partial, f, origin, size=f["size"], sha256=f["sha256"], got_sha256=copied.sha256
            )
        )
    changed = unproven(partial, entries)
    if changed:
        raise FetchError(f"backup of {label} refused: " + "; ".join(changed))
    (partial / VERIFIED).unlink(missing_ok=True)
    (partial / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    os.sync()
    partial.rename(target)
    return progress.done


def cmd_backup(opts) -> dict:
    store, to = Path(opts.store), Path(opts.to)
    to.mkdir(parents=True, exist_ok=True)
    copied, total, models = 0, 0, []
    started = time.monotonic()
    for record_file in sorted(store.glob(f"*/*/{RECORD}")):
        placed = record_file.parent
        record = json.loads(record_file.read_text(encoding="utf-8"))
        target = to / placed.parent.name / placed.name
        entry = {"model": f"{placed.parent.name}@{placed.name}", "dest": str(target)}
        if target.is_dir() and not mismatches({**record["manifest"], "files": []}, target):
            entry["status"] = "present"
        else:
            copied += backup_model(placed, target, opts.spare_bytes)
            entry["status"] = "copied"
        total += sum(f["size"] for f in record["files"])
        models.append(entry)
    summary = {"status": "ok", "to": str(to), "models": models}
    restore = {"model_local_dirs": [str(to)]}
    if opts.prefix:
        wheels = fill(to / "wheels", Path(opts.prefix), opts.index, opts.spare_bytes)
        pythons = python_builds(Path(opts.prefix) / "python", to / "python")
        summary.update(wheels=wheels, python=pythons)
        copied += wheels["bytes_transferred"] + pythons["bytes_transferred"]
        restore.update(uv_find_links=[wheels["dir"]], uv_offline=True)
        if pythons["downloads_json"]:
            restore["voxcpm_python_downloads_json"] = pythons["downloads_json"]
        if wheels["problems"]:
            summary["status"] = "incomplete"  # raised below, once the summary is written
    summary.update(
        bytes_total=total,
        bytes_transferred=copied,
        seconds=round(time.monotonic() - started, 2),
        restore=restore,
    )
    (to / "rigup-backup.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    problems = summary.get("wheels", {}).get("problems", [])
    if problems:
        raise FetchError(
            f"the backup in {to} cannot rebuild every venv without a network (models, wheels and "
            f"CPython kept so far are there): {'; '.join(problems[:10])}"
        )
    return summary
