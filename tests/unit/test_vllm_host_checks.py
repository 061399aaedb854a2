"""roles/vllm/host_checks.py: the vLLM deploy's three on-host checks, as data: the commands
run as the service's user where they must, quote the model directory, and run again when (and
only when) what they check changes."""

from __future__ import annotations

import shlex

import pytest

from roles.model import PLACEMENT_RECORD
from roles.vllm.host_checks import (
    SCRIPTS,
    CheckFacts,
    args_check,
    checkpoint_preflight,
    text_only_check,
)
from roles.vllm.paths import VllmPaths

MODEL = "/srv/models/Qwen3.6 27B"  # a space: the commands must quote it
AS_USER = "runuser -u vllm -- env HOME=/var/lib/rigup/vllm"


@pytest.fixture
def facts(settings) -> CheckFacts:
    return CheckFacts(
        paths=VllmPaths.from_data(settings),
        as_user=AS_USER,
        model_dir=MODEL,
        method="language_model_only",
        venv_key=("0" * 64, "3.12"),
    )


def test_the_checkpoint_checks_run_as_the_service_user_on_the_quoted_model(facts):
    p = facts.paths
    preflight = checkpoint_preflight(facts, {"method": "mtp", "num_speculative_tokens": 3})
    assert shlex.split(preflight.command)[-7:] == [
        p.python,
        f"{p.bin}/checkpoint_preflight.py",
        MODEL,
        "--method",
        "language_model_only",
        "--speculative-method",
        "mtp",
    ]
    assert preflight.command.startswith(AS_USER + " ")
    text_only = text_only_check(facts)
    assert text_only.command.startswith(AS_USER + " ")
    assert shlex.split(text_only.command)[-4:] == [
        f"{p.bin}/text_only_check.py",
        MODEL,
        "--method",
        "language_model_only",
    ]
    # without a drafter, no MTP head is asked for
    assert "--speculative-method" not in checkpoint_preflight(facts, None).command


def test_the_argument_check_reads_its_inputs_from_a_temporary_directory(facts):
    args = ["/srv/models/x", "--max-model-len", "262144"]
    check = args_check(facts, args, {"extra_start": 3})
    assert check.command.startswith("d=$(mktemp -d) && ")
    assert check.command.endswith("rc=$?; rm -rf $d; exit $rc")
    assert shlex.quote('["/srv/models/x", "--max-model-len", "262144"]') in check.command
    assert check.arguments("/var/lib/rigup/checks")["stamp"] == "/var/lib/rigup/checks/vllm-args.ok"


def test_each_check_runs_again_when_what_it_checks_changes(facts, tmp_path, monkeypatch):
    args = ["/srv/models/x"]
    before = [
        checkpoint_preflight(facts, None).key,
        args_check(facts, args, {}).key,
        text_only_check(facts).key,
    ]
    # the same inputs give the same keys: a converged host checks nothing again
    assert before == [
        checkpoint_preflight(facts, None).key,
        args_check(facts, args, {}).key,
        text_only_check(facts).key,
    ]
    assert len(set(before)) == 3
    other = CheckFacts(**{**facts.__dict__, "venv_key": ("1" * 64, "3.12")})
    assert checkpoint_preflight(other, None).key != before[0]
    assert args_check(facts, [*args, "--enforce-eager"], {}).key != before[1]
    # a changed script (vllm_offline.py, imported by two checks) changes their keys
    changed = tmp_path / "vllm_offline.py"
    changed.write_text(SCRIPTS["vllm_offline.py"].read_text() + "\n# changed\n")
    monkeypatch.setitem(SCRIPTS, "vllm_offline.py", changed)
    assert args_check(facts, args, {}).key != before[1]
    assert text_only_check(facts).key != before[2]
    assert checkpoint_preflight(facts, None).key == before[0]


def test_the_checks_watch_the_placed_model(facts):
    for check in (
        checkpoint_preflight(facts, None),
        args_check(facts, [], {}),
        text_only_check(facts),
    ):
        assert check.watch == (f"{MODEL}/{PLACEMENT_RECORD}", f"{MODEL}/config.json")
