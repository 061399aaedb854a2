"""Model manifests: what a model is (repository, ref or pinned commit, files with size and sha256)
and where its files go; and model locks: the exact files of an unpinned manifest at one commit.
Format: docs/models.md (format = 1).

Manifests live in ``files/model/manifests/<name>.toml``, their locks beside them
(``<name>.lock``, or in ``model_lock_dir``). :func:`load_manifest` reads and validates a manifest
and its lock; every problem is reported at once as a :class:`ManifestError` (a pyinfra
``DeployError``) on the controller, before any change on a host. Pure: no host access.
"""

from __future__ import annotations

import fnmatch
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.version import InvalidVersion, Version
from pyinfra.api.exceptions import DeployError

MANIFEST_DIR = Path(__file__).resolve().parents[2] / "files" / "model" / "manifests"
FORMAT = 1
STATES = ("locked", "unpinned")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_TOP_KEYS = {
    "format",
    "name",
    "description",
    "state",
    "repo_id",
    "ref",
    "revision",
    "gated",
    "modelscope_id",
    "modelscope_revision",
    "include",
    "exclude",
    "files",
    "comfyui_min_release",
    "comfyui_min_release_source",
}
_FILE_KEYS = {"path", "size", "sha256", "dest"}
_LOCK_KEYS = {"format", "name", "repo_id", "ref", "commit", "include", "exclude", "files"}
LOCK_SUFFIX = ".lock"


class ManifestError(DeployError):
    """A manifest that cannot be used; the message names the file and every problem."""


@dataclass(frozen=True)
class ModelFile:
    """One wanted file: ``path`` in the repository, ``dest`` in the placed directory (posix,
    relative), ``size`` in bytes and ``sha256`` (lowercase hex) when known."""

    path: str
    dest: str
    size: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Manifest:
    """A validated manifest (see the module docstring for the format), with its lock applied.

    ``revision`` names the placed directory (a commit for a locked manifest, else a label);
    ``commit`` is the hub commit the files are pinned to: the revision of a locked manifest, the
    lock's commit for an unpinned one with a lock (``lock_file``), else None.
    """

    name: str
    state: str
    repo_id: str
    revision: str
    ref: str = "main"
    description: str = ""
    gated: bool = False
    modelscope_id: str | None = None
    modelscope_revision: str = "master"
    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    files: tuple[ModelFile, ...] = field(default_factory=tuple)
    source_file: str = ""
    commit: str | None = None
    lock_file: str = ""
    comfyui_min_release: str | None = None
    comfyui_min_release_source: str = ""

    @property
    def locked(self) -> bool:
        """True when the files are pinned to a hub commit, each with its size and sha256 (in the
        manifest itself, or by its lock): every source can place it, and only these bytes."""
        return (
            self.commit is not None
            and bool(self.files)
            and all(f.size is not None and f.sha256 for f in self.files)
        )

    @property
    def total_bytes(self) -> int | None:
        """Sum of the listed file sizes in bytes; None when a size is unknown or no files are
        listed (an unpinned manifest selecting by patterns)."""
        if not self.files or any(f.size is None for f in self.files):
            return None
        return sum(f.size for f in self.files)  # type: ignore[misc]

    def selects(self, repo_path: str) -> bool:
        """Whether a repository path is wanted: listed in ``files``, or (no files listed) matched
        by ``include`` and not by ``exclude`` (fnmatch patterns, as huggingface_hub's
        ``allow_patterns``/``ignore_patterns``)."""
        if self.files:
            return any(f.path == repo_path for f in self.files)
        return any(fnmatch.fnmatch(repo_path, p) for p in self.include) and not any(
            fnmatch.fnmatch(repo_path, p) for p in self.exclude
        )

    def to_json(self) -> dict[str, Any]:
        """The manifest as the on-target tool reads it (files/model/model_fetch.py)."""
        return {
            "format": FORMAT,
            "name": self.name,
            "state": self.state,
            "repo_id": self.repo_id,
            "ref": self.ref,
            "revision": self.revision,
            "commit": self.commit,
            "gated": self.gated,
            "modelscope_id": self.modelscope_id,
            "modelscope_revision": self.modelscope_revision,
            "include": list(self.include),
            "exclude": list(self.exclude),
            "files": [
                {"path": f.path, "dest": f.dest, "size": f.size, "sha256": f.sha256}
                for f in self.files
            ],
        }


