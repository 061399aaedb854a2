#!/usr/bin/env python3
"""Check a `vllm serve` argument list with the installed vLLM's own code.

Usage (run with the vLLM venv's python):

    python check_args.py ARGV_JSON_FILE [--with-model]

ARGV_JSON_FILE holds the JSON list of the arguments that follow `vllm serve`, e.g.
["/srv/models/x", "--tensor-parallel-size", "2", ...]. Nothing here lists vLLM's flags: the
arguments are parsed by the parser `vllm serve` itself builds, then handed to the same vLLM
code the server runs next, as far as that code runs without a GPU:

1. vLLM's `vllm` CLI parser with its `serve` subcommand, built the way
   vllm/entrypoints/cli/main.py does (ServeSubcommand.subparser_init -> make_arg_parser on a
   FlexibleArgumentParser), parsing ["serve", *argv]. Unknown or misspelled flags, invalid
   choices, bad values and bad JSON (e.g. in --speculative-config) fail here with argparse's
   own message; an invalid choice names the rigup setting (from --managed) and the closest
   valid names.
   Then every name vLLM resolves only at start, against the installed vLLM's registries
   (vllm_names.py next to this script: reasoning and tool-call parsers, chat template,
   quantization method, load format, tokenizer mode, speculative method, model implementation,
   config format, Mamba backend), all failures at once,
   each naming the rigup setting and the valid names.
2. ServeSubcommand.validate (validate_parsed_serve_args), and the positional model taking
   precedence over --model as in ServeSubcommand.cmd.
3. Each given value checked against the pydantic field of the vLLM config class that owns the
   flag (the parser groups are named after those classes: CacheConfig, SchedulerConfig, ...),
   e.g. --gpu-memory-utilization must be in (0, 1]. A JSON value for a config-typed flag
   (--speculative-config) is checked key by key against that class (SpeculativeConfig): unknown
   keys, an unknown "method", num_speculative_tokens <= 0 fail. The full SpeculativeConfig
   needs the target model's config, so it is only built with --with-model.
4. AsyncEngineArgs.from_cli_args(namespace), which builds the nested configs
   (compilation, attention, kernel, ...) and resolves the quantization config. Under
   HF_HUB_OFFLINE=1 (rigup's service env) it also resolves the model path offline
   (transformers_utils/repo_utils.py get_model_path): a local path that does not exist yet is
   taken for a Hub repo id and fails, exactly as `vllm serve` would; run the check after the
   model is placed, or without HF_HUB_OFFLINE.
5. Only with --with-model (the model directory must exist locally): EngineArgs.
   create_model_config() (reads MODEL/config.json: architecture, quantization, max_model_len
   against the model) and create_speculative_config() (e.g. resolves the MTP draft).
6. Only with --managed MANAGED_JSON ({"extra_start": N, "managed": {flag: setting}}): the
   arguments from index N on (the user's extra flags) may not set what a managed flag sets,
   under any spelling vLLM's parser takes (an alias, an abbreviation such as ``--hos``,
   ``--max_model_len``, ``--speculative-config.key``): argparse would let the last one win.
   Abbreviations are refused there too: spell flags out.
7. Only with --with-model on vLLM's CPU build (the platform it detects is the CPU): the
   kernels the checkpoint's quantization needs are in the kernel library vLLM loads on this
   CPU (CpuPlatform.import_kernels picks _C_AVX512 or _C_AVX2 by torch.cpu's answers). vLLM
   0.22.1's AVX2 library has no cpu_gemm_wna16, the only CPU kernel for 4-bit weight-only
   layers (GPTQ, AutoRound, AWQ), so on a CPU without AVX-512 the engine would die loading the
   weights ("'_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'").

Why the platform fallback: building vLLM 0.22.1's parser instantiates every config class for
its defaults, and DeviceConfig() (vllm/config/device.py, __post_init__) raises "Failed to infer
device type" when vLLM's platform detection finds no accelerator (UnspecifiedPlatform), which is
the case on the lab machine and in CI. vLLM handles the same problem for `vllm bench`
(vllm/entrypoints/cli/main.py:54-65): when current_platform.is_unspecified(), it assigns
platforms.current_platform = CpuPlatform(). This script does exactly that, and only then. The
CUDA platform class cannot stand in, because importing vllm/platforms/cuda.py loads vllm._C,
which needs libcuda.so.1 (the NVIDIA driver). The parser itself does not depend on the platform
(CpuPlatform and CudaPlatform both keep Platform.pre_register_and_update, a no-op), so the
parse is the same as on the rig. On a host where vLLM detects a GPU nothing is overridden.

Output: one JSON line on stdout. Exit 0: {"ok": true, "vllm_version": ..., "args": {dest:
value for each flag given}, ...}. Exit 1: {"ok": false, "error": "..."} plus one line
"check_args: FAIL: ..." on stderr naming the offending flag. Exit 2: this script's own usage
errors (missing/invalid ARGV_JSON_FILE). vLLM's logs go to stderr.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import re
import sys
import typing
import warnings

from vllm_names import explain_invalid_choice, label_for, name_problems  # next to this script
from vllm_offline import ensure_platform, json_result_writer

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2

_UNSET = object()


class CheckFailed(Exception):
    """A check failed; the message names the flag."""


class _ParseError(Exception):
    pass


_NOT_JSON = re.compile(
    r"^argument (?P<flags>\S+): Value (?P<value>.*) cannot be converted to <function loads\b"
)


def one_line(message: str) -> str:
    """argparse/pydantic messages can span lines; the report is one line."""
    return "; ".join(line.strip() for line in message.splitlines() if line.strip())


def explain_parse_error(message: str) -> str:
    """argparse reports a JSON flag's bad value as "cannot be converted to <function loads at
    0x..>"; say what json.loads objects to instead."""
    m = _NOT_JSON.match(message)
    if m:
        try:
            json.loads(m["value"])
        except ValueError as e:
            return f"argument {m['flags']}: invalid JSON {m['value']!r}: {e}"
    return message


