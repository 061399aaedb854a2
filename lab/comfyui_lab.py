"""What the lab machine needs for the ComfyUI role, in place of what it cannot reach: a git
mirror of ComfyUI pushed in from the controller (``$RIGUP_COMFYUI_MIRROR``), which the role
clones exactly as a firewalled rig clones from its own mirror, and a port of its own per lab
machine (lab machines share the controller's network).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from lab.machine import LabMachine
from lab.step import StepResult

REPO = Path(__file__).resolve().parents[1]

#: Where the lab keeps its git mirror of ComfyUI (inventory/lab.py points comfyui_git_url here).
LAB_COMFYUI_MIRROR = "/srv/mirror/ComfyUI.git"
#: The ComfyUI release the lab runs: the shipped lock (files/comfyui/releases/v0.8.0.toml), whose
#: commit the lab's mirror holds. Not the default comfyui_release: the lab places no ComfyUI models
#: (comfyui_models = []), and the default is a release its first run on a rig locks, which needs
#: the git remote the lab has no way to reach.
LAB_COMFYUI_RELEASE = "v0.8.0"
#: Controller-side environment variable naming a git mirror of ComfyUI (a bare repository that
#: holds the commit of LAB_COMFYUI_RELEASE). Without it the lab leaves ComfyUI out (comfyui_install = False) and
#: its tests skip, saying so.
COMFYUI_MIRROR_ENV = "RIGUP_COMFYUI_MIRROR"


def lab_comfyui_port(cfg) -> int:
    """ComfyUI's port in the lab machine of ``cfg`` (a :class:`lab.config.LabConfig`).

    Lab machines share the controller's network namespace, so two labs (a user's and the test
    suite's, or two checkouts') must not both listen on 8188: the port moves with the SSH port,
    ``8188 + 10 x (ssh_port - 2222)`` (8188 for the default lab, 8198 for the suite's 2223).
    Measured: with one port for all, a second lab's wait-ready took the first lab's ComfyUI as
    its own.
    """
    return 8188 + 10 * (cfg.ssh_port - 2222)


def comfyui_mirror() -> Path | None:
    """The controller's ComfyUI git mirror named by ``$RIGUP_COMFYUI_MIRROR``, or None if unset.

    Raises ``ValueError`` when the variable is set but names no git repository, so a typo is not
    silently turned into a skip.
    """
    value = os.environ.get(COMFYUI_MIRROR_ENV, "")
    if not value:
        return None
    path = Path(value)
    if not ((path / "objects").is_dir() or (path / ".git").is_dir()):
        raise ValueError(f"{COMFYUI_MIRROR_ENV}={value} is not a git repository")
    return path


#: A mirror made by a snapshot tool may lack large blobs (the one this repo was developed with
#: drops files of 4 MiB and more: ComfyUI v0.8.0's comfy/text_encoders/llama_tokenizer/
#: tokenizer.json). Checking such a commit out leaves those files missing, which the role rightly
#: reports as local changes. The lab then checks out a commit of its own on top of the pinned
#: one, identical but for the files whose blobs are missing; fixed author and dates make its id
#: stable. A complete mirror (any real clone) gets the pinned commit itself.
_LAB_COMMIT_SCRIPT = """
set -eu
base="$1"
t=$(mktemp) m=$(mktemp)
git ls-tree -r --format='%(objectname) %(path)' "$base" > "$t"
cut -d' ' -f1 "$t" | git cat-file --batch-check | awk '$2 == "missing" {print $1}' > "$m"
if ! test -s "$m"; then echo "@commit $base"; exit 0; fi
export GIT_INDEX_FILE="$GIT_OBJECT_DIRECTORY/../index"
git read-tree "$base"
grep -F -f "$m" "$t" | cut -d' ' -f2- | while read -r path; do
    echo "@dropped $path"
    git update-index --force-remove -- "$path"
done
tree=$(git write-tree)
export GIT_AUTHOR_NAME=rigup-lab GIT_AUTHOR_EMAIL=lab@rigup.invalid
export GIT_COMMITTER_NAME=rigup-lab GIT_COMMITTER_EMAIL=lab@rigup.invalid
export GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z
echo "@commit $(echo "lab: $base without the files whose blobs this mirror lacks" |
    git commit-tree "$tree" -p "$base")"
rm -f "$t" "$m"
"""


def lab_comfyui_commit(cfg) -> str | None:
    """The ComfyUI commit the lab machine of ``cfg`` (a :class:`lab.config.LabConfig`) checks
    out, as recorded by :func:`seed`; None before its mirror is seeded."""
    path = cfg.state_dir / "comfyui-commit"
    return path.read_text().strip() if path.exists() else None


def seed(machine: LabMachine) -> StepResult:
    """Push the controller's ComfyUI mirror to :data:`LAB_COMFYUI_MIRROR` in the machine (the
    role clones from that path exactly as a firewalled rig clones from its own mirror) and
    record the commit the lab checks out (see :data:`_LAB_COMMIT_SCRIPT`: its objects are
    written to a scratch directory, never into the controller's mirror); a skipped step when
    ``$RIGUP_COMFYUI_MIRROR`` is unset."""
    started = time.monotonic()
    mirror = comfyui_mirror()
    if mirror is None:
        why = f"no ComfyUI mirror (set {COMFYUI_MIRROR_ENV} to a git mirror of ComfyUI)"
        return StepResult("comfyui src", 0, 0.0, {"skipped": why})
    from roles.comfyui.release import load_release

    base = load_release(LAB_COMFYUI_RELEASE).commit
    git_dir = mirror / ".git" if (mirror / ".git").is_dir() else mirror
    with tempfile.TemporaryDirectory(prefix="rigup-comfyui-") as tmp:
        objects = Path(tmp) / "objects"
        objects.mkdir()
        env = {
            **os.environ,
            "GIT_DIR": str(git_dir),
            "GIT_OBJECT_DIRECTORY": str(objects),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(git_dir / "objects"),
        }
        out = subprocess.run(
            ["bash", "-c", _LAB_COMMIT_SCRIPT, "lab-commit", base],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        commit = next(line.split()[1] for line in out if line.startswith("@commit "))
        dropped = [line.split(" ", 1)[1] for line in out if line.startswith("@dropped ")]
        machine.ssh(f"rm -rf {LAB_COMFYUI_MIRROR}.tmp && mkdir -p {LAB_COMFYUI_MIRROR}.tmp")
        machine.push(git_dir, f"{LAB_COMFYUI_MIRROR}.tmp")
        machine.push(objects, f"{LAB_COMFYUI_MIRROR}.tmp/objects")
    ref = f"{LAB_COMFYUI_MIRROR}.tmp/refs/heads/rigup-lab"
    machine.ssh(
        f"mkdir -p $(dirname {ref}) && echo {commit} > {ref} && rm -rf {LAB_COMFYUI_MIRROR} && "
        f"mv {LAB_COMFYUI_MIRROR}.tmp {LAB_COMFYUI_MIRROR}"
    )
    (machine.cfg.state_dir / "comfyui-commit").write_text(commit + "\n")
    size = sum(f.stat().st_size for f in mirror.rglob("*") if f.is_file())
    detail = {"bytes": size, "commit": commit, "dropped": dropped}
    return StepResult("comfyui src", 0, time.monotonic() - started, detail)
