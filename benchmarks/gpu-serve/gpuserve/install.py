"""On the GPU machine (standard library and pip only): join the carried pieces of the wheelhouse,
check them against manifest.json, and install the wheels with ``pip install --no-index
--no-deps --target``: a directory that goes first on the engine's ``PYTHONPATH``, beside the
machine's own torch."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from gpuserve.wheelhouse import MANIFEST, WheelhouseError, sha256_file

#: written into the target directory once every wheel is installed: the tar's sha256
DONE = ".rigup-wheelhouse"


def check_pieces(pieces: Path) -> dict:
    """The manifest in ``pieces``, after checking every piece it lists is there with its
    sha256. Raises WheelhouseError naming every missing or damaged piece at once."""
    try:
        manifest = json.loads((pieces / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise WheelhouseError(f"{pieces / MANIFEST}: {exc}") from exc
    problems = []
    for piece in manifest["pieces"]:
        path = pieces / piece["file"]
        if not path.is_file():
            problems.append(f"{piece['file']} is missing")
        elif sha256_file(path) != piece["sha256"]:
            problems.append(f"{piece['file']}: sha256 differs from the manifest")
    if problems:
        raise WheelhouseError("; ".join(problems))
    return manifest


def unpack(pieces: Path, wheels: Path) -> list[Path]:
    """Join the checked pieces, check the tar's sha256, extract its wheels into ``wheels`` and
    check each against the manifest. Returns the wheel paths. Raises WheelhouseError."""
    manifest = check_pieces(pieces)
    wheels.mkdir(parents=True, exist_ok=True)
    joined = wheels / "rigup-wheels.tar"
    digest = hashlib.sha256()
    with open(joined, "wb") as out:
        for piece in manifest["pieces"]:
            with open(pieces / piece["file"], "rb") as f:
                while block := f.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != manifest["tar"]["sha256"]:
        raise WheelhouseError("the joined pieces' sha256 differs from the manifest's tar")
    with tarfile.open(joined) as tar:
        names = tar.getnames()
        unknown = [n for n in names if n not in manifest["wheels"] or "/" in n]
        if unknown:
            raise WheelhouseError(f"the tar holds files the manifest does not list: {unknown}")
        tar.extractall(wheels, filter="data")
    joined.unlink()
    bad = [n for n in names if sha256_file(wheels / n) != manifest["wheels"][n]]
    if bad:
        raise WheelhouseError(f"wheels whose sha256 differs from the manifest: {bad}")
    return [wheels / n for n in names]


def install(pieces: Path, target: Path) -> dict:
    """Unpack the wheelhouse in ``pieces`` and install its wheels into ``target`` (pip
    ``--target``, no index, no dependencies). Idempotent: a target that holds this tar's
    install is left as it is. Returns ``{"installed": n, "target", "seconds"...}``."""
    started = time.monotonic()
    manifest = check_pieces(pieces)
    done = target / DONE
    if done.is_file() and done.read_text(encoding="utf-8").strip() == manifest["tar"]["sha256"]:
        return {"installed": 0, "already": len(manifest["wheels"]), "target": str(target)}
    if target.exists():
        shutil.rmtree(target)
    wheel_dir = target.parent / f"{target.name}.wheels"
    wheels = unpack(pieces, wheel_dir)
    argv = [
        sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
        "--disable-pip-version-check", "--quiet", "--target", str(target),
        *map(str, wheels),
    ]  # fmt: skip
    got = subprocess.run(argv, check=False)
    if got.returncode != 0:
        raise WheelhouseError(f"pip install --target {target} failed (exit {got.returncode})")
    shutil.rmtree(wheel_dir)
    done.write_text(manifest["tar"]["sha256"] + "\n", encoding="utf-8")
    return {
        "installed": len(wheels),
        "target": str(target),
        "seconds": round(time.monotonic() - started, 1),
    }
