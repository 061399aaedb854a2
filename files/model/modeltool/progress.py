"""Progress lines on stderr, and interruption: a transfer stopped by a signal or by the loss of
the controller that started it is recorded as interrupted, never as a source failure.

The controller runs the tool over SSH with its output in pipes. When the controller goes away
(killed, its connection lost), the read ends of those pipes close: :class:`Guard` sees that
within a second (``poll`` reports ``POLLERR``/``POLLHUP`` on fd 1 or 2) and so does a progress
line (``EPIPE``). Either way, and on SIGINT, SIGTERM or SIGHUP, the guard records the
interruption once (its ``on_interrupt`` writes the report) and ends the process at once with
status 130: what was verified is kept, the next run resumes.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable

PROGRESS_EVERY_S = 5.0
WATCH_EVERY_S = 1.0


def human_bytes(n: int) -> str:
    """``466428`` -> ``"466,428 B (466.4 kB)"``; decimal units (GB = 1e9 bytes)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n:,} B ({n / size:.1f} {unit})"
    return f"{n:,} B"


def say(line: str) -> None:
    """One line on stderr; a closed stderr means the controller is gone: an interruption."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        interrupt("the controller's connection closed (stderr: broken pipe)")


class Progress:
    """Counts bytes moved and prints a progress line to stderr at most every 5 s."""

    def __init__(self, label: str, total: int | None):
        self.label, self.total = label, total
        self.done = 0
        self.started = self.last = time.monotonic()
        #: brings ``done`` up to date where bytes arrive outside this process's reads (a hub
        #: library writing files): called before a figure is shown or recorded
        self.refresh: Callable[[], None] = lambda: None

    def add(self, n: int, current: str = "") -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.show(current)

    def show(self, current: str = "") -> None:
        self.refresh()
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = self.done / elapsed / 1e6
        pct = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
        total = f"/{self.total / 1e9:.2f}" if self.total else ""
        say(f"{self.label}: {self.done / 1e9:.2f}{total} GB{pct}, {rate:.0f} MB/s {current}")

    def summary(self) -> dict:
        seconds = time.monotonic() - self.started
        return {
            "bytes_transferred": self.done,
            "seconds": round(seconds, 2),
            "rate_mb_s": round(self.done / seconds / 1e6, 1) if seconds > 0 else None,
        }


class Guard:
    """Records an interruption once and exits; see the module docstring.

    ``on_interrupt(reason)`` must be quick and must not raise (it writes a small report).
    ``watch``: also watch stdout/stderr for a closed reader (off in tests that run the tool's
    functions in the test process).
    """

    def __init__(self, on_interrupt: Callable[[str], None], watch: bool = True):
        self.on_interrupt = on_interrupt
        self.watch = watch
        self._lock = threading.RLock()  # a signal may arrive while __exit__ holds it
        self._finished = False
        self._saved: dict[int, object] = {}

    def __enter__(self) -> Guard:
        global _current
        _current = self
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            self._saved[sig] = signal.signal(sig, self._on_signal)
        fds = [fd for fd in (1, 2) if _is_pipe(fd)]
        if self.watch and fds:
            threading.Thread(target=self._watch, args=(fds,), daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        global _current
        with self._lock:
            self._finished = True
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        _current = None

    def _on_signal(self, signum, _frame) -> None:
        self.trigger(f"signal {signal.Signals(signum).name}")

    def _watch(self, fds: list[int]) -> None:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLERR | select.POLLHUP)
        while not self._finished:
            if poller.poll(0):
                self.trigger("the controller's connection closed (its output pipe is gone)")
                return
            time.sleep(WATCH_EVERY_S)

    def trigger(self, reason: str) -> None:
        """Record the interruption (once) and end the process with status 130."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            try:
                self.on_interrupt(reason)
            finally:
                os._exit(130)


_current: Guard | None = None


def interrupt(reason: str) -> None:
    """Interrupt the running command (see :class:`Guard`); outside one, raise ``OSError``."""
    if _current is not None:
        _current.trigger(reason)
    raise OSError(reason)


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)
