"""What every parser shares: :class:`ParseError` and :func:`strip_ansi`."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ParseError(ValueError):
    """Raised when tool output does not have the shape a parser expects (says which tool)."""


def strip_ansi(text: str) -> str:
    """Remove terminal escape sequences (``nvidia-smi topo`` underlines its header with ESC[4m)."""
    return _ANSI.sub("", text)
