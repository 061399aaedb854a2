"""The sources of a placement: each transfers a model's files into the partial area, checked
(a local directory or cache, Hugging Face, ModelScope; :data:`SOURCES`)."""

from __future__ import annotations

import contextlib
import json
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from modeltool import hub, local
from modeltool.hashing import file_hashes, sha256_file
from modeltool.layout import (
    DOWNLOAD,
    RECORD,
    SourceError,
)
from modeltool.partial import check_free_space, current, finish_file, pinned, verified_before
from modeltool.progress import PROGRESS_EVERY_S, Progress
from modeltool.snapshot import (
    expected,
    recorded_files,
    selected,
)

#: files downloaded at once from a hub (each is also split by hf_xet where the hub uses Xet)
HUB_WORKERS = 4


#: errors of the machine itself, not of a source: trying another source would not help
def from_local(manifest: dict, partial: Path, opts) -> tuple[list[dict], dict, Progress]:
    src, layout, files = local.complete_local_copy(manifest, opts.local_dir)
    recorded = recorded_files(src)
    origin = f"local:{src}"
    done = verified_before(partial, origin, manifest)
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
            entries.append(
                {k: done[f["dest"]][k] for k in ("dest", "path", "size", "sha256", "stat")}
            )
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
    done = verified_before(partial, origin, manifest)
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
    entries = {
        d: {k: e[k] for k in ("dest", "path", "size", "sha256", "stat")} for d, e in done.items()
    }
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
    done = verified_before(partial, origin, manifest)
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
    entries = {
        d: {k: e[k] for k in ("dest", "path", "size", "sha256", "stat")} for d, e in done.items()
    }
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
