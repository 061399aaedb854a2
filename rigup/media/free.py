"""Free the GPU memory of the media mode's servers while they stay up, and bring the speech
model back: the calls a mode switch makes instead of stopping the services.

- ComfyUI: ``POST /free`` with ``{"unload_models": true, "free_memory": true}`` (ComfyUI's
  server.py): it answers 200 at once and sets two flags its prompt worker acts on when idle
  (main.py ``prompt_worker``: ``unload_all_models()``, then the executor's caches reset, so the
  next prompt loads every model again). :func:`free_comfyui` reads ``GET /system_stats`` before
  and after and waits until ComfyUI's queue is empty (a running prompt delays the free).
- rigup's speech server: ``POST /release`` (the model leaves the GPU, the server stays up, its
  ``/ready`` says "released") and ``POST /reload`` (loads it again: ``/ready`` 200 when done),
  with its API key (files/voxcpm/voxcpm_memory.py).

Standard library only: it runs on the rig from rigup's package (``rigup-free``, files/doctor).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

#: ComfyUI's body for POST /free: unload every model and reset the caches (ComfyUI's own names)
FREE_BODY = {"unload_models": True, "free_memory": True}


class FreeError(RuntimeError):
    """A server did not free (or reload) as asked: the message says which and why."""


def _call(
    url: str, body: dict | None = None, key: str | None = None, timeout: float = 30.0
) -> tuple[int, dict]:
    """``(status, JSON body or {})`` of a GET (``body`` None) or a JSON POST; an HTTP error
    status is returned, not raised; a refused connection raises :class:`FreeError`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            status, raw = answer.status, answer.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except OSError as e:
        raise FreeError(f"{url}: {e}") from None
    try:
        return status, json.loads(raw) if raw.strip() else {}
    except ValueError:
        return status, {"text": raw.decode(errors="replace")[:500]}


def _device(stats: dict) -> dict:
    devices = stats.get("devices") or [{}]
    return devices[0]


def free_comfyui(url: str, wait_s: float = 60.0, poll_s: float = 0.5) -> dict:
    """POST /free to ComfyUI at ``url`` (``http://127.0.0.1:8188``), then wait (at most
    ``wait_s`` seconds) until its queue is empty, so the worker has acted on the flags.

    Returns ``{"freed": True, "device": "cuda:0 ..."|"cpu", "vram_free_before": bytes,
    "vram_free_after": bytes, "torch_vram_before": bytes, "torch_vram_after": bytes,
    "seconds": s}`` (ComfyUI's /system_stats fields: ``torch_vram_total`` is what torch holds
    on the device). Raises :class:`FreeError` when ComfyUI does not answer 200, or its queue is
    still busy after ``wait_s`` (the free then happens when that prompt ends)."""
    base = url.rstrip("/")
    started = time.monotonic()
    status, before = _call(f"{base}/system_stats")
    if status != 200:
        raise FreeError(f"ComfyUI {base}/system_stats answered {status}: {before}")
    status, answer = _call(f"{base}/free", FREE_BODY)
    if status != 200:
        raise FreeError(f"ComfyUI {base}/free answered {status}: {answer}")
    deadline = started + wait_s
    while True:
        status, queue = _call(f"{base}/queue")
        busy = len(queue.get("queue_running") or []) + len(queue.get("queue_pending") or [])
        if status == 200 and not busy:
            break
        if time.monotonic() > deadline:
            raise FreeError(
                f"ComfyUI {base}: {busy} prompt(s) still queued after {wait_s:.0f} s; the free "
                "happens when they end"
            )
        time.sleep(poll_s)
    time.sleep(poll_s)  # the worker acts on the flags right after the queue empties
    _, after = _call(f"{base}/system_stats")
    dev_before, dev_after = _device(before), _device(after)
    return {
        "freed": True,
        "device": dev_after.get("name") or dev_after.get("type"),
        "vram_free_before": dev_before.get("vram_free"),
        "vram_free_after": dev_after.get("vram_free"),
        "torch_vram_before": dev_before.get("torch_vram_total"),
        "torch_vram_after": dev_after.get("torch_vram_total"),
        "seconds": round(time.monotonic() - started, 3),
    }


def release_speech(url: str, key: str | None = None, timeout: float = 120.0) -> dict:
    """POST /release to rigup's speech server at ``url`` with its API key ``key``: its answer
    (``{"status": "released", "released_seconds": s, "freed": {...}}``) once the model is
    released (a synthesis under way finishes first). Raises :class:`FreeError` otherwise (401:
    wrong key; 409: the model is loading)."""
    base = url.rstrip("/")
    status, answer = _call(f"{base}/release", {}, key, timeout)
    if status != 200 or answer.get("status") != "released":
        raise FreeError(f"speech server {base}/release answered {status}: {answer}")
    return answer


def reload_speech(url: str, key: str | None = None, wait_s: float = 900.0, poll_s=0.5) -> dict:
    """POST /reload to the speech server, then wait (at most ``wait_s`` seconds) for
    ``GET /ready`` to answer 200: ``/ready``'s body plus ``"seconds"`` (the wait). Raises
    :class:`FreeError` when the reload is refused, the load fails or takes longer."""
    base = url.rstrip("/")
    started = time.monotonic()
    status, answer = _call(f"{base}/reload", {}, key)
    if status not in (200, 202):
        raise FreeError(f"speech server {base}/reload answered {status}: {answer}")
    while True:
        status, ready = _call(f"{base}/ready")
        if status == 200:
            return {**ready, "seconds": round(time.monotonic() - started, 3)}
        if ready.get("status") == "failed" or time.monotonic() - started > wait_s:
            raise FreeError(f"speech server {base}: not ready after the reload: {ready}")
        time.sleep(poll_s)


def key_from_env_file(path: str | Path, name: str) -> str | None:
    """The value of ``name`` in a systemd environment file (``NAME=value`` lines, as rigup writes
    the API keys, root-only); None when the file or the line is missing."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == name:
            return value.strip().strip('"')
    return None
