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
from lab.step import StepResult

UNIT = "vllm.service"


def lab_vllm_port(cfg) -> int:
    """vLLM's port in the lab machine of ``cfg``: labs share the controller's network, so it
    follows the SSH port (30000 + ssh_port: 32222 for the default lab)."""
    return 30000 + cfg.ssh_port


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


def serve(machine: LabMachine, model: str = "qwen3.6-27b") -> StepResult:
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
