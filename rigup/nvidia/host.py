"""On the host: the tools' runs, shared by rigup-gpu-power, rigup-nvlink and
rigup-nvidia-diagnose (a ``runner`` is ``argv -> (exit status, output)``)."""

from __future__ import annotations

from rigup import units

from .driver import DRIVER_KINDS, DRIVER_STATE_COMMAND, explain, parse_driver_state
from .gpus import GPU_QUERY_FIELDS, GPU_QUERY_FORMAT, GpuQuery, read_gpu_query


def run(argv: list[str], timeout: float = 120) -> tuple[int, str]:
    """Run a command; ``(exit status, stdout + stderr)``: :func:`rigup.units.run` with the
    NVIDIA tools' default timeout of 120 s. A missing program is status 127 and a timeout 124,
    never an exception."""
    return units.run(argv, timeout)


def driver_state(runner=run, command: str = DRIVER_STATE_COMMAND) -> dict:
    """:func:`parse_driver_state` of ``command`` (:data:`DRIVER_STATE_COMMAND`) run through
    ``runner``."""
    _, out = runner(["sh", "-c", command])
    return parse_driver_state(out.splitlines())


def query_gpus(
    runner=run, smi: str = "nvidia-smi", state_command: str = DRIVER_STATE_COMMAND
) -> GpuQuery:
    """``nvidia-smi --query-gpu`` through ``runner``, read by :func:`read_gpu_query`. When it
    fails for a driver reason ("couldn't communicate with the NVIDIA driver"), the driver state
    names the cause: one "the NVIDIA kernel module is not loaded" verdict with it."""
    code, out = runner([smi, f"--query-gpu={','.join(GPU_QUERY_FIELDS)}", GPU_QUERY_FORMAT])
    query = read_gpu_query(out, code)
    if any(v.kind in DRIVER_KINDS for v in query.failed):
        state = driver_state(runner, state_command)
        query = GpuQuery(query.gpus, explain(query.verdicts, state), code)
    return query
