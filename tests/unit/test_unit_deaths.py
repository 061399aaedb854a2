"""How a unit died, for any unit: killed by the OOM killer (system
RAM, not VRAM: named with its process, unit, peak and a fix for THAT service), killed by a
signal from outside (``kill -9``: not a crash, not the GPU, not the OOM killer), crashed by a
signal of its own; and a past death of a unit that runs again is a warning with its time.

The kill and the crash are systemd 259's own output captured on the lab machine
(tests/fixtures/systemd/lab-*); the OOM lines are constructed in systemd's and the kernel's
formats (tests/fixtures/oom/README.md says why)."""

from __future__ import annotations

from rigup import diagnosis, units
from tests.captures import FIXTURES


def lines(path: str) -> list[str]:
    return (FIXTURES / path).read_text().splitlines()


def captured(show: str, journal: str):
    """read_unit over the captured ``systemctl show`` and ``journalctl -o json`` of a unit."""
    outputs = {
        "systemctl": (FIXTURES / show).read_text(),
        "journalctl": (FIXTURES / journal).read_text(),
    }

    def runner(argv: list[str]) -> tuple[int, str]:
        if argv[0] == "stat":  # a transient unit's files, as old as its start
            return 0, ""
        return 0, outputs[argv[0]]

    return units.read_unit("vllm.service", runner, mode="llm", mode_active=True)


def ids(verdicts) -> list[str]:
    return [v.id for v in verdicts]


def test_a_kill_9_of_a_unit_that_serves_again_is_a_warning_with_its_time():
    state, journal = captured("systemd/lab-kill-9-show.txt", "systemd/lab-kill-9-journal.json")
    assert state["history_lines"] == 5 and journal[state["history_lines"]].startswith("Started")
    found = units.explain(state, journal)
    assert ids(found) == ["service/restarted", "unit-signal/killed"]
    restarted, killed = found
    # the end of the killed run: its last journal entry, 08:32:52 (systemd's "Scheduled restart job")
    assert restarted.what == (
        "vllm.service runs, after 1 crash(es) since it was started; the last ended "
        "2026-12-03 08:32:52 UTC"
    )
    assert killed.severity == diagnosis.WARN
    assert killed.what == (
        "vllm.service's main process was killed by a signal (SIGKILL, signal 9) (an earlier run, "
        "ended 2026-12-03 08:32:52 UTC; vllm.service runs again since)"
    )
    assert "not a crash of its own, not the GPU and not the OOM killer" in killed.why
    assert killed.evidence == ("vllm.service: Main process exited, code=killed, status=9/KILL",)
    assert diagnosis.exit_status(found) == 1  # a warning, not FAIL, while it serves


def test_the_same_kill_of_a_unit_that_stays_down_is_a_failure():
    state = units.unit_state(
        {"Id": "ollama.service", "LoadState": "loaded", "ActiveState": "failed",
         "SubState": "failed", "Result": "signal", "NRestarts": "0"}
    )  # fmt: skip
    journal = [
        line.replace("vllm.service", "ollama.service")
        for line in units.lines_to_explain(
            state, units.runs(units.parse_journal(
                (FIXTURES / "systemd/lab-kill-9-journal.json").read_text()))[:1]
        )
    ]  # fmt: skip
    found = units.explain(state, journal)
    assert ids(found) == ["service/failed", "unit-signal/killed"]
    assert found[1].severity == diagnosis.FAIL and "ollama.service's main process" in found[1].what


def test_a_crash_by_its_own_signal_is_a_crash_not_a_kill():
    entries = units.parse_journal((FIXTURES / "systemd/lab-segv-journal.json").read_text())
    state = units.unit_state(
        {"Id": "voxcpm.service", "LoadState": "loaded", "ActiveState": "failed",
         "SubState": "failed", "Result": "signal", "NRestarts": "0"}
    )  # fmt: skip
    found = units.explain(state, [line for _, line in entries])
    assert ids(found) == ["service/failed", "unit-signal/crash"]
    assert found[1].what == "voxcpm.service's main process crashed (SIGSEGV, signal 11)"


def running_after_a_crash(unit: str, history: int) -> dict:
    return {
        **units.unit_state(
            {"Id": unit, "LoadState": "loaded", "ActiveState": "active", "SubState": "running",
             "NRestarts": "1", "UnitFileState": "enabled"},
            mode="media", mode_active=True,
        ),
        "history_lines": history,
        "history_end": 1796286769.5,
    }  # fmt: skip


