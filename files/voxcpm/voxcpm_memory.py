"""The speech server's release and reload routes: the model leaves the GPU and comes back while
the server stays up, as ComfyUI's ``POST /free`` (``{"unload_models": true, "free_memory":
true}``) does for its models. rigup's mode switch calls them (rigup/media/free.py, ``rigup-free
speech``) instead of stopping the service.

    POST /release   waits for the synthesis under way, frees the model (VRAM), answers 200
                    {"status": "released", "released_seconds": s, "freed": {...}}; again: the same
                    200 (nothing to free). While loading: 409.
    POST /reload    loads the model again in the background: 202 {"status": "loading"}, then
                    GET /ready answers 200 once it is loaded; already loaded: 200 {"status":
                    "ready"}; already loading: 202.

While released, GET /ready answers 503 with ``"status": "released"`` (not ready for speech;
the process is healthy: GET /health stays 200), and a speech request 503 ``model_released``
with Retry-After. Both routes sit behind the API key as /v1/* does (voxcpm_server.py
``require_api_key``: :data:`ADMIN_PATHS`)."""

from __future__ import annotations

import logging
import threading
import time

from fastapi import FastAPI
from fastapi.responses import JSONResponse

log = logging.getLogger("voxcpm_server")

#: the routes of this module, guarded by the API key like /v1/*
ADMIN_PATHS = ("/release", "/reload")


def add_memory_routes(app: FastAPI, synthesizer, state, generate_lock: threading.Lock, load):
    """``POST /release`` and ``POST /reload`` (module docstring). ``state``: the server's
    ``ServiceState`` (``status``: loading, ready, failed, released); ``generate_lock``: the lock
    every synthesis holds, so a release waits for the one under way; ``load``: the server's
    loader (sets ``state`` to ready or failed)."""
    switch = threading.Lock()  # one release or reload decides at a time

    @app.post("/release")
    def release():
        with switch:
            if state.status == "loading":
                body = {"status": "loading", "error": "the model is loading; release it after"}
                return JSONResponse(body, 409)
            if state.status == "released":
                return {"status": "released", "released_seconds": 0.0, "freed": {}}
            started = time.monotonic()
            with generate_lock:
                state.status = "released"
                freed = synthesizer.release()
            seconds = round(time.monotonic() - started, 3)
            state.load_seconds, state.error = None, None
            log.info("%s model released in %.2f s %s", synthesizer.name, seconds, freed)
            return {"status": "released", "released_seconds": seconds, "freed": freed}

    @app.post("/reload")
    def reload():
        with switch:
            if state.status == "ready":
                return {"status": "ready", "load_seconds": state.load_seconds}
            if state.status == "loading":
                return JSONResponse({"status": "loading"}, 202)
            state.status, state.error = "loading", None
            threading.Thread(target=load, name="reload-synthesizer", daemon=True).start()
            return JSONResponse({"status": "loading"}, 202)
