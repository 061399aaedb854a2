"""``place``: put a model at ``DEST``, verified and atomically, from the first source that can
provide it; check (and, when asked, repair) a model already placed there.

A placement is assembled in ``<parent>/.<revision>.partial``: each file is transferred to
``<dest>.incomplete``, checked (size, sha256: the manifest's or lock's, else the hash the source
publishes or recorded), renamed to its place and logged in ``.rigup-verified.jsonl``. Only when
every file is verified, every shard a checkpoint index names is there and nothing else is left,
the record ``.rigup-manifest.json`` is written and the directory renamed to ``DEST``: a placed
directory is always complete, and holds nothing but the model and its record. A file that fails
its check is kept in ``.<revision>.rejected/`` (outside the model) until the model is placed.

One transfer of a model at a time: a second ``place`` of the same ``DEST`` waits for the first
(up to ``--lock-wait`` seconds), then refuses with the first one's pid and start time.

An unpinned manifest (no commit, no sha256) from Hugging Face is locked on its first placement:
its ref resolves to a commit, the files at that commit are checked against the hashes the hub
publishes, and the record carries the commit and every file's size and sha256 (the controller
writes the model's lock file from it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from modeltool import hub, local
from modeltool.hashing import file_hashes, sha256_file
from modeltool.layout import (
    DOWNLOAD,
    EDIT_ORIGINAL,
    EXIT_BUSY,
    EXIT_MISMATCH,
    EXIT_SPACE,
    RECORD,
    SPARE_BYTES,
    VERIFIED,
    FetchError,
    SourceError,
    partial_dir,
    rejected_dir,
    replaced_dir,
)
from modeltool.progress import PROGRESS_EVERY_S, Progress, human_bytes, say
from modeltool.snapshot import (
    expected,
    missing_shards,
    recorded_files,
    selected,
    size_mismatches,
    tree_sizes,
    unexpected_files,
)

#: files downloaded at once from a hub (each is also split by hf_xet where the hub uses Xet)
HUB_WORKERS = 4
#: errors of the machine itself, not of a source: trying another source would not help
FATAL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)

#: the transfer running in this process, for the report of an interruption
current: dict = {}


# ---- one transfer at a time ----------------------------------------------------------------
def _lock_path(dest: Path, lock_dir: str) -> Path:
    base = Path(lock_dir) if lock_dir and os.access(lock_dir, os.W_OK) else None
    base = base or Path(tempfile.gettempdir())
    return base / f"rigup-model-{hashlib.sha1(str(dest).encode()).hexdigest()[:16]}.lock"


@contextlib.contextmanager
def transfer_lock(dest: Path, lock_dir: str, wait_s: float) -> Iterator[None]:
    """Hold the lock of ``dest`` for this process (released when it exits, even when killed)."""
    path = _lock_path(dest, lock_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait_s
    said = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "?"
                if time.monotonic() >= deadline:
                    raise FetchError(
                        f"another transfer of {dest} is running ({holder}); wait for it to end "
                        "or stop it, then run again",
                        EXIT_BUSY,
                    ) from None
                if not said:
                    say(f"waiting for another transfer of {dest} ({holder})")
                    said = True
                time.sleep(1)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {since}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


# ---- space ------------------------------------------------------------------------------------
def check_free_space(where: Path, needed: int, name: str, spare: int = SPARE_BYTES) -> None:
    """Raise FetchError (exit 3) unless ``needed`` + ``spare`` bytes are free at ``where``."""
    free = shutil.disk_usage(where).free
    if needed + spare > free:
        raise FetchError(
            f"not enough free space for {name} on {where}: {needed / 1e9:.2f} GB to transfer "
            f"+ {spare / 2**30:.2f} GiB spare, {free / 1e9:.2f} GB free "
            f"(short by {(needed + spare - free) / 1e9:.2f} GB)",
            code=EXIT_SPACE,
        )


# ---- the partial area -------------------------------------------------------------------------
def pinned(manifest: dict) -> bool:
    """Every file listed with its sha256 (a locked manifest, or an unpinned one with a lock)."""
    return bool(manifest["files"]) and all(f.get("sha256") for f in manifest["files"])


def verified_before(partial: Path, origin: str, pinned: bool) -> dict[str, dict]:
    """Files an earlier run verified in ``partial`` that this transfer can keep: all of them
    when the manifest pins every sha256 (they were checked against it), else those that came
    from the same ``origin`` (a local copy, or a hub at one commit)."""
    out = {}
    try:
        lines = (partial / VERIFIED).read_text(encoding="utf-8").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by an interruption: that file is transferred again
        final = partial / entry["dest"]
        if (pinned or entry.get("from") == origin) and final.is_file():
            if final.stat().st_size == entry["size"]:
                out[entry["dest"]] = entry
    return out


def finish_file(
    partial: Path,
    f: dict,
    origin: str,
    *,
    size: int | None,
    sha256: str | None,
    got_sha256: str,
    blob_id: str | None = None,
    got_blob_id: str | None = None,
) -> dict:
    """Check a transferred file and move it to its place in the partial area, or keep it aside
    (``.<revision>.rejected/``) and raise :class:`FetchError` naming what differs. The file is
    ``<partial>/<dest>.incomplete``; its place ``<partial>/<dest>``."""
    final = partial / f["dest"]
    tmp = final.with_name(final.name + ".incomplete")
    actual = tmp.stat().st_size
    problems = []
    if size is not None and actual != size:
        problems.append(f"{actual} bytes, {size} expected")
    if sha256 is not None and got_sha256 != sha256:
        problems.append(f"sha256 {got_sha256}, {sha256} expected")
    if blob_id is not None and got_blob_id != blob_id:
        problems.append(f"git blob id {got_blob_id}, {blob_id} expected (the hub's)")
    if problems:
        bad = rejected_dir(_dest_of(partial)) / (f["dest"] + ".bad")
        bad.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(bad)
        raise FetchError(f"{f['dest']}: {'; '.join(problems)} (kept as {bad})")
    tmp.replace(final)
    entry = {"dest": f["dest"], "path": f["path"], "size": actual, "sha256": got_sha256}
    with open(partial / VERIFIED, "a", encoding="utf-8") as log:
        log.write(json.dumps({**entry, "from": origin}) + "\n")
    return entry


def _dest_of(partial: Path) -> Path:
    name = partial.name
    assert name.startswith(".") and name.endswith(".partial"), partial
    return partial.with_name(name[1 : -len(".partial")])


# ---- sources ----------------------------------------------------------------------------------
def from_local(manifest: dict, partial: Path, opts) -> tuple[list[dict], dict, Progress]:
    src, layout, files = local.complete_local_copy(manifest, opts.local_dir)
    recorded = recorded_files(src)
    origin = f"local:{src}"
    done = verified_before(partial, origin, pinned(manifest))
    name = f"{manifest['name']}@{manifest['revision']}"
    sources = {f["dest"]: local.source_file(src, f) for f in files}
    needed = 0
    for f in files:
        if f["dest"] not in done:
            size = expected(f, recorded)[0] or sources[f["dest"]].stat().st_size  # type: ignore[union-attr]
            tmp = partial / (f["dest"] + ".incomplete")
            needed += max(size - (tmp.stat().st_size if tmp.exists() else 0), 0)
    if opts.link == "hardlink" and src.stat().st_dev == partial.stat().st_dev:
        needed = 0
    check_free_space(partial, needed, name, opts.spare_bytes)
    progress = Progress(f"{name} from {src}", needed)
    current["progress"] = progress
    entries, notes = [], []
    for f in files:
        if f["dest"] in done:
            entries.append({k: done[f["dest"]][k] for k in ("dest", "path", "size", "sha256")})
            continue
        s = sources[f["dest"]]
        size, sha = expected(f, recorded)
        if size is None:
            size = s.stat().st_size  # type: ignore[union-attr]
        final = partial / f["dest"]
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".incomplete")
        got, note = local.copy_file(s, tmp, opts.link, progress)  # type: ignore[arg-type]
        if note:
            notes.append(f"{f['dest']}: {note}")
        entries.append(finish_file(partial, f, origin, size=size, sha256=sha, got_sha256=got))
    origin_info = {"source": "local", "from": str(src), "layout": layout}
    commit = manifest.get("commit") or _recorded_commit(src) or _snapshot_commit(layout, src)
    if commit:
        origin_info["commit"] = commit
    if notes:
        origin_info["resumed"] = notes
    return entries, origin_info, progress


def _recorded_commit(src: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((src / RECORD).read_text(encoding="utf-8")).get("commit")
    return None


def _snapshot_commit(layout: str, src: Path) -> str | None:
    return src.name if layout.startswith("Hugging Face cache") else None


class _Meter:
    """Prints the bytes arriving under a directory every 5 s while a hub library downloads."""

    def __init__(self, progress: Progress, where: Path, base: int):
        self.progress, self.where, self.base = progress, where, base
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(PROGRESS_EVERY_S):
            self.progress.show()

    def _count(self) -> None:
        self.progress.done = self.base + hub.tree_bytes(self.where)

    def __enter__(self) -> _Meter:
        self.progress.refresh = self._count
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.progress.refresh = lambda: None


def hub_expectations(
    manifest: dict, commit: str, tree: dict[str, hub.HubFile]
) -> list[tuple[dict, dict]]:
    """[(file, expectation)] of a Hugging Face placement at ``commit`` whose files are ``tree``:
    the manifest's files (or those its patterns select), each expected to have the size the hub
    lists and the manifest's (or lock's) sha256, else the hash the hub publishes (LFS sha256, or
    git blob id). Raises :class:`SourceError` for a file the repository lacks. Pure."""
    files = manifest["files"]
    if files:
        absent = [f["path"] for f in files if f["path"] not in tree]
        if absent:
            raise SourceError(f"{manifest['repo_id']} at {commit} has no {', '.join(absent[:5])}")
        chosen = list(files)
    else:
        chosen = [
            {"path": p, "dest": p, "size": None, "sha256": None}
            for p in sorted(tree)
            if selected(manifest, p)
        ]
        if not chosen:
            raise SourceError(
                f"{manifest['repo_id']} at {commit} has no file the manifest selects "
                f"(include {manifest['include']}, exclude {manifest['exclude']})"
            )
    out = []
    for f in chosen:
        h = tree[f["path"]]
        sha = f.get("sha256") or h.sha256
        if f.get("size") is not None and f["size"] != h.size:
            raise SourceError(
                f"{f['path']}: {h.size} bytes at {commit} on the hub, {f['size']} in the manifest"
            )
        out.append((f, {"size": h.size, "sha256": sha, "blob_id": None if sha else h.blob_id}))
    return out


def _hub_wanted(manifest: dict, opts, token: str | None) -> tuple[str, list[tuple[dict, dict]]]:
    """(commit, [(file, expectation)]) of a Hugging Face placement. A manifest pinned to a
    commit with every sha256 is taken as it is (no listing); otherwise the ref is resolved now
    and the files listed at that commit (first-run locking, see :func:`hub_expectations`)."""
    if manifest.get("commit") and pinned(manifest):
        return manifest["commit"], [
            (f, {"size": f.get("size"), "sha256": f["sha256"], "blob_id": None})
            for f in manifest["files"]
        ]
    commit = manifest.get("commit") or hub.resolve_ref(
        manifest["repo_id"], manifest["ref"], opts.hf_endpoint, token
    )
    tree = hub.list_files(manifest["repo_id"], commit, opts.hf_endpoint, token)
    return commit, hub_expectations(manifest, commit, tree)


def from_huggingface(manifest: dict, partial: Path, opts) -> tuple[list[dict], dict, Progress]:
    token = hub.read_token(opts.hf_token_file)
    name = f"{manifest['name']}@{manifest['revision']}"
    commit, wanted = _hub_wanted(manifest, opts, token)
    origin = f"huggingface@{commit}"
    done = verified_before(partial, origin, pinned(manifest))
    download = partial / DOWNLOAD
    download.mkdir(parents=True, exist_ok=True)
    hub.forget_unfinished(download)
    todo = [(f, e) for f, e in wanted if f["dest"] not in done]
    needed = sum(e["size"] for _, e in todo)
    check_free_space(partial, needed, name, opts.spare_bytes)
    progress = Progress(
        f"{name} from {opts.hf_endpoint or 'huggingface.co'} at {commit[:12]}", needed
    )
    current["progress"] = progress
    entries = {d: {k: e[k] for k in ("dest", "path", "size", "sha256")} for d, e in done.items()}
    moved = 0
    with _Meter(progress, download, 0) as meter, ThreadPoolExecutor(HUB_WORKERS) as pool:
        futures = {
            pool.submit(
                hub.hf_download,
                manifest["repo_id"],
                f["path"],
                commit,
                download,
                opts.hf_endpoint,
                token,
            ): (f, e)
            for f, e in todo
        }
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    f, e = futures[future]
                    got_file = future.result()
                    final = partial / f["dest"]
                    final.parent.mkdir(parents=True, exist_ok=True)
                    tmp = final.with_name(final.name + ".incomplete")
                    got_file.replace(tmp)
                    sha, blob = file_hashes(tmp)
                    entries[f["dest"]] = finish_file(
                        partial,
                        f,
                        origin,
                        size=e["size"],
                        sha256=e["sha256"],
                        got_sha256=sha,
                        blob_id=e["blob_id"],
                        got_blob_id=blob,
                    )
                    moved += e["size"]
                    meter.base = moved
        except BaseException:
            for future in pending:
                future.cancel()
            raise
    progress.done = moved
    info = {
        "source": "huggingface",
        "repo_id": manifest["repo_id"],
        "commit": commit,
        "ref": manifest["ref"],
        "endpoint": opts.hf_endpoint,
    }
    return [entries[f["dest"]] for f, _ in wanted], info, progress


def from_modelscope(manifest: dict, partial: Path, opts) -> tuple[list[dict], dict, Progress]:
    files = manifest["files"]
    if not pinned(manifest):
        raise SourceError(
            f"manifest {manifest['name']} has no lock (no sha256 for its files): ModelScope "
            "files are checked against the sha256 of a lock, made through Hugging Face "
            "(files/model/model_lock.py, or a first placement from huggingface)"
        )
    if not manifest.get("modelscope_id"):
        raise SourceError(f"manifest {manifest['name']} has no modelscope_id")
    name = f"{manifest['name']}@{manifest['revision']}"
    origin = f"modelscope:{manifest['modelscope_id']}@{manifest.get('modelscope_revision')}"
    done = verified_before(partial, origin, pinned=True)
    todo = [f for f in files if f["dest"] not in done]
    needed = sum(f["size"] for f in todo)
    check_free_space(partial, needed, name, opts.spare_bytes)
    progress = Progress(f"{name} from ModelScope", needed)
    current["progress"] = progress
    download = partial / DOWNLOAD
    download.mkdir(parents=True, exist_ok=True)
    with _Meter(progress, download, 0):
        hub.modelscope_download(
            manifest["modelscope_id"],
            manifest.get("modelscope_revision") or "master",
            [f["path"] for f in todo],
            download,
            opts.modelscope_endpoint,
            hub.read_token(opts.modelscope_token_file),
        )
    entries = {d: {k: e[k] for k in ("dest", "path", "size", "sha256")} for d, e in done.items()}
    for f in todo:
        got_file = download / f["path"]
        if not got_file.is_file():
            raise SourceError(f"{f['path']}: the ModelScope download did not produce it")
        final = partial / f["dest"]
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".incomplete")
        got_file.replace(tmp)
        entries[f["dest"]] = finish_file(
            partial, f, origin, size=f["size"], sha256=f["sha256"], got_sha256=sha256_file(tmp)
        )
    progress.done = needed
    info = {"source": "modelscope", "modelscope_id": manifest["modelscope_id"]}
    if manifest.get("commit"):
        info["commit"] = manifest["commit"]
    return [entries[f["dest"]] for f in files], info, progress


SOURCES = {"local": from_local, "huggingface": from_huggingface, "modelscope": from_modelscope}


# ---- publishing -------------------------------------------------------------------------------
def publish(partial: Path, dest: Path, record: dict) -> list[str]:
    """Make ``partial`` the placed model ``dest``: nothing but the verified files and the record
    in it, every indexed shard present, root-owned and read-only, renamed atomically. Returns
    what was removed (a transfer's leftovers)."""
    for junk in (partial / DOWNLOAD, partial / VERIFIED):
        if junk.is_dir():
            shutil.rmtree(junk)
        elif junk.exists():
            junk.unlink()
    wanted = {e["dest"] for e in record["files"]}
    removed = unexpected_files(wanted, set(tree_sizes(partial)) - {RECORD})
    for rel in removed:
        (partial / rel).unlink()
    for d in sorted({p for p in partial.rglob("*") if p.is_dir()}, reverse=True):
        if not any(d.iterdir()):
            d.rmdir()
    broken = missing_shards(partial, {d: partial / d for d in wanted})
    if broken:
        raise FetchError("refusing to place an incomplete checkpoint: " + "; ".join(broken))
    (partial / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    for p in [partial, *partial.rglob("*")]:
        if os.geteuid() == 0:
            os.chown(p, 0, 0, follow_symlinks=False)
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    os.sync()
    partial.rename(dest)
    rejected = rejected_dir(dest)
    if rejected.exists():
        shutil.rmtree(rejected)
        removed.append(f"{rejected} (files rejected by an earlier attempt)")
    return removed


def _classify(source: str, exc: Exception) -> FetchError:
    """A library's exception as a source failure, or as a fatal error of this machine."""
    text = " ".join(str(exc).split())[:500]
    if isinstance(exc, OSError) and exc.errno in FATAL_ERRNOS:
        return FetchError(f"{source}: {type(exc).__name__}: {text}")
    return SourceError(f"{type(exc).__name__}: {text}")


def place_from_sources(manifest: dict, partial: Path, dest: Path, sources: list[str], opts):
    """Try each source in order; return (entries, origin, progress) of the first that
    provides every file. Raises :class:`FetchError` with every source's reason."""
    errors = []
    for source in sources:
        try:
            return SOURCES[source](manifest, partial, opts)
        except SourceError as e:
            errors.append(f"{source}: {e}")
        except FetchError as e:
            if e.code in (EXIT_SPACE, EXIT_BUSY):
                raise
            errors.append(f"{source}: {e}")
        except Exception as e:  # a hub library's network, HTTP or auth error
            classified = _classify(source, e)
            if not isinstance(classified, SourceError):
                raise classified from e
            errors.append(f"{source}: {classified}")
    raise FetchError(" | ".join(errors))


def place_new(manifest: dict, dest: Path, sources: list[str], opts) -> dict:
    name = f"{manifest['name']}@{manifest['revision']}"
    partial = partial_dir(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial.mkdir(exist_ok=True)
    current.update(dest=str(dest), partial=str(partial))
    try:
        entries, origin, progress = place_from_sources(manifest, partial, dest, sources, opts)
    except FetchError as e:
        raise FetchError(
            f"no source could provide {name} (partial copy kept in {partial}): {e}", e.code
        ) from None
    record = {
        "manifest": manifest,
        **origin,
        "placed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": entries,
    }
    removed = publish(partial, dest, record)
    out = {
        "status": "placed",
        "dest": str(dest),
        **origin,
        "files": len(entries),
        "bytes_total": sum(e["size"] for e in entries),
        **progress.summary(),
    }
    if removed:
        out["removed"] = removed
    return out


# ---- a model already placed -------------------------------------------------------------------
def placed_problems(manifest: dict, dest: Path, full: bool) -> tuple[list[dict], list[str], int]:
    """(files to replace, each with its ``problem``; stray files; sha256 checked) of the placed
    directory ``dest``: missing or of another size (cheap), or, with ``full``, of another
    sha256 than the manifest's or the record's. The kept original of an edited file stands in
    for it."""
    recorded = recorded_files(dest)
    sizes = tree_sizes(dest)
    wanted = manifest["files"] or [
        {"path": r.get("path", d), "dest": d, "size": r.get("size"), "sha256": r.get("sha256")}
        for d, r in recorded.items()
    ]
    bad = size_mismatches(wanted, recorded, sizes)
    checked = 0
    known_bad = {f["dest"] for f in bad}
    for f in wanted:
        _, sha = expected(f, recorded)
        rec_sha = recorded.get(f["dest"], {}).get("sha256")
        if f["dest"] in known_bad:
            continue
        if sha and rec_sha and sha != rec_sha:
            bad.append({**f, "problem": f"placed with sha256 {rec_sha}, {sha} expected"})
        elif full and sha:
            path = dest / f["dest"]
            if (dest / (f["dest"] + EDIT_ORIGINAL)).is_file():
                path = dest / (f["dest"] + EDIT_ORIGINAL)
            checked += 1
            got = sha256_file(path)
            if got != sha:
                bad.append({**f, "problem": f"sha256 {got}, {sha} expected"})
    strays = unexpected_files({f["dest"] for f in wanted}, set(sizes))
    return bad, strays, checked


def cmd_place(opts) -> dict:
    manifest = json.loads(Path(opts.manifest).read_text(encoding="utf-8"))
    dest = Path(opts.dest)
    sources = [s for s in opts.sources.split(",") if s]
    with transfer_lock(dest, opts.lock_dir, opts.lock_wait):
        if not dest.is_dir():
            return place_new(manifest, dest, sources, opts)
        bad, strays, checked = placed_problems(manifest, dest, opts.verify_sha256)
        listed = [f"{f['dest']}: {f['problem']}" for f in bad] + [
            f"{s}: not part of the model" for s in strays
        ]
        if not listed:
            out = {"status": "present", "dest": str(dest), "bytes_transferred": 0}
            return {**out, "sha256_checked": checked} if opts.verify_sha256 else out
        if not opts.replace_mismatched:
            raise FetchError(
                f"{dest} does not match its manifest and record: {'; '.join(listed)}. Kept as "
                "it is; set model_replace_mismatched = True to replace these files (the old "
                "ones are kept aside)",
                EXIT_MISMATCH,
            )
        return repair(manifest, dest, bad, strays, sources, opts)


def repair(manifest: dict, dest: Path, bad: list[dict], strays: list[str], sources, opts) -> dict:
    """Replace the files of a placed copy that do not match with verified ones and move stray
    files out; what is replaced is kept in ``.<revision>.replaced-<UTC time>/``."""
    recorded = recorded_files(dest)
    record = json.loads((dest / RECORD).read_text(encoding="utf-8")) if recorded else {}
    sub = {
        **manifest,
        "commit": manifest.get("commit") or record.get("commit"),
        "files": [
            {
                "path": f["path"],
                "dest": f["dest"],
                "size": expected(f, recorded)[0],
                "sha256": expected(f, recorded)[1],
            }
            for f in bad
        ],
    }
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    aside = replaced_dir(dest, stamp)
    entries: list[dict] = []
    result: dict = {"bytes_transferred": 0}
    if bad:
        work = dest.parent / f".{dest.name}.repair"
        if work.exists():
            shutil.rmtree(work)
        (work / ".placed.partial").mkdir(parents=True)
        current.update(dest=str(dest), partial=str(work))
        entries, origin, progress = place_from_sources(
            sub, work / ".placed.partial", work / "placed", sources, opts
        )
        result = {**origin, **progress.summary()}
        for e in entries:
            target = dest / e["dest"]
            if target.exists():
                (aside / e["dest"]).parent.mkdir(parents=True, exist_ok=True)
                target.replace(aside / e["dest"])
            target.parent.mkdir(parents=True, exist_ok=True)
            (work / ".placed.partial" / e["dest"]).replace(target)
            os.chmod(target, 0o644)
        shutil.rmtree(work)
    for rel in strays:
        (aside / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).replace(aside / rel)
    if record:
        fresh = {e["dest"]: e for e in entries}
        record["files"] = [fresh.get(f["dest"], f) for f in record["files"]]
        record["repaired_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        tmp = dest / (RECORD + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        os.chmod(tmp, 0o644)
        tmp.replace(dest / RECORD)
    os.sync()
    say(f"repaired {dest}: {len(entries)} file(s) replaced, {len(strays)} stray file(s) moved "
        f"out; the old ones are in {aside}")  # fmt: skip
    return {
        **result,
        "status": "repaired",
        "dest": str(dest),
        "replaced": [e["dest"] for e in entries],
        "moved_out": strays,
        "kept_aside": str(aside),
    }


def describe(result: dict) -> str:
    """The closing line of a placement for stderr."""
    done = result.get("bytes_transferred") or 0
    return (
        f"place: {result['status']}: {human_bytes(done)} transferred in "
        f"{result['seconds']:.1f} s ({result.get('rate_mb_s') or 0:.1f} MB/s)"
    )
