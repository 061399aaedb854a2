"""The lab's LLM mode: vLLM 0.22.1's CPU engine started for real by ``rigup-mode llm`` and
measured (seconds to /health, first-token latency, the engine's memory), the figures the summary
of ``python -m lab converge`` prints. Runs on the controller: the lab shares its network, so the
OpenAI SDK reaches the service on 127.0.0.1 directly.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from lab.machine import LabMachine
from lab.pair_serving import VLLM_KEY_FILE
from lab.step import StepResult

UNIT = "vllm.service"


def lab_vllm_port(cfg) -> int:
    """vLLM's port in the lab machine of ``cfg``: labs share the controller's network, so it
    follows the SSH port (30000 + ssh_port: 32222 for the default lab)."""
    return 30000 + cfg.ssh_port


#: the name clients send as "model" (inventory/group_data/all.py vllm_served_model_name)
SERVED_MODEL = "qwen3.6-27b"
#: the root-only files holding the API keys on a rig and in the lab (roles/common/paths.py
#: ServicePaths ``api_key_file`` of vllm and voxcpm under the shipped rigup_etc_dir;
#: tests/unit/test_lab_service_lines.py checks them)
KEY_FILES = {
    "VLLM_API_KEY": VLLM_KEY_FILE,
    "VOXCPM_API_KEY": "/etc/rigup/voxcpm/secrets/api-key.env",
}


def service_lines(cfg, env: dict, comfyui: bool, full: bool = True) -> list[str]:
    """How to talk to each of the lab's services from the controller (the lab shares its
    network, so each service listens on the controller's 127.0.0.1 at a port of this lab):
    the exact ``curl`` for vLLM's chat and the speech server, ComfyUI's address when it is
    installed (``comfyui``), and the mode each needs. ``env``: the converge's environment (an
    API key exported there guards the service: ``VLLM_API_KEY``, ``VOXCPM_API_KEY``).
    ``full`` False: the layers run (vLLM only)."""
    from lab.comfyui_lab import lab_comfyui_port
    from lab.config import DEFAULT_NAME, DEFAULT_SSH_PORT
    from lab.voxcpm_lab import lab_voxcpm_port

    lab = ".venv/bin/python -m lab"
    if (cfg.name, cfg.ssh_port) != (DEFAULT_NAME, DEFAULT_SSH_PORT):  # this lab, not the default
        lab = f"RIGUP_LAB_NAME={cfg.name} RIGUP_LAB_SSH_PORT={cfg.ssh_port} {lab}"
    vllm, voxcpm = lab_vllm_port(cfg), lab_voxcpm_port(cfg)
    out = [
        f"talk to the lab from this controller (its ports follow RIGUP_LAB_SSH_PORT={cfg.ssh_port};"
        " a rig uses 8000, 8100, 8188):",
        f"  vLLM, LLM mode (on now): curl -s 127.0.0.1:{vllm}/v1/chat/completions "
        "-H 'Content-Type: application/json'"
        + _bearer("VLLM_API_KEY", env)
        + f' -d \'{{"model": "{SERVED_MODEL}", "messages": [{{"role": "user", '
        '"content": "Hello"}]}\'',
        "    " + _key_note("VLLM_API_KEY", env),
    ]
    if not full:
        return out
    out += [
        f"  speech, media mode ({lab} ssh rigup-mode media first): curl -s "
        f"127.0.0.1:{voxcpm}/v1/audio/speech -H 'Content-Type: application/json'"
        + _bearer("VOXCPM_API_KEY", env)
        + ' -d \'{"input": "Hello from the lab.", "voice": "alloy"}\' -o hello.mp3'
        " (a tone: the lab runs the speech server's test double)",
        "    " + _key_note("VOXCPM_API_KEY", env),
        f"  ComfyUI, media mode: http://127.0.0.1:{lab_comfyui_port(cfg)}/ (no API key)"
        if comfyui
        else "  ComfyUI: not installed in this lab (comfyui_install = False)",
        f"  back to the LLM mode: {lab} ssh rigup-mode llm (returns once /health answers)",
    ]
    return out


def _bearer(key_env: str, env: dict) -> str:
    return f' -H "Authorization: Bearer ${key_env}"' if env.get(key_env) else ""


def _key_note(key_env: str, env: dict) -> str:
    if env.get(key_env):
        return (
            f"API key: the ${key_env} exported at converge (in the lab, root-only: "
            f"{KEY_FILES[key_env]})"
        )
    return f"API key: none (${key_env} was not set at converge; /v1/* is open on 127.0.0.1)"


def cpu_flags(cpuinfo: str) -> set[str]:
    """The flags of the first processor in ``/proc/cpuinfo``'s text (``avx2``, ``avx512f``...)."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def lab_checkpoint_variant(flags: set[str] | None = None, env: dict | None = None) -> str:
    """Which tiny checkpoint (lab/tiny) the lab serves: the AutoRound INT4 one, as the rig's
    model, where vLLM's CPU build has a 4-bit kernel (its AVX-512 library: a CPU with
    ``avx512f``), else the same model in BF16 (the AVX2 library lacks cpu_gemm_wna16, and
    files/vllm/check_args.py refuses INT4 there). ``RIGUP_LAB_CHECKPOINT`` (``hybrid`` or
    ``hybrid-int4``) chooses by hand. The lab machine runs on the controller's CPU."""
    env = os.environ if env is None else env
    chosen = env.get("RIGUP_LAB_CHECKPOINT")
    if chosen:
        if chosen not in ("hybrid", "hybrid-int4"):
            raise ValueError(f"RIGUP_LAB_CHECKPOINT: {chosen!r} is not hybrid or hybrid-int4")
        return chosen
    if flags is None:
        flags = cpu_flags(Path("/proc/cpuinfo").read_text())
    return "hybrid-int4" if "avx512f" in flags else "hybrid"


