"""A full disk: ENOSPC anywhere in a failing start's journal is THE cause,
named with the file written and its file system, before anything else, for any unit; a C++
compile error of torch.compile whose output says ENOSPC is ENOSPC; a routine warning (vLLM's
ulimit warning, quoting "Errno 24 Too many open files") is never taken for a cause; ``df`` is
read by one parser (the doctor's and the converge's free-space fact).

The journal is vLLM's own, captured in the lab (tests/fixtures/vllm-cpu/README.md:
lab-enospc-journal.json.gz, a 64 MiB tmpfs over vLLM's TMPDIR)."""

from __future__ import annotations

import gzip
import json

import pytest

from rigup import diagnosis, units
from tests.captures import FIXTURES

#: the written file of the capture: torch's precompiled header, the output of gcc's -o
PCH = (
    "/var/lib/rigup/vllm/tmp/torchinductor_vllm/precompiled_headers/"
    "csxpbes6h34mgndkkqeekvbsbkr5xaoknwpzutkdwby2g7k35avw.h.gch"
)
#: `df -B1 --output=target,avail,size` of the lab's tmpfs, as captured when it was mounted
DF_TMPFS = (
    "Mounted on                 Avail 1B-blocks\n/var/lib/rigup/vllm/tmp 67108864  67108864\n"
)


def journal_text() -> str:
    return gzip.decompress((FIXTURES / "vllm-cpu/lab-enospc-journal.json.gz").read_bytes()).decode()


def failed_run() -> list[str]:
    """The lines of the capture's runs that explain a crash loop (the start that failed and
    the restart after it; the serving run stopped first is left out), as read_unit gives them."""
    runs = units.runs(units.parse_journal(journal_text()))
    assert [len(lines) for _, lines in runs] == [15, 1820, 4]  # stop, the failed start, restart
    return units.lines_to_explain(looping_state(), runs)


def looping_state(**extra) -> dict:
    return units.unit_state(
        {"Id": "vllm.service", "LoadState": "loaded", "ActiveState": "activating",
         "SubState": "auto-restart", "Result": "exit-code", "NRestarts": "1"},
        mode="llm", mode_active=True, **extra,
    )  # fmt: skip


def test_the_capture_is_a_full_disk_inside_a_cpp_compile_error():
    lines = failed_run()
    assert any("CppCompileError: C++ compile error" in line for line in lines)
    assert any("cannot write PCH file: No space left on device" in line for line in lines)
    assert any("Errno 24] Too many open files" in line for line in lines)  # the routine warning


def test_enospc_is_the_cause_first_naming_the_file_written_not_the_header_compiled():
    found = units.explain(looping_state(), failed_run())
    first = found[0]
    assert first.id == "no-space" and first.severity == diagnosis.FAIL
    # gcc names the header it compiled (/opt/rigup/vllm/venv/.../cpp_prefix.h:1324:2); the file
    # written is the -o of torch's command before it, on the full tmpfs
    assert first.what == f"no space left on device writing {PCH}"
    assert "/opt/rigup" not in first.what
    assert "C++ compile error of torch.compile" in first.why
    assert f"df -h {PCH}" in first.fix
    assert all("No space left on device" in line for line in first.evidence)
    # the engine's failure and the dead workers follow from it: no verdict of their own
    assert not {"vllm-engine-failed", "vllm-worker-died"} & {v.id for v in found}
    assert "service/crash-loop" in [v.id for v in found]
    assert not any("Errno 24" in f"{v.what} {v.why}" for v in found)


def test_read_unit_reads_df_of_the_file_system_written_and_explain_names_it():
    show = (
        "Id=vllm.service\nLoadState=loaded\nActiveState=activating\nSubState=auto-restart\n"
        "Result=exit-code\nNRestarts=1\n"
    )
    asked: list[list[str]] = []

    def runner(argv: list[str]) -> tuple[int, str]:
        asked.append(argv)
        if argv[0] == "sh":  # df of the written file's nearest existing parent
            return 0, DF_TMPFS
        return 0, {"systemctl": show, "journalctl": journal_text()}[argv[0]]

    state, journal = units.read_unit("vllm.service", runner, mode="llm", mode_active=True)
    assert asked[-1][-1] == PCH and "df -B1 --output=target,avail,size" in asked[-1][2]
    assert state["no_space_df"]["mount"] == "/var/lib/rigup/vllm/tmp"
    first = units.explain(state, journal)[0]
    assert first.what == (
        f"no space left on device writing {PCH} (its file system /var/lib/rigup/vllm/tmp: "
        "0.06 GiB free of 0.06 GiB when read)"
    )


