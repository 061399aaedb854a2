"""Data tests of rigup's own pyinfra operations: arguments + facts -> expected commands.

The shape of pyinfra's own tests/operations/<module.operation>/<case>.json (its harness,
tests/util.py and tests/test_operations.py, is not shipped in the pyinfra package, so this is a
small one in the same spirit). Each tests/operations/<operation>/<case>.json holds:

- ``kwargs``: the operation's arguments. A string ``"callable:<module>:<name>"`` stands for that
  Python object (``json_file_patched``'s ``patch``); ``{"call": "<module>:<name>", "args": [...]}``
  for what that function returns (``model_placed``'s ``manifest``).
- ``facts``: ``{"<fact>": {"<arguments>": value}}``. ``<fact>`` names one of pyinfra's facts as
  pyinfra's tests do (``files.FileContents``) and one of rigup's by its class name
  (``UvSyncPending``, ``GitCheckout``); ``<arguments>`` is pyinfra's ``key=value, ...`` string
  of the fact's arguments, sorted by key. Every fact the operation
  reads must be listed (``null`` for a fact that returns None), and every listed fact must be
  read: a stale case fails.
- ``commands``: the commands the operation yields, in order: a shell command as a string (as
  pyinfra runs it, masked bits shown as ``[raw, masked]``), an upload as
  ``["upload", "<content>", "<dest>"]``, a Python step on the controller as
  ``["function", "<name>", [<arguments>]]`` (an argument that is not a JSON value as
  ``"<TypeName>"``).
- ``noop_description``: the no-op message, required when no command is expected.
- ``exception``: ``{"name": "OperationError", "message": "..."}`` when the operation must raise.
- ``executing``: ``host.state.is_executing`` (default false: the operation is being planned).
"""

from __future__ import annotations

import importlib
import inspect
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Config, FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.api.util import get_kwargs_str
from pyinfra.context import ctx_host, ctx_state

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests" / "operations"
CASE_KEYS = {"kwargs", "facts", "commands", "noop_description", "exception", "executing"}

#: operation name (the case directory) -> "<module>:<attribute>"
OPERATIONS = {
    "uv_venv_synced": "roles.common.operations:uv_venv_synced",
    "uv_venv_recorded": "roles.common.operations:uv_venv_recorded",
    "check_passes": "roles.common.operations:check_passes",
    "json_file_patched": "roles.common.operations:json_file_patched",
    "git_checkout_pinned": "roles.comfyui.git:git_checkout_pinned",
    "git_checkout_tag": "roles.comfyui.git:git_checkout_tag",
    "mode_active": "roles.modes:mode_active",
    "model_placed": "roles.model.operations:model_placed",
    "driver_held": "roles.nvidia.operations:driver_held",
    "driver_switched": "roles.nvidia.operations:driver_switched",
    "cuda_home_linked": "roles.nvidia.operations:cuda_home_linked",
    "cuda_math_header_patched": "roles.nvidia.operations:cuda_math_header_patched",
    "file_placed": "roles.common.placed:file_placed",
    "template_placed": "roles.common.placed:template_placed",
    "directory_placed": "roles.common.placed:directory_placed",
    "link_placed": "roles.common.placed:link_placed",
    "file_absent": "roles.common.placed:file_absent",
    "file_present": "roles.common.placed:file_present",
    "tree_placed": "roles.common.placed:tree_placed",
    "service_account": "roles.common.operations:service_account",
}


