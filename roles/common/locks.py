"""What a committed uv lock (``uv pip compile --generate-hashes`` output) pins. Pure."""

from __future__ import annotations

import re
from pathlib import Path


def pinned_version(lock: Path, package: str) -> str | None:
    """The version ``lock`` pins for ``package`` (``package==X`` at the start of a line, name
    compared as PEP 503 normalises it), or None when the lock does not list it.

    Raises ``OSError`` when the lock cannot be read.
    """
    want = _normal(package)
    for line in lock.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if m and _normal(m.group(1)) == want:
            return m.group(2)
    return None


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def version_check(lock: Path, package: str, key: str):
    """A settings checker: the value must be the version ``lock`` pins for ``package``.

    The setting documents the release; the lock decides it. A user who edits only the setting
    is told to regenerate the lock (docs/maintenance.md).
    """

    def check(value):
        pinned = pinned_version(lock, package)
        if value != pinned:
            return (
                f"{value!r} but {lock.parent.name}/{lock.name} pins {package}=={pinned}; the lock "
                f"decides what is installed: regenerate it for a new release "
                f"(docs/maintenance.md), then set {key} to match"
            )
        return None

    return check
