"""Generic checkers for rigup's settings, shared by every role's rules (roles/<role>/settings.py).

A checker takes one value and returns None when it is acceptable, else the reason as a sentence
fragment ("must be an integer, got '8000'"); the settings validation (roles/settings.py) prefixes
the key. Pure, standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Check = Callable[[Any], "str | None"]

UNIX_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
VERSION = re.compile(r"^\d+(\.\d+){1,3}([a-z0-9.+-]*)$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
GIT_COMMIT = re.compile(r"^[0-9a-f]{40}$")
PYTHON = re.compile(r"^(/[\w./+-]+|python3(\.\d+)?)$")


def integer(lo: int, hi: int) -> Check:
    """An int (not a bool) in ``[lo, hi]``."""

    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"must be an integer, got {value!r}"
        if not lo <= value <= hi:
            return f"must be between {lo} and {hi}, got {value}"
        return None

    return check


def service_port(value: Any) -> str | None:
    """A TCP port a rigup service can listen on: 1024-65535. The services run as their own
    users with no capabilities (CapabilityBoundingSet= empty), and binding a port below 1024
    needs CAP_NET_BIND_SERVICE."""
    problem = integer(1, 65535)(value)
    if problem:
        return problem
    if value < 1024:
        return (
            f"{value} is below 1024: the service runs unprivileged, without "
            "CAP_NET_BIND_SERVICE, and could not bind it; use a port from 1024 to 65535 (a "
            "reverse proxy can serve it on a low port)"
        )
    return None


def number(lo: float, hi: float, *, lo_open: bool = False) -> Check:
    """An int or float (not a bool) in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""

    def check(value: Any) -> str | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"must be a number, got {value!r}"
        if value > hi or value < lo or (lo_open and value == lo):
            bracket = "(" if lo_open else "["
            return f"must be in {bracket}{lo}, {hi}], got {value}"
        return None

    return check


def matches(pattern: re.Pattern[str], what: str) -> Check:
    """A string matching ``pattern``; ``what`` describes it in the error."""

    def check(value: Any) -> str | None:
        if not isinstance(value, str) or not pattern.match(value):
            return f"must be {what}, got {value!r}"
        return None

    return check


def choice(choices: tuple[str, ...]) -> Check:
    """One of ``choices``."""

    def check(value: Any) -> str | None:
        if value not in choices:
            return f"must be one of {', '.join(choices)}; got {value!r}"
        return None

    return check


def boolean(value: Any) -> str | None:
    """True or False (not 1/0 or "yes")."""
    return None if isinstance(value, bool) else f"must be True or False, got {value!r}"


#: Directories that hold the system itself. rigup creates, chowns and chmods the directories it
#: is given, so none of these may be one of them (a directory of rigup's own below them is fine).
SYSTEM_DIRS = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root",
    "/run", "/sbin", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/sbin", "/usr/sbin", "/usr/share", "/var",
    "/var/cache", "/var/lib", "/var/log", "/var/tmp", "/var/opt", "/var/spool",
)  # fmt: skip
#: Mount points and user trees: fine as places to read from, not as directories rigup owns.
SHARED_DIRS = ("/home", "/media", "/mnt", "/srv")


def abs_path(value: Any) -> str | None:
    """A plain absolute path: no ``..``, spaces or control characters, not ``/``."""
    if not isinstance(value, str) or not value.startswith("/") or value.rstrip("/") == "":
        return f"must be an absolute path other than /, got {value!r}"
    if any(part in ("..", ".") for part in value.split("/")) or any(c in value for c in "\n\0 "):
        return f"must be a plain absolute path (no '..', spaces or control characters): {value!r}"
    return None


def _normal(path: str) -> str:
    return re.sub("/+", "/", path).rstrip("/")


def owned_dir(value: Any) -> str | None:
    """A directory rigup creates and owns: :func:`abs_path`, and neither a system directory
    (:data:`SYSTEM_DIRS`) nor a shared mount point (:data:`SHARED_DIRS`) itself."""
    problem = abs_path(value)
    if problem:
        return problem
    if _normal(value) in SYSTEM_DIRS + SHARED_DIRS:
        return f"{value} is a system directory; give a directory of rigup's own below it"
    return None


def writable_dir_or_empty(value: Any) -> str | None:
    """ "" or a directory rigup writes into (a backup disk): :func:`abs_path`, not a system
    directory itself (a mount point such as /mnt is fine)."""
    if value == "":
        return None
    problem = abs_path(value)
    if problem:
        return problem
    if _normal(value) in SYSTEM_DIRS:
        return f"{value} is a system directory; give a directory of its own"
    return None


def abs_path_or_empty(value: Any) -> str | None:
    """ "" (unset) or :func:`abs_path`."""
    return None if value == "" else abs_path(value)