def _load(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def parse_value(value: Any) -> Any:
    """JSON -> Python: ``"callable:<module>:<name>"`` becomes that object."""
    if isinstance(value, str) and value.startswith("callable:"):
        return _load(value[len("callable:") :])
    if isinstance(value, list):
        return [parse_value(v) for v in value]
    if isinstance(value, dict) and set(value) == {"call", "args"}:
        return _load(value["call"])(*parse_value(value["args"]))
    if isinstance(value, dict):
        return {k: parse_value(v) for k, v in value.items()}
    return value


def fact_name(fact_cls: type) -> str:
    """pyinfra's facts as in pyinfra's own tests (``files.FileContents``); rigup's by class name
    (``UvSyncPending``, ``GitCheckout``), which is unique within rigup and survives a move."""
    module = fact_cls.__module__
    if module.startswith("pyinfra.facts."):
        return f"{module.removeprefix('pyinfra.facts.')}.{fact_cls.__name__}"
    return fact_cls.__name__


class FakeState:
    """What operations read from ``pyinfra.context.state``."""

    cwd = "/"
    inventory = None  # what pyinfra's templates see as ``inventory``
    in_op = True
    in_deploy = True

    def __init__(self, executing: bool) -> None:
        self.config = Config()
        self.is_executing = executing


class FakeHost:
    """A host whose facts come from the case's JSON; records the no-op message."""

    name = "somehost"
    in_op = True
    in_callback_op = False
    current_op_global_arguments = None

    def __init__(self, facts: dict[str, dict[str, Any]], state: FakeState) -> None:
        self.facts = facts
        self.state = state
        self.data: dict[str, Any] = {}
        self.noop_description: str | None = None
        self.read: set[tuple[str, str]] = set()

    def noop(self, description: str) -> None:
        self.noop_description = description

    def log(self, *args, **kwargs) -> None:
        pass

    def get_temp_filename(self, *args, **kwargs) -> str:
        return "_tempfile_"

    def get_fact(self, fact_cls: type, **kwargs: Any) -> Any:
        # as pyinfra's FakeHost: an argument the fact does not take would hide a bug
        real_args = inspect.getfullargspec(fact_cls.command).args
        for key in kwargs:
            assert key in real_args, f"{fact_cls.__name__}.command takes no argument {key!r}"
        name, args = fact_name(fact_cls), get_kwargs_str(kwargs)
        if name not in self.facts or args not in self.facts[name]:
            raise KeyError(f"missing test fact data: {name} [{args}]")
        self.read.add((name, args))
        return parse_value(self.facts[name][args])


def command_json(command: Any) -> Any:
    """One command as the JSON cases write it (pyinfra's tests/test_operations.py parse_commands)."""
    if isinstance(command, str):  # as pyinfra/api/operation.py wraps a yielded string
        command = StringCommand(command.strip())
    if isinstance(command, StringCommand):
        raw, masked = command.get_raw_value(), command.get_masked_value()
        return raw if raw == masked else [raw, masked]
    if isinstance(command, FileUploadCommand):
        src = command.src
        if hasattr(src, "read"):
            src.seek(0)
            data = src.read()
            data = data.decode() if isinstance(data, bytes) else data
        else:  # a local file: its path from the repository's root, as the case writes it
            data = str(src).removeprefix(f"{REPO}/")
        return ["upload", data, str(command.dest)]
    if isinstance(command, FunctionCommand):
        plain = (str, int, float, bool, type(None))
        args = [a if isinstance(a, plain) else f"<{type(a).__name__}>" for a in command.args]
        return ["function", command.function.__name__, args]
    raise TypeError(f"{command!r} is not a pyinfra command")


def run_case(operation: str, case: dict[str, Any]) -> tuple[list[Any], FakeHost]:
    """Run ``operation``'s body with the case's arguments on a fake host; its commands as JSON."""
    op = _load(OPERATIONS[operation])
    state = FakeState(executing=case.get("executing", False))
    host = FakeHost(case.get("facts", {}), state)
    with ctx_state.use(state), ctx_host.use(host):
        commands = [command_json(c) for c in op._inner(**parse_value(case.get("kwargs", {})))]
    return commands, host


def check_case(operation: str, case: dict[str, Any]) -> None:
    """Assert that ``operation`` does what ``case`` says: its commands, no-op message or error."""
    unknown = set(case) - CASE_KEYS
    assert not unknown, f"unknown keys: {sorted(unknown)}"
    expected_error = case.get("exception")
    if expected_error:
        with pytest.raises(Exception) as info:
            run_case(operation, case)
        assert type(info.value).__name__ == expected_error["name"]
        assert str(info.value) == expected_error["message"]
        return
    commands, host = run_case(operation, case)
    assert commands == case["commands"], "the operation yields:\n" + json.dumps(commands, indent=4)
    listed = {(name, args) for name, by_args in case.get("facts", {}).items() for args in by_args}
    assert listed <= host.read, f"facts listed but never read: {sorted(listed - host.read)}"
    if not commands or "noop_description" in case:
        assert host.noop_description == case["noop_description"]


def _case_files() -> list[Path]:
    return sorted(CASES.glob("*/*.json"))


def test_every_operation_has_cases():
    directories = {p.name for p in CASES.iterdir() if p.is_dir()}
    assert directories == set(OPERATIONS)
    for name in OPERATIONS:
        assert list((CASES / name).glob("*.json")), f"no cases for {name}"


@pytest.mark.parametrize("path", _case_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_operation(path: Path):
    check_case(path.parent.name, json.loads(path.read_text()))


def _first_run() -> dict[str, Any]:
    return json.loads((CASES / "check_passes" / "first_run.json").read_text())


def test_harness_fails_when_commands_differ():
    case = _first_run()
    case["commands"][0] += " "
    with pytest.raises(AssertionError, match="the operation yields"):
        check_case("check_passes", case)


def test_harness_fails_on_a_missing_or_unread_fact():
    case = _first_run()
    case["facts"]["CheckStamp"] = {}
    with pytest.raises(KeyError, match="missing test fact data: CheckStamp"):
        check_case("check_passes", case)
    case = _first_run()
    case["facts"]["files.File"] = {"path=/nowhere": None}
    with pytest.raises(AssertionError, match="never read"):
        check_case("check_passes", case)


def test_harness_fails_on_a_wrong_noop_message_or_error():
    case = json.loads((CASES / "check_passes" / "converged.json").read_text())
    case["noop_description"] = "something else"
    with pytest.raises(AssertionError):
        check_case("check_passes", case)
    case = _first_run()
    case["exception"] = {"name": "OperationError", "message": "x"}
    with pytest.raises(pytest.fail.Exception):
        check_case("check_passes", case)


@pytest.mark.parametrize(("check", "stamped"), [("true", True), ("false", False)])
def test_the_stamp_is_written_after_a_check_that_ends_with_exit(tmp_path, check, stamped):
    """check_passes' command run by a real shell: a check that ends with `exit $rc` (as vLLM's
    argument check does, to clean up its temporary files) still leaves the stamp when it passes,
    so the next converge plans no change; a failing one leaves none."""
    case = json.loads((CASES / "check_passes" / "a_command_that_ends_with_exit.json").read_text())
    stamp = tmp_path / "vllm-args.ok"
    (command,) = case["commands"]
    command = command.replace(case["kwargs"]["stamp"], str(stamp)).replace(
        "/opt/rigup/vllm/venv/bin/python /opt/rigup/vllm/bin/check_args.py $d/argv.json "
        "--with-model",
        check,
    )
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True)
    assert (proc.returncode == 0) is stamped
    assert stamp.exists() is stamped
    if stamped:
        assert stamp.read_text().strip() == case["kwargs"]["key"]