def _rel_path(value: Any) -> str | None:
    if not isinstance(value, str) or not value or value.startswith("/"):
        return None
    parts = PurePosixPath(value).parts
    if any(p in ("..", ".", "") for p in parts) or any(c in value for c in "\n\0\\"):
        return None
    return str(PurePosixPath(value))


def _patterns(raw: dict, key: str, default: tuple[str, ...], problems: list[str]) -> tuple:
    value = raw.get(key, list(default))
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        problems.append(f"{key}: must be a list of fnmatch patterns, got {value!r}")
        return default
    return tuple(value)


def _files(raw: dict, problems: list[str]) -> tuple[ModelFile, ...]:
    entries = raw.get("files", [])
    if not isinstance(entries, list):
        problems.append("files: must be an array of tables ([[files]])")
        return ()
    out: list[ModelFile] = []
    for i, entry in enumerate(entries):
        where = f"files[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{where}: must be a table with path (and size, sha256, dest)")
            continue
        unknown = sorted(set(entry) - _FILE_KEYS)
        if unknown:
            problems.append(f"{where}: unknown keys {unknown} (known: {sorted(_FILE_KEYS)})")
        path = _rel_path(entry.get("path"))
        if path is None:
            problems.append(
                f"{where}.path: must be a relative path without '..', got {entry.get('path')!r}"
            )
            continue
        dest = _rel_path(entry.get("dest", path))
        if dest is None:
            problems.append(
                f"{where}.dest: must be a relative path without '..', got {entry.get('dest')!r}"
            )
            continue
        if dest == ".rigup-manifest.json":
            problems.append(f"{where}.dest: {dest} is rigup's own record file")
        size = entry.get("size")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            problems.append(f"{where}.size: must be a byte count (integer >= 0), got {size!r}")
            size = None
        sha = entry.get("sha256")
        if sha is not None and (not isinstance(sha, str) or not _SHA256.match(sha)):
            problems.append(f"{where}.sha256: must be 64 lowercase hex digits, got {sha!r}")
            sha = None
        out.append(ModelFile(path=path, dest=dest, size=size, sha256=sha))
    dests = [f.dest for f in out]
    dupes = sorted({d for d in dests if dests.count(d) > 1})
    if dupes:
        problems.append(f"files: several files go to the same dest: {dupes}")
    return tuple(out)


