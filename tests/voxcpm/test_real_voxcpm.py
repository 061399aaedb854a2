"""rigup's speech server with its REAL synthesizer: voxcpm 2.0.3 loading and running a tiny
VoxCPM2 that voxcpm's own classes construct (tests/voxcpm/tiny_voxcpm2.py), on the CPU.

    RIGUP_VOXCPM_ON_LAB=1 .venv/bin/pytest tests/voxcpm     # the venv rigup deployed on the lab
    RIGUP_VOXCPM_PYTHON=/path/to/venv/bin/python .venv/bin/pytest tests/voxcpm   # a local venv

The lab scenario (tests/lab/test_scenario.py) runs the first form after converging the lab, so
CI proves that the server drives voxcpm's real API (``VoxCPM(...)``, ``.generate(text=...,
reference_wav_path=...)``, ``tts_model.sample_rate``) in the venv rigup built: model load,
tokenizer, the generation loop, voice cloning from a reference recording and the AudioVAE
decode to 48 kHz all run. The weights are random, so the audio is noise: what is checked is the
path, not the voice.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from roles.voxcpm.settings import SERVER_PARTS

REPO = Path(__file__).resolve().parents[2]
BUILDER = REPO / "tests" / "voxcpm" / "tiny_voxcpm2.py"
ON_LAB = os.environ.get("RIGUP_VOXCPM_ON_LAB") == "1"
#: the venv and server rigup deploys (roles/voxcpm/service.py, default settings)
LAB_PYTHON = "/opt/rigup/voxcpm/venv/bin/python"
PYTHON = LAB_PYTHON if ON_LAB else os.environ.get("RIGUP_VOXCPM_PYTHON", "")


def _port() -> int:
    """Not the service's port (it may run beside this test); labs share this machine's network,
    so on a lab the port follows its SSH port, as inventory/lab.py does for the service."""
    if ON_LAB:
        from lab.config import LabConfig

        return LabConfig.from_env().ssh_port + 20000
    return 18100


PORT = _port()
WORK = "/var/tmp/rigup-real-voxcpm"

pytestmark = pytest.mark.skipif(
    not PYTHON,
    reason="no voxcpm venv to run: set RIGUP_VOXCPM_PYTHON to a python with voxcpm 2.0.3, or "
    "RIGUP_VOXCPM_ON_LAB=1 for a converged lab machine",
)


class Target:
    """Runs shell commands where the voxcpm venv is: the lab machine (ssh) or this machine."""

    def __init__(self):
        self.machine = None
        if ON_LAB:
            from lab.config import LabConfig
            from lab.machine import LabMachine

            self.machine = LabMachine(LabConfig.from_env(), log=lambda _: None)

    def run(self, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
        if self.machine is not None:
            return self.machine.ssh(command, check=False, timeout=timeout)
        return subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=timeout
        )

    def put(self, src: Path, dest: str) -> None:
        if self.machine is not None:
            self.machine.push(src, dest)
        else:
            subprocess.run(["install", "-D", "-m", "644", str(src), dest], check=True)


def _http(target: Target, path: str, body: dict | None = None, out: str = "/dev/null"):
    """(status, headers dict, body text or '') of a request from the target to the server."""
    data = f"-H 'Content-Type: application/json' --data {shlex.quote(json.dumps(body))}"
    res = target.run(
        f"curl -sS --max-time 120 -D - -o {out} {data if body is not None else ''} "
        f"http://127.0.0.1:{PORT}{path}; echo; test {out} = /dev/null || true"
    )
    lines = res.stdout.splitlines()
    status = lines[0].split()[1] if lines and lines[0].startswith("HTTP/") else "000"
    headers = {
        k.strip().lower(): v.strip()
        for k, _, v in (x.partition(":") for x in lines[1:] if ":" in x)
    }
    return status, headers


def _wav_info(target: Target, path: str) -> dict:
    code = (
        # a streamed WAV's header gives no length (0xFFFFFFFF): count the frames that came
        "import json, sys, wave, numpy; w = wave.open(sys.argv[1]); "
        "a = numpy.frombuffer(w.readframes(w.getnframes()), '<i2'); "
        "print(json.dumps({'channels': w.getnchannels(), 'width': w.getsampwidth(), "
        "'rate': w.getframerate(), 'frames': a.size, 'peak': int(abs(a).max())}))"
    )
    res = target.run(f"{PYTHON} -c {shlex.quote(code)} {path}")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def server():
    """Tiny VoxCPM2 built, rigup's server started on it with --synthesizer voxcpm on the CPU,
    otherwise with the service's defaults (optimize on: voxcpm skips torch.compile off CUDA but
    still runs its warm-up generation while loading)."""
    target = Target()
    target.run(f"rm -rf {WORK} && mkdir -p {WORK}/voices")
    target.put(BUILDER, f"{WORK}/tiny_voxcpm2.py")
    for part in SERVER_PARTS:  # the server and the modules it imports from beside it
        target.put(part, f"{WORK}/{part.name}")
    built = target.run(f"{PYTHON} {WORK}/tiny_voxcpm2.py {WORK}/model", timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    info = json.loads(built.stdout.strip().splitlines()[-1])
    # a reference recording for voice cloning: 1 s of a 16 kHz chirp
    make_voice = (
        "import numpy, wave; t = numpy.arange(16000) / 16000; "
        "a = (0.3 * numpy.sin(2 * numpy.pi * (200 + 300 * t) * t) * 32767).astype('<i2'); "
        f"w = wave.open('{WORK}/voices/narrator.wav', 'wb'); w.setnchannels(1); "
        "w.setsampwidth(2); w.setframerate(16000); w.writeframes(a.tobytes()); w.close()"
    )
    assert target.run(f"{PYTHON} -c {shlex.quote(make_voice)}").returncode == 0
    started = time.monotonic()
    try:
        target.run(  # detached (setsid, no stdin) so that ssh returns at once
            f"cd {WORK} || exit 1; HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 setsid {PYTHON} "
            f"voxcpm_server.py --model-dir {WORK}/model --port {PORT} --voices-dir "
            f"{WORK}/voices --device cpu --synthesizer voxcpm "
            f"< /dev/null > {WORK}/server.log 2>&1 & echo $! > {WORK}/pid",
            timeout=30,
        )
        ready = {}
        for _ in range(240):
            res = target.run(f"curl -s http://127.0.0.1:{PORT}/ready || true")
            if res.stdout.strip().startswith("{"):
                ready = json.loads(res.stdout)
                if ready["status"] != "loading":
                    break
            time.sleep(0.5)
        log = target.run(f"tail -40 {WORK}/server.log").stdout
        assert ready.get("status") == "ready", f"server not ready: {ready}\n{log}"
        ready["seconds_to_ready"] = round(time.monotonic() - started, 1)
        print(f"\ntiny VoxCPM2: {info}, ready: {ready}")
        yield target, ready
    finally:
        target.run(f"kill $(cat {WORK}/pid) 2>/dev/null; sleep 1; rm -rf {WORK}")


def test_real_synthesizer_loads_voxcpm2(server):
    _, ready = server
    assert ready["synthesizer"] == "voxcpm"
    assert ready["sample_rate"] == 48000  # VoxCPM2's AudioVAE V2 output rate, read from voxcpm


def test_real_synthesizer_speaks_a_wav(server):
    target, _ = server
    status, headers = _http(
        target,
        "/v1/audio/speech",
        {"input": "Hello rig.", "voice": "default", "response_format": "wav"},
        f"{WORK}/a.wav",
    )
    assert status == "200" and headers["x-synthesizer"] == "voxcpm", headers
    wav = _wav_info(target, f"{WORK}/a.wav")
    assert (wav["channels"], wav["width"], wav["rate"]) == (1, 2, 48000), wav
    assert wav["frames"] > 0 and wav["peak"] > 0, f"silence or nothing from VoxCPM2: {wav}"
    print(f"\nreal VoxCPM2 path: {wav}, first audio after {headers['x-first-audio-seconds']} s")


def test_real_synthesizer_clones_a_reference_voice_with_instructions(server):
    target, _ = server
    status, headers = _http(
        target,
        "/v1/audio/speech",
        {
            "input": "Cloned.",
            "voice": "narrator",
            "instructions": "slow and calm",
            "response_format": "wav",
        },
        f"{WORK}/b.wav",
    )
    assert status == "200", headers
    assert _wav_info(target, f"{WORK}/b.wav")["frames"] > 0


def _decoded(target: Target, path: str) -> dict:
    """What the venv's PyAV decodes from the file at ``path`` on the target."""
    code = (
        "import av, json, sys\n"
        "with av.open(sys.argv[1]) as c:\n"
        "    s = c.streams.audio[0]\n"
        "    n = sum(f.samples for f in c.decode(s))\n"
        "    print(json.dumps({'container': c.format.name, 'codec': s.codec_context.name,"
        " 'rate': s.codec_context.sample_rate, 'samples': n}))\n"
    )
    res = target.run(f"{PYTHON} -c {shlex.quote(code)} {path}")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("response_format", "container", "rate"),
    [(None, "mp3", 48000), ("opus", "ogg", 48000), ("aac", "aac", 48000), ("flac", "flac", 48000)],
)
def test_real_synthesizer_audio_in_openais_formats(server, response_format, container, rate):
    """VoxCPM2's own output encoded by the venv's PyAV (mp3 when no format is asked for)."""
    target, _ = server
    body = {"input": "Hello rig.", "voice": "alloy"}
    if response_format:
        body["response_format"] = response_format
    out = f"{WORK}/c.{response_format or 'mp3'}"
    status, headers = _http(target, "/v1/audio/speech", body, out)
    assert status == "200" and headers["x-voice"] == "default", headers
    got = _decoded(target, out)
    assert (got["container"], got["rate"]) == (container, rate), got
    assert got["samples"] / rate > 0.2, got  # streamed: no header carries the length


