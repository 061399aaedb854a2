"""doctor role: rigup-doctor, rigup-bench and rigup-report installed and on PATH, doctor.json as
the settings render it, the benchmark arms' drop-ins, and rigup-doctor's diagnosis of the host
(read-only). A failing diagnosis is the assertion message: each verdict says what, why and the
fix, in the words of rigup's diagnosis library."""

import json
import shlex
import time

import pytest

from rigup import diagnosis
from rigup.media.bench import ROWS  # the row ids rigup-bench --media runs
from roles.common.paths import LINK_DIR
from roles.doctor.config import arm_files, doctor_config
from roles.doctor.paths import COMMANDS, DoctorPaths
from roles.doctor.settings import arm_problems
from roles.model.manifest import load_manifest
from roles.vllm.cpu import parse_cpu_list


@pytest.fixture(scope="module")
def doctor_paths(data) -> DoctorPaths:
    return DoctorPaths.from_data(data)


@pytest.fixture(scope="module")
def cpus(host, data) -> list[int]:
    if data.get("vllm_device") != "cpu":
        return []
    out = host.run("awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status")
    return parse_cpu_list(out.stdout.strip() or "0")


@pytest.mark.parametrize("command", COMMANDS)
def test_command_on_path(host, doctor_paths, command):
    link = host.file(f"{LINK_DIR}/{command}")
    assert link.is_symlink and link.linked_to == f"{doctor_paths.bin}/{command}", (
        f"{LINK_DIR}/{command} is not rigup's {command}: re-run deploys/doctor.py"
    )
    out = host.run(f"{command} --help")
    assert out.rc == 0 and "usage:" in out.stdout, out.stdout + out.stderr


def test_doctor_json_is_the_settings(host, data, llm_dir, doctor_paths, cpus):
    f = host.file(doctor_paths.config)
    assert f.exists, f"{doctor_paths.config} is missing: re-run deploys/doctor.py"
    manifest = load_manifest(data.get("model_llm_manifest"))
    model = {
        "name": manifest.name,
        "revision": manifest.revision,
        "repo_id": manifest.repo_id,
        "state": manifest.state,
        "description": manifest.description,
    }
    assert json.loads(f.content_string) == doctor_config(data, llm_dir, model, cpus), (
        f"{doctor_paths.config} differs from the settings: re-run deploys/doctor.py"
    )


def test_rigup_bench_names_the_media_rows(host, data):
    """rigup-bench --help names --media and its rows; --list names each media row with its
    workflow where ComfyUI is installed, and says there are none where it is not."""
    out = host.run("rigup-bench --help")
    assert out.rc == 0 and "--media" in out.stdout, out.stdout + out.stderr
    assert all(row in out.stdout for row in ROWS), out.stdout
    listed = host.run("rigup-bench --list")
    assert listed.rc == 0, listed.stdout + listed.stderr
    if data.get("comfyui_install"):
        for row, (workflow, _) in ROWS.items():
            assert f"media row {row}: " in listed.stdout and f"{workflow}.json" in listed.stdout, (
                listed.stdout
            )
    else:
        assert "media rows: none (comfyui_install is off on this rig)" in listed.stdout


def test_bench_arms_are_the_settings(host, data, llm_dir, doctor_paths, cpus):
    for name, arm in data.get("bench_arms").items():
        if arm_problems(data, arm):
            continue
        for suffix, text in arm_files(data, name, arm, llm_dir, cpus).items():
            path = f"{doctor_paths.arms}/{name}{suffix}"
            assert host.file(path).content_string == text, (
                f"{path} differs: re-run deploys/doctor.py"
            )
    assert not host.file("/run/systemd/system/vllm.service.d/50-rigup-bench-arm.conf").exists, (
        "a rigup-bench arm is still in place: `sudo rigup-bench --restore`"
    )


def test_rigup_doctor_is_read_only_fast_and_names_every_fault(host):
    started = time.monotonic()
    out = host.run("rigup-doctor --json")
    seconds = time.monotonic() - started
    result = json.loads(out.stdout)
    assert out.rc == result["exit"] == {"ok": 0, "warn": 1, "fail": 2}[result["status"]]
    known = {s.id for s in diagnosis.SIGNATURES}
    verdicts = [v for s in result["sections"] for v in s["verdicts"]]
    assert {v["id"] for v in verdicts} <= known | {"nvidia-smi-unrecognised"}
    assert [s["name"] for s in result["sections"]] == [
        s for s in ("boot", "driver", "gpus", "nvlink", "services", "metrics", "cluster", "disk",
                    "venvs")
        if s in {x["name"] for x in result["sections"]}
    ]  # fmt: skip
    failed = [
        f"{v['what']}: {v['why']}. Fix: {v['fix']}" for v in verdicts if v["severity"] == "fail"
    ]
    assert not failed, "rigup-doctor: " + " | ".join(failed)
    print(f"rigup-doctor: {result['status']} in {seconds:.1f} s")
    assert seconds < 60, f"rigup-doctor took {seconds:.0f} s"


def test_rigup_explain_speaks_for_the_services(host, paths):
    link = host.file(f"{LINK_DIR}/rigup-explain")
    assert link.is_symlink and link.linked_to == f"{paths.bin}/rigup-explain", (
        f"{LINK_DIR}/rigup-explain is not rigup's rigup-explain: re-run deploys/base.py"
    )
    out = host.run(f"rigup-explain {shlex.quote('vllm.service')}")  # by name, on PATH
    assert out.rc in (0, 2) and out.stdout.startswith("rigup: vllm.service: "), (
        out.stdout + out.stderr
    )
