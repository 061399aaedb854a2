"""The lab scenario, molecule's sequence on the lab machine:
create -> converge -> idempotence (a second run in ``--dry --json`` mode plans 0 changes)
-> verify (testinfra) -> destroy.

Used by ``python -m lab converge`` (README's first command; it keeps the machine) and by
tests/lab/test_scenario.py (CI; it also breaks the machine on purpose and destroys it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.checkpoint import build_checkpoint
from lab.machine import LabMachine

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: Where the lab keeps its "mirror" of the checkpoint: under /srv/mirror (model_local_dirs), named
#: after the repository, as `hf download --local-dir` or a NAS copy would be.
LAB_MODEL_MIRROR = "/srv/mirror/Qwen3.6-27B-int4-AutoRound"

# --- ComfyUI mirror (issue 4) -------------------------------------------------------------------
#: Where the lab keeps its git mirror of ComfyUI (inventory/lab.py points comfyui_git_url here).
LAB_COMFYUI_MIRROR = "/srv/mirror/ComfyUI.git"
#: Controller-side environment variable naming a git mirror of ComfyUI (a bare repository that
#: holds comfyui_commit). No machine here reaches GitHub, so without it the lab leaves ComfyUI
#: out (comfyui_install = False) and its tests skip, saying so.
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
    out, as recorded by :func:`seed_comfyui_mirror`; None before its mirror is seeded."""
    path = cfg.state_dir / "comfyui-commit"
    return path.read_text().strip() if path.exists() else None


def seed_comfyui_mirror(machine: LabMachine) -> StepResult:
    """Push the controller's ComfyUI mirror to :data:`LAB_COMFYUI_MIRROR` in the machine (the
    role clones from that path exactly as a firewalled rig clones from its own mirror) and
    record the commit the lab checks out (see :data:`_LAB_COMMIT_SCRIPT`: its objects are
    written to a scratch directory, never into the controller's mirror); a skipped step when
    ``$RIGUP_COMFYUI_MIRROR`` is unset."""
    import runpy

    started = time.monotonic()
    mirror = comfyui_mirror()
    if mirror is None:
        why = f"no ComfyUI mirror (set {COMFYUI_MIRROR_ENV} to a git mirror of ComfyUI)"
        return StepResult("comfyui src", 0, 0.0, {"skipped": why})
    base = runpy.run_path(str(REPO / "inventory" / "group_data" / "all.py"))["comfyui_commit"]
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


@dataclass
class StepResult:
    """Outcome of one scenario step: exit code, wall time in seconds, and step-specific detail."""

    name: str
    rc: int
    seconds: float
    detail: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def skipped(self) -> bool:
        return "skipped" in self.detail


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def seed_mirror(machine: LabMachine) -> StepResult:
    """Build the constructed Qwen3.6-27B-AutoRound-shaped checkpoint and push it to the mirror path
    in the machine (the "local mirror" model source)."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rigup-ckpt-") as tmp:
        ckpt = build_checkpoint(Path(tmp) / "ckpt")
        machine.ssh(f"mkdir -p {LAB_MODEL_MIRROR}")
        machine.push(ckpt, LAB_MODEL_MIRROR)
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    return StepResult("seed mirror", 0, time.monotonic() - started, {"bytes": size})


def converge(inventory: str = "inventory/lab.py", deploy: str = "deploys/full.py") -> StepResult:
    """Run the deploy for real (``pyinfra -y``), output streamed to the terminal."""
    started = time.monotonic()
    rc = subprocess.run(
        [str(BIN / "pyinfra"), "-y", inventory, deploy], cwd=REPO, env=_env()
    ).returncode
    return StepResult("converge", rc, time.monotonic() - started)


def plan_changes(parsed: dict) -> tuple[list[str], list[str]]:
    """(operations that would change a host, operations that would change only if a condition
    fires) from ``pyinfra --dry --json`` output. Conditional operations (``_if=``) depend on other
    operations' changes, so with no unconditional change none of them can fire."""
    changed = [op["name"] for op in parsed["plan"] if op["hosts_with_change"]]
    conditional = [op["name"] for op in parsed["plan"] if op["hosts_with_conditional_change"]]
    return changed, conditional


