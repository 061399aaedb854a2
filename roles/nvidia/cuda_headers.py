"""The CUDA toolkit's ``crt/math_functions.h`` against glibc >= 2.42: pure functions.

glibc 2.42 declares ``rsqrt``/``rsqrtf`` (C23) in ``bits/mathcalls.h`` with ``__THROW``, which is
``noexcept(true)`` in C++. CUDA 13.0's ``crt/math_functions.h`` declares the same functions with
no exception specification, so every ``.cu`` that includes the math headers stops in nvcc's host
pass: ``bits/mathcalls.h(206): error: exception specification is incompatible with that of
previous function "rsqrt"``. CUDA 13.2 is the first release whose headers compile against glibc
2.42+ (llvm/llvm-project#185701); nixpkgs adds ``noexcept(true)`` to the two declarations of
earlier toolkits (NixOS/nixpkgs#512796), and so does rigup (roles/nvidia/operations.py
``cuda_math_header_patched``, docs/nvidia.md).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping

#: the first glibc that declares rsqrt/rsqrtf, with noexcept in C++ (glibc 2.42 added the ISO C23
#: rsqrt family to <math.h>; NixOS/nixpkgs#512796, llvm/llvm-project#185701)
GLIBC_DECLARES_RSQRT = (2, 42)
#: the header, relative to CUDA_HOME
MATH_FUNCTIONS_H = "include/crt/math_functions.h"
#: the functions whose declarations conflict with glibc's
FUNCTIONS = ("rsqrt", "rsqrtf")
#: the mark rigup leaves on each line it changed (what and why), at the end of that line so the
#: header's line numbers stay those of NVIDIA's file
MARK = "/* rigup: noexcept(true) as glibc >= 2.42 declares it, NixOS/nixpkgs#512796 */"
#: the lines that grep hands to :func:`noexcept_edits` (roles/nvidia/facts.py CudaMathHeader)
DECLARATION_GREP = r"^extern[[:space:]].*[^A-Za-z0-9_]rsqrtf?\("

# ``extern ... double rsqrt(double x)`` then what follows the parameter list up to ``;``
_DECLARATION = re.compile(
    r"^(?P<head>extern\s.*[^A-Za-z0-9_](?P<name>rsqrtf?)\((?:double|float)\s+\w+\))"
    r"(?P<spec>[^;]*);(?P<tail>.*)$"
)
_GLIBC = re.compile(r"(?:^glibc\s+|GLIBC[^)]*\)\s+)(\d+)\.(\d+)")


class HeaderError(ValueError):
    """The header is not one this module knows: a function of :data:`FUNCTIONS` has no
    ``extern`` declaration in it."""


def parse_glibc_version(lines: list[str]) -> tuple[int, int] | None:
    """(major, minor) of glibc from ``getconf GNU_LIBC_VERSION`` (``glibc 2.43``) or the first
    line of ``ldd --version`` (``ldd (Ubuntu GLIBC 2.43-2ubuntu2) 2.43``); None for anything
    else (musl's ldd, no output)."""
    for line in lines:
        match = _GLIBC.search(line.strip())
        if match:
            return int(match.group(1)), int(match.group(2))
    return None


def needs_noexcept(glibc: tuple[int, int] | None) -> bool:
    """Does a host with this glibc need ``noexcept(true)`` on CUDA's rsqrt declarations? Only
    glibc >= 2.42 (:data:`GLIBC_DECLARES_RSQRT`) declares them; an unknown libc needs nothing."""
    return glibc is not None and tuple(glibc) >= GLIBC_DECLARES_RSQRT


def noexcept_edits(declarations: Mapping[int, str]) -> dict[int, str]:
    """The lines to change: ``{line number: new line}`` for each ``extern`` declaration of
    :data:`FUNCTIONS` with no exception specification, which gets ``noexcept(true)`` and
    :data:`MARK`. A declaration that has one (rigup's, or CUDA 13.2's ``_NV_RSQRT_SPECIFIER``)
    is left as it is, so the edits of an edited header are ``{}``.

    ``declarations``: line number -> line (without newline) of the header, at least those grep
    finds with :data:`DECLARATION_GREP`; other lines are ignored. Raises :class:`HeaderError`
    when a function of :data:`FUNCTIONS` has no such declaration (another header layout: the edit
    would do nothing, so nvcc would still fail).
    """
    edits: dict[int, str] = {}
    seen: set[str] = set()
    for number, line in declarations.items():
        match = _DECLARATION.match(line)
        if not match:
            continue
        seen.add(match["name"])
        if match["spec"].strip():
            continue
        tail = match["tail"].rstrip()
        edits[number] = f"{match['head']} noexcept(true);{tail} {MARK}"
    missing = [name for name in FUNCTIONS if name not in seen]
    if missing:
        raise HeaderError(
            f"no extern declaration of {', '.join(missing)} in {MATH_FUNCTIONS_H}: not the header "
            "layout of CUDA 13.0-13.1 that rigup edits for glibc >= 2.42"
        )
    return edits


def patched_header(text: str) -> str:
    """``text`` (the whole header) with :func:`noexcept_edits` applied; unchanged when already
    edited. Raises :class:`HeaderError` as :func:`noexcept_edits` does."""
    lines = text.split("\n")
    edits = noexcept_edits(dict(enumerate(lines, start=1)))
    return "\n".join(edits.get(number, line) for number, line in enumerate(lines, start=1))


def sed_command(path: str, edits: Mapping[int, str]) -> str:
    """The shell command that makes ``edits`` (:func:`noexcept_edits`) to ``path`` in place:
    ``sed -i -e '629c <line>' -e '653c <line>' <path>`` (GNU sed's one-line ``c``: the text is
    taken literally but for backslashes, and loses its leading blanks). Raises ValueError for a
    line sed would not write as given (a backslash, a newline or leading blanks)."""
    script: list[str] = []
    for number, line in sorted(edits.items()):
        if "\\" in line or "\n" in line or line != line.lstrip():
            raise ValueError(f"line {number} of {path} cannot be written by sed's c: {line!r}")
        script += ["-e", f"{number}c {line}"]
    return "sed -i " + " ".join(shlex.quote(arg) for arg in script) + " " + shlex.quote(path)