def engine_rss_mib(machine: LabMachine, unit: str = UNIT) -> float:
    """Resident memory of every process of ``unit`` (those in its cgroup), in MiB."""
    out = machine.ssh(
        f"ps -e -o rss= -o cgroup= | awk '$2 ~ /\\/{unit}$/ {{s += $1}} END {{print s + 0}}'",
        check=False,
    ).stdout.strip()
    return int(out or 0) / 1024


def first_token_seconds(port: int, model: str, prompt: str = "Hello!") -> tuple[float, str]:
    """Seconds from sending a streamed chat completion to its first token, and the answer."""
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="no-key", timeout=300)
    started = time.monotonic()
    first = None
    parts = []
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=48,
        temperature=0,
        stream=True,
    )
    for chunk in stream:
        delta = chunk.choices[0].delta if chunk.choices else None
        # vLLM 0.22.1 streams the thinking as `reasoning` (vllm#33402 removed reasoning_content)
        text = (getattr(delta, "content", None) or getattr(delta, "reasoning", None)
                or "") if delta else ""  # fmt: skip
        if text and first is None:
            first = time.monotonic() - started
        parts.append(text)
    return (first if first is not None else time.monotonic() - started), "".join(parts)


def serve(machine: LabMachine, model: str = SERVED_MODEL) -> StepResult:
    """``rigup-mode llm`` on the lab: returns once vllm.service answers /health (its
    ExecStartPost); then a streamed chat completion from the controller. Detail: seconds to
    /health, first-token latency, the answer, the engine's RSS."""
    started = time.monotonic()
    switch = machine.ssh("rigup-mode llm", check=False)
    health = time.monotonic() - started
    if switch.returncode != 0:
        return StepResult(
            "serve",
            switch.returncode,
            health,
            {"stderr": (switch.stdout + switch.stderr)[-3000:]},
        )
    port = lab_vllm_port(machine.cfg)
    try:
        ttft, answer = first_token_seconds(port, model)
    except Exception as e:  # the step reports what went wrong, the summary shows it
        return StepResult("serve", 1, time.monotonic() - started, {"stderr": repr(e)})
    return StepResult(
        "serve",
        0,
        time.monotonic() - started,
        {
            "health_s": health,
            "ttft_s": ttft,
            "answer": answer,
            "rss_mib": engine_rss_mib(machine),
        },
    )