def test_real_synthesizer_pcm_is_24_khz(server):
    target, _ = server
    body = {"input": "Hello rig.", "response_format": "pcm"}
    status, headers = _http(target, "/v1/audio/speech", body, f"{WORK}/d.pcm")
    assert status == "200" and headers["x-sample-rate"] == "24000", headers
    size = int(target.run(f"stat -c %s {WORK}/d.pcm").stdout.strip())
    assert size % 2 == 0 and size / 2 / 24000 > 0.2, size  # whole 16-bit samples, audible length


def test_real_synthesizer_releases_and_reloads_voxcpm2(server):
    """POST /release drops voxcpm's model (the server stays up, /ready 503 released, speech
    503), POST /reload loads it again with voxcpm's API, and it speaks (runs last: the model
    is loaded again at its end)."""
    target, _ = server
    status, _ = _http(target, "/release", {})
    assert status == "200"
    ready = json.loads(target.run(f"curl -s http://127.0.0.1:{PORT}/ready").stdout)
    assert ready["status"] == "released" and ready["synthesizer"] == "voxcpm", ready
    assert _http(target, "/v1/audio/speech", {"input": "Hello rig."})[0] == "503"
    assert _http(target, "/reload", {})[0] == "202"
    for _ in range(240):
        ready = json.loads(target.run(f"curl -s http://127.0.0.1:{PORT}/ready").stdout)
        if ready["status"] != "loading":
            break
        time.sleep(0.5)
    assert ready["status"] == "ready" and ready["load_seconds"] > 0, ready
    print(f"\nreal VoxCPM2 reloaded in {ready['load_seconds']} s")
    body = {"input": "Hello rig.", "response_format": "wav"}
    status, headers = _http(target, "/v1/audio/speech", body, f"{WORK}/e.wav")
    assert status == "200" and headers["x-synthesizer"] == "voxcpm", headers
    assert _wav_info(target, f"{WORK}/e.wav")["peak"] > 0