def parse_manifest(
    raw: dict[str, Any], source: str = "<manifest>", stem: str | None = None
) -> Manifest:
    """Validate a manifest's decoded TOML and return it as a :class:`Manifest`.

    ``stem`` (the file name without ``.toml``) must equal ``name`` when given. Raises
    :class:`ManifestError` listing every problem.
    """
    problems: list[str] = []
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        problems.append(f"unknown keys {unknown} (known: {sorted(_TOP_KEYS)})")
    if raw.get("format") != FORMAT:
        problems.append(f"format: must be {FORMAT}, got {raw.get('format')!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(f"name: must be letters, digits, '.', '_' or '-', got {name!r}")
    elif stem is not None and name != stem:
        problems.append(f"name: {name!r} must equal the file name ({stem}.toml)")
    state = raw.get("state")
    if state not in STATES:
        problems.append(f"state: must be one of {', '.join(STATES)}, got {state!r}")
    repo_id = raw.get("repo_id")
    if not isinstance(repo_id, str) or not _REPO_ID.match(repo_id):
        problems.append(f"repo_id: must be a Hugging Face id 'org/name', got {repo_id!r}")
    revision = raw.get("revision")
    if not isinstance(revision, str) or not _NAME.match(revision):
        problems.append(
            f"revision: must be a commit or a label of [A-Za-z0-9._-], got {revision!r}"
        )
    ref = raw.get("ref", "main")
    if not isinstance(ref, str) or not ref or any(c.isspace() for c in ref):
        problems.append(f"ref: must be a branch or tag name, got {ref!r}")
    for key in ("description", "modelscope_revision"):
        if key in raw and not isinstance(raw[key], str):
            problems.append(f"{key}: must be a string, got {raw[key]!r}")
    ms_id = raw.get("modelscope_id")
    if ms_id is not None and (not isinstance(ms_id, str) or not _REPO_ID.match(ms_id)):
        problems.append(f"modelscope_id: must be a ModelScope id 'org/name', got {ms_id!r}")
    gated = raw.get("gated", False)
    if not isinstance(gated, bool):
        problems.append(f"gated: must be true or false, got {gated!r}")
    include = _patterns(raw, "include", ("*",), problems)
    exclude = _patterns(raw, "exclude", (), problems)
    files = _files(raw, problems)
    min_release = raw.get("comfyui_min_release")
    min_source = raw.get("comfyui_min_release_source", "")
    if min_release is not None and release_version(min_release) is None:
        problems.append(
            "comfyui_min_release: must be a ComfyUI release tag such as v0.16.1, got "
            f"{min_release!r}"
        )
    if min_release is not None and (not isinstance(min_source, str) or not min_source.strip()):
        problems.append(
            "comfyui_min_release_source: say where the oldest release that loads the model is "
            "stated (a pull request, release notes, a template)"
        )
    elif min_release is None and "comfyui_min_release_source" in raw:
        problems.append("comfyui_min_release_source: given without comfyui_min_release")

    if state == "locked":
        if isinstance(revision, str) and not _COMMIT.match(revision):
            problems.append(
                f"revision: a locked manifest needs the 40-hex commit, got {revision!r} "
                '(run files/model/model_lock.py, or set state = "unpinned")'
            )
        if not files:
            problems.append("files: a locked manifest lists every file ([[files]])")
        missing = [f.path for f in files if f.size is None or f.sha256 is None]
        if missing:
            problems.append(f"files: a locked manifest needs size and sha256 for {missing}")
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ManifestError(f"model manifest {source} is invalid (nothing was changed):\n{lines}")
    return Manifest(
        name=name,
        state=state,
        repo_id=repo_id,
        revision=revision,
        ref=ref,
        description=raw.get("description", ""),
        gated=gated,
        modelscope_id=ms_id,
        modelscope_revision=raw.get("modelscope_revision", "master"),
        include=include,
        exclude=exclude,
        files=files,
        source_file=source,
        commit=revision if state == "locked" else None,
        comfyui_min_release=min_release,
        comfyui_min_release_source=min_source if min_release is not None else "",
    )


def release_version(tag: Any) -> Version | None:
    """The version a ComfyUI release tag names (``v0.16.1`` -> ``Version("0.16.1")``; ComfyUI
    tags are ``v`` + its ``pyproject.toml`` version), or None for a tag that names none."""
    if not isinstance(tag, str) or not tag.startswith("v"):
        return None
    try:
        return Version(tag[1:])
    except InvalidVersion:
        return None


def lock_path(manifest_file: str | Path, lock_dir: str = "") -> Path:
    """Where the lock of a manifest file is: ``<lock_dir or its directory>/<name>.lock``."""
    path = Path(manifest_file)
    return (Path(lock_dir) if lock_dir else path.parent) / f"{path.stem}{LOCK_SUFFIX}"


def apply_lock(manifest: Manifest, raw: dict[str, Any], source: str) -> Manifest:
    """``manifest`` pinned by its lock (decoded TOML ``raw`` read from ``source``). Raises
    :class:`ManifestError` when the lock is malformed or was made for another manifest."""
    m = manifest
    problems: list[str] = []
    unknown = sorted(set(raw) - _LOCK_KEYS)
    if unknown:
        problems.append(f"unknown keys {unknown} (known: {sorted(_LOCK_KEYS)})")
    if raw.get("format") != FORMAT:
        problems.append(f"format: must be {FORMAT}, got {raw.get('format')!r}")
    if m.state == "locked":
        problems.append('the manifest is locked itself (state = "locked"): remove the lock')
    for key, want in (("name", m.name), ("repo_id", m.repo_id), ("ref", m.ref)):
        if raw.get(key) != want:
            problems.append(f"{key}: the lock is for {raw.get(key)!r}, the manifest says {want!r}")
    commit = raw.get("commit")
    if not isinstance(commit, str) or not _COMMIT.match(commit):
        problems.append(f"commit: must be the 40-hex commit, got {commit!r}")
    files = _files(raw, problems)
    if not files:
        problems.append("files: a lock lists every file ([[files]])")
    if any(f.size is None or f.sha256 is None for f in files):
        problems.append("files: a lock gives every file its size and sha256")
    if m.files:
        by_path = {f.path: f for f in m.files}
        if {f.path for f in files} != set(by_path):
            problems.append(
                f"files: the lock lists {sorted(f.path for f in files)}, the manifest "
                f"{sorted(by_path)}"
            )
        else:
            files = tuple(ModelFile(f.path, by_path[f.path].dest, f.size, f.sha256) for f in files)
    else:
        for key, want in (("include", m.include), ("exclude", m.exclude)):
            if tuple(raw.get(key, ())) != want:
                problems.append(
                    f"{key}: the lock was made for {raw.get(key)!r}, the manifest says {list(want)!r}"
                )
        stray = [f.path for f in files if not m.selects(f.path)]
        if stray:
            problems.append(f"files: the manifest's patterns do not select {stray[:5]}")
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ManifestError(
            f"model lock {source} does not fit its manifest {m.source_file} (nothing was "
            f"changed):\n{lines}\nDelete the lock to lock {m.repo_id}@{m.ref} again (the next "
            "run that reaches the hub writes a new one), or restore the manifest it was made for."
        )
    return replace(m, commit=commit, files=files, lock_file=source)


def store_path(store_dir: str, manifest: Manifest) -> str:
    """Where ``manifest`` is placed: ``<store_dir>/<name>/<revision>`` (absolute)."""
    return f"{store_dir.rstrip('/')}/{manifest.name}/{manifest.revision}"


def manifest_path(ref: str) -> Path:
    """The .toml file for a manifest reference: a name under files/model/manifests/, or an
    absolute path. Raises :class:`ManifestError` naming the known manifests when absent."""
    path = Path(ref) if ref.startswith("/") else MANIFEST_DIR / f"{ref}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in MANIFEST_DIR.glob("*.toml")))
        raise ManifestError(
            f"model manifest {ref!r} not found ({path}); known manifests: {known} "
            "(nothing was changed)"
        )
    return path


def _toml(path: Path, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(f"{what} {path} is not valid TOML: {exc}") from None


def load_manifest(ref: str, lock_dir: str = "") -> Manifest:
    """Read and validate the manifest ``ref`` (see :func:`manifest_path`) and apply its lock
    (:func:`lock_path`) when there is one.

    Raises :class:`ManifestError` when a file is missing, is not TOML, or is invalid.
    """
    path = manifest_path(ref)
    manifest = parse_manifest(_toml(path, "model manifest"), str(path), stem=path.stem)
    lock = lock_path(path, lock_dir)
    if lock.is_file():
        manifest = apply_lock(manifest, _toml(lock, "model lock"), str(lock))
    return manifest
