"""The ComfyUI release a host runs: a tag (``comfyui_release``), pinned by its lock.

A release lock is two files in ``files/comfyui/releases/`` (or ``comfyui_lock_dir``):
``<tag>.toml`` (the commit the tag named, the version that commit declares and, optionally, the
commit's tree id) and ``<tag>.requirements.lock`` (that commit's requirements.txt compiled by uv
with every hash). With a lock, a host checks out exactly that commit (refused, before the
checkout, when the lock names a tree id the commit does not have) and builds its venv from
exactly that lock.

Without one (a new release), the first run on a host that reaches the git remote locks it: the
host fetches the tag and checks out the commit it names, compiles the commit's requirements.txt
with ``uv pip compile --generate-hashes`` (from the host's package sources), builds the venv from
that lock, and the controller writes both files from what the host made, naming them at the end
of the run. Commit them: the next run and every other rig use them, as with model locks
(docs/models.md).
"""

from __future__ import annotations

import atexit
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinfra import host, logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.exceptions import DeployError
from pyinfra.api.operation import OperationMeta
from pyinfra.facts.files import FileContents

from roles.comfyui.git import GitCheckout, git_checkout_pinned, git_checkout_tag
from roles.comfyui.paths import ComfyuiPaths
from roles.common.facts import uv_env
from roles.common.operations import uv_venv_synced
from roles.common.paths import Layout
from roles.common.uv import PackageSources
from roles.common.venv import locked_venv, uv_lock_private

RELEASES = Path(__file__).resolve().parents[2] / "files" / "comfyui" / "releases"
TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)


