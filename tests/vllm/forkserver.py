"""Run many short scripts under the pinned vLLM's python with vLLM imported once.

tests/vllm runs files/vllm/check_args.py and its siblings about forty times, each a fresh
``python script.py ARGS`` that spends most of its time importing vLLM and torch (about 20 CPU
seconds each on a CI-sized machine: most of tests/vllm's time). :func:`run_all` starts this file
under that python once per distinct environment; it imports the modules the scripts import
(:data:`WARM`), then forks one child per job, and each child runs its script as ``python
script.py ARGS`` would (``__main__``, ``sys.argv``, the script's folder first on ``sys.path``, its
own working directory, environment, stdout and stderr, its exit status). What a script computes is
unchanged; only the import is shared. The environment is fixed before the import (a server per
distinct environment), because libraries read some variables when imported (huggingface_hub's
``HF_HUB_OFFLINE``).

This file is standard-library only: the server side runs under the pinned vLLM's python, the
client side under the controller's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: what check_args.py, text_only.py and the probes import: imported once, before the forks
WARM = (
    "vllm.engine.arg_utils",
    "vllm.entrypoints.cli.serve",
    "vllm.config",
    "vllm.transformers_utils.config",
)


@dataclass(frozen=True)
class Job:
    """One ``python ARGV...`` run: ``argv`` is a script path and its arguments, or ``-c CODE
    ARGS``; ``cwd`` its working directory; ``env`` its whole environment."""

    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]


def run_all(
    python: str, jobs: dict[str, Job], workers: int, timeout_s: int = 600
) -> dict[str, tuple[int, str, str]]:
    """Run ``jobs`` under ``python`` (the pinned vLLM's), at most ``workers`` at once per
    environment. Returns ``{name: (exit status, stdout, stderr)}``; a job past ``timeout_s`` is
    killed (status -9). Raises RuntimeError when a server itself fails (vLLM not importable)."""
    groups: dict[tuple[tuple[str, str], ...], dict[str, Job]] = {}
    for name, job in jobs.items():
        groups.setdefault(job.env, {})[name] = job
    results: dict[str, tuple[int, str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="rigup-forkserver-") as tmp:
        procs = []
        for i, (env, group) in enumerate(groups.items()):
            spec = Path(tmp) / f"jobs-{i}.json"
            spec.write_text(
                json.dumps(
                    {
                        "workers": workers,
                        "timeout_s": timeout_s,
                        "out": str(Path(tmp) / f"out-{i}"),
                        "jobs": {n: {"argv": j.argv, "cwd": j.cwd} for n, j in group.items()},
                    }
                )
            )
            procs.append(
                subprocess.Popen(
                    [python, __file__, str(spec)],
                    env=dict(env),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        for i, proc in enumerate(procs):
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise RuntimeError(f"the fork server failed ({proc.returncode}): {err[-3000:]}")
            got = json.loads((Path(tmp) / f"out-{i}" / "results.json").read_text())
            results.update({n: tuple(r) for n, r in got.items()})
    return results


def _child(argv: list[str], cwd: str, out: str, err: str) -> None:
    """In the forked child: become ``python ARGV...`` and exit with its status."""
    code: int = 0
    try:
        os.chdir(cwd)
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            sys.path[0] = ""
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102
        else:
            import runpy

            sys.argv = list(argv)
            sys.path[0] = str(Path(argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # as the interpreter does: the traceback on stderr, status 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(spec_path: str) -> None:
    import importlib

    spec = json.loads(Path(spec_path).read_text())
    for module in WARM:
        try:
            importlib.import_module(module)
        except ImportError:
            pass  # the script then imports what it needs itself
    out_dir = Path(spec["out"])
    out_dir.mkdir(parents=True, exist_ok=True)
    pending = list(spec["jobs"].items())
    running: dict[int, tuple[str, float]] = {}
    results: dict[str, list] = {}
    while pending or running:
        while pending and len(running) < spec["workers"]:
            name, job = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                out, err = str(out_dir / f"{name}.out"), str(out_dir / f"{name}.err")
                _child(job["argv"], job["cwd"], out, err)
            running[pid] = (name, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for p, (_name, started) in running.items():
                if time.monotonic() - started > spec["timeout_s"]:
                    os.kill(p, 9)
            time.sleep(0.05)
            continue
        name, _ = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        results[name] = [
            code,
            (out_dir / f"{name}.out").read_text(errors="replace"),
            (out_dir / f"{name}.err").read_text(errors="replace"),
        ]
    # a file, not stdout: vLLM logs to stdout
    (out_dir / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    _serve(sys.argv[1])