def idempotence(inventory: str = "inventory/lab.py", deploy: str = "deploys/full.py") -> StepResult:
    """A second run in ``--dry --json`` mode; rc 0 only when it plans no change."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "pyinfra"), inventory, deploy, "--dry", "--json"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        return StepResult("idempotence", proc.returncode, seconds, {"stderr": proc.stderr[-3000:]})
    changed, conditional = plan_changes(json.loads(proc.stdout))
    detail = {
        "changes": changed,
        "conditional": conditional,
        "operations": len(json.loads(proc.stdout)["plan"]),
    }
    return StepResult("idempotence", 1 if changed else 0, seconds, detail)


def verify(inventory: str = "inventory/lab.py", extra: list[str] | None = None) -> StepResult:
    """Run the testinfra suite (tests/infra) against the inventory's hosts."""
    started = time.monotonic()
    proc = subprocess.run(
        [
            str(BIN / "pytest"),
            "tests/infra",
            "--inventory",
            inventory,
            "-q",
            "-p",
            "no:cacheprovider",
            *(extra or []),
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    return StepResult(
        "verify",
        proc.returncode,
        time.monotonic() - started,
        {
            "summary": lines[-1] if lines else "",
            "output": proc.stdout[-20000:] + proc.stderr[-2000:],
        },
    )


# --- Models (issue 5) ---
def format_transfer(report: dict) -> str:
    """One summary line from a model transfer report (files/model/model_fetch.py's JSON)."""
    where = report["dest"].rstrip("/").split("/")
    name = f"{where[-2]}@{where[-1]}" if len(where) > 1 else report["dest"]
    moved = report.get("bytes_transferred", 0)
    rate = f", {report['rate_mb_s']} MB/s" if report.get("rate_mb_s") else ""
    source = (
        f" from {report['from']} ({report.get('layout', report.get('source'))})"
        if report.get("from")
        else ""
    )
    return f"model {name}: {report['status']}{source}, {moved:,} B moved in {report['seconds']} s{rate}"


def model_transfer_lines(machine: LabMachine) -> list[str]:
    """The last transfer of each placed model on the machine (/var/lib/rigup/model/*@*.json)."""
    proc = machine.ssh("cat /var/lib/rigup/model/*@*.json 2>/dev/null", check=False)
    lines = []
    for raw in proc.stdout.splitlines():
        try:
            lines.append(format_transfer(json.loads(raw)))
        except (ValueError, KeyError):
            continue
    return lines


def format_summary(steps: list[StepResult], machine: LabMachine) -> str:
    """The closing summary of ``python -m lab converge``: what was converged and verified."""
    out = ["", "== rigup lab summary =="]
    for s in steps:
        if s.skipped:
            out.append(f"SKIP {s.name:<12}            {s.detail['skipped']}")
            continue
        mark = "ok  " if s.ok else "FAIL"
        line = f"{mark} {s.name:<12} {s.seconds:7.1f} s"
        if s.name == "idempotence" and "operations" in s.detail:
            line += (
                f"  {len(s.detail['changes'])} changes in {s.detail['operations']} planned "
                f"operations ({len(s.detail['conditional'])} conditional, none can fire)"
            )
            if s.detail["changes"]:
                line += "\n       would change: " + "; ".join(s.detail["changes"])
        if s.name == "verify":
            line += f"  testinfra: {s.detail.get('summary', '')}"
        if s.name == "seed mirror":
            line += f"  constructed checkpoint, {s.detail['bytes'] / 1e6:.1f} MB"
        if s.name == "seed voxcpm":  # issue 4 (lab/voxcpm_lab.py)
            line += f"  CPython 3.11 archive from Debian 12, {s.detail['bytes'] / 1e6:.1f} MB"
        if s.name == "comfyui src":  # issue 4
            line += f"  ComfyUI git mirror, {s.detail['bytes'] / 1e6:.1f} MB"
            if s.detail["dropped"]:
                line += (
                    f"; lab commit {s.detail['commit'][:12]} leaves out what the mirror lacks: "
                    + ", ".join(s.detail["dropped"])
                )
        out.append(line)
    out.extend(model_transfer_lines(machine))  # --- Models (issue 5) ---
    cfg = machine.cfg
    out.append(
        f"lab machine {cfg.name}: ssh -i {cfg.ssh_key} -p {cfg.ssh_port} root@127.0.0.1 "
        "(or .venv/bin/python -m lab ssh)"
    )
    if all(s.ok for s in steps):
        out.append(
            "not started here: vllm.service (the lab declares no NVIDIA GPUs; installed, checked "
            "by vLLM's own parser and config code, kept stopped)"
        )
        out.append(  # issue 4
            "test double: voxcpm.service runs rigup's speech server with a tone in place of "
            "VoxCPM2 (no weights, no GPU here; voxcpm_test_double_synthesizer)"
        )
        # --- issue 4: modes ---
        out.append(
            "modes: `rigup-mode llm|media` in the lab switches rigup-llm.target/rigup-media.target "
            "for real; comfyui.service runs there on the CPU (--cpu) in the media mode"
            if comfyui_mirror()
            else "modes: ComfyUI left out (no ComfyUI mirror: set RIGUP_COMFYUI_MIRROR); the mode "
            "targets still switch with `rigup-mode llm|media`"
        )
    return "\n".join(out)
