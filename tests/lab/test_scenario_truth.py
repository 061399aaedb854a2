"""The lab scenario, every converge tells the truth: interrupted, concurrent, bad inputs,
exposure and keys, restarts of an outdated or stuck unit."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
import time

import pytest

from lab import scenario
from lab.host import proc_children, proc_cmdline
from lab.serving import lab_vllm_port
from lab.step import StepResult
from roles.common.facts import uv_env
from tests.lab import blocking
from tests.lab.labtools import (
    LAB_MARKS,
    active,
    infra,
    pyinfra,
)

pytestmark = LAB_MARKS


# --- Every converge tells the truth: interrupted, concurrent, bad inputs, exposure, restarts ---


def _start(*args: str, env: dict | None = None) -> subprocess.Popen:
    """pyinfra against the lab in the background, stdout and stderr merged into a pipe."""
    return subprocess.Popen(
        [str(scenario.BIN / "pyinfra"), *args],
        cwd=scenario.REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )


def _read_until(proc: subprocess.Popen, marker: str, seen: list[str]) -> None:
    """Read ``proc``'s output into ``seen`` until a line holds ``marker``; fail if it ends first."""
    for line in proc.stdout:
        seen.append(line)
        if marker in line:
            return
    raise AssertionError(f"pyinfra ended before {marker!r}:\n{''.join(seen)[-3000:]}")


def _blocking_runs(lab, alive, seconds: float = 300.0) -> None:
    """Wait until the blocking operation runs on the lab (its pid file names a live shell);
    fail if the converge (``alive()`` false) ends first. The operation never ends by itself."""
    started = blocking.STARTED
    deadline = time.monotonic() + seconds
    probe = f"test -s {started} && kill -0 $(cat {started})"
    while lab.ssh(probe, check=False).returncode != 0:
        assert alive(), "the converge ended before its blocking operation ran"
        assert time.monotonic() < deadline, f"the blocking operation did not start in {seconds} s"
        time.sleep(0.5)


def _blocking_gone(lab, seconds: float = 30.0) -> None:
    """The blocking operation ends with its controller's connection (no process left behind)."""
    started = blocking.STARTED
    deadline = time.monotonic() + seconds
    while lab.ssh(f"kill -0 $(cat {started})", check=False).returncode == 0:
        assert time.monotonic() < deadline, (
            f"the blocking operation outlived its run by {seconds} s"
        )
        time.sleep(0.5)
    lab.ssh(f"rm -f {started}")


def _blocking_converge(lab) -> subprocess.Popen:
    lab.ssh(f"rm -f {blocking.STARTED}")
    return _start("-y", "inventory/lab.py", blocking.DEPLOY)


def test_interrupted_converge_exits_130_naming_the_operation(converged):
    """SIGINT in the middle of an operation (one that is running for certain: it never ends by
    itself): exit 130 (pyinfra alone exits 0), the operation and 'half-converged' named, and the
    operation on the host ends with the run."""
    proc = _blocking_converge(converged)
    _blocking_runs(converged, lambda: proc.poll() is None)
    proc.send_signal(signal.SIGINT)
    out = proc.stdout.read()
    assert proc.wait() == 130, out[-3000:]
    assert f"interrupted during '{blocking.OPERATION}'" in out, out[-3000:]
    assert "may be half-converged" in out and "Exiting upon user request" not in out
    _blocking_gone(converged)


def test_lab_entry_point_reads_an_interrupted_converge_as_a_failure(converged):
    """The lab's converge step (bin/rigup-lab, this suite) with its pyinfra interrupted while an
    operation runs."""
    done: list[StepResult] = []
    converged.ssh(f"rm -f {blocking.STARTED}")
    runner = threading.Thread(
        target=lambda: done.append(scenario.converge("inventory/lab.py", blocking.DEPLOY))
    )
    runner.start()
    _blocking_runs(converged, runner.is_alive)
    child = next(
        (p for p in proc_children(os.getpid()) if blocking.DEPLOY in proc_cmdline(p)), None
    )
    assert child, "the converge step started no pyinfra"
    os.kill(child, signal.SIGINT)
    runner.join(120)
    assert done and not done[0].ok and done[0].rc == 130, done
    _blocking_gone(converged)


def test_second_converge_refuses_before_any_change_and_a_killed_one_leaves_no_lock(converged):
    """Two real converges of one host: the second refuses before any change, naming the first;
    SIGKILL of the first (its operation still running on the host) leaves no lock behind."""
    first = _blocking_converge(converged)
    seen: list[str] = []
    _read_until(first, "converge lock held", seen)
    _blocking_runs(converged, lambda: first.poll() is None)
    second = pyinfra("-y", "inventory/lab.py", "deploys/full.py")
    out = second.stdout + second.stderr
    assert second.returncode != 0, out[-3000:]
    name = converged.cfg.name
    assert f"another rigup converge is running on {name}, pid {first.pid} " in out, out[-3000:]
    assert "since 20" in out and "Beginning operation run" not in out, out[-3000:]
    assert first.poll() is None, "the first converge must still hold the lock here"
    first.kill()
    first.wait()
    _blocking_gone(converged)
    # the next converge takes the lock at once: the killed run's holder is gone
    result = scenario.converge("inventory/lab.py", "deploys/modes.py")
    assert result.ok, f"the next converge did not converge (exit {result.rc})"