class ReleaseError(DeployError):
    """A release lock that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Release:
    """A ComfyUI release: ``tag``; ``commit``, ``version`` and ``tree`` (the commit's git tree
    id, None when the lock names none) from its lock (None before the first run locks it);
    ``requirements``, the lock's requirements file; ``lock_file``, where the lock is (or will
    be written)."""

    tag: str
    lock_file: Path
    commit: str | None = None
    version: str | None = None
    requirements: Path | None = None
    tree: str | None = None

    @property
    def locked(self) -> bool:
        return self.commit is not None

    @property
    def label(self) -> str:
        """``ComfyUI 0.8.0`` when locked, else ``ComfyUI v0.8.0`` (the tag)."""
        return f"ComfyUI {self.version or self.tag}"


def lock_path(tag: str, lock_dir: str = "") -> Path:
    """``<lock_dir or files/comfyui/releases>/<tag>.toml``."""
    return (Path(lock_dir) if lock_dir else RELEASES) / f"{tag}.toml"


def load_release(tag: str, lock_dir: str = "", commit: str = "") -> Release:
    """The release ``tag`` with its lock applied, when there is one; ``commit`` (a setting for
    mirrors that carry a commit of their own) replaces the locked commit, and with it the
    lock's tree id (which names the locked commit's tree). Raises :class:`ReleaseError` for a
    lock that is malformed or made for another tag."""
    path = lock_path(tag, lock_dir)
    if not path.is_file():
        return Release(tag=tag, lock_file=path, commit=commit or None)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ReleaseError(f"ComfyUI release lock {path} is not valid TOML: {exc}") from None
    problems = []
    if raw.get("format") != 1:
        problems.append(f"format: must be 1, got {raw.get('format')!r}")
    if raw.get("release") != tag:
        problems.append(f"release: the lock is for {raw.get('release')!r}, not {tag!r}")
    if not isinstance(raw.get("commit"), str) or not _COMMIT.match(raw["commit"]):
        problems.append(f"commit: must be a 40-hex commit, got {raw.get('commit')!r}")
    if not isinstance(raw.get("version"), str) or not raw["version"]:
        problems.append(
            f"version: must be the version the commit declares, got {raw.get('version')!r}"
        )
    tree = raw.get("tree")
    if tree is not None and not (isinstance(tree, str) and _COMMIT.match(tree)):
        problems.append(f"tree: must be the commit's 40-hex git tree id, got {tree!r}")
    requirements = path.with_name(f"{tag}.requirements.lock")
    if not requirements.is_file():
        problems.append(f"{requirements.name} is missing beside it")
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ReleaseError(
            f"ComfyUI release lock {path} cannot be used (nothing was changed):\n{lines}\n"
            "Delete it (and its requirements lock) to lock the release again."
        )
    return Release(
        tag=tag,
        lock_file=path,
        commit=commit or raw["commit"],
        version=raw["version"],
        requirements=requirements,
        tree=None if commit else tree,
    )


def release_of(settings: Any) -> Release:
    """The release the settings name (``comfyui_release``, ``comfyui_lock_dir``,
    ``comfyui_commit``)."""
    return load_release(
        settings.get("comfyui_release"),
        settings.get("comfyui_lock_dir") or "",
        settings.get("comfyui_commit") or "",
    )


def lock_text(tag: str, commit: str, version: str, origin: str, tree: str = "") -> str:
    """``<tag>.toml`` of a release lock; ``tree`` (the commit's git tree id), when given, is
    checked on the host before the checkout."""
    return (
        f"# rigup ComfyUI release lock (format 1): the commit release {tag} named when it was\n"
        f"# locked, and the version it declares; {tag}.requirements.lock beside it holds its\n"
        "# requirements.txt compiled by uv with every hash. Every rig with these files runs\n"
        f"# exactly this. Commit both; delete both to lock the release again.\n# {origin}\n"
        f'format = 1\nrelease = "{tag}"\ncommit = "{commit}"\nversion = "{version}"\n'
        + (f'tree = "{tree}"\n' if tree else "")
    )


#: release locks this run wrote, named again at the end of the run
LOCKS_WRITTEN: list[str] = []


def _print_locks() -> None:
    if LOCKS_WRITTEN:
        lines = "\n".join(f"    {line}" for line in LOCKS_WRITTEN)
        print(f"\n--> ComfyUI release locks written on this controller. Commit them:\n{lines}\n",
              file=sys.stderr)  # fmt: skip


atexit.register(_print_locks)


def write_lock(state, host, release: Release, src: str, requirements_on_host: str) -> bool:
    """Write the release lock on the controller from what the host checked out and compiled."""
    checkout = host.get_fact(GitCheckout, path=src)
    version_py = host.get_fact(FileContents, path=f"{src}/comfyui_version.py") or []
    lock = host.get_fact(FileContents, path=requirements_on_host)
    found = _VERSION_LINE.search("\n".join(version_py))
    if not checkout or not checkout["head"] or not found or not lock:
        host.log_styled(
            f"ComfyUI {release.tag}: no lock written: the checkout, its comfyui_version.py or "
            f"{requirements_on_host} is missing on the host",
            fg="red",
            log_func=logger.error,
        )
        return False
    target = release.lock_file
    target.parent.mkdir(parents=True, exist_ok=True)
    target.with_name(f"{release.tag}.requirements.lock").write_text("\n".join(lock) + "\n")
    origin = f"Locked on {host.name} from {host.data.get('comfyui_git_url')}."
    target.write_text(lock_text(release.tag, checkout["head"], found.group(1), origin))
    line = f"{target} (+ .requirements.lock): {release.tag} = {checkout['head']}, ComfyUI {found.group(1)}"
    LOCKS_WRITTEN.append(line)
    host.log_styled(f"ComfyUI release lock written: {line}", fg="green", log_func=logger.warning)
    return True


@operation()
def requirements_compiled(
    src: str, lock: str, python: str, uv: str, cache_dir: str, tmp_dir: str, sources: str = ""
):
    """Compile ``<src>/requirements.txt`` to ``lock`` on the host with every hash
    (``uv pip compile --universal --generate-hashes``, for ``python``'s version and up): the
    first run of a release that has no lock yet."""
    env = uv_env(cache_dir, tmp_dir, sources)
    yield (
        f"{env} {shlex.quote(uv)} pip compile --quiet --universal --generate-hashes "
        f"--python {shlex.quote(python)} -o {shlex.quote(lock)} {shlex.quote(src)}/requirements.txt"
    )


@operation()
def release_lock_written(release: Release, src: str, requirements_on_host: str):
    """Write the release's lock on the controller (see :func:`write_lock`)."""
    yield FunctionCommand(write_lock, (release, src, requirements_on_host), {})


def release_source(settings: Any) -> tuple[Release, list[OperationMeta]]:
    """Check out the release and build its venv: from its lock, or (none yet) by locking it
    on this host (see the module docstring). Returns the release and the operations that change
    what ComfyUI runs."""
    d = ComfyuiPaths.from_data(settings)
    rel = release_of(settings)
    layout = Layout.from_data(settings)
    if rel.locked:
        version_file = shlex.quote(f"{d.src}/comfyui_version.py")
        checkout = git_checkout_pinned(
            name=f"{rel.label} source at {rel.commit[:12]} ({rel.tag})",
            path=d.src,
            url=settings.comfyui_git_url,
            commit=rel.commit,
            tree=rel.tree,
            version_check=(
                f"grep -qx '__version__ = \"{rel.version}\"' {version_file} || "
                f"{{ echo 'ComfyUI {rel.tag}: {version_file} at {rel.commit} is not "
                f"{rel.version}' >&2; exit 1; }}"
            ),
        )
        built = locked_venv(
            settings,
            what="ComfyUI",
            contents=f"{rel.label} requirements",
            lock_src=rel.requirements,
            lock=d.lock,
            venv=d.venv,
            python=settings.comfyui_python,
        )
        return rel, [checkout, built.lock, built.venv]
    logger.info(
        f"[{host.name}] ComfyUI {rel.tag}: no release lock yet: the host checks out the commit the "
        f"tag names, compiles its requirements with every hash, and the lock is written to "
        f"{rel.lock_file}"
    )
    checkout = git_checkout_tag(
        name=f"ComfyUI source at release {rel.tag} (first run: its commit resolved on the host)",
        path=d.src,
        url=settings.comfyui_git_url,
        tag=rel.tag,
    )
    # what both uv operations run with: the lock, the interpreter, uv and where packages come from
    uv_args = {
        "lock": d.lock,
        "python": settings.comfyui_python,
        "uv": layout.uv,
        "cache_dir": layout.uv_cache,
        "tmp_dir": layout.tmp,
        "sources": PackageSources.from_data(settings).uv_env(),
    }
    compiled = requirements_compiled(
        name=f"ComfyUI {rel.tag} requirements locked (uv pip compile --generate-hashes)",
        src=d.src,
        **uv_args,
    )
    venv = uv_venv_synced(
        name=f"ComfyUI venv (ComfyUI {rel.tag} requirements; uv, locked on this run)",
        venv=d.venv,
        **uv_args,
    )
    uv_lock_private(d.venv)
    written = release_lock_written(
        name=f"ComfyUI {rel.tag} release lock written on the controller",
        release=rel,
        src=d.src,
        requirements_on_host=d.lock,
    )
    return rel, [checkout, compiled, venv, written]
