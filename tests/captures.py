"""Read capture files of the form ``$ <command>`` / output / ``[exit <status>]`` (one or more
blocks; tests/fixtures/h200x2/CAPTURES.md and tests/fixtures/field/README.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_EXIT = re.compile(r"^\[exit (\d+)\]$")


@dataclass(frozen=True)
class Block:
    command: str
    output: str
    exit_code: int | None  # None: not recorded

    @property
    def lines(self) -> list[str]:
        return self.output.splitlines()


def blocks(name: str) -> list[Block]:
    """Every block of ``tests/fixtures/<name>``, output exactly as captured (escapes kept)."""
    found: list[Block] = []
    command, output = None, []

    def close(code: int | None) -> None:
        if command is not None:
            found.append(Block(command, "\n".join(output) + ("\n" if output else ""), code))

    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("$ "):
            close(None)
            command, output = line[2:], []
        elif m := _EXIT.match(_ANSI.sub("", line)):
            close(int(m.group(1)))
            command, output = None, []
        else:
            output.append(line)
    close(None)
    return found


def block(name: str) -> Block:
    """The only (or first) block of a capture file."""
    return blocks(name)[0]