def _voxcpm_up_again(lab) -> None:
    result = scenario.converge("inventory/lab.py", "deploys/voxcpm.py", "deploys/modes.py")
    assert result.ok, f"the next converge did not converge (exit {result.rc})"
    assert active(lab, "voxcpm.service") == "active"


# Bad inputs: each refused before any change, with the setting (or the process) named.
BAD_INPUTS = {
    "misspelled key": (["vllm_prot=9000"], "deploys/full.py", "did you mean vllm_port?"),
    "port below 1024": (["voxcpm_port=80"], "deploys/full.py", "voxcpm_port: 80 is below 1024"),
    "same port twice": (
        ["comfyui_port={vllm}", "comfyui_install=True"],
        "deploys/full.py",
        "is vllm_port too",
    ),
    "system directory": (["model_store_dir=/etc"], "deploys/full.py", "is a system directory"),
    "ComfyUI beyond loopback": (
        ["comfyui_host=0.0.0.0"],
        "deploys/full.py",
        "comfyui_allow_network_without_auth",
    ),
    "vLLM beyond loopback without a key": (
        # the lab runs vLLM's dev mode, refused beyond loopback first (inventory/lab.py): off here
        ["vllm_host=0.0.0.0", "vllm_server_dev_mode=False"],
        "deploys/vllm.py",
        "vllm_host is 0.0.0.0, not loopback, and vLLM has no API key",
    ),
    "speech beyond loopback without a key": (
        ["voxcpm_host=0.0.0.0"],
        "deploys/voxcpm.py",
        "voxcpm_host is 0.0.0.0, not loopback, and VoxCPM2 has no API key",
    ),
    "port held by sshd": (["voxcpm_port={ssh}"], "deploys/voxcpm.py", "by sshd (pid "),
}


