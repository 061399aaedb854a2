"""Facts of the state of paths on a host, many paths in one command: what
:mod:`roles.common.placed` decides from. Each ``process()`` is pure and tested on captured
output (tests/fixtures/placed)."""

from __future__ import annotations

import shlex
from typing import TypedDict

from pyinfra.api import FactBase


class PathState(TypedDict, total=False):
    """What :class:`PathStates` reports of one path. ``type``: ``file``, ``directory``,
    ``link`` or ``other`` (a device, a socket...); ``mode``: octal permission digits as
    ``stat %a`` prints them (``"644"``, ``"1777"``); ``user``/``group``: owner names (ids
    where the name is unknown); ``size`` bytes and ``sha256`` (hex) of a regular file;
    ``target`` of a symbolic link (not resolved)."""

    type: str
    mode: str
    user: str
    group: str
    size: int
    sha256: str
    target: str


def path_state(
    kind: str, mode: str, user: str, group: str, size: str, value: str
) -> PathState | None:
    """One path's state from the fields the facts below print: ``kind`` "absent" (None),
    "link" (``value`` its target), "file" (``value`` its sha256, ``size`` in bytes),
    "directory", or another kind (its type only)."""
    if kind == "absent":
        return None
    if kind == "link":
        return {"type": "link", "target": value}
    if kind == "file":
        return {
            "type": "file",
            "mode": mode,
            "user": user,
            "group": group,
            "size": int(size),
            "sha256": value,
        }
    if kind == "directory":
        return {"type": "directory", "mode": mode, "user": user, "group": group}
    return {"type": kind}


class PathStates(FactBase):
    """State of each of ``paths`` on the host, in one command: ``{"/etc/x": {"type": "file",
    "mode": "644", "user": "root", "group": "root", "size": 12, "sha256": "..."}, "/y": None}``
    (None: nothing at that path). A link is reported as itself (``{"type": "link",
    "target": "..."}``), never followed. Regular files are hashed (sha256sum): meant for the
    small files rigup places (scripts, units, configs), not for model weights.

    Output, one line per path, tab-separated: ``type mode user group size sha256|target path``
    (path last, so a path may hold spaces). Paths with a tab or a newline are refused
    (``ValueError``).
    """

    def command(self, paths: tuple[str, ...]) -> str:
        bad = [p for p in paths if "\t" in p or "\n" in p or not p.startswith("/")]
        if bad:
            raise ValueError(f"PathStates: not an absolute path without tab or newline: {bad!r}")
        quoted = " ".join(shlex.quote(p) for p in paths)
        t = "\\t"
        return (
            f"for p in {quoted}; do "
            f'if [ -L "$p" ]; then printf "link{t}{t}{t}{t}{t}%s{t}%s\\n" "$(readlink -- "$p")" "$p"; '
            f'elif [ -f "$p" ]; then printf "file{t}%s{t}%s{t}%s{t}%s{t}%s{t}%s\\n" '
            '$(stat -c \'%a %U %G %s\' -- "$p") "$(sha256sum < "$p" | cut -d\' \' -f1)" "$p"; '
            f'elif [ -d "$p" ]; then printf "directory{t}%s{t}%s{t}%s{t}{t}{t}%s\\n" '
            '$(stat -c \'%a %U %G\' -- "$p") "$p"; '
            f'elif [ -e "$p" ]; then printf "other{t}{t}{t}{t}{t}{t}%s\\n" "$p"; '
            f'else printf "absent{t}{t}{t}{t}{t}{t}%s\\n" "$p"; fi; done'
        )

    def default(self) -> dict[str, PathState | None]:
        return {}

    def process(self, output: list[str]) -> dict[str, PathState | None]:
        states: dict[str, PathState | None] = {}
        for line in output:
            fields = line.split("\t", 6)
            if len(fields) != 7:
                continue
            kind, mode, user, group, size, value, path = fields
            states[path] = path_state(kind, mode, user, group, size, value)
        return states


class TreeStates(FactBase):
    """State of the directory ``path`` and of everything under it, in one command, in the
    shape of :class:`PathStates` (``{}`` when ``path`` is not a directory). For rigup's own
    small trees (its libraries, its packages), never a venv or a model: every regular file is
    hashed.

    Output: ``find -printf`` lines ``type mode user group size link-target path`` (``%y``
    letters: ``f`` file, ``d`` directory, ``l`` link), then ``@sha256`` and sha256sum's lines.
    """

    def default(self) -> dict[str, PathState | None]:
        return {}

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"! test -d {q} || {{ find {q} -printf '%y\\t%m\\t%u\\t%g\\t%s\\t%l\\t%p\\n' "
            f"&& echo @sha256 && find {q} -type f -exec sha256sum {{}} + ; }}"
        )

    def process(self, output: list[str]) -> dict[str, PathState | None]:
        split = output.index("@sha256") if "@sha256" in output else len(output)
        sums = {}
        for line in output[split + 1 :]:
            digest, _, path = line.partition("  ")
            if path and not digest.startswith("\\"):
                sums[path] = digest
        states: dict[str, PathState | None] = {}
        kinds = {"f": "file", "d": "directory", "l": "link"}
        for line in output[:split]:
            fields = line.split("\t", 6)
            if len(fields) != 7:
                continue
            letter, mode, user, group, size, target, path = fields
            kind = kinds.get(letter, "other")
            value = target if kind == "link" else sums.get(path, "")
            states[path] = path_state(kind, mode, user, group, size, value)
        return states
