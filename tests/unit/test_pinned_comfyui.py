"""The pinned ComfyUI's own code: the lab's release (LAB_COMFYUI_RELEASE, ComfyUI 0.30.0), read
at its locked commit from the repository lab/comfyui_source.py makes of the pinned sdist on PyPI
(downloaded once into $RIGUP_LAB_CACHE_DIR/comfyui, sha256 and tree id checked). Its argument
parser accepts what rigup renders and rejects typos and offload-defeating flags, its version file
matches the lock's version, and the release's requirements lock satisfies its requirements.txt.
The lab runs the same parser check on the host with the deployed checkout
(files/comfyui/check_args.py, tests/infra).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from lab.comfyui_lab import LAB_COMFYUI_RELEASE, comfyui_source
from roles.comfyui.flags import main_args
from roles.comfyui.release import load_release

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "files" / "comfyui" / "check_args.py"
PINS = REPO / "files" / "comfyui" / "pins.in"


@pytest.fixture(scope="module")
def source():
    """The cached, checked source repository (built here on first use: ~12 MB from PyPI)."""
    return comfyui_source()


def _release(settings):
    return load_release(LAB_COMFYUI_RELEASE, settings["comfyui_lock_dir"])


def _show(source, settings: dict, path: str) -> str:
    out = subprocess.run(
        ["git", "--git-dir", str(source.bare), "show", f"{_release(settings).commit}:{path}"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, f"{path} at {_release(settings).commit}: {out.stderr}"
    return out.stdout


def test_the_locked_commit_has_the_locked_tree(source, settings):
    release = _release(settings)
    tree = subprocess.run(
        ["git", "--git-dir", str(source.bare), "rev-parse", f"{release.commit}^{{tree}}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert tree == release.tree == "41e7dd48ea31bc0f0948e415091e89bc7a1c66d7"


@pytest.fixture
def checkout(source, settings, tmp_path) -> Path:
    """The files the parser needs (comfy/cli_args.py, comfy/options.py) at the pinned commit."""
    (tmp_path / "comfy").mkdir()
    for path in ("comfy/cli_args.py", "comfy/options.py"):
        (tmp_path / path).write_text(_show(source, settings, path))
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
    # 0.30.0's --cuda-device is a string: a comma-separated list of ids (comfy/cli_args.py)
    assert result["cuda_device"] == "0" and result["reserve_vram"] == 1.0 and not result["cpu"]
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


def test_version_file_matches_the_setting(source, settings):
    text = _show(source, settings, "comfyui_version.py")
    assert f'__version__ = "{_release(settings).version}"' in text.splitlines()


def _pins(lock: str) -> dict[str, str]:
    """``name -> version`` of a uv requirements lock (``name==version \\`` lines)."""
    found = re.findall(r"^([A-Za-z0-9._-]+)==([^ ;\\]+)", lock, re.MULTILINE)
    return {name.lower().replace("_", "-"): version for name, version in found}


def test_the_requirements_lock_satisfies_the_pinned_requirements_txt(source, settings):
    """Every requirement of the pinned ComfyUI's requirements.txt is in the release's lock at a
    version its specifier allows, and at a version files/comfyui/pins.in allows (torch,
    torchvision and torchaudio as vLLM's lock has them; transformers below 5.15)."""
    pins = _pins(_release(settings).requirements.read_text())
    problems = []
    for line in _show(source, settings, "requirements.txt").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        name = req.name.lower().replace("_", "-")
        if name not in pins:
            problems.append(f"{req}: not in the lock")
        elif not req.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{req}: the lock has {pins[name]}")
    for line in PINS.read_text().splitlines():
        if line and not line.startswith("#"):
            req = Requirement(line)
            found = pins.get(req.name.lower())
            if found is None or not req.specifier.contains(found, prereleases=True):
                problems.append(f"{line}: the lock has {found}")
    assert not problems, problems