@pytest.mark.parametrize("what", list(BAD_INPUTS))
def test_bad_input_refused_before_any_change(media, what):
    converged = media
    data, deploy, message = BAD_INPUTS[what]
    stamp = "stat -c %Y.%Z /etc/systemd/system/voxcpm.service /etc/rigup/voxcpm/voxcpm.env"
    before = converged.ssh(stamp).stdout
    ports = {"ssh": converged.cfg.ssh_port, "vllm": lab_vllm_port(converged.cfg)}
    args = [a for d in data for a in ("--data", d.format(**ports))]
    proc = pyinfra("-y", "inventory/lab.py", deploy, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and message in out, out[-3000:]
    assert "Beginning operation run" not in out, out[-3000:]
    assert "nothing was changed" in out
    assert converged.ssh(stamp).stdout == before


def test_unit_stuck_activating_on_an_outdated_unit_is_restarted(media):
    """Another process takes voxcpm's port: voxcpm.service loops in activating (auto-restart).
    A converge keeping the port names that process; one with a free port restarts the unit."""
    lab = media
    port = lab.cfg.ssh_port + 10000  # inventory/lab.py's voxcpm_port
    lab.ssh(  # voxcpm starts once the squatter listens (not after a guessed delay)
        f"systemctl stop voxcpm && systemd-run -q --unit=rigup-squatter python3 -m http.server "
        f"{port} --bind 127.0.0.1 && for i in $(seq 300); do ss -Hltn 'sport = :{port}' | "
        "grep -q . && break; sleep 0.1; done && ss -Hltn 'sport = :{port}' | grep -q . && "
        "systemctl start --no-block voxcpm".replace("{port}", str(port))
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # its server exits (port taken): a restart loop
            state = lab.ssh("systemctl show voxcpm -p ActiveState -p SubState").stdout.split()
            if "SubState=auto-restart" in state:
                break
            time.sleep(1)
        assert "ActiveState=activating" in state and "SubState=auto-restart" in state, state
        kept = pyinfra("-y", "inventory/lab.py", "deploys/voxcpm.py")
        out = kept.stdout + kept.stderr
        assert kept.returncode != 0 and "by python3 (pid " in out, out[-3000:]
        assert "rigup-squatter.service) on 127.0.0.1:" in out, out[-3000:]
        moved = scenario.converge(
            "inventory/lab.py", "deploys/voxcpm.py", "deploys/modes.py",
            "--data", f"voxcpm_port={port + 1}",
        )  # fmt: skip
        assert moved.ok
        assert active(lab, "voxcpm.service") == "active"
    finally:
        lab.ssh("systemctl stop rigup-squatter", check=False)
    _voxcpm_up_again(lab)


def test_speech_api_key_stored_0600_checked_and_never_printed(media):
    lab = media
    key = "vox-" + os.urandom(12).hex()
    env = {"VOXCPM_API_KEY": key}
    args = ("inventory/lab.py", "deploys/voxcpm.py", "deploys/modes.py")
    open_ = ("--data", "voxcpm_host=0.0.0.0")
    dry = subprocess.run(
        [str(scenario.BIN / "pyinfra"), *args, *open_, "--dry", "--diff"],
        cwd=scenario.REPO, capture_output=True, text=True, env={**os.environ, **env},
    )  # fmt: skip
    assert dry.returncode == 0 and key[4:20] not in dry.stdout + dry.stderr
    real = _start("-y", "-vvv", *args, *open_, env=env)
    out = real.stdout.read()
    assert real.wait() == 0, out[-3000:]
    assert key[4:20] not in out
    port = lab.cfg.ssh_port + 10000
    try:
        stat = lab.ssh("stat -c '%a %U' /etc/rigup/voxcpm/secrets/api-key.env").stdout.split()
        assert stat == ["600", "root"]
        curl = f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{port}/v1/models"
        assert lab.ssh(curl).stdout == "401"
        assert lab.ssh(f"{curl} -H 'Authorization: Bearer {key}'").stdout == "200"
        assert infra("-k", "beyond_loopback").ok
        main_pid = lab.ssh("systemctl show -p MainPID --value voxcpm").stdout.strip()
        leaks = lab.ssh(
            f"grep -rlF {key} /etc/systemd /etc/rigup/voxcpm/voxcpm.env /proc/{main_pid}/cmdline",
            check=False,
        ).stdout
        assert not leaks.strip(), leaks
    finally:
        lab.ssh("rm -f /etc/rigup/voxcpm/secrets/api-key.env")
        _voxcpm_up_again(lab)
        lab.ssh("systemctl restart voxcpm")  # forget the key it was started with


def test_clean_sigterm_restarts_voxcpm_and_a_mode_switch_keeps_it_stopped(media):
    lab = media
    pid = lab.ssh("systemctl show -p MainPID --value voxcpm").stdout.strip()
    lab.ssh(f"kill -TERM {pid}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        state = active(lab, "voxcpm.service")
        now = lab.ssh("systemctl show -p MainPID --value voxcpm").stdout.strip()
        if state == "active" and now not in (pid, "0"):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"voxcpm.service not back after SIGTERM: {state}, pid {now}")
    journal = lab.ssh("journalctl -u voxcpm -n 40 --no-pager -o cat").stdout
    assert "Scheduled restart job" in journal, journal
    lab.ssh("rigup-mode llm")
    # A restart systemd has scheduled shows at once as activating/auto-restart (its RestartSec=
    # timer running); the stop job rigup-mode runs leaves inactive/dead and no job queued. Read
    # when rigup-mode returns (its jobs are done): no timer to outwait.
    state = lab.ssh("systemctl show -p ActiveState -p SubState --value voxcpm | paste -sd/ -")
    assert state.stdout.strip() == "inactive/dead", state.stdout
    jobs = lab.ssh("systemctl list-jobs --no-legend --no-pager").stdout
    assert "voxcpm.service" not in jobs, jobs
    lab.ssh("rigup-mode media")
    assert active(lab, "voxcpm.service") == "active"


#: A project uv must build from source with setuptools (what a cold uv cache meets in a lock's
#: sdist-only package): uv then makes its ``uv-setuptools-<hash>.lock`` 0666 in TMPDIR.
SDIST_PROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"
[project]
name = "rigup-sdist-probe"
version = "0"
"""


def test_a_source_build_leaves_nothing_every_user_can_write(converged):
    """The cold uv cache's case, with the deploy's uv and environment (uv_env: TMPDIR is
    rigup_tmp_dir): uv builds a source distribution and leaves its 0666 build lock in rigup's temp
    directory, out of other users' reach (0700), so testinfra's check passes; a file others can
    reach fails it, and the repair it names (`chmod o-w`) makes it pass."""
    lab = converged
    tmp, work = "/var/tmp/rigup", "/var/tmp/rigup/sdist-probe"
    env = f"{uv_env('/var/cache/rigup/uv', tmp)} /opt/rigup/uv/bin/uv"
    probe = "/opt/rigup/rigup-probe.txt"
    try:
        lab.ssh(
            f"rm -rf {work} {tmp}/uv-setuptools-*.lock && mkdir -p {work}/project && "
            f"printf %s {shlex.quote(SDIST_PROJECT)} > {work}/project/pyproject.toml && "
            f"{env} venv -q --python python3 {work}/venv && "
            f"{env} pip install -q --python {work}/venv/bin/python {work}/project",
            timeout=600,
        )
        locks = lab.ssh(f"find {tmp} -maxdepth 1 -name 'uv-setuptools-*.lock' -perm -0666")
        assert locks.stdout.strip(), "uv built no source distribution: the cold case did not happen"
        check = ("-k", "world_writable")
        assert infra(*check).ok, infra(*check).detail["output"]
        lab.ssh(f"touch {probe} && chmod 0666 {probe}")
        failed = infra(*check)
        assert not failed.ok and f"666 root {probe}" in failed.detail["output"], failed.detail
        assert "`chmod o-w` on each repairs it" in failed.detail["output"]
        lab.ssh(f"chmod o-w {probe}")
        assert infra(*check).ok
    finally:
        lab.ssh(f"rm -rf {work} {probe}", check=False)
