"""The lab's uv cache warmed on the controller while the template builds.

A converge on a cold cache downloads and unpacks every wheel of the venvs the lab's deploy
builds (vLLM's CPU build, ComfyUI's and VoxCPM2's CUDA torch, the model tool, the CUDA toolkit,
the router: about 12 GB), inside the machine, after the machine booted; two machines that start
side by side (the suite's two workers) each do it. :func:`warm` does it once, on the controller,
into the lab's shared cache (``<cache_dir>/uv``), beside the template's debootstrap (network and
dpkg, mostly one core): uv 0.13.9 of the controller's venv, the version files/base/uv.lock
installs on the machines, so the machine's uv finds the same cache entries (uv's cache layout:
https://docs.astral.sh/uv/concepts/cache/) and :mod:`lab.uvshare` links them in before it boots.

For each lock the machine installs, ``uv pip install --target`` into a scratch directory with the
machine's Python version and platform (``--python-version``, ``--python-platform``), no
dependencies beyond the lock, hash-checked, nothing built from source (``--no-build``: an sdist
is built by the machine's own interpreter). The scratch directory is removed; the cache keeps the
wheels. A lock uv cannot warm this way is named in the log and left to the machine, which
downloads it as before: warming saves time and never decides an outcome.

The standard library and uv (a program it runs); the lock paths come from the roles' constants.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab.config import LabConfig

REPO = Path(__file__).resolve().parents[1]
#: the platform uv selects wheels for: glibc x86_64, manylinux_2_40 (Ubuntu 26.04 has glibc 2.43
#: and Debian 13 2.41; uv 0.13's newest manylinux target is 2_40)
PLATFORM = "x86_64-manylinux_2_40"
#: python3 of each suite the lab runs (lab/config.py SUITE_INFO's comments)
SUITE_PYTHON = {"resolute": "3.14", "trixie": "3.13", "forky": "3.14"}
#: VoxCPM2's interpreter: the lab's CPython 3.11 (lab/voxcpm_lab.py LAB_PYTHON_VERSION)
VOXCPM_PYTHON = "3.11"


@dataclass(frozen=True)
class Warmed:
    """What one :func:`warm` did: ``locks`` warmed, ``failed`` (lock, uv's last line),
    ``skipped`` True when an earlier run had warmed the same locks, ``seconds``."""

    locks: tuple[str, ...] = ()
    failed: tuple[tuple[str, str], ...] = ()
    skipped: bool = False
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.skipped:
            return "already warm for these locks"
        text = f"{len(self.locks)} locks in {self.seconds:.0f} s"
        if self.failed:
            text += "; left to the machine: " + ", ".join(
                f"{lock} ({why})" for lock, why in self.failed
            )
        return text


def lab_locks(suite: str) -> list[tuple[Path, str]]:
    """The locks a lab converge installs, each with the Python version of its venv: ``[(lock
    path, "3.14"), ...]``. From the roles' own constants, so a lock a role switches to is warmed."""
    from lab.comfyui_lab import LAB_COMFYUI_RELEASE
    from roles.comfyui.release import load_release
    from roles.model import FILES as MODEL_FILES
    from roles.nvidia.toolkit import FILES as NVIDIA_FILES
    from roles.router.settings import LOCK as ROUTER_LOCK
    from roles.vllm.settings import CPU_LOCK
    from roles.voxcpm import FILES as VOXCPM_FILES

    python = SUITE_PYTHON.get(suite, "3.14")
    release = load_release(LAB_COMFYUI_RELEASE)
    return [
        (CPU_LOCK, python),
        (release.requirements, python),
        (VOXCPM_FILES / "requirements.lock", VOXCPM_PYTHON),
        (MODEL_FILES / "requirements.lock", python),
        (NVIDIA_FILES / "cuda-toolkit.lock", python),
        (ROUTER_LOCK, python),
    ]


def uv_binary() -> Path:
    """The controller venv's uv (requirements.lock pins the machines' version)."""
    return Path(sys.executable).with_name("uv")


def _digest(locks: list[tuple[Path, str]]) -> str:
    h = hashlib.sha256()
    for lock, python in locks:
        h.update(f"{python} {PLATFORM}\n".encode())
        h.update(lock.read_bytes())
    return h.hexdigest()


def warm(cfg: LabConfig, log: Callable[[str], None]) -> Warmed:
    """Fill ``<cache_dir>/uv`` with the wheels of :func:`lab_locks`. Serialized between
    processes by a lock file beside the cache (a second worker waits, then finds it done: a
    stamp holds the locks' digest). Never raises for what uv answers; OSError only where the
    cache directory cannot be written."""
    started = time.monotonic()
    cache = cfg.uv_cache_dir
    cache.mkdir(parents=True, exist_ok=True)
    locks = lab_locks(cfg.suite)
    digest = _digest(locks)
    stamp = cache.parent / "uv-warmed"
    with open(cache.parent / "uv-warm.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text().strip() == digest:
            return Warmed(skipped=True, seconds=time.monotonic() - started)
        warmed, failed = [], []
        for lock, python in locks:
            why = _warm_one(cache, lock, python)
            name = str(lock.relative_to(REPO)) if lock.is_relative_to(REPO) else str(lock)
            if why:
                failed.append((name, why))
            else:
                warmed.append(name)
        # written whatever failed: a lock uv cannot warm here is the machine's to download, and
        # trying it again for every machine would only cost time
        stamp.write_text(digest + "\n")
    return Warmed(tuple(warmed), tuple(failed), False, time.monotonic() - started)


#: uv's words for a package that has no wheel, only an sdist (``--no-build``)
_NO_WHEEL = re.compile(r"Wheels are required for `([^`]+)`")


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 compares it (``Foo_Bar`` -> ``foo-bar``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def without(lock_text: str, names: set[str]) -> str:
    """``lock_text`` (uv pip compile's format: ``name==version \\`` then ``--hash`` lines)
    without the entries of ``names`` (normalized names, PEP 503)."""
    out, skipping = [], False
    for line in lock_text.splitlines():
        if line and not line[0].isspace() and not line.startswith("#"):
            name = re.split(r"[=<>!~ ;\[]", line, maxsplit=1)[0]
            skipping = normalized(name) in names
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def _warm_one(cache: Path, lock: Path, python: str) -> str:
    """One lock into the cache; "" on success, else why not. A package with no wheel (uv's
    ``--no-build`` names it) is left out and the rest tried again: the machine builds it."""
    scratch = Path(tempfile.mkdtemp(prefix=".rigup-warm-", dir=cache.parent))
    text, left_out = lock.read_text(), set()
    try:
        for _ in range(10):
            reqs = scratch / "requirements.lock"
            reqs.write_text(without(text, left_out))
            proc = subprocess.run(
                [
                    str(uv_binary()),
                    "pip",
                    "install",
                    "--quiet",
                    "--target",
                    str(scratch / "t"),
                    "--python-version",
                    python,
                    "--python-platform",
                    PLATFORM,
                    "--no-deps",
                    "--no-build",
                    "--require-hashes",
                    "-r",
                    str(reqs),
                ],  # fmt: skip
                env={**os.environ, "UV_CACHE_DIR": str(cache), "UV_NO_PROGRESS": "1"},
                capture_output=True,
                text=True,
                timeout=1800,
            )
            if not proc.returncode:
                return ""
            sdist = _NO_WHEEL.search(proc.stderr or "")
            if not sdist:
                lines = (proc.stderr or proc.stdout).strip().splitlines()
                return lines[-1] if lines else f"uv exited {proc.returncode}"
            left_out.add(normalized(sdist.group(1)))
        return f"more than 10 packages without a wheel: {sorted(left_out)}"
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class Background:
    """:func:`warm` in a thread: started before the template builds, joined before the
    machine's cache is seeded (:meth:`join` logs what it did)."""

    def __init__(self, cfg: LabConfig, log: Callable[[str], None]):
        self.cfg, self.log = cfg, log
        self.result: Warmed | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="uv-warm", daemon=True)

    def _run(self) -> None:
        try:
            self.result = warm(self.cfg, self.log)
        except Exception as e:  # noqa: BLE001 - warming only saves time; the machine downloads
            self.error = e

    def start(self) -> Background:
        self.thread.start()
        return self

    def join(self) -> None:
        started = time.monotonic()
        self.thread.join()
        waited = time.monotonic() - started
        if self.error is not None:
            self.log(f"uv cache not warmed ({self.error}); the machine downloads its wheels")
        elif self.result is not None and not self.result.skipped:
            self.log(f"uv cache warmed on the controller: {self.result} (waited {waited:.0f} s)")
