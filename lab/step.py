"""The outcome of one lab step (up, seeding a mirror, converge, idempotence, verify), as the
scenario, ``python -m lab converge`` and its summary report it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class StepResult:
    """Outcome of one scenario step: exit code, wall time in seconds, and step-specific detail."""

    name: str
    rc: int
    seconds: float
    detail: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def skipped(self) -> bool:
        return "skipped" in self.detail
