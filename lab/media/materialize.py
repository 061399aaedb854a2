"""Seeded random values for a ComfyUI module's state dict, streamed as safetensors entries.

A module built on the ``meta`` device has shapes but no values; :func:`entries` turns each of
its state-dict tensors into a :class:`lab.media.safetensors_out.Entry` whose bytes are produced
on ``device`` only when written. Values: parameters of two or more dimensions are normal with
std 1/sqrt(fan_in) (fan_in = numel / shape[0]); one-dimensional parameters named like norm
scales and activation alpha/beta (:func:`unit_params`) are ones,
other one-dimensional parameters (biases) zeros; buffers of learned statistics get neutral values
(:data:`BUFFER_FILL`), other buffers keep the value ComfyUI's own module computed (the module is
instantiated on a real device when it has buffers).

Linear weights listed in ``fp8`` are written the way ComfyUI's mixed-precision loader reads them
(comfy/ops.py, format "float8_e4m3fn" of comfy/quant_ops.py QUANT_ALGOS): ``<layer>.weight``
float8_e4m3fn, ``<layer>.weight_scale`` float32 scalar (max |w| / 448, 448 = the largest
e4m3fn value), ``<layer>.comfy_quant`` the UTF-8 bytes of ``{"format": "float8_e4m3fn"}``.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from lab.media import safetensors_out
from lab.media.safetensors_out import Entry

#: torch dtype name -> safetensors dtype name
ST_DTYPE = {
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "float8_e4m3fn": "F8_E4M3",
    "int64": "I64",
    "int32": "I32",
    "uint8": "U8",
    "bool": "BOOL",
}
FP8_MAX = 448.0  # largest finite float8_e4m3fn
#: one-dimensional parameters that are ones: a norm's scale (in a module whose class name has
#: "Norm": GroupNorm, LayerNorm, RMSNorm, ...), an activation's alpha / beta (Snake, SnakeBeta)
NORM_PARAMS = ("weight", "scale", "gamma")
ACTIVATION_PARAMS = ("alpha", "beta")
#: buffers that hold learned statistics, which ComfyUI allocates with torch.empty (garbage until
#: a file fills them): name suffix -> the neutral value written (unit std, zero mean / shift).
#: Other buffers keep the value ComfyUI's module computed (vocoder filters, windows).
BUFFER_FILL = {
    "std-of-means": 1.0,
    "mean-of-means": 0.0,
    "running_var": 1.0,
    "running_mean": 0.0,
    "scale_shift_table": 0.0,
}


def unit_params(module) -> set[str]:
    """State-dict names of the one-dimensional parameters that are ones: norm scales (except a
    norm that adds 1 itself: ComfyUI's RMSNorm with ``add`` True, as Gemma's, is zeros) and
    activation alpha/beta."""
    out = set()
    for path, m in module.named_modules():
        prefix = f"{path}." if path else ""
        for pname, p in m.named_parameters(recurse=False):
            if p.dim() != 1:
                continue
            is_norm = (
                "Norm" in type(m).__name__ and pname in NORM_PARAMS and not getattr(m, "add", False)
            )
            if is_norm or pname in ACTIVATION_PARAMS:
                out.add(prefix + pname)
    return out


def _bytes(t) -> bytes:
    import torch

    return t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()


def _value(name: str, shape: tuple[int, ...], device: str, seed: int, ones: bool):
    import torch

    gen = torch.Generator(device=device).manual_seed(
        (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)
    )
    if len(shape) >= 2:
        fan_in = max(1, int(torch.tensor(shape[1:]).prod().item()))
        return torch.randn(shape, generator=gen, device=device) / fan_in**0.5
    if ones:
        return torch.ones(shape, device=device)
    return torch.zeros(shape, device=device)


def linear_weights(module) -> set[str]:
    """Names (``<module path>.weight``) of every torch.nn.Linear's weight in ``module``."""
    import torch

    return {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, torch.nn.Linear)}


