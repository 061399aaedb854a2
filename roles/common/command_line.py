"""systemd command lines from argv words: pure (no pyinfra), so the rendering of a service's
``ExecStart=`` (roles/vllm/flags.py) also runs where pyinfra is not installed
(benchmarks/gpu-serve on a GPU machine)."""

from __future__ import annotations


def systemd_quote(arg: str) -> str:
    """Quote one argument for a systemd ``ExecStart=`` line (systemd.service(5), "Command lines").

    Double-quoted, with backslash and double quote escaped, ``%`` doubled (specifier) and ``$``
    doubled (variable expansion), so the service receives exactly ``arg``.
    """
    if arg and all(c.isalnum() or c in "-_./:=,+@" for c in arg):
        return arg
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def exec_line(words: list[str]) -> str:
    """An ``ExecStart=`` value from argv words, each :func:`systemd_quote`-d."""
    return " ".join(systemd_quote(w) for w in words)
