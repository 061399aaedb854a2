"""Signatures of the media mode's journals: ComfyUI's (``journalctl -u comfyui``, source
``comfyui-log``) and rigup's VoxCPM2 speech server's (``journalctl -u voxcpm``, ``voxcpm-log``),
with fixes in THEIR settings (comfyui_*, voxcpm_*); :func:`classify_service_log` reads any
unit's journal with its own source.

Both services stay up when one workflow or request fails (ComfyUI logs the error and waits for the
next prompt), so a failure in the current run's journal is what tells that something is wrong.

Sources: ComfyUI's own messages (execution.py "!!! Exception during processing !!!",
comfy/model_management.py "Got an OOM, unloading all loaded models.", nodes.py "Cannot import
... module for custom nodes"); PyTorch's torch.OutOfMemoryError and load_state_dict's "size
mismatch for"; Comfy-Org/ComfyUI#12047 (LTX-2.3's text encoder out of memory on an RTX 3090,
``--novram`` works), intel/llm-scaler#358 (an older ComfyUI loading LTX-2.3: "size mismatch for
adaln_single.linear.bias"), ComfyUI PR #12773 (LTX-2.3 support, merged 2026-03-05); rigup's
files/voxcpm/voxcpm_server.py (its log lines and exit messages).
"""

from __future__ import annotations

from typing import Any

from .comfyui_jobs import classify_jobs
from .core import FAIL, WARN, Signature, Verdict, classify_lines

#: torch.OutOfMemoryError, as the traceback ends and as ComfyUI's execution.py announces it.
_OOM = (
    r"(?:OutOfMemoryError: |!!! Exception during processing !!! )(?:CUDA out of memory\. Tried "
    r"to allocate (?P<size>[\d.]+ [KMG]iB)|Allocation on device)"
)
_PORT = r"\[Errno 98\] .*[Aa]ddress already in use"


def _where(f: dict[str, Any]) -> dict[str, str]:
    size = f" (tried to allocate {f['size']})" if f.get("size") else ""
    part = f.get("connector") or f.get("module")
    ltx = bool(f.get("connector")) or "lightricks" in str(f.get("module") or "")
    return {
        "size_words": size,
        "where": f" in {part}" if part else "",
        "known": "; LTX-2.3's text encoder (Gemma 3 12B) and its audio embeddings connector "
        "run out on a 24 GB card (Comfy-Org/ComfyUI#12047)"
        if ltx
        else "",
    }


_COMFYUI_LOG: list[Signature] = [
    Signature(
        id="comfyui-oom",
        source="comfyui-log",
        severity=FAIL,
        what="ComfyUI ran out of GPU memory running a workflow{size_words}{where}",
        why="the workflow failed and ComfyUI stays up waiting for the next one: its models and "
        "their activations do not fit on the card next to what ComfyUI leaves free "
        "(comfyui_reserve_vram_gib){known}",
        fix='comfyui_extra_args = ["--novram"] (weights stay in system memory and each layer '
        'moves to the GPU when it runs; it works for #12047) or ["--lowvram"], then converge; '
        "a smaller model file (an fp8 or GGUF text encoder) also fits",
        pattern=_OOM,
        context={
            "connector": r"\b(\w*embeddings_connector)\b",
            "module": r'comfy/((?:ldm|text_encoders)/[\w/]+)\.py", line \d+'
            r'(?![\s\S]*comfy/(?:ldm|text_encoders)/[\w/]+\.py")',
        },
        derive=_where,
        reference="Comfy-Org/ComfyUI#12047; PyTorch CUDACachingAllocator.cpp; ComfyUI "
        "comfy/model_management.py ('Allocation on device')",
    ),
    Signature(
        id="comfyui-model-mismatch/ltx-2.3",
        source="comfyui-log",
        severity=FAIL,
        what="this ComfyUI release cannot load LTX-2.3 (size mismatch for {param})",
        why="its LTX model class has LTX-2's shapes: ComfyUI learnt LTX-2.3 in PR #12773 "
        "(merged 2026-03-05), and comfyui_release names an older release "
        "(intel/llm-scaler#358)",
        fix="set comfyui_release to a ComfyUI release made after 2026-03-05 (one that contains "
        "PR #12773; its lock in files/comfyui/releases), then converge",
        pattern=r"size mismatch for (?P<param>[\w.]*adaln_single\.[\w.]+)",
        reference="intel/llm-scaler#358; ComfyUI PR #12773",
    ),
    Signature(
        id="comfyui-model-mismatch",
        source="comfyui-log",
        severity=FAIL,
        what="ComfyUI cannot load a model file: size mismatch for {param}",
        why="the file's tensors have other shapes than this ComfyUI release's model class: a "
        "model newer than the release (checkpoint {ckpt}, ComfyUI {model}), or a file for "
        "another model in the workflow's loader",
        fix="a model newer than the release needs a newer comfyui_release (then converge); "
        "otherwise pick the file the workflow was made for",
        pattern=r"size mismatch for (?P<param>[\w.]+): copying a param with shape "
        r"(?P<ckpt>torch\.Size\(\[[\d, ]*\]\)) from checkpoint, the shape in current model is "
        r"(?P<model>torch\.Size\(\[[\d, ]*\]\))",
        reference="PyTorch torch/nn/modules/module.py load_state_dict ('size mismatch for')",
    ),
    Signature(
        id="comfyui-custom-node",
        source="comfyui-log",
        severity=WARN,
        what="ComfyUI could not import the custom node {node}",
        why="its module raised while ComfyUI imported it (a missing package or a node written "
        "for another ComfyUI release); its nodes are missing from workflows",
        fix="install its requirements into ComfyUI's venv or remove it from custom_nodes/ "
        "(comfyui_base_dir); `journalctl -u comfyui` shows the error above this line",
        pattern=r"Cannot import (?P<node>\S+) module for custom nodes",
        reference="ComfyUI nodes.py load_custom_node",
    ),
    Signature(
        id="comfyui-bad-argument",
        source="comfyui-log",
        severity=FAIL,
        what="ComfyUI's argument parser refused the command line",
        why="{error}",
        fix="rigup checks comfyui_extra_args with the pinned ComfyUI's parser at converge: a unit "
        "edited by hand is restored by converging; a setting: fix comfyui_extra_args",
        pattern=r"main\.py: error: (?P<error>.+)",
        reference="ComfyUI comfy/cli_args.py (argparse)",
    ),
    Signature(
        id="comfyui-port-in-use",
        source="comfyui-log",
        severity=FAIL,
        what="ComfyUI could not listen on its port",
        why="'Address already in use': another process holds comfyui_port",
        fix="`ss -ltnp` names the process; stop it or change comfyui_port, then converge",
        pattern=_PORT,
        reference="Linux EADDRINUSE (errno 98)",
    ),
]

