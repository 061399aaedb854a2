"""The pinned ComfyUI's own code, read from a git mirror at the commit of the shipped release lock
the lab runs (LAB_COMFYUI_RELEASE): its argument parser accepts what rigup renders and rejects typos and offload-defeating flags, its version file
matches the lock's version, and files/comfyui/requirements.in follows its requirements.txt.

Needs a git mirror of ComfyUI holding that commit, named by $RIGUP_COMFYUI_MIRROR. No machine
here reaches GitHub, so CI has none: these tests skip then, saying why. The lab runs the same
parser check on the host with the deployed checkout (files/comfyui/check_args.py, tests/infra).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lab.comfyui_lab import COMFYUI_MIRROR_ENV, LAB_COMFYUI_RELEASE, comfyui_mirror
from roles.comfyui.flags import main_args
from roles.comfyui.release import load_release

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "files" / "comfyui" / "check_args.py"

pytestmark = pytest.mark.skipif(
    comfyui_mirror() is None,
    reason=f"no ComfyUI mirror: set {COMFYUI_MIRROR_ENV} to a git mirror of ComfyUI holding "
    "the commit of LAB_COMFYUI_RELEASE (no machine here reaches GitHub)",
)


def _release(settings):
    return load_release(LAB_COMFYUI_RELEASE, settings["comfyui_lock_dir"])


def _show(settings: dict, path: str) -> str:
    mirror = comfyui_mirror()
    out = subprocess.run(
        ["git", "--git-dir", str(mirror), "show", f"{_release(settings).commit}:{path}"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"{path} at {_release(settings).commit}: {out.stderr}"
    return out.stdout


@pytest.fixture
def checkout(settings, tmp_path) -> Path:
    """The files the parser needs (comfy/cli_args.py, comfy/options.py) at the pinned commit."""
    (tmp_path / "comfy").mkdir()
    for path in ("comfy/cli_args.py", "comfy/options.py"):
        (tmp_path / path).write_text(_show(settings, path))
    return tmp_path


def _check(checkout: Path, args: list[str], tmp_path: Path) -> tuple[int, dict]:
    argv = tmp_path / "args.json"
    argv.write_text(json.dumps(args))
    proc = subprocess.run(
        [sys.executable, "-B", str(CHECK), str(checkout), str(argv)],
        capture_output=True,
        text=True,
    )
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_parser_accepts_the_rendered_arguments(settings, checkout, tmp_path):
    rc, result = _check(checkout, main_args(settings), tmp_path)
    assert rc == 0, result
    assert result["listen"] == "127.0.0.1" and result["port"] == 8188
    assert result["base_directory"] == settings["comfyui_base_dir"]
    assert result["cuda_device"] == 0 and result["reserve_vram"] == 1.0 and not result["cpu"]
    assert result["database_url"] == "sqlite:////srv/rigup/comfyui/user/comfyui.db"


def test_parser_accepts_the_lab_cpu_arguments(settings, checkout, tmp_path):
    settings["comfyui_cpu"] = True
    rc, result = _check(checkout, main_args(settings), tmp_path)
    assert rc == 0 and result["cpu"] is True, result


@pytest.mark.parametrize(
    "flag,error",
    [
        (["--data-directory", "/srv/x"], "unrecognized arguments: --data-directory"),
        (["--high-vram"], "unrecognized arguments: --high-vram"),
        (["--reserve-vram", "lots"], "argument --reserve-vram: invalid float value"),
        (["--highvram"], "--highvram defeats offloading"),
        (["--gpu-only"], "--gpu-only defeats offloading"),
    ],
)
def test_parser_rejects(settings, checkout, tmp_path, flag, error):
    """The check is real: ComfyUI's parser refuses flags that do not exist (the issue's
    --data-directory), and rigup refuses the ones that defeat offloading."""
    rc, result = _check(checkout, main_args(settings) + flag, tmp_path)
    assert rc == 1 and error in result["error"], result


def test_version_file_matches_the_setting(settings):
    text = _show(settings, "comfyui_version.py")
    assert f'__version__ = "{_release(settings).version}"' in text.splitlines()


def _requirements(text: str) -> dict[str, str]:
    reqs = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name = re.split(r"[<>=~!; ]", line, maxsplit=1)[0].lower()
            reqs[name] = line[len(name) :].strip()
    return reqs


def test_requirements_in_follows_the_pinned_requirements_txt(settings):
    """Every requirement of the pinned ComfyUI is in requirements.in with the same specifier,
    except torch/torchvision/torchaudio, which rigup pins to vLLM's release (a shared cache)."""
    upstream = _requirements(_show(settings, "requirements.txt"))
    ours = _requirements((REPO / "files" / "comfyui" / "requirements.in").read_text())
    added = {"requests"}  # imported by the pinned ComfyUI, missing from its requirements.txt
    assert set(upstream) | added == set(ours), (set(upstream) | added) ^ set(ours)
    shared_torch = {"torch", "torchvision", "torchaudio"}
    differ = {n: (upstream[n], ours[n]) for n in upstream if upstream[n] != ours[n]}
    assert set(differ) <= shared_torch, differ