def str_list(value: Any) -> str | None:
    """A list (or tuple) of strings."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return f"must be a list of strings, got {value!r}"
    return None


def abs_path_list(value: Any) -> str | None:
    """A list of :func:`abs_path` strings."""
    problem = str_list(value)
    if problem:
        return problem
    return next((f"{v!r}: {p}" for v in value if (p := abs_path(v))), None)


def package_list(value: Any) -> str | None:
    """A list of Debian package names."""
    problem = str_list(value)
    if problem:
        return problem
    bad = [v for v in value if not re.match(r"^[a-z0-9][a-z0-9+.-]+$", v)]
    return f"has invalid Debian package names: {bad}" if bad else None


def env_mapping(value: Any) -> str | None:
    """A mapping of environment variable names to one-line strings or numbers."""
    if not isinstance(value, Mapping):
        return f"must be a mapping of NAME: value, got {value!r}"
    for name, val in value.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            return f"has an invalid variable name {name!r}"
        if not isinstance(val, (str, int, float)) or "\n" in str(val):
            return f"{name} must be a one-line string or number, got {val!r}"
    return None


def host_address(value: Any) -> str | None:
    """An IP address or host name to bind a server to."""
    if not isinstance(value, str) or not re.match(r"^[A-Za-z0-9.:_-]+$", value):
        return f"must be an IP address or host name to bind, got {value!r}"
    return None


def https_url(value: Any) -> str | None:
    """An ``https://`` URL."""
    if not isinstance(value, str) or not re.match(r"^https://[A-Za-z0-9.-]+(/[\w./%+-]*)?$", value):
        return f"must be an https:// URL, got {value!r}"
    return None


def url_or_empty(value: Any) -> str | None:
    """ "" (unset) or an ``http(s)://`` URL (a mirror; http for one on the LAN or loopback)."""
    if value == "":
        return None
    if not isinstance(value, str) or not re.match(
        r"^https?://[A-Za-z0-9.:\[\]_-]+(/[\w./~%+-]*)?$", value
    ):
        return f"must be empty or an http(s) URL such as https://hf-mirror.com, got {value!r}"
    return None


def location_or_empty(*, paths: bool) -> Check:
    """ "" (unset), an ``http(s)://`` or ``file://`` URL, or (``paths``) an absolute path."""

    def check(value: Any) -> str | None:
        if value == "":
            return None
        if isinstance(value, str) and re.match(r"^(https?|file)://[^\s'\"]+$", value):
            return None
        if paths and isinstance(value, str) and value.startswith("/"):
            return abs_path(value)
        what = "an http(s):// or file:// URL" + (", an absolute path" if paths else "")
        return f'must be "" or {what}, got {value!r}'

    return check


def sha256_or_empty(value: Any) -> str | None:
    """ "" or 64 lowercase hex digits."""
    if value == "" or (isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value)):
        return None
    return f"must be a sha256 (64 lowercase hex digits) or '', got {value!r}"


def git_source(value: Any) -> str | None:
    """A git URL (https://, ssh://, git@host:path) or an absolute path to a local mirror."""
    if isinstance(value, str) and value.startswith("/"):
        return abs_path(value)
    if not isinstance(value, str) or not re.match(r"^(https://|ssh://|git@)[^\s'\"]+$", value):
        return f"must be an https://, ssh:// or git@ URL, or an absolute path to a mirror; got {value!r}"
    return None


def python_interpreter(value: Any) -> str | None:
    """``python3``, ``python3.X`` or an absolute path to an interpreter."""
    return matches(PYTHON, "python3, python3.X or an absolute path")(value)


def contains(outer: str, inner: str) -> bool:
    """True when directory ``inner`` is ``outer`` or below it (plain string paths)."""
    o, i = outer.rstrip("/") + "/", inner.rstrip("/") + "/"
    return i.startswith(o)


def flag_matches(
    extra: list[str] | tuple[str, ...], flags: Iterable[str], aliases: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    """The tokens of ``extra`` (a service's extra arguments) that set one of ``flags`` (long
    flags), as ``(token as written, flag, how)``; ``aliases`` maps short or other spellings to
    their long flag. Caught: the flag itself, ``--flag=value``, ``--flag_name`` with
    underscores (vLLM accepts it), ``--flag.key`` (vLLM's JSON keys), its aliases, and any
    abbreviation of it (argparse takes an unambiguous prefix for the whole flag: ``--hos``);
    ``how`` says which of these it was (``" (an abbreviation of --host)"``, or "")."""
    flags = list(flags)
    found = []
    for token in extra:
        if not token.startswith("-") or token == "--":
            continue
        name = token.split("=", 1)[0]
        if name.startswith("--"):
            name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
        flag = aliases.get(name, name)
        how = f" (an alias of {flag})" if flag != name else ""
        if flag not in flags and name.startswith("--") and len(name) > 3:
            prefixes = [m for m in flags if m.startswith(name)]
            if prefixes:
                flag, how = prefixes[0], f" (an abbreviation of {prefixes[0]})"
        if flag in flags:
            found.append((token.split("=", 1)[0], flag, how))
    return found


def flag_clashes(
    extra: list[str] | tuple[str, ...], managed: Mapping[str, str], aliases: Mapping[str, str]
) -> list[str]:
    """Flags in ``extra`` (a service's extra arguments) that would set what a rigup setting sets
    (:func:`flag_matches`): ``managed`` maps each managed long flag to its setting
    (``{"--host": "vllm_host"}``), ``aliases`` short or other spellings to their long flag
    (``{"-tp": "--tensor-parallel-size"}``). Returns one message per clash: ``"--hos (an
    abbreviation of --host) sets what vllm_host sets"``."""
    return [
        f"{token}{how} sets what {managed[flag]} sets"
        for token, flag, how in flag_matches(extra, managed, aliases)
    ]
