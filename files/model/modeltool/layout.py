"""Names the tool gives things in a model store, its exit codes and errors. Pure."""

from __future__ import annotations

from pathlib import Path

#: what was placed, in each placed directory: manifest, source, commit, files with size + sha256
RECORD = ".rigup-manifest.json"
#: partial area: files already transferred and verified (one JSON line each, append-only)
VERIFIED = ".rigup-verified.jsonl"
#: partial area: where the hub libraries download (their own temporary files included)
DOWNLOAD = ".download"
#: suffix of the original a rigup edit keeps next to a placed file (config.json.rigup-orig)
EDIT_ORIGINAL = ".rigup-orig"
#: keep this much free after a transfer (logs, journald and apt need room)
SPARE_BYTES = 1 << 30

#: exit codes of model_fetch.py
EXIT_ERROR = 1
EXIT_SPACE = 3
EXIT_BUSY = 4
EXIT_MISMATCH = 5
EXIT_INTERRUPTED = 130


class FetchError(Exception):
    """A problem the caller must fix; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


class SourceError(FetchError):
    """A source cannot provide the model (no copy, not on the hub, a network error): the next
    source in the list is tried. Any other error stops the placement."""


def partial_dir(dest: Path) -> Path:
    """Where a placement is assembled before it is renamed to ``dest``."""
    return dest.parent / f".{dest.name}.partial"


def rejected_dir(dest: Path) -> Path:
    """Where a transferred file that failed verification is kept for inspection (outside the
    placed directory; removed once the model is placed)."""
    return dest.parent / f".{dest.name}.rejected"


def replaced_dir(dest: Path, stamp: str) -> Path:
    """Where the files a repair replaced are kept (outside the placed directory)."""
    return dest.parent / f".{dest.name}.replaced-{stamp}"
