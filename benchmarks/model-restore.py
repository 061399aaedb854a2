"""Benchmark: place, re-place, back up and restore a constructed multi-GB model with rigup's
on-target tool (model_fetch.py), and print bytes moved, times and rates. Figures, not asserts.

Run on a converged host (it uses the tool venv and script the model deploy installed), e.g. the
lab machine:

    .venv/bin/python -m lab ssh -- /opt/rigup/model/venv/bin/python - < benchmarks/model-restore.py

Environment: BENCH_GB (model size in GB, default 4; needs ~4x that free), BENCH_SHARDS
(default 4), BENCH_DIR (default /var/tmp/rigup-bench-model, removed at the end),
RIGUP_MODEL_FETCH (default /opt/rigup/model/bin/model_fetch.py).

Steps: (1) write BENCH_SHARDS random shards + config.json as a "mirror" and a manifest with
their sizes and sha256; (2) place from the mirror (first run); (3) place again (second run:
nothing to transfer); (4) back up the store; (5) a rebuild: restore into an empty store from the
backup, copied; (6) the same with hard links (backup and store on one filesystem). The page cache
is not dropped (a container cannot): reads after step 1 may come from RAM, which the disk figures
below say nothing about on a rig with a separate backup disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

GB = float(os.environ.get("BENCH_GB", "4"))
SHARDS = int(os.environ.get("BENCH_SHARDS", "4"))
ROOT = Path(os.environ.get("BENCH_DIR", "/var/tmp/rigup-bench-model"))
FETCH = os.environ.get("RIGUP_MODEL_FETCH", "/opt/rigup/model/bin/model_fetch.py")
NAME, REV = "bench-model", "constructed-1"


def write_random(path: Path, size: int) -> str:
    h = hashlib.sha256()
    block = 64 * 1024 * 1024
    with open(path, "wb") as f:
        left = size
        while left:
            chunk = os.urandom(min(block, left))
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    return h.hexdigest()


def fetch(*args: str) -> tuple[dict, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, FETCH, *args], capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"model_fetch.py {args[0]} failed:\n{proc.stderr[-3000:]}\n{proc.stdout}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), seconds


def line(step: str, result: dict, seconds: float) -> None:
    moved = result.get("bytes_transferred", 0)
    rate = moved / seconds / 1e6 if seconds > 0 else 0.0
    print(
        f"{step:<36} {result['status']:<8} {moved / 1e9:8.3f} GB moved  {seconds:7.2f} s  "
        f"{rate:7.0f} MB/s",
        flush=True,
    )


def main() -> int:
    if ROOT.exists():
        shutil.rmtree(ROOT)
    mirror = ROOT / "mirror" / NAME
    mirror.mkdir(parents=True)
    shard = int(GB * 1e9 / SHARDS)
    free = shutil.disk_usage(ROOT).free
    if shard * SHARDS * 4.2 > free:
        sys.exit(
            f"needs ~{shard * SHARDS * 4.2 / 1e9:.1f} GB free under {ROOT}, {free / 1e9:.1f} GB free"
        )
    files = []
    started = time.monotonic()
    for i in range(SHARDS):
        rel = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        files.append({"path": rel, "size": shard, "sha256": write_random(mirror / rel, shard)})
    config = mirror / "config.json"
    config.write_text('{"architectures": ["BenchForCausalLM"]}\n')
    files.append(
        {
            "path": "config.json",
            "size": config.stat().st_size,
            "sha256": hashlib.sha256(config.read_bytes()).hexdigest(),
        }
    )
    total = sum(f["size"] for f in files)
    print(
        f"constructed {NAME}: {len(files)} files, {total / 1e9:.2f} GB in {time.monotonic() - started:.1f} s"
    )
    manifest = ROOT / "manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "format": 1,
                "name": NAME,
                "state": "unpinned",
                "repo_id": "bench/bench-model",
                "ref": "main",
                "revision": REV,
                "gated": False,
                "modelscope_id": None,
                "modelscope_revision": "master",
                "include": ["*"],
                "exclude": [],
                "files": [{**f, "dest": f["path"]} for f in files],
            }
        )
    )
    store, backup, rebuilt = ROOT / "store", ROOT / "backup", ROOT / "rebuilt"
    place = ("place", "--manifest", str(manifest))
    line(
        "1st place (mirror -> store)",
        *fetch(*place, "--local-dir", str(ROOT / "mirror"), "--dest", f"{store}/{NAME}/{REV}"),
    )
    line(
        "2nd place (already placed)",
        *fetch(*place, "--local-dir", str(ROOT / "mirror"), "--dest", f"{store}/{NAME}/{REV}"),
    )
    line("backup (store -> backup)", *fetch("backup", "--store", str(store), "--to", str(backup)))
    line("backup again", *fetch("backup", "--store", str(store), "--to", str(backup)))
    line(
        "restore, copy (backup -> new store)",
        *fetch(*place, "--local-dir", str(backup), "--dest", f"{rebuilt}/{NAME}/{REV}"),
    )
    shutil.rmtree(rebuilt)
    line(
        "restore, hardlink (same fs)",
        *fetch(
            *place,
            "--local-dir",
            str(backup),
            "--link",
            "hardlink",
            "--dest",
            f"{rebuilt}/{NAME}/{REV}",
        ),
    )
    verify, seconds = fetch(
        "verify", "--manifest", str(manifest), "--dir", f"{rebuilt}/{NAME}/{REV}"
    )
    print(
        f"{'verify restored copy (sha256)':<36} {verify['status']:<8} {verify['sha256_checked']} files  {seconds:7.2f} s  {total / seconds / 1e6:7.0f} MB/s"
    )
    shutil.rmtree(ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
