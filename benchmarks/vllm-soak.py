"""A bounded soak of vllm.service: N clients sending chat completions for M minutes.

Runs ON the host with the vLLM venv's python (it has the openai SDK), e.g. on the lab:

    .venv/bin/python -m lab ssh -- /opt/rigup/vllm/venv/bin/python - --minutes 10 --clients 4 \\
        < benchmarks/vllm-soak.py

Reads the port and served name from /etc/rigup/vllm/serve-args.json and the API key (if any)
from /etc/rigup/vllm/secrets/api-key.env. Prints, every minute and at the end: requests, failed
requests, empty answers, completion tokens, the engine's resident memory (every process of
vllm.service) and its growth since the start. A benchmark: it prints figures, it asserts nothing
except that the run is a real one (exit 1 when a request failed or an answer was empty).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ARGS_FILE = Path("/etc/rigup/vllm/serve-args.json")
KEY_FILE = Path("/etc/rigup/vllm/secrets/api-key.env")
PROMPTS = [
    "Hello!",
    "Write two sentences about the sea.",
    "What is the capital of France?",
    "List three prime numbers.",
]


def engine_rss_mib(unit: str = "vllm.service") -> float:
    """Resident memory of every process in ``unit``'s cgroup, in MiB."""
    out = subprocess.run(
        ["ps", "-e", "-o", "rss=", "-o", "cgroup="], capture_output=True, text=True
    ).stdout
    kib = sum(int(line.split()[0]) for line in out.splitlines() if line.rstrip().endswith(unit))
    return kib / 1024


def served() -> tuple[int, str, str | None]:
    """(port, served model name, API key or None) of the deployed vllm.service."""
    args = json.loads(ARGS_FILE.read_text())
    port = int(args[args.index("--port") + 1])
    name = args[args.index("--served-model-name") + 1]
    key = None
    if KEY_FILE.exists():
        line = KEY_FILE.read_text().strip()
        key = line.split("=", 1)[1] if line.startswith("VLLM_API_KEY=") else None
    return port, name, key


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--minutes", type=float, default=10.0)
    cli.add_argument("--clients", type=int, default=4)
    cli.add_argument("--max-tokens", type=int, default=64)
    opts = cli.parse_args(argv)

    from openai import OpenAI

    port, model, key = served()
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key or "no-key", timeout=600)
    lock = threading.Lock()
    totals = {"requests": 0, "failed": 0, "empty": 0, "tokens": 0}
    errors: list[str] = []
    stop = time.monotonic() + opts.minutes * 60

    def worker(index: int) -> None:
        n = 0
        while time.monotonic() < stop:
            prompt = PROMPTS[(index + n) % len(PROMPTS)]
            n += 1
            try:
                reply = client.chat.completions.create(
                    model=model,
                    messages=[{"role": "user", "content": prompt}],
                    max_tokens=opts.max_tokens,
                )
                message = reply.choices[0].message
                # vLLM 0.22.1: the thinking is `reasoning` (vllm#33402)
                text = (message.content or "") + (getattr(message, "reasoning", None) or "")
                with lock:
                    totals["requests"] += 1
                    totals["tokens"] += reply.usage.completion_tokens
                    if not text.strip():
                        totals["empty"] += 1
            except Exception as e:  # counted and shown: the soak's finding
                with lock:
                    totals["requests"] += 1
                    totals["failed"] += 1
                    errors.append(f"{type(e).__name__}: {e}"[:300])

    rss_start = engine_rss_mib()
    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(opts.clients)]
    for t in threads:
        t.start()
    next_report = started + 60
    while any(t.is_alive() for t in threads):
        time.sleep(1)
        if time.monotonic() >= next_report:
            next_report += 60
            with lock:
                snapshot = dict(totals)
            rss = engine_rss_mib()
            print(
                f"{(time.monotonic() - started) / 60:5.1f} min: {snapshot['requests']} requests, "
                f"{snapshot['failed']} failed, {snapshot['empty']} empty, engine RSS "
                f"{rss:.0f} MiB ({rss - rss_start:+.0f} MiB)",
                flush=True,
            )
    seconds = time.monotonic() - started
    rss_end = engine_rss_mib()
    result = {
        **totals,
        "clients": opts.clients,
        "minutes": round(seconds / 60, 2),
        "requests_per_s": round(totals["requests"] / seconds, 2),
        "tokens_per_s": round(totals["tokens"] / seconds, 1),
        "rss_start_mib": round(rss_start),
        "rss_end_mib": round(rss_end),
        "rss_growth_mib": round(rss_end - rss_start),
        "errors": errors[:5],
    }
    print(json.dumps(result))
    return 0 if totals["failed"] == 0 and totals["empty"] == 0 and totals["requests"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