_VOXCPM_LOG: list[Signature] = [
    Signature(
        id="voxcpm-oom",
        source="voxcpm-log",
        severity=FAIL,
        what="VoxCPM2 ran out of GPU memory{size_words}",
        why="VoxCPM2 needs about voxcpm_vram_gib on its card (voxcpm_gpu_index) and less was "
        "free: another process on that card (ComfyUI when comfyui_gpu_index is the same, a "
        "desktop session) or torch.compile's extra memory (voxcpm_torch_compile)",
        fix="give VoxCPM2 a card of its own (voxcpm_gpu_index other than comfyui_gpu_index), "
        "check `nvidia-smi` for other processes, or voxcpm_torch_compile = False; then converge",
        pattern=_OOM,
        derive=lambda f: {
            "size_words": f" (tried to allocate {f['size']})" if f.get("size") else ""
        },
        reference="PyTorch CUDACachingAllocator.cpp; voxcpm 2.0.3 README ('VRAM ~8 GB')",
    ),
    Signature(
        id="voxcpm-model-dir",
        source="voxcpm-log",
        severity=FAIL,
        what="the speech server found no VoxCPM2 checkpoint: {problem}",
        why="it checks the model directory before loading (config.json must say architecture "
        "voxcpm2) and exits",
        fix="place the model again (voxcpm_model_manifest; deploys/model.py), then converge",
        pattern=r"voxcpm_server: (?P<problem>\S*config\.json (?:does not exist|is not a JSON "
        r"object|says architecture).*)",
        reference="files/voxcpm/voxcpm_server.py check_model_dir",
    ),
    Signature(
        id="voxcpm-load-failed",
        source="voxcpm-log",
        severity=FAIL,
        what="VoxCPM2 failed to load",
        why="the synthesizer raised while loading; the traceback below this line ends with the "
        "error (a broken venv, a partial model copy, a GPU error)",
        fix="converge (it re-syncs the venv against files/voxcpm/requirements.lock and checks "
        "the placed model); `journalctl -u voxcpm -n 200` shows the error",
        pattern=r"loading the (?P<synth>\S+) synthesizer failed",
        reference="files/voxcpm/voxcpm_server.py (log.exception at load)",
    ),
    Signature(
        id="voxcpm-synthesis-failed",
        source="voxcpm-log",
        severity=WARN,
        what="a speech request failed in VoxCPM2 (the server stays up)",
        why="the synthesizer raised on a request and answered 500; the traceback below this line "
        "ends with the error",
        fix="read the error; an out-of-memory error is named on its own line; a request with a "
        "reference recording: check <voices dir>/<name>.wav",
        pattern=r"synthesis failed$",
        reference="files/voxcpm/voxcpm_server.py (log.exception per request)",
    ),
    Signature(
        id="voxcpm-port-in-use",
        source="voxcpm-log",
        severity=FAIL,
        what="the speech server could not listen on its port",
        why="'Address already in use': another process holds voxcpm_port",
        fix="`ss -ltnp` names the process; stop it or change voxcpm_port, then converge",
        pattern=_PORT,
        reference="Linux EADDRINUSE (errno 98)",
    ),
]


def _with_jobs(verdicts: list[Verdict], text: str | None) -> list[Verdict]:
    """ComfyUI's line verdicts and its failed jobs (:func:`classify_jobs`), one verdict per
    kind of failed job with every job's lines as evidence; an out-of-memory line inside a job
    whose cause was named first (a failed weight stream that ends in an OOM) is that job's."""
    merged: dict[tuple[str, str], Verdict] = {}
    named: list[str] = []
    for v, job in classify_jobs(text):
        named.append("\n".join(job.lines))
        key = (v.id, v.what)
        old = merged.get(key)
        evidence = old.evidence + v.evidence[-1:] if old else v.evidence
        merged[key] = Verdict(**{**v.__dict__, "evidence": evidence})

    def inside(line: str) -> bool:
        return any(line.split("!!! ", 1)[-1] in block for block in named)

    kept = [v for v in verdicts if not (v.id == "comfyui-oom" and all(map(inside, v.evidence)))]
    return kept + list(merged.values())


def classify_service_log(source: str, text: str | None) -> list[Verdict]:
    """What a media service's journal says (``source``: comfyui-log or voxcpm-log), failures
    first; ComfyUI's with each failed job (its exception block) named by its node and its last
    exception."""
    order = {FAIL: 0, WARN: 1}
    verdicts = classify_lines(source, text)[0]
    if source == "comfyui-log":
        verdicts = _with_jobs(verdicts, text)
    return sorted(verdicts, key=lambda v: order.get(v.severity, 2))
