#!/usr/bin/env python3
"""Benchmark: real-time factor of the VoxCPM2 service (synthesis seconds / audio seconds).

Sends a few sentences to ``POST /v1/audio/speech`` one after the other (``pcm``: 16-bit samples
at the ``X-Sample-Rate`` header's rate, so the audio length is the byte count) and prints, per
request and in total, the audio length, the time to the first audio byte (the server streams the
answer as it is synthesized), the time to the last byte and the RTF (last byte / audio length;
one request at a time, so it is the synthesis time). Below 1.0 is faster than real time;
voxcpm 2.0.3's README gives ~0.30 for VoxCPM2 on an RTX 4090 (torch.compile on). Standard library
only; run it on the rig (the service listens on loopback):

    python3 benchmarks/voxcpm-rtf.py                      # http://127.0.0.1:8100, 3 rounds
    python3 benchmarks/voxcpm-rtf.py --url http://127.0.0.1:12251 --rounds 1   # a lab machine

On a host running the test double (``voxcpm_test_double_synthesizer``) the figures describe the
double, not VoxCPM2; the script says so (the ``X-Synthesizer`` header).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request

SENTENCES = [
    "The rig converged in one command.",
    "Two graphics cards, one bridge, and a model that speaks forty-eight thousand samples a second.",
    "A longer paragraph tests how synthesis time grows with text: the quick brown fox jumps over "
    "the lazy dog, and the rig owner checks every change before and after it lands.",
]


def speak(url: str, text: str) -> dict:
    body = json.dumps({"input": text, "voice": "default", "response_format": "pcm"}).encode()
    request = urllib.request.Request(
        f"{url}/v1/audio/speech", body, {"Content-Type": "application/json"}
    )
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as response:
        data = response.read1(1 << 16)
        first_s = time.monotonic() - started
        data += response.read()
        headers = response.headers
    return {
        "chars": len(text),
        "bytes": len(data),
        "audio_s": len(data) / 2 / int(headers["X-Sample-Rate"]),
        "first_s": first_s,
        "wall_s": time.monotonic() - started,
        "synthesizer": headers["X-Synthesizer"],
    }


def main(argv: list[str]) -> int:
    cli = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cli.add_argument("--url", default="http://127.0.0.1:8100")
    cli.add_argument("--rounds", type=int, default=3, help="passes over the sentences")
    args = cli.parse_args(argv)
    with urllib.request.urlopen(f"{args.url}/ready", timeout=10) as r:
        ready = json.load(r)
    print(f"service: {ready['synthesizer']} synthesizer, model {ready['model']}")
    if ready["synthesizer"] != "voxcpm":
        print("NOTE: not VoxCPM2 (test double): the figures describe the double")
    rows = []
    print(f"{'chars':>5} {'audio s':>8} {'first s':>8} {'wall s':>8} {'RTF':>6}")
    for _ in range(args.rounds):
        for text in SENTENCES:
            row = speak(args.url, text)
            rows.append(row)
            rtf = row["wall_s"] / row["audio_s"] if row["audio_s"] else float("nan")
            print(
                f"{row['chars']:5d} {row['audio_s']:8.2f} {row['first_s']:8.2f} "
                f"{row['wall_s']:8.2f} {rtf:6.3f}"
            )
    audio = sum(r["audio_s"] for r in rows)
    synth = sum(r["wall_s"] for r in rows)
    first = max(r["first_s"] for r in rows)
    print(f"total: {len(rows)} requests, {audio:.1f} s of audio in {synth:.1f} s; first audio "
          f"after at most {first:.2f} s")  # fmt: skip
    print(f"RTF {synth / audio:.3f} (README figure for an RTX 4090: ~0.30)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
