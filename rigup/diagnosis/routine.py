"""Warnings a service prints at every healthy start: never a cause.

A failing start's journal is read for its last error line when no signature names the failure
(:func:`rigup.diagnosis.classify_vllm_log`); a routine warning that quotes an error (vLLM's ulimit
warning names ``OSError: [Errno 24] Too many open files``) must not be taken for it.
:data:`ROUTINE_WARNINGS` lists them, each with the source that prints it and where it was seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class RoutineWarning:
    """One warning of ``source`` (a diagnosis source: ``vllm-log``) that a healthy start prints,
    recognised by ``pattern`` (searched in a line); ``reference``: where it is printed and
    captured."""

    source: str
    pattern: str
    reference: str

    @property
    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern)


ROUTINE_WARNINGS: tuple[RoutineWarning, ...] = (
    RoutineWarning(
        source="vllm-log",
        pattern=r"Found ulimit of \d+ and failed to automatically increase",
        reference="vLLM 0.22.1 utils/system_utils.py:299 (the API server raises its open-file "
        "limit to 65536 and warns, quoting 'OSError: [Errno 24] Too many open files', where the "
        "hard limit is lower); printed at every start of every captured log: tests/fixtures/"
        "vllm-cpu/*.log and tests/fixtures/vllm-cuda/*.log (a hard limit of 20000)",
    ),
)


def is_routine(line: str, source: str) -> bool:
    """Whether ``line`` of ``source``'s journal is one of :data:`ROUTINE_WARNINGS`."""
    return any(w.source == source and w.regex.search(line) for w in ROUTINE_WARNINGS)