def build_parser():
    """The `vllm` CLI parser with the `serve` subcommand, as vllm/entrypoints/cli/main.py
    builds it; only error reporting is changed (raise instead of print-and-exit)."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Parser(FlexibleArgumentParser):
        def error(self, message):  # argparse's own message, e.g. "unrecognized arguments: .."
            raise _ParseError(message)

        def exit(self, status=0, message=None):  # e.g. --help / --version in the argv
            raise _ParseError(f"argument list asks argparse to exit ({message or 'help'})")

    top = Parser(prog="vllm", description="vLLM CLI")
    subparsers = top.add_subparsers(required=False, dest="subparser")
    command = ServeSubcommand()
    serve = command.subparser_init(subparsers)  # same class as `top` (argparse's parser_class)
    serve.set_defaults(dispatch_function=command.cmd)
    return top, serve, command


def given_dests(serve: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """Destinations argparse actually set from argv (abbreviations, `--a=b`, `--a.b c` and
    underscores included): parse again into a namespace pre-filled with a sentinel; argparse
    only fills defaults for attributes that are missing."""
    dests = [a.dest for a in serve._actions if a.dest != argparse.SUPPRESS]
    probe = argparse.Namespace(**dict.fromkeys(dests, _UNSET))
    serve.parse_args(list(argv), namespace=probe)
    return [dest for dest in dests if getattr(probe, dest) is not _UNSET]


def flag_of(serve: argparse.ArgumentParser, dest: str) -> str:
    for action in serve._actions:
        if action.dest == dest:
            longs = [s for s in action.option_strings if s.startswith("--")]
            return (longs or action.option_strings or [dest])[0]
    return dest


def _config_class_in(tp):
    """The vLLM config dataclass inside a type hint (X, X | None, SkipValidation[X]), if any."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp) and hasattr(tp, "__pydantic_fields__"):
        return tp
    for arg in typing.get_args(tp):
        found = _config_class_in(arg)
        if found is not None:
            return found
    return None


def _is_plain(value) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    return False


