"""The lab's shared uv cache, hard-linked into each machine instead of bind-mounted.

uv installs a venv by hard-linking the files of its cache's unpacked wheels (``archive-v*/<id>``)
into the venv; where the cache and the venv are on different mounts it falls back to a full copy.
A bind mount is a mount of its own even on the same file system (link(2) answers EXDEV across
mounts), so with ``<cache_dir>/uv`` bind-mounted at /var/cache/rigup/uv every lab machine held a
full copy of every venv: about 10 GiB per converged machine (vLLM's CPU build and VoxCPM2's CUDA
torch), 60 GiB at the suite's peak with four machines. A real rig keeps its cache and its venvs on
one file system, so its venvs are links into its cache.

So the machine's cache is a directory of its own root file system, filled before it boots with
links to the shared cache's files (:func:`seed`), and what the machine downloaded goes back to the
shared cache as links when it stops (:func:`harvest`). Both sides are one file system (checked by
:func:`same_filesystem`; otherwise the lab bind-mounts the cache as before).

What is linked and what is copied follows uv's own cache layout
(https://docs.astral.sh/uv/concepts/cache/): an unpacked wheel under ``archive-v*/<id>`` is
written once under a fresh id and never changed, so it is linked; everything else (the pointers
from a wheel to its archive id, the index pages, lock files) can be rewritten and is small, so it
is copied: a machine never writes into a file the shared cache or another machine holds.

Standard library only, as the rest of the machine's code.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.config import LabConfig
from lab.host import nearest_existing

#: uv's bucket of unpacked wheels, one directory per archive id (uv 0.13: ``archive-v0``)
ARCHIVE_PREFIX = "archive-v"
#: the names uv gives its work in progress inside the cache (``.tmpXXXXXX``): never shared
TEMP_PREFIX = ".tmp"
#: buckets that cannot name an archive (index pages, interpreter facts): not read for pointers
NOT_POINTERS = ("simple-v", "interpreter-v")


@dataclass(frozen=True)
class Shared:
    """What one :func:`seed` or :func:`harvest` did: ``linked`` archive files (no bytes
    written), ``copied`` other files and their ``copied_bytes``, ``archives`` directories
    brought over, ``skipped_archives`` left out (unpacked again by the other side under another
    id: a duplicate no pointer of the destination names)."""

    linked: int = 0
    copied: int = 0
    copied_bytes: int = 0
    archives: int = 0
    skipped_archives: int = 0

    def __str__(self) -> str:
        text = (
            f"{self.archives} wheel archives ({self.linked} files linked), {self.copied} "
            f"other files copied ({self.copied_bytes / 2**20:.1f} MiB)"
        )
        if self.skipped_archives:
            text += f", {self.skipped_archives} duplicate archives left out"
        return text


def same_filesystem(a: Path, b: Path) -> bool:
    """True if ``a`` and ``b`` (or their nearest existing parents) are on one file system, so
    that files can be hard-linked from one to the other."""
    return nearest_existing(a).stat().st_dev == nearest_existing(b).stat().st_dev


def _is_archive(rel: Path) -> bool:
    return bool(rel.parts) and rel.parts[0].startswith(ARCHIVE_PREFIX)


def _archive_dirs(cache: Path) -> dict[str, Path]:
    """``{archive id: directory}`` of every unpacked wheel in ``cache``."""
    found: dict[str, Path] = {}
    if not cache.is_dir():
        return found
    for bucket in cache.iterdir():
        if bucket.name.startswith(ARCHIVE_PREFIX) and bucket.is_dir():
            for entry in bucket.iterdir():
                if not entry.name.startswith(TEMP_PREFIX):
                    found[f"{bucket.name}/{entry.name}"] = entry
    return found


def _other_files(cache: Path) -> list[Path]:
    """Every file outside the archive buckets (relative to ``cache``), uv's temp dirs left out."""
    files: list[Path] = []
    for root, dirs, names in os.walk(cache):
        rel_root = Path(root).relative_to(cache)
        dirs[:] = [
            d for d in dirs if not d.startswith(TEMP_PREFIX) and not _is_archive(rel_root / d)
        ]
        files += [rel_root / n for n in names if not n.startswith(TEMP_PREFIX)]
    return files


def _make_dirs(dst: Path, src_root: Path, dst_root: Path) -> None:
    """Create ``dst``'s missing parents inside ``dst_root`` with the modes they have in
    ``src_root``."""
    missing = []
    d = dst
    while d != dst_root and not d.exists():
        missing.append(d)
        d = d.parent
    for d in reversed(missing):
        d.mkdir()
        src = src_root / d.relative_to(dst_root)
        if src.is_dir():
            shutil.copystat(src, d)