def test_comfyui_killed_by_the_oom_killer_is_named_as_ram_with_comfyuis_fix():
    journal = lines("oom/comfyui-oom-kill-journal.txt")
    state = running_after_a_crash(
        "comfyui.service", journal.index("Started comfyui.service - ComfyUI (rigup media mode).")
    )
    kernel = lines("oom/klog-oom-kill-comfyui.txt")
    found = units.explain(state, journal, kernel)
    assert ids(found) == ["service/restarted", "unit-oom", "oom-kill"]
    oom, kill = found[1], found[2]
    assert oom.what.startswith(
        "the kernel's OOM killer killed a process of comfyui.service (system RAM, not VRAM)"
    )
    assert "its memory peak was 61.2 GiB" in oom.why and "ended 2026-12-03 08:32:49 UTC" in oom.what
    assert kill.what.startswith(
        "the kernel's OOM killer killed python3 (pid 2345 of comfyui.service) holding 58.4 GiB of RAM"
    )
    assert "ran out of RAM and swap" in kill.why and "not the GPU's (VRAM)" in kill.why
    for v in (oom, kill):
        assert '["--cache-none"]' in v.fix and "--disable-pinned-memory" in v.fix
        assert "vllm" not in v.fix.lower()
    # systemd's SIGKILL is the OOM killer's, not a kill of its own
    assert "unit-signal/killed" not in ids(found)


def test_any_unit_killed_by_the_oom_killer_gets_a_fix_for_itself():
    journal = [
        line.replace("comfyui.service", "ollama.service")
        for line in lines("oom/comfyui-oom-kill-journal.txt")
    ]
    (oom,) = diagnosis.classify_unit_log("\n".join(journal))
    assert oom.id == "unit-oom" and "ollama.service" in oom.what and "61.2 GiB" in oom.why
    assert "ollama.service's own memory use" in oom.fix and "swap or RAM" in oom.fix
    assert "vllm" not in oom.fix.lower()
    # vLLM's own fix names its RAM settings, never what it reserves of VRAM as the cure
    vllm = diagnosis.classify_unit_log("vllm.service: Failed with result 'oom-kill'.")[0]
    assert "vllm_cpu_memory_utilization" in vllm.fix and "does not help here" in vllm.fix


def test_a_kill_9_is_not_blamed_on_an_oom_kill_of_another_unit():
    state, journal = captured("systemd/lab-kill-9-show.txt", "systemd/lab-kill-9-journal.json")
    kernel = lines("oom/klog-oom-kill-other-unit.txt")
    found = units.explain(state, journal, kernel)
    assert ids(found) == ["service/restarted", "unit-signal/killed"]
    # the kernel's verdict itself names the other unit and its cgroup limit
    (other,) = diagnosis.classify_kernel_log("\n".join(kernel))
    assert other.what.startswith(
        "the kernel's OOM killer killed restic (pid 8812 of backup.service)"
    )
    assert "MemoryMax=" in other.why and "backup.service's own memory use" in other.fix


def test_a_sigkill_without_systemds_oom_line_is_the_oom_killer_when_the_kernel_names_the_unit():
    """Without a memory controller systemd sees only the SIGKILL; the kernel says whose."""
    journal = [
        line
        for line in lines("oom/comfyui-oom-kill-journal.txt")
        if "OOM killer" not in line and "oom-kill" not in line
    ]
    state = running_after_a_crash(
        "comfyui.service", journal.index("Started comfyui.service - ComfyUI (rigup media mode).")
    )
    found = units.explain(state, journal, lines("oom/klog-oom-kill-comfyui.txt"))
    assert ids(found) == ["service/restarted", "oom-kill"]


def test_rigup_explain_names_the_mode_from_the_units_part_of():
    """rigup-explain passes no mode: the unit's PartOf= (its mode's target) gives it."""
    props = {"Id": "vllm.service", "LoadState": "loaded", "ActiveState": "active",
             "SubState": "running", "PartOf": "rigup-llm.target"}  # fmt: skip
    (up,) = units.explain(units.unit_state(props), [])
    assert up.id == "service/up" and up.why == "running in the llm mode"
    (other,) = units.explain(units.unit_state({**props, "Id": "ssh.service", "PartOf": ""}), [])
    assert other.why == "running (outside rigup's modes)" and "?" not in str(other)
    assert "-pPartOf" in units.show_argv(["vllm.service"])


def test_a_kill_9_is_not_blamed_on_a_cpu_trap_in_the_same_minutes():
    """A trap explains a process that died on its own; a SIGKILL came from outside."""
    state, journal = captured("systemd/lab-kill-9-show.txt", "systemd/lab-kill-9-journal.json")
    kernel = lines("vllm-cpu/dmesg-worker-trap.txt")
    assert ids(units.explain(state, journal, kernel)) == ["service/restarted", "unit-signal/killed"]
