"""The hub sources: Hugging Face (huggingface_hub; any endpoint speaking its API: a mirror such
as hf-mirror.com, or the lab's server) and ModelScope (modelscope). Their libraries are imported
here, when a hub is used, never at the tool's import.

Hugging Face: a ref (branch or tag) resolves to a commit (``model_info``); the repository's
files at that commit come with their size and the hash the hub publishes (``list_repo_tree``):
the LFS sha256 of large files, the git blob id of the others; each file is downloaded at the
commit with ``hf_hub_download``. huggingface_hub 2.4.0 does not resume a download across
processes (each process writes its own ``<name>.<random>.incomplete`` and starts at byte 0), so
rigup resumes by file: a file verified once is never fetched again.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from modeltool.layout import SourceError


@dataclass(frozen=True)
class HubFile:
    """A file of a hub repository at a commit: ``size``, and the hash the hub publishes for it:
    ``sha256`` (LFS / Xet files) or ``blob_id`` (the git blob id of a file kept in git)."""

    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


def read_token(path: str) -> str | None:
    """The token in ``path`` (root-only, written by rigup), or None when there is none."""
    if path and Path(path).is_file():
        return Path(path).read_text(encoding="utf-8").strip() or None
    return None


def _api(endpoint: str, token: str | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint or None, token=token or False)


def resolve_ref(repo_id: str, ref: str, endpoint: str, token: str | None) -> str:
    """The commit ``ref`` (a branch, tag or commit) names in ``repo_id`` now."""
    info = _api(endpoint, token).model_info(repo_id, revision=ref)
    if not info.sha:
        raise SourceError(f"{repo_id}@{ref}: the hub gave no commit for it")
    return info.sha


def list_files(repo_id: str, commit: str, endpoint: str, token: str | None) -> dict[str, HubFile]:
    """Every file of ``repo_id`` at ``commit`` (path -> :class:`HubFile`)."""
    from huggingface_hub.hf_api import RepoFile

    out = {}
    for entry in _api(endpoint, token).list_repo_tree(repo_id, revision=commit, recursive=True):
        if isinstance(entry, RepoFile):
            lfs = entry.lfs
            out[entry.path] = HubFile(
                path=entry.path,
                size=entry.size,
                sha256=lfs.sha256 if lfs else None,
                blob_id=None if lfs else entry.blob_id,
            )
    return out


def hf_download(
    repo_id: str, path: str, commit: str, local_dir: Path, endpoint: str, token: str | None
) -> Path:
    """Download one file at ``commit`` into ``local_dir`` (its place there: ``<local_dir>/<path>``)."""
    from huggingface_hub import hf_hub_download

    return Path(
        hf_hub_download(
            repo_id,
            path,
            revision=commit,
            local_dir=str(local_dir),
            endpoint=endpoint or None,
            token=token or False,
        )
    )


def forget_unfinished(local_dir: Path) -> int:
    """Remove what huggingface_hub leaves of downloads that never finished in ``local_dir``
    (``.cache/huggingface/download/**/*.incomplete``; no later process resumes them). Returns
    the bytes freed."""
    freed = 0
    folder = local_dir / ".cache" / "huggingface" / "download"
    for leftover in folder.rglob("*.incomplete") if folder.is_dir() else ():
        freed += leftover.stat().st_size
        leftover.unlink()
    return freed


def modelscope_download(
    modelscope_id: str,
    revision: str,
    paths: list[str],
    local_dir: Path,
    endpoint: str,
    token: str | None,
) -> Path:
    """modelscope's snapshot_download of ``paths`` into ``local_dir`` (untested against a live
    ModelScope: no ModelScope-compatible server exists to test it with)."""
    from modelscope import snapshot_download

    snapshot_download(
        model_id=modelscope_id,
        revision=revision or "master",
        local_dir=str(local_dir),
        allow_patterns=paths,
        endpoint=endpoint or None,
        token=token,
    )
    return local_dir


def tree_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (0 when it does not exist)."""
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def remove_tree(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