def entries(
    module,
    prefix: str,
    *,
    dtype: str,
    device: str,
    seed: int,
    fp8: Callable[[str], bool] = lambda name: False,
    nvfp4: Callable[[str], bool] = lambda name: False,
    ones: Callable[[str], bool] | None = None,
    skip: Iterable[str] = (),
) -> list[Entry]:
    """Entries for ``module.state_dict()``, names prefixed with ``prefix``.

    ``dtype``: torch dtype name for floating tensors ("bfloat16", "float32", ...); integer and
    bool buffers keep theirs. ``fp8(name)`` selects Linear weights to store as float8_e4m3fn,
    ``nvfp4(name)`` as NVFP4 (only names in :func:`linear_weights`). ``ones(name)`` overrides which one-dimensional
    parameters are ones. ``skip``: state-dict names to leave out.
    """
    import torch

    params = {n for n, _ in module.named_parameters()}
    linears = linear_weights(module)
    skipped = set(skip)
    units = unit_params(module)
    is_ones = ones or units.__contains__
    out: list[Entry] = []
    for name, t in module.state_dict(keep_vars=True).items():
        if name in skipped:
            continue
        key = prefix + name
        shape = tuple(t.shape)
        if name not in params:  # a buffer: ComfyUI's computed value
            if t.device.type == "meta":
                raise ValueError(
                    f"{key}: buffer on the meta device; build this module on a real device"
                )
            buf = t.detach()
            fill = next((v for suffix, v in BUFFER_FILL.items() if name.endswith(suffix)), None)
            if fill is not None:
                buf = torch.full_like(buf, fill)
            elif buf.is_floating_point() and not bool(torch.isfinite(buf).all()):
                raise ValueError(
                    f"{key}: buffer is not finite (uninitialized?); add it to BUFFER_FILL"
                )
            if buf.is_floating_point():
                buf = buf.to(getattr(torch, dtype))
            out.append(
                Entry(
                    key,
                    shape,
                    ST_DTYPE[str(buf.dtype).removeprefix("torch.")],
                    lambda b=buf: _bytes(b),
                )
            )
            continue
        if name in linears and nvfp4(name) and len(shape) == 2:
            out += _nvfp4_entries(key, shape, device, seed)
            continue
        if name in linears and fp8(name):
            layer = key[: -len(".weight")]

            def q(name=key, shape=shape):
                w = _value(name, shape, device, seed, False)
                return _bytes((w * (FP8_MAX / w.abs().max())).to(torch.float8_e4m3fn))

            def s(name=key, shape=shape):
                w = _value(name, shape, device, seed, False)
                return _bytes((w.abs().max() / FP8_MAX).float())

            conf = torch.tensor(
                list(json.dumps({"format": "float8_e4m3fn"}).encode()), dtype=torch.uint8
            )
            out.append(Entry(key, shape, "F8_E4M3", q))
            out.append(Entry(f"{layer}.weight_scale", (), "F32", s))
            out.append(
                Entry(f"{layer}.comfy_quant", tuple(conf.shape), "U8", lambda c=conf: _bytes(c))
            )
            continue
        want_ones = len(shape) == 1 and is_ones(name)
        out.append(
            Entry(
                key,
                shape,
                ST_DTYPE[dtype],
                lambda n=key, sh=shape, o=want_ones: _bytes(
                    _value(n, sh, device, seed, o).to(getattr(torch, dtype))
                ),
            )
        )
    return out


def _nvfp4_entries(key: str, shape: tuple[int, ...], device: str, seed: int) -> list[Entry]:
    """NVFP4 as ComfyUI stores it (comfy/quant_ops.py TensorCoreNVFP4Layout, quantized by
    ComfyUI's own QuantizedTensor.from_float): ``.weight`` uint8 [out16, in16 / 2] (two e2m1
    values a byte; out16 / in16 = rounded up to 16), ``.weight_scale`` float8_e4m3fn block scales
    [out16 rounded up to 128, in16 / 16 rounded up to 4] (the swizzled layout), ``.weight_scale_2``
    float32 scalar, ``.comfy_quant`` {"format": "nvfp4"}. The layer is quantized once, when its
    weight is written; its scales are taken from that result."""
    import torch

    layer = key[: -len(".weight")]
    out16, in16 = (-(-shape[0] // 16) * 16), (-(-shape[1] // 16) * 16)
    done: dict[str, object] = {}

    def part(suffix: str):
        def produce() -> bytes:
            if not done:
                from comfy.quant_ops import QuantizedTensor

                w = _value(key, shape, device, seed, False).to(torch.bfloat16)
                done.update(
                    QuantizedTensor.from_float(w, "TensorCoreNVFP4Layout").state_dict(
                        f"{layer}.weight"
                    )
                )
            return _bytes(done.pop(f"{layer}.{suffix}"))

        return produce

    conf = torch.tensor(list(json.dumps({"format": "nvfp4"}).encode()), dtype=torch.uint8)
    return [
        Entry(f"{layer}.weight", (out16, in16 // 2), "U8", part("weight")),
        Entry(
            f"{layer}.weight_scale",
            (-(-out16 // 128) * 128, -(-(in16 // 16) // 4) * 4),
            "F8_E4M3",
            part("weight_scale"),
        ),
        Entry(f"{layer}.weight_scale_2", (), "F32", part("weight_scale_2")),
        Entry(f"{layer}.comfy_quant", tuple(conf.shape), "U8", lambda c=conf: _bytes(c)),
    ]


def uint8_entry(name: str, data: bytes) -> Entry:
    """A raw byte payload stored as a U8 tensor (ComfyUI's ``tekken_model`` / ``spiece_model``)."""
    return Entry(name, (len(data),), "U8", lambda: data)


def parameter_count(entries_: Iterable[Entry]) -> int:
    """Parameters the entries hold: the elements of floating-point tensors, plus two per byte of
    an NVFP4 weight (a U8 ``.weight`` with a ``.weight_scale_2`` beside it; counted padded); not
    the quantization scales, U8 payloads (tokenizers, comfy_quant) or integer tensors."""
    import math

    entries_ = list(entries_)
    packed = {e.name[: -len("_scale_2")] for e in entries_ if e.name.endswith(".weight_scale_2")}
    total = 0
    for e in entries_:
        if e.name.endswith((".weight_scale", ".weight_scale_2")):
            continue
        if e.dtype == "U8" and e.name in packed:
            total += 2 * math.prod(e.shape)
        elif e.dtype not in ("U8", "I64", "I32", "BOOL"):
            total += math.prod(e.shape)
    return total


def write_file(
    out: Path,
    rel: str,
    entries: list[Entry],
    metadata: Mapping[str, str] | None = None,
    plan: bool = False,
) -> dict:
    """Write ``entries`` to ``out/rel`` (``plan``: count only); return the file's record
    ``{"path": rel, "bytes", "tensors", "parameters", "seconds"}``."""
    t0 = time.monotonic()
    n = (
        sum(e.nbytes for e in entries)
        if plan
        else safetensors_out.write(out / rel, entries, metadata)
    )
    return {
        "path": rel,
        "bytes": n,
        "tensors": len(entries),
        "parameters": parameter_count(entries),
        "seconds": round(time.monotonic() - t0, 2),
    }
