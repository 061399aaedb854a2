"""Run an API-format workflow on ComfyUI through its own API and read back what happened.

:func:`run` posts ``{"prompt": workflow, "client_id": id}`` to ``/prompt``, follows ``/ws?clientId=id``
(ComfyUI sends that client its prompt's ``execution_start``, ``executing``, ``progress``
``{value, max, node}``, ``executed``, ``execution_success`` / ``execution_error`` /
``execution_interrupted``), then reads ``/history/<prompt_id>``, the source of truth for the
status and the outputs. The /ws messages only give the timings (a progress message per sampler
step). Message shapes: ComfyUI 0.30.0 server.py ``send_sync`` callers and execution.py.

The parsers (:func:`outcome`, :func:`step_timings`) are pure, for tests on captured messages.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from rigup.media.websocket import WebSocket

TERMINAL = ("execution_success", "execution_error", "execution_interrupted")


class ComfyUIError(Exception):
    """ComfyUI could not be reached or answered outside its API (the message says which URL)."""


@dataclass
class Result:
    """One workflow run.

    status: "success", "error" (ComfyUI's execution_error or a prompt it refused) or
    "interrupted". outputs: one dict per output file ``{"node", "kind" ("images", "video",
    "audio", ...), "filename", "subfolder", "type"}``. error: None, or ``{"node_id",
    "node_type", "exception_type", "exception_message"}`` for an execution error, or
    ``{"node_errors": {...}, "exception_message": str}`` for a prompt refused by validation.
    timings: :func:`step_timings` plus ``total_s`` (post to terminal message, s).
    """

    prompt_id: str | None
    status: str
    outputs: list[dict] = field(default_factory=list)
    error: dict | None = None
    timings: dict = field(default_factory=dict)
    messages: list[tuple[float, dict]] = field(default_factory=list)


def outcome(prompt_id: str, history: dict) -> tuple[str, list[dict], dict | None]:
    """(status, outputs, error) from ``GET /history/<prompt_id>``'s JSON.

    ``history[prompt_id]["status"]`` is ``{"status_str": "success"|"error", "completed": bool,
    "messages": [[type, data], ...]}``; ``["outputs"][node_id]`` maps a kind ("images",
    "video", "audio", "animated", "text") to a list of file dicts (filename, subfolder, type) or
    values. Raises ComfyUIError when the prompt is not in the history (not run, or purged).
    """
    entry = history.get(prompt_id)
    if entry is None:
        raise ComfyUIError(f"prompt {prompt_id} is not in ComfyUI's /history")
    st = entry.get("status") or {}
    status = st.get("status_str") or ("success" if st.get("completed") else "error")
    error = None
    for kind, data in st.get("messages", []):
        if kind == "execution_error":
            error = {
                k: data.get(k)
                for k in ("node_id", "node_type", "exception_type", "exception_message")
            }
        elif kind == "execution_interrupted":
            status = "interrupted"
    outputs = []
    for node, kinds in (entry.get("outputs") or {}).items():
        for kind, items in kinds.items():
            for item in items if isinstance(items, list) else []:
                if isinstance(item, dict) and "filename" in item:
                    outputs.append(
                        {
                            "node": node,
                            "kind": kind,
                            **{k: item.get(k) for k in ("filename", "subfolder", "type")},
                        }
                    )
    return status, outputs, error


def step_timings(messages: list[tuple[float, dict]], prompt_id: str) -> dict:
    """Seconds per sampler step from /ws ``progress`` messages ``(t, message)`` (t in s, any
    origin) of ``prompt_id``: ``{"nodes": {node: {"steps": max, "s_per_step": mean of the
    intervals between successive progress values (None with fewer than two), "first_step_s":
    from the node's ``executing`` to its first progress}}}``. Progress messages of other
    prompts (ComfyUI sends them to every client when a node forgets the prompt id) are skipped
    when they name another prompt."""
    nodes: dict[str, dict] = {}
    started: dict[str, float] = {}
    last: dict[str, tuple[int, float]] = {}
    for t, msg in messages:
        data = msg.get("data") or {}
        if data.get("prompt_id") not in (None, prompt_id):
            continue
        if msg.get("type") == "executing" and data.get("node") is not None:
            started[data["node"]] = t
        elif msg.get("type") == "progress":
            node = data.get("node")
            rec = nodes.setdefault(node, {"steps": data.get("max"), "intervals": []})
            rec["steps"] = data.get("max")
            if node in last and data.get("value", 0) > last[node][0]:
                rec["intervals"].append((t - last[node][1]) / (data["value"] - last[node][0]))
            elif node not in last and node in started:
                rec["first_step_s"] = round(t - started[node], 4)
            last[node] = (data.get("value", 0), t)
    out = {}
    for node, rec in nodes.items():
        iv = rec.pop("intervals")
        rec["s_per_step"] = round(sum(iv) / len(iv), 4) if iv else None
        out[node] = rec
    return {"nodes": out}


def _http(url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json"} if data else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            raise ComfyUIError(f"{url}: HTTP {e.code}: {raw[:300]!r}") from e
    except (urllib.error.URLError, OSError) as e:
        raise ComfyUIError(f"{url}: {e}") from e


def run(
    base_url: str,
    workflow: dict,
    *,
    timeout: float = 3600.0,
    clock: Callable[[], float] = time.monotonic,
    client_id: str | None = None,
    history_wait: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Result:
    """Submit ``workflow`` (API format) to ComfyUI at ``base_url`` (http://host:port) and wait
    for it; return its :class:`Result`. A workflow ComfyUI refuses (HTTP 400, its node_errors)
    is a Result with status "error", not an exception. Raises ComfyUIError when ComfyUI cannot
    be reached, TimeoutError when no terminal message comes within ``timeout`` s; ComfyUIError
    when the history has no entry ``history_wait`` s after it."""
    u = urllib.parse.urlsplit(base_url)
    client_id = client_id or uuid.uuid4().hex
    ws = WebSocket.connect(
        u.hostname or "127.0.0.1",
        u.port or 80,
        f"/ws?clientId={client_id}",
        timeout=min(timeout, 60.0),
    )
    messages: list[tuple[float, dict]] = []
    try:
        t0 = clock()
        code, answer = _http(f"{base_url}/prompt", {"prompt": workflow, "client_id": client_id})
        if code != 200 or "prompt_id" not in answer:
            err = answer.get("error") or {}
            return Result(
                None,
                "error",
                error={
                    "exception_message": err.get("message", str(answer)),
                    "node_errors": answer.get("node_errors", {}),
                },
                timings={"total_s": round(clock() - t0, 3)},
            )
        prompt_id = answer["prompt_id"]
        done = None
        while done is None:
            if clock() - t0 > timeout:
                raise TimeoutError(f"ComfyUI prompt {prompt_id}: no result within {timeout} s")
            raw = ws.recv()
            if raw is None:
                raise ComfyUIError(f"{base_url}/ws closed before prompt {prompt_id} finished")
            if isinstance(raw, bytes):
                continue  # a latent preview image
            msg = json.loads(raw)
            messages.append((clock() - t0, msg))
            data = msg.get("data") or {}
            if msg.get("type") in TERMINAL and data.get("prompt_id") == prompt_id:
                done = msg["type"]
        total = messages[-1][0]
    finally:
        ws.close()
    # ComfyUI sends the terminal message before its prompt worker files the history entry
    # (main.py prompt_worker: execute, then PromptQueue.task_done): poll until it is there.
    deadline = clock() + history_wait
    while True:
        _, history = _http(f"{base_url}/history/{urllib.parse.quote(prompt_id)}")
        if prompt_id in history or clock() > deadline:
            break
        sleep(0.1)
    status, outputs, error = outcome(prompt_id, history)
    timings = step_timings(messages, prompt_id)
    timings["total_s"] = round(total, 3)
    return Result(prompt_id, status, outputs, error, timings, messages)
