"""rigup.media's ComfyUI client on captured real traffic: /ws messages and /history answers of
ComfyUI 0.30.0 (--cpu) running rigup's two shipped workflows with tiny checkpoints
(tests/fixtures/media/*/ws.jsonl, history.json; output.png / output.mp4 are the files it wrote),
and its WebSocket framing against a local socket pair."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path

import pytest

from rigup.media import comfyui, container, websocket

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "media"


def _capture(name: str) -> tuple[str, dict, list[tuple[float, dict]]]:
    history = json.loads((FIXTURES / name / "history.json").read_text())
    messages = [
        (r["t"], r["msg"])
        for r in map(json.loads, (FIXTURES / name / "ws.jsonl").read_text().splitlines())
    ]
    (prompt_id,) = history
    return prompt_id, history, messages


def test_flux2_history_is_a_success_with_its_png():
    prompt_id, history, _ = _capture("flux2-tiny")
    status, outputs, error = comfyui.outcome(prompt_id, history)
    assert (status, error) == ("success", None)
    assert outputs == [
        {
            "node": "save",
            "kind": "images",
            "filename": "flux2-dev_00001_.png",
            "subfolder": "rigup",
            "type": "output",
        }
    ]


def test_ltx_history_lists_the_mp4_savevideo_wrote():
    prompt_id, history, _ = _capture("ltx-tiny")
    status, outputs, error = comfyui.outcome(prompt_id, history)
    assert status == "success" and error is None
    assert [(o["node"], o["filename"]) for o in outputs] == [("save", "ltx-2.3_00001_.mp4")]


@pytest.mark.parametrize(
    ("name", "node", "node_type", "message"),
    [
        (
            "ltx-error-vocoder",
            "decode_audio",
            "LTXVAudioVAEDecode",
            "non-empty 2D or 4D weight tensor expected",
        ),
        ("ltx-error-connector", "sample", "SamplerCustomAdvanced", "Sizes of tensors must match"),
    ],
)
def test_an_execution_error_names_comfyuis_node_and_exception(name, node, node_type, message):
    prompt_id, history, _ = _capture(name)
    status, outputs, error = comfyui.outcome(prompt_id, history)
    assert status == "error" and outputs == []
    assert (error["node_id"], error["node_type"], error["exception_type"]) == (
        node,
        node_type,
        "RuntimeError",
    )
    assert error["exception_message"].startswith(message)


def test_a_prompt_missing_from_history_is_an_error():
    _, history, _ = _capture("flux2-tiny")
    with pytest.raises(comfyui.ComfyUIError, match="not in ComfyUI's /history"):
        comfyui.outcome("no-such-prompt", history)


def test_step_timings_from_progress_messages():
    # flux2-tiny ws.jsonl: executing "sample" at 7.2263 s, progress 1/2 at 8.3701, 2/2 at 8.9778
    prompt_id, _, messages = _capture("flux2-tiny")
    assert comfyui.step_timings(messages, prompt_id) == {
        "nodes": {"sample": {"steps": 2, "first_step_s": 1.1438, "s_per_step": 0.6077}}
    }
    # ltx-tiny: executing 9.2846, progress 16.7128, 18.7371
    prompt_id, _, messages = _capture("ltx-tiny")
    assert comfyui.step_timings(messages, prompt_id)["nodes"]["sample"] == {
        "steps": 2,
        "first_step_s": 7.4282,
        "s_per_step": 2.0243,
    }


def test_step_timings_skip_other_prompts_progress():
    prompt_id, _, messages = _capture("flux2-tiny")
    other = [
        (t, {**m, "data": {**m["data"], "prompt_id": "other"}})
        for t, m in messages
        if m["type"] == "progress"
    ]
    assert comfyui.step_timings(other, prompt_id) == {"nodes": {}}


def test_the_outputs_are_what_the_workflow_asked_for():
    assert container.png_size((FIXTURES / "flux2-tiny" / "output.png").read_bytes()) == (64, 64)
    video, audio = container.mp4_tracks((FIXTURES / "ltx-tiny" / "output.mp4").read_bytes())
    assert (
        video["handler"],
        video["codec"],
        video["width"],
        video["height"],
        video["samples"],
    ) == ("vide", "avc1", 64, 64, 9)
    assert video["duration"] / video["timescale"] == pytest.approx(9 / 25)
    assert (audio["handler"], audio["codec"], audio["channels"], audio["sample_rate"]) == (
        "soun",
        "mp4a",
        2,
        48000,
    )


def test_container_refuses_other_formats():
    with pytest.raises(container.ContainerError, match="not a PNG"):
        container.png_size((FIXTURES / "ltx-tiny" / "output.mp4").read_bytes())
    with pytest.raises(container.ContainerError):
        container.mp4_tracks((FIXTURES / "flux2-tiny" / "output.png").read_bytes())


def test_accept_key_is_rfc6455s_example():
    assert (
        websocket.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    )  # RFC 6455 1.3


def _server_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack(">H", n)
    else:
        head += bytes([127]) + struct.pack(">Q", n)
    return head + payload


def _unmask(frame: bytes) -> tuple[int, bytes]:
    assert frame[1] & 0x80, "client frames must be masked"
    n, mask = frame[1] & 0x7F, frame[2:6]
    return frame[0] & 0x0F, bytes(b ^ mask[i % 4] for i, b in enumerate(frame[6 : 6 + n]))


def test_websocket_frames_text_binary_fragments_ping_and_close():
    a, b = socket.socketpair()
    ws = websocket.WebSocket(a)
    big = json.dumps({"type": "progress", "data": {"value": 1, "pad": "x" * 70000}}).encode()
    b.sendall(
        _server_frame(websocket.OP_TEXT, b'{"type": "status"}')
        + _server_frame(websocket.OP_BIN, b"\x00\x01preview")
        + _server_frame(websocket.OP_PING, b"hi")
        + _server_frame(websocket.OP_TEXT, big[:100], fin=False)
        + _server_frame(websocket.OP_CONT, big[100:])
        + _server_frame(websocket.OP_CLOSE, struct.pack(">H", 1000))
    )
    assert ws.recv() == '{"type": "status"}'
    assert ws.recv() == b"\x00\x01preview"
    assert json.loads(ws.recv())["data"]["value"] == 1
    assert _unmask(b.recv(8)) == (websocket.OP_PONG, b"hi")
    assert ws.recv() is None
    assert _unmask(b.recv(8)) == (websocket.OP_CLOSE, struct.pack(">H", 1000))
    a.close(), b.close()


def test_encode_frame_lengths_and_mask():
    for n in (5, 300, 70000):
        frame = websocket.encode_frame(websocket.OP_TEXT, b"a" * n, mask=b"\x01\x02\x03\x04")
        assert frame[0] == 0x81 and frame[1] & 0x80
        head = {5: 2, 300: 4, 70000: 10}[n]
        body = frame[head + 4 :]
        assert (
            len(body) == n
            and bytes(x ^ b"\x01\x02\x03\x04"[i % 4] for i, x in enumerate(body)) == b"a" * n
        )


def _result(name: str) -> comfyui.Result:
    prompt_id, history, messages = _capture(name)
    status, outputs, error = comfyui.outcome(prompt_id, history)
    timings = {**comfyui.step_timings(messages, prompt_id), "total_s": messages[-1][0]}
    return comfyui.Result(prompt_id, status, outputs, error, timings, messages)


def test_bench_figures_of_an_image_and_a_clip():
    from rigup.media import bench

    image = bench.figures(
        "flux2-1024", {"width": 64, "height": 64, "steps": 2}, _result("flux2-tiny")
    )
    assert image == {
        "row": "flux2-1024", "status": "success", "total_s": 11.9416,
        "steps": 2, "s_per_step": 0.6077, "first_step_s": 1.1438,
    }  # fmt: skip
    clip = bench.figures("ltx2.3-clip", {"frames": 9, "fps": 25, "steps": 2}, _result("ltx-tiny"))
    # 9 frames at 25 fps = 0.36 s of video; the run took 24.2868 s (its last /ws message)
    assert (clip["video_s"], clip["s_per_video_s"], clip["s_per_step"]) == (0.36, 67.463, 2.0243)
    failed = bench.figures("ltx2.3-clip", {"frames": 9, "fps": 25}, _result("ltx-error-vocoder"))
    assert failed["status"] == "error" and "s_per_video_s" not in failed
    assert failed["error"]["node_type"] == "LTXVAudioVAEDecode"
