"""Files, templates, directories and links placed on a host, decided from one batched fact.

pyinfra's own ``files.put``/``files.template``/``files.directory``/``files.link`` read one fact
per question (``File``, ``Directory``, ``Sha1File``, ``Link``): two or three SSH round trips for
each file, at planning and again when the operation runs. A converged lab host answered 409 such
facts in a no-change re-run (benchmarks/rerun.py, 2026-12-02), most of its 32 s. Here the state
of many paths (type, mode, owner, group, size, sha256, link target) comes from ONE command
(:class:`PathStates`); a role reads the paths it places with :func:`survey` before declaring
them, and each operation below decides from that answer. Only when a path differs does it hand
over to pyinfra's own operation (``files.put._inner`` ...), which makes the change exactly as
before. When an operation runs (not planning), it reads its own path again (one round trip:
earlier operations of the run may have changed it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from io import BytesIO, StringIO
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from pyinfra import host, state
from pyinfra.api import StringCommand, operation
from pyinfra.api.exceptions import OperationValueError
from pyinfra.api.util import get_template
from pyinfra.operations import files

from roles.common.path_states import PathState, PathStates, TreeStates

#: per host: the planning-time state of the paths a role surveyed (see :func:`survey`)
_SURVEYED: WeakKeyDictionary[Any, dict[str, PathState | None]] = WeakKeyDictionary()


def survey(paths: Iterable[str]) -> None:
    """Read the state of ``paths`` on the current host in one round trip, for the planning of
    the placement operations that follow (a role calls it with every path it places, before
    declaring them). Does nothing while operations run: they read their own path then."""
    wanted = tuple(dict.fromkeys(paths))
    if not wanted or host.state.is_executing:
        return
    states = host.get_fact(PathStates, paths=wanted) or {}
    # a path the answer does not list is taken as absent: its operation plans the change
    _SURVEYED.setdefault(host, {}).update({path: states.get(path) for path in wanted})


#: per host: the directories whose whole trees a role surveyed (see :func:`survey_tree`)
_TREES: WeakKeyDictionary[Any, set[str]] = WeakKeyDictionary()


def survey_tree(path: str) -> None:
    """Read the state of the directory ``path`` and of everything under it in one round trip
    (:class:`TreeStates`), for the planning of the placement operations that follow: a path
    under it that the answer does not list is absent. Only for rigup's own small trees (its
    libraries): every file in it is hashed. Does nothing while operations run."""
    if host.state.is_executing:
        return
    _SURVEYED.setdefault(host, {}).update(host.get_fact(TreeStates, path=path) or {})
    _TREES.setdefault(host, set()).add(path.rstrip("/"))


def _covered(path: str) -> bool:
    return any(path == t or path.startswith(t + "/") for t in _TREES.get(host, ()))


def path_state(path: str) -> PathState | None:
    """The state of ``path``: from the planning survey when planning and surveyed (a path
    under a surveyed tree that it does not list is absent), else one :class:`PathStates`
    round trip."""
    if not host.state.is_executing:
        surveyed = _SURVEYED.get(host, {})
        if path in surveyed:
            return surveyed[path]
        if _covered(path):
            return None
    return (host.get_fact(PathStates, paths=(path,)) or {}).get(path)


def _mode_matches(current: PathState, mode: str | int | None) -> bool:
    if mode is None:
        return True
    want = int(str(mode), 8)  # pyinfra's convention: 644 and "644" both mean rw-r--r--
    return current.get("mode", "") != "" and int(current["mode"], 8) == want


def _owner_matches(current: PathState, user: str | None, group: str | None) -> bool:
    return (user is None or current.get("user") == user) and (
        group is None or current.get("group") == group
    )


def _is(
    current: PathState | None,
    kind: str,
    mode,
    user: str | None,
    group: str | None,
    data: bytes | None = None,
) -> bool:
    """``current`` is a ``kind`` ("file", "directory") with ``mode``, ``user`` and ``group``
    and, when ``data`` is given, those bytes (by sha256)."""
    return (
        current is not None
        and current.get("type") == kind
        and (data is None or current.get("sha256") == hashlib.sha256(data).hexdigest())
        and _mode_matches(current, mode)
        and _owner_matches(current, user, group)
    )


def _content(src: str | Path | StringIO | BytesIO) -> bytes:
    if isinstance(src, StringIO):
        return src.getvalue().encode()
    if isinstance(src, BytesIO):
        return src.getvalue()
    return Path(src).read_bytes()


def _place(data: bytes, dest: str, mode, user, group, template: str | None = None):
    if _is(path_state(dest), "file", mode, user, group, data):
        host.noop(f"file {dest} is current")
        return
    # pyinfra's own put makes the change (upload through a temp file, parent directory,
    # chown/chmod, --diff output); it reads its own facts, on this path only
    upload: Any = StringIO(data.decode()) if _is_text(data) else BytesIO(data)
    if template:
        upload.template = template
    yield from files.put._inner(src=upload, dest=dest, mode=mode, user=user, group=group)


def _is_text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


@operation()
def file_placed(
    src: str | Path | StringIO | BytesIO,
    dest: str,
    mode: str | int | None = None,
    user: str | None = None,
    group: str | None = None,
):
    """Hold ``dest`` at the bytes of ``src`` (a local file's path, or text in a ``StringIO``)
    with ``mode`` (octal, ``"644"``) and, when given, ``user``/``group``; what pyinfra's
    ``files.put`` does, compared by sha256 from :class:`PathStates`. Raises ``OSError`` when
    the local ``src`` does not exist."""
    yield from _place(_content(src), dest, mode, user, group)


@operation()
def template_placed(
    src: str | Path,
    dest: str,
    mode: str | int | None = None,
    user: str | None = None,
    group: str | None = None,
    jinja_env_kwargs: dict[str, Any] | None = None,
    **data: Any,
):
    """Hold ``dest`` at the Jinja template ``src`` rendered with ``data`` (and ``host``,
    ``state``, ``inventory``, as pyinfra's ``files.template`` gives them), like
    :func:`file_placed`. Raises ``OperationValueError`` when the template cannot render."""
    data.setdefault("host", host)
    data.setdefault("state", state)
    data.setdefault("inventory", state.inventory)
    try:
        text = get_template(str(src), jinja_env_kwargs or {}).render(data)
    except Exception as exc:  # jinja's errors name the template line
        raise OperationValueError(f"template {src}: {exc}") from exc
    yield from _place(text.encode(), dest, mode, user, group, template=str(src))


@operation()
def directory_placed(
    path: str, mode: str | int | None = None, user: str | None = None, group: str | None = None
):
    """A directory at ``path`` with ``mode`` and, when given, ``user``/``group`` (pyinfra's
    ``files.directory`` makes it when it differs). Never its content."""
    if _is(path_state(path), "directory", mode, user, group):
        host.noop(f"directory {path} is current")
        return
    yield from files.directory._inner(path=path, mode=mode, user=user, group=group)


@operation()
def link_placed(path: str, target: str):
    """A symbolic link at ``path`` to ``target`` (pyinfra's ``files.link`` makes it when it
    differs; like it, it fails on a file or directory a user put at ``path``)."""
    current = path_state(path)
    if current is not None and current.get("type") == "link" and current["target"] == target:
        host.noop(f"link {path} -> {target} is current")
        return
    yield from files.link._inner(path=path, target=target)


@operation()
def file_present(
    path: str, mode: str | int | None = None, user: str | None = None, group: str | None = None
):
    """A regular file at ``path`` (made empty when absent; its content is not ours) with
    ``mode`` and, when given, ``user``/``group`` (pyinfra's ``files.file`` makes it so)."""
    if _is(path_state(path), "file", mode, user, group):
        host.noop(f"file {path} is as wanted")
        return
    yield from files.file._inner(path=path, mode=mode, user=user, group=group)


@operation()
def file_absent(path: str):
    """No file or link at ``path`` (pyinfra's ``files.file(present=False)`` removes it)."""
    if path_state(path) is None:
        host.noop(f"{path} is absent")
        return
    yield from files.file._inner(path=path, present=False)


def tree_files(src: Path) -> list[str]:
    """The files of the local directory ``src`` that a host gets, relative, sorted: every file
    but compiled Python (``*.pyc``, ``__pycache__``)."""
    return sorted(
        str(p.relative_to(src))
        for p in src.rglob("*")
        if p.is_file() and p.suffix != ".pyc" and "__pycache__" not in p.parts
    )


def tree_entries(path: str) -> dict[str, PathState | None]:
    """Everything under the directory ``path`` (itself included), path -> state: from a
    planning :func:`survey_tree` that covers it, else one :class:`TreeStates` round trip."""
    return _tree(path)


def _tree(path: str) -> dict[str, PathState | None]:
    """Everything under the directory ``path`` (itself included): from a planning
    :func:`survey_tree` that covers it, else one :class:`TreeStates` round trip."""
    if not host.state.is_executing and _covered(path):
        prefix = path.rstrip("/") + "/"
        surveyed = _SURVEYED.get(host, {})
        return {p: s for p, s in surveyed.items() if p == path or p.startswith(prefix)}
    return host.get_fact(TreeStates, path=path) or {}


@operation()
def tree_placed(
    src: str | Path,
    dest: str,
    mode: str = "644",
    dir_mode: str = "755",
    user: str | None = None,
    group: str | None = None,
):
    """Hold the directory ``dest`` at the local directory ``src`` (a Python package): its
    subdirectories (``dir_mode``), its files (``mode``; compiled Python left out, see
    :func:`tree_files`) and nothing else: a file under ``dest`` that ``src`` no longer has is
    removed (compiled Python, which the interpreter writes, is left). What pyinfra's
    ``files.sync(delete=True)`` does, decided from one round trip (:class:`TreeStates`, or a
    :func:`survey_tree` that covers ``dest``) instead of two or three per file."""
    src = Path(src)
    rels = tree_files(src)
    dirs = [dest, *(f"{dest}/{d}" for d in sorted({str(Path(r).parent) for r in rels} - {"."}))]
    states = _tree(dest)
    changed = False
    for path in dirs:
        if not _is(states.get(path), "directory", dir_mode, user, group):
            changed = True
            yield from files.directory._inner(path=path, mode=dir_mode, user=user, group=group)
    for rel in rels:
        data = (src / rel).read_bytes()
        if not _is(states.get(f"{dest}/{rel}"), "file", mode, user, group, data):
            changed = True
            yield from files.put._inner(
                src=str(src / rel), dest=f"{dest}/{rel}", mode=mode, user=user, group=group
            )
    wanted = {f"{dest}/{rel}" for rel in rels}
    for path, current in sorted(states.items()):
        stale = current is not None and current.get("type") in ("file", "link")
        compiled = "/__pycache__/" in path or path.endswith(".pyc")
        if stale and path not in wanted and not compiled:
            changed = True
            yield StringCommand("rm", "-f", path)
    if not changed:
        host.noop(f"{dest} holds {src.name} ({len(rels)} files)")