def _link_tree(src: Path, dst: Path, src_root: Path, dst_root: Path) -> int:
    """Hard-link every file of the directory ``src`` to the same place under ``dst``; symlinks
    are recreated. Returns the number of files linked."""
    count = 0
    for root, dirs, names in os.walk(src):
        rel = Path(root).relative_to(src)
        target_dir = dst / rel
        _make_dirs(target_dir, src_root, dst_root)
        for name in names:
            s, t = Path(root) / name, target_dir / name
            if os.path.lexists(t):
                continue
            if s.is_symlink():
                os.symlink(os.readlink(s), t)
            else:
                os.link(s, t)
            count += 1
        for name in dirs:
            s = Path(root) / name
            if s.is_symlink():  # os.walk does not descend into links to directories
                t = target_dir / name
                if not os.path.lexists(t):
                    os.symlink(os.readlink(s), t)
    return count


def _copy_file(src: Path, dst: Path, src_root: Path, dst_root: Path) -> int:
    _make_dirs(dst.parent, src_root, dst_root)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
        return 0
    partial = dst.with_name(f"{TEMP_PREFIX}-rigup-{dst.name}")
    shutil.copy2(src, partial)
    os.replace(partial, dst)
    return dst.stat().st_size


def _share(src: Path, dst: Path, only_named: bool) -> Shared:
    linked = copied = copied_bytes = archives = skipped = 0
    if not src.is_dir():
        return Shared()
    dst.mkdir(parents=True, exist_ok=True)
    others = [rel for rel in _other_files(src) if not os.path.lexists(dst / rel)]
    wanted = _archive_dirs(src)
    have = _archive_dirs(dst)
    new = {key: path for key, path in wanted.items() if key not in have}
    if only_named and new:
        # the pointers the destination will hold once the new files are in: its own and the
        # new ones; an archive no pointer names is a duplicate of one the destination has
        pointers = b"".join(
            (root / rel).read_bytes()
            for root, rels in ((dst, _other_files(dst)), (src, others))
            for rel in rels
            if not rel.parts[0].startswith(NOT_POINTERS) and (root / rel).is_file()
        )
        named = {k: p for k, p in new.items() if p.name.encode() in pointers}
        skipped = len(new) - len(named)
        new = named
    # archives first: a pointer is never visible before the archive it names
    for key, path in sorted(new.items()):
        linked += _link_tree(path, dst / key, src, dst)
        archives += 1
    for rel in others:
        if os.path.lexists(dst / rel):  # another process put it there meanwhile
            continue
        copied_bytes += _copy_file(src / rel, dst / rel, src, dst)
        copied += 1
    return Shared(linked, copied, copied_bytes, archives, skipped)


def seed(shared: Path, machine: Path) -> Shared:
    """Fill the machine's uv cache ``machine`` (a directory in its root file system, the
    machine stopped) from the lab's ``shared`` cache: every wheel archive it lacks as hard links,
    every other file it lacks as a copy. Nothing the machine has is replaced.

    Raises:
        OSError: the two are not on one file system (EXDEV; check :func:`same_filesystem`),
            or a file could not be read or written.
    """
    return _share(shared, machine, only_named=False)


def harvest(machine: Path, shared: Path) -> Shared:
    """Bring what the machine's uv cache ``machine`` has and the ``shared`` cache lacks back to
    it (the machine's uv idle: stopped, or no converge running): wheel archives as hard links,
    other files copied. An archive that no pointer of the result names is left out: two machines
    that unpacked the same wheel at once (a cold cache) hold it under two ids, and only the one
    the shared cache's pointer names is kept. Nothing the shared cache has is replaced.

    Raises:
        OSError: as :func:`seed`.
    """
    return _share(machine, shared, only_named=True)


def linked(cfg: LabConfig) -> bool:
    """True if ``cfg``'s machine gets a uv cache of its own linked to the lab's (``uv_cache`` on,
    state_dir and cache_dir on one file system); False: the lab's cache is bind-mounted (another
    file system) or not shared (``uv_cache`` off)."""
    return cfg.uv_cache and same_filesystem(cfg.cache_dir, cfg.state_dir)


def seed_machine(cfg: LabConfig, log: Callable[[str], None]) -> None:
    """Before the machine boots: :func:`seed` its rootfs's uv cache from the lab's (or say that
    the lab's is bind-mounted instead). Raises OSError as :func:`seed`."""
    if not cfg.uv_cache:
        return
    cfg.uv_cache_dir.mkdir(parents=True, exist_ok=True)
    if not linked(cfg):
        log(f"uv cache: {cfg.uv_cache_dir} bind-mounted (another file system than the machine)")
        return
    started = time.monotonic()
    done = seed(cfg.uv_cache_dir, cfg.machine_uv_cache_dir)
    log(f"uv cache seeded in {time.monotonic() - started:.1f} s: {done}")


def harvest_machine(cfg: LabConfig, log: Callable[[str], None]) -> None:
    """:func:`harvest` what the machine's uv downloaded into the lab's cache: when it stopped,
    or after a converge (no uv runs in it then). Raises OSError as :func:`seed`."""
    if not (linked(cfg) and cfg.machine_uv_cache_dir.is_dir()):
        return
    started = time.monotonic()
    done = harvest(cfg.machine_uv_cache_dir, cfg.uv_cache_dir)
    if done.archives or done.copied:
        log(f"uv cache shared back in {time.monotonic() - started:.1f} s: {done}")
