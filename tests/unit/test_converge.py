"""A converge as the controller runs it (roles/common/converge.py): the converge lock's holder
script run for real (flock, the owner record, its end when the pipe to its controller closes),
the refusal and interruption messages, and a real pyinfra run interrupted by SIGINT and SIGTERM
(rigup's config.py makes it exit 128 + the signal, naming the operation)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roles.common.converge import (
    BUSY,
    HostProgress,
    busy_message,
    controller_gone,
    holder_script,
    interruption_message,
    parse_owner,
)

REPO = Path(__file__).resolve().parents[2]
PYINFRA = Path(sys.executable).parent / "pyinfra"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the holder chowns its directory to root")


def _hold(directory: Path, token: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["sh", "-c", holder_script({"token": token, "pid": "4242"}, str(directory))],
        stdout=subprocess.PIPE,
        text=True,
    )


@needs_root
def test_one_holder_at_a_time_and_the_lock_ends_with_its_controllers_pipe(tmp_path):
    lock = tmp_path / "lock"
    first = _hold(lock, "first")
    assert first.stdout.readline().strip() == "@held"
    assert oct(lock.stat().st_mode & 0o777) == "0o700" and lock.stat().st_uid == 0
    second = subprocess.run(
        ["sh", "-c", holder_script({"token": "second"}, str(lock))], capture_output=True, text=True
    )
    assert second.returncode == BUSY
    lines = second.stdout.splitlines()
    assert lines[0] == "@busy"
    owner = parse_owner(lines[1:])
    assert owner["token"] == "first" and owner["pid"] == "4242" and owner["since"].startswith("20")
    assert int(owner["holder"]) == first.pid
    started = time.monotonic()
    first.stdout.close()  # the controller is gone: its end of the pipe closes
    first.wait(timeout=10)
    assert time.monotonic() - started < 3
    third = _hold(lock, "third")
    try:
        assert third.stdout.readline().strip() == "@held"
    finally:
        third.kill()
        third.wait()


def test_busy_message_names_host_pid_controller_and_time():
    owner = {
        "pid": "123",
        "controller": "ws1",
        "user": "ana",
        "command": "pyinfra inventory/rig.py deploys/full.py",
        "since": "2026-11-30T17:08:01Z",
        "holder": "77",
    }
    text = busy_message("rig", owner)
    assert text.startswith("another rigup converge is running on rig, pid 123 (pyinfra on ws1 as")
    assert "since 2026-11-30T17:08:01Z; nothing was changed" in text and "pid 77" in text
    assert "owner record is not written yet" in busy_message("rig", {})


def test_controller_gone_only_for_a_dead_pid_of_this_controller():
    dead = subprocess.Popen(["true"])
    dead.wait()
    here = {"controller": "me", "pid": str(dead.pid)}
    assert controller_gone(here, "me")
    assert not controller_gone({**here, "pid": str(os.getpid())}, "me")
    assert not controller_gone(here, "another-machine")
    assert not controller_gone({}, "me")


def test_interruption_messages():
    assert "before any operation ran: nothing was changed" in interruption_message(
        "SIGINT", False, {}
    )
    text = interruption_message(
        "SIGTERM",
        True,
        {
            "rig": HostProgress("vLLM | vLLM venv", 12, 61),
            "b": HostProgress("", 3, 61),
            "c": HostProgress("", 0, 61),
        },
    )
    assert "rig: interrupted during 'vLLM | vLLM venv' (12 of 61 operations finished)" in text
    assert "may be half-converged" in text
    assert "b: stopped between operations (3 of 61" in text
    assert "c: no operation had run on it; nothing was changed there." in text


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 60.0) -> None:
    """Wait until ``path`` exists (the operation runs); fail if ``proc`` ends first."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, (
            f"the run ended before its operation started: {proc.stdout.read()}"
        )
        assert time.monotonic() < deadline, f"{path} not created within {seconds} s"
        time.sleep(0.05)


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_real_run_interrupted_exits_non_zero_naming_the_operation(sig, status, tmp_path):
    """The signal lands while the operation runs for certain: it has started (its file exists)
    and never ends by itself (tests/unit/deploys/interruptible.py)."""
    started = tmp_path / "started"
    proc = subprocess.Popen(
        [str(PYINFRA), "-y", "@local", "tests/unit/deploys/interruptible.py"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "RIGUP_TEST_STARTED": str(started)},
    )
    _wait_for(started, proc)
    proc.send_signal(sig)
    out = proc.stdout.read()
    assert proc.wait(timeout=30) == status, out
    assert f"rigup: interrupted ({sig.name}) while operations were running" in out, out
    assert "@local: interrupted during 'Wait to be interrupted' (0 of 1 operations" in out, out
    assert "Exiting upon user request" not in out