def _validate_field(owner: type, name: str, value):
    """Validate one value against owner's pydantic field `name`; return an error text or None."""
    import pydantic

    info = owner.__pydantic_fields__[name]
    hint = info.annotation
    if info.metadata:
        hint = typing.Annotated[(hint, *info.metadata)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            adapter = pydantic.TypeAdapter(hint)
        except Exception:  # a hint pydantic cannot build on its own: leave it to vLLM
            return None
        try:
            adapter.validate_python(value)
        except pydantic.ValidationError as e:
            err = e.errors()[0]
            return f"{err['msg']} (got {value!r}; {owner.__name__}.{name})"
    return None


def check_fields(serve: argparse.ArgumentParser, ns: argparse.Namespace, dests: list[str]):
    """Check given values against the vLLM config class that owns each flag's parser group."""
    import vllm.config as vllm_config

    owner_of: dict[str, type] = {}
    for group in serve._action_groups:
        cls = getattr(vllm_config, group.title or "", None)
        if isinstance(cls, type) and hasattr(cls, "__pydantic_fields__"):
            for action in group._group_actions:
                owner_of[action.dest] = cls
    checked = []
    for dest in dests:
        owner = owner_of.get(dest)
        if owner is None or dest not in owner.__pydantic_fields__:
            continue
        value = getattr(ns, dest)
        flag = flag_of(serve, dest)
        nested = _config_class_in(owner.__pydantic_fields__[dest].annotation)
        if nested is not None and isinstance(value, dict):
            fields = nested.__pydantic_fields__
            for key, sub in value.items():
                if key not in fields:
                    raise CheckFailed(
                        f"{flag}: unknown key {key!r} ({nested.__name__} has no such field)"
                    )
                if _is_plain(sub) and (problem := _validate_field(nested, key, sub)):
                    raise CheckFailed(f"{flag}: {key}: {problem}")
            checked.append(dest)
        elif _is_plain(value):
            if problem := _validate_field(owner, dest, value):
                raise CheckFailed(f"{flag}: {problem}")
            checked.append(dest)
    return checked


class WarningLog(logging.Handler):
    """Collects what vLLM logs at WARNING and above while checking (e.g. speculative.py's
    note that several speculative tokens re-run the single MTP layer)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        message = one_line(record.getMessage())
        if message not in self.messages:
            self.messages.append(message)


def _jsonable(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    return str(value)


def labeller(serve: argparse.ArgumentParser, argv: list[str], spec: dict | None):
    """``label_of(dest)``: who set a destination, for messages: the rigup setting of a managed
    flag (``spec``: check_managed's JSON), ``vllm_extra_args: --flag`` for one the user's extra
    arguments set, else the flag."""
    managed: dict[str, str] = {}
    extra_dests: set[str] = set()
    if spec:
        for flag, setting in spec["managed"].items():
            action = serve._option_string_actions.get(flag)
            if action is not None:
                managed.setdefault(flag_of(serve, action.dest), setting)
        try:
            extra_dests = set(given_dests(serve, argv[int(spec["extra_start"]) :]))
        except (_ParseError, ValueError):
            pass  # the full parse reports it

    def label_of(dest: str) -> str:
        return label_for(flag_of(serve, dest), dest in extra_dests, managed)

    return label_of


def check(argv: list[str], with_model: bool, managed: dict | None = None) -> dict:
    import vllm

    result: dict = {"vllm_version": vllm.__version__, "platform": ensure_platform()}
    steps: list[str] = []
    warn: list[str] = []

    top, serve, command = build_parser()
    label_of = labeller(serve, argv, managed)
    try:
        ns = top.parse_args(["serve", *argv])
    except _ParseError as e:
        by_flag = serve._option_string_actions
        explained = explain_invalid_choice(
            str(e), lambda flag: label_of(by_flag[flag].dest) if flag in by_flag else flag
        )
        raise CheckFailed(explained or explain_parse_error(str(e))) from None
    except ValueError as e:  # FlexibleArgumentParser's own checks, e.g. model not first
        raise CheckFailed(str(e)) from None
    steps.append("vllm serve parser")

    dests = [d for d in given_dests(serve, argv) if d != "model_tag"]
    # names vLLM looks up only at start (parsers, chat template, quantization, ...): all at once
    problems = name_problems(ns, dests, label_of)
    if problems:
        raise CheckFailed("\n".join(problems))
    steps.append("names vLLM resolves at start")

    try:
        command.validate(ns)
    except (TypeError, ValueError) as e:
        raise CheckFailed(str(e)) from None
    steps.append("ServeSubcommand.validate")
    if getattr(ns, "model_tag", None) is not None:  # as ServeSubcommand.cmd does
        ns.model = ns.model_tag

    for token in argv:
        if token.startswith("--"):
            # FlexibleArgumentParser accepts `--a_b` for `--a-b` and `--a.key v` for JSON keys;
            # anything else argparse took is an abbreviation of a longer flag.
            name = token.split("=", 1)[0].split(".", 1)[0]
            if "--" + name[2:].replace("_", "-") not in serve._option_string_actions:
                warn.append(f"{name}: accepted only as an abbreviation; spell the flag out")
    deprecated = {
        a.dest
        for a in serve._actions
        if getattr(a, "deprecated", False) or a in getattr(type(serve), "_deprecated", ())
    }
    warn += [
        f"{flag_of(serve, d)} is deprecated in vLLM {vllm.__version__}"
        for d in dests
        if d in deprecated
    ]

    result["fields_checked"] = check_fields(serve, ns, dests)
    steps.append("config field validation")

    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        engine_args = AsyncEngineArgs.from_cli_args(ns)
    except Exception as e:
        message = f"AsyncEngineArgs.from_cli_args: {type(e).__name__}: {e}"
        import huggingface_hub

        if huggingface_hub.constants.HF_HUB_OFFLINE and not os.path.exists(ns.model):
            # EngineArgs.__post_init__ resolves the model offline (repo_utils.get_model_path):
            # a local path that does not exist yet is taken for a Hub repo id
            message = (
                f"model path {ns.model} does not exist; with HF_HUB_OFFLINE=1 vLLM takes it for"
                f" a Hugging Face repo id ({message})"
            )
        raise CheckFailed(message) from None
    steps.append("AsyncEngineArgs.from_cli_args")

    # snapshot before create_speculative_config adds the target configs to the same dict
    result["args"] = {"model": ns.model} | {d: _jsonable(getattr(ns, d)) for d in dests}
    if with_model:
        result["model"] = check_model(engine_args)
        if result["platform"] == "cpu (detected)":
            check_cpu_kernels(engine_args.create_model_config())
            steps.append("CpuPlatform.import_kernels")
        steps.append("EngineArgs.create_model_config")
        if engine_args.speculative_config is not None:
            steps.append("EngineArgs.create_speculative_config")

    result["checks"] = steps
    result["warnings"] = warn
    return result


def check_managed(serve: argparse.ArgumentParser, argv: list[str], spec: dict) -> None:
    """Refuse an extra argument (from ``spec["extra_start"]`` on) that sets a managed flag's
    destination, naming the setting that decides it; and an abbreviated extra flag."""
    extra = argv[int(spec["extra_start"]) :]
    owner: dict[str, tuple[str, str]] = {}
    for flag, setting in spec["managed"].items():
        action = serve._option_string_actions.get(flag)
        if action is not None:
            owner.setdefault(action.dest, (flag, setting))
    for i, token in enumerate(extra):
        if not token.startswith("-") or token == "--":
            continue
        words = [token] if "=" in token else extra[i : i + 2]
        if len(words) == 2 and words[1].startswith("-"):
            words = words[:1]
        try:
            dests = given_dests(serve, words)
        except (_ParseError, ValueError):
            continue  # the full parse reported it already
        for dest in dests:
            if dest in owner:
                flag, setting = owner[dest]
                raise CheckFailed(
                    f"vllm_extra_args: {token.split('=', 1)[0]} sets {flag} ({dest}), which "
                    f"{setting} decides; set it there"
                )
        name = token.split("=", 1)[0].split(".", 1)[0]
        if name.startswith("--") and "--" + name[2:].replace("_", "-") not in (
            serve._option_string_actions
        ):
            raise CheckFailed(
                f"vllm_extra_args: {name} is taken only as an abbreviation of a longer flag; "
                "spell the flag out"
            )


#: torch.ops._C kernels vLLM's CPU build calls for weight-only quantized layers, by weight bits:
#: CPUWNA16LinearKernel and INCConfig.apply_cpu_w4a16_quant_layer (vLLM 0.22.1,
#: model_executor/kernels/linear/mixed_precision/cpu.py, layers/quantization/inc.py) both call
#: cpu_gemm_wna16 (uint4 weights only).
CPU_WEIGHT_ONLY_KERNELS = {4: "cpu_gemm_wna16"}


def weight_bits(quantization_config: dict | None) -> int | None:
    """The weight bits of a checkpoint's quantization_config (GPTQ/AutoRound ``bits``, AWQ
    ``w_bit``, INC ``weight_bits``), or None when it names none."""
    quant = quantization_config or {}
    for key in ("bits", "weight_bits", "w_bit"):
        if isinstance(quant.get(key), int):
            return quant[key]
    return None


def cpu_kernel_problem(method: str | None, bits: int | None, has_kernel) -> str | None:
    """Why vLLM's CPU build cannot run a checkpoint quantized with ``method`` at ``bits`` weight
    bits, or None. ``has_kernel(name)`` answers whether torch.ops._C holds a kernel."""
    kernel = CPU_WEIGHT_ONLY_KERNELS.get(bits) if method else None
    if kernel is None or has_kernel(kernel):
        return None
    return (
        f"vllm_device: cpu: this checkpoint's {bits}-bit weights ({method}) need vLLM's "
        f"{kernel} kernel, and the CPU kernel library vLLM loads on this CPU has none: vLLM "
        "0.22.1's CPU build ships it only in its AVX-512 library (_C_AVX512), and this CPU has "
        f"no AVX-512, so it loads _C_AVX2. The engine would die loading the weights "
        f"(\"'_OpNamespace' '_C' object has no attribute '{kernel}'\"). Serve an unquantized "
        '(BF16) checkpoint on this machine, or serve on NVIDIA GPUs (vllm_device = "cuda")'
    )


def check_cpu_kernels(model_config) -> None:
    """Raise CheckFailed when vLLM's CPU build lacks a kernel the checkpoint's quantization needs
    on this CPU (:func:`cpu_kernel_problem`); loads the kernels as vLLM's engine does."""
    import torch
    from vllm.platforms import current_platform

    current_platform.import_kernels()
    quant = getattr(model_config.hf_config, "quantization_config", None)
    problem = cpu_kernel_problem(
        model_config.quantization,
        weight_bits(quant if isinstance(quant, dict) else None),
        lambda name: hasattr(torch.ops._C, name),
    )
    if problem:
        raise CheckFailed(problem)


def check_model(engine_args) -> dict:
    if not os.path.isdir(engine_args.model):
        raise CheckFailed(f"--with-model: {engine_args.model} is not a local directory")
    from vllm.config import ParallelConfig

    try:
        model_config = engine_args.create_model_config()
    except Exception as e:
        raise CheckFailed(f"EngineArgs.create_model_config: {type(e).__name__}: {e}") from None
    info = {
        "architecture": model_config.architecture,
        "quantization": model_config.quantization,
        "dtype": str(model_config.dtype).removeprefix("torch."),
        "max_model_len": model_config.max_model_len,
        "is_hybrid": model_config.is_hybrid,
        "multimodal": model_config.is_multimodal_model,
    }
    if engine_args.speculative_config is not None:
        parallel = ParallelConfig(
            tensor_parallel_size=engine_args.tensor_parallel_size,
            pipeline_parallel_size=engine_args.pipeline_parallel_size,
        )
        try:
            spec = engine_args.create_speculative_config(model_config, parallel)
        except Exception as e:
            raise CheckFailed(
                f"--speculative-config: {type(e).__name__}: {e} "
                "(EngineArgs.create_speculative_config)"
            ) from None
        info["speculative"] = {
            "method": spec.method,
            "num_speculative_tokens": spec.num_speculative_tokens,
            "draft_architecture": getattr(spec.draft_model_config, "architecture", None),
        }
    return info


def main(argv: list[str]) -> int:
    emit = json_result_writer()

    cli = argparse.ArgumentParser(prog="check_args.py", description=__doc__.split("\n")[0])
    cli.add_argument("argv_json_file", help="JSON list of the arguments after `vllm serve`")
    cli.add_argument(
        "--with-model",
        action="store_true",
        help="also build vLLM's ModelConfig and speculative config from the local model dir",
    )
    cli.add_argument(
        "--managed",
        metavar="MANAGED_JSON",
        help='{"extra_start": N, "managed": {flag: setting}}: extra flags may not set these',
    )
    try:
        opts = cli.parse_args(argv)
    except SystemExit as e:
        emit(
            {
                "ok": False,
                "error": "usage: check_args.py ARGV_JSON_FILE [--with-model] [--managed FILE]",
            }
        )
        return EXIT_USAGE if e.code else EXIT_OK

    try:
        with open(opts.argv_json_file, encoding="utf-8") as f:
            serve_argv = json.load(f)
    except (OSError, ValueError) as e:
        emit({"ok": False, "error": f"cannot read {opts.argv_json_file}: {e}"})
        return EXIT_USAGE
    if not isinstance(serve_argv, list) or not all(isinstance(a, str) for a in serve_argv):
        emit({"ok": False, "error": f"{opts.argv_json_file}: expected a JSON list of strings"})
        return EXIT_USAGE

    vllm_warnings = WarningLog()
    try:
        import vllm.logger  # configures vLLM's logging (dictConfig) before we add a handler

        logging.getLogger("vllm").addHandler(vllm_warnings)
        spec = None
        if opts.managed:
            with open(opts.managed, encoding="utf-8") as f:
                spec = json.load(f)
        result = check(serve_argv, opts.with_model, spec)
        if spec is not None:
            check_managed(build_parser()[1], serve_argv, spec)
            result["checks"].append("managed flags")
        result["vllm_warnings"] = vllm_warnings.messages
    except CheckFailed as e:
        message = one_line(str(e))
        print(f"check_args: FAIL: {message}", file=sys.stderr, flush=True)
        payload = {"ok": False, "error": message}
        try:
            import vllm

            payload["vllm_version"] = vllm.__version__
        except Exception:
            pass
        emit(payload)
        return EXIT_FAIL
    except Exception as e:  # vLLM itself broken (import error, ...): still one JSON line
        message = one_line(f"internal error: {type(e).__name__}: {e}")
        print(f"check_args: FAIL: {message}", file=sys.stderr, flush=True)
        emit({"ok": False, "error": message})
        return EXIT_FAIL
    emit({"ok": True, **result})
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