def test_the_same_enospc_in_any_units_journal_is_its_cause():
    state = units.unit_state(
        {"Id": "comfyui.service", "LoadState": "loaded", "ActiveState": "failed",
         "SubState": "failed", "Result": "exit-code", "NRestarts": "0"}
    )  # fmt: skip
    journal = [
        "Traceback (most recent call last):",
        "OSError: [Errno 28] No space left on device: '/srv/rigup/comfyui/output/ComfyUI_00001_.png'",
    ]
    found = units.explain(state, journal)
    assert found[0].id == "no-space"
    assert found[0].what.endswith("writing /srv/rigup/comfyui/output/ComfyUI_00001_.png")


def test_a_quota_is_named_as_a_quota():
    (v,) = diagnosis.classify_no_space(
        "OSError: [Errno 122] Disk quota exceeded: '/var/lib/rigup/voxcpm/cache/x'"
    )
    assert v.id == "no-space/quota" and v.what.endswith("writing /var/lib/rigup/voxcpm/cache/x")


def test_a_healthy_start_has_no_full_disk():
    text = (FIXTURES / "vllm-cpu/startup-best-hybrid.log").read_text()
    assert diagnosis.classify_no_space(text) == []
    assert diagnosis.first_no_space_path(text.splitlines()) is None


# --- routine warnings ---


ULIMIT = (FIXTURES / "vllm-cuda/serve-tiny-int4-cudagraphs.log").read_text().splitlines()[10]


def test_the_ulimit_warning_is_a_named_routine_warning_with_its_source():
    assert "OSError: [Errno 24] Too many open files" in ULIMIT
    assert diagnosis.is_routine(ULIMIT, "vllm-log")
    (warning,) = [w for w in diagnosis.ROUTINE_WARNINGS if w.regex.search(ULIMIT)]
    assert "system_utils.py:299" in warning.reference
    assert not diagnosis.is_routine(ULIMIT, "comfyui-log")  # vLLM's, not any service's


@pytest.mark.parametrize("fixture", sorted(p.name for p in (FIXTURES / "vllm-cpu").glob("*.log")))
def test_no_captured_start_blames_the_routine_warning(fixture):
    text = (FIXTURES / "vllm-cpu" / fixture).read_text()
    for v in diagnosis.classify_vllm_log(text):
        assert "Errno 24" not in f"{v.what} {v.why}", (fixture, v)


def test_an_engine_failure_after_only_the_routine_warning_names_no_error_of_it():
    # the lines of a real start up to the ulimit warning, then the engine's failure: nothing
    # rigup recognises came before it, and the warning's quoted OSError is not it
    start = (FIXTURES / "vllm-cpu/fail-tp2-on-2-cores.log").read_text().splitlines()
    cut = next(i for i, line in enumerate(start) if "Found ulimit" in line)
    failed = next(line for line in start if "Engine core initialization failed" in line)
    (v,) = diagnosis.classify_vllm_log("\n".join([*start[: cut + 1], failed]))
    assert v.id == "vllm-engine-failed"
    assert v.why == "no error rigup recognises came before it"


# --- df, one parser ---


def test_parse_df_reads_bytes_and_mount_points_with_spaces():
    captured = (
        "Mounted on                 Avail 1B-blocks\n"
        "/                    49380442112 270471139328\n"
        "/mnt/my disk             1048576   67108864\n"
    )
    root, spaced = diagnosis.parse_df(captured)
    assert root["mount"] == "/" and root["free_bytes"] == 49380442112
    assert round(root["free_gib"], 2) == 45.99 and round(root["size_gib"], 1) == 251.9
    assert spaced["mount"] == "/mnt/my disk" and spaced["free_gib"] == 1 / 1024
    assert diagnosis.parse_df("df: /nope: No such file or directory\n") == []


def test_df_argv_walks_up_to_an_existing_parent():
    argv = units.df_argv("/var/lib/rigup/vllm/tmp/gone/x.gch")
    assert argv[:2] == ["sh", "-c"] and argv[-1] == "/var/lib/rigup/vllm/tmp/gone/x.gch"
    assert 'while ! test -e "$p"' in argv[2]
    assert json.dumps(argv)  # plain strings, no shell quoting of the path needed


def test_a_journal_cut_between_a_compile_command_and_its_enospc_still_names_the_file_written():
    # rigup-doctor reads a unit's last 400 entries (units.journal_argv): in the lab (a longer
    # crash loop than this capture) they began after the first block's compile command, so its
    # ENOSPC line had no -o above it; a later block (another worker's) still has its own
    journal = failed_run()
    command = next(i for i, line in enumerate(journal) if " -o /" in line)
    cut = journal[command + 1 :]
    first = next(i for i, line in enumerate(cut) if "No space left" in line)
    assert not any(" -o /" in line for line in cut[:first])
    (v,) = diagnosis.classify_no_space("\n".join(cut))
    assert v.what == f"no space left on device writing {PCH}"
    assert diagnosis.first_no_space_path(cut) == PCH
