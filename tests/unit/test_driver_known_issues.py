"""The known issues of the driver branches rigup supports (rigup/diagnosis/driver_branches.py), read
by rigup-doctor's driver section from the driver state it captures (its package names and
kernel) and the rig's settings."""

from __future__ import annotations

import pytest

from rigup import diagnosis, doctor
from rigup.nvidia import DRIVER_STATE_COMMAND, parse_driver_state
from roles.doctor.config import doctor_config
from roles.nvidia.facts import NvidiaGpus
from tests.captures import block

MODEL = "/srv/rigup/models/qwen3.6-27b-int4-autoround/mirror-2026-11"
#: a rig's driver state with Ubuntu's 580 open driver (field capture, kernel 7.0.0-44-generic)
STATE_580_OPEN = "field/state-installed-not-loaded.txt"
#: the lab's driver state with Ubuntu's 595 open driver, then 580-server (closed), installed by
#: tests/lab/test_nvidia_branches.py (never loaded: a container)
STATE_595_OPEN = "lab/resolute-driver-state-595-open.txt"
STATE_580_SERVER = "lab/resolute-driver-state-580-server.txt"


def _state(fixture: str, kernel: str | None = None, **context) -> dict:
    lines = block(fixture).lines
    if kernel:  # the report's kernel in place of the capture's
        lines = [f"kernel={kernel}" if line.startswith("kernel=") else line for line in lines]
    return {**parse_driver_state(lines), **context}


def _ids(state: dict) -> list[str]:
    return [v.id for v in diagnosis.classify_state("driver-state", state)]


def test_open_580_with_nvlink_on_the_panic_kernel_is_named_with_the_server_variant():
    state = _state(STATE_580_OPEN, kernel="7.0.0-22-generic", gpu_count=2, tensor_parallel=2)
    (v,) = [v for v in diagnosis.classify_state("driver-state", state)
            if v.id == "driver-580-open-nvlink-panic"]  # fmt: skip
    assert v.severity == diagnosis.WARN
    assert "kernel 7.0.0-22-generic" in v.what
    assert "NVIDIA/open-gpu-kernel-modules#1211" in v.why
    assert 'nvidia_driver_variant = "server"' in v.fix and "nvidia-driver-580-server" in v.fix


@pytest.mark.parametrize(
    "kernel,gpus",
    [("7.0.0-44-generic", 2), ("7.0.0-22-generic", 1), ("7.0.0-22-generic", None)],
)
def test_the_panic_is_not_named_off_its_kernel_or_without_nvlink(kernel, gpus):
    state = _state(STATE_580_OPEN, kernel=kernel, gpu_count=gpus)
    assert "driver-580-open-nvlink-panic" not in _ids(state)


def test_the_closed_server_driver_is_not_the_panic():
    state = _state(STATE_580_SERVER, kernel="7.0.0-22-generic", gpu_count=2)
    assert "driver-580-open-nvlink-panic" not in _ids(state)


@pytest.mark.parametrize(
    "fixture,branch,server,is_open,version",
    [
        (STATE_595_OPEN, 595, False, True, "595.58.03"),
        (STATE_580_SERVER, 580, True, False, "580.126.20"),
    ],
)
def test_the_lab_driver_states_of_both_branches_read(fixture, branch, server, is_open, version):
    """rigup's driver-state parser on what 595's and 580-server's packages put on disk."""
    state = _state(fixture)
    assert state["module_kernels"] == {"7.0.0-14-generic": version}
    assert state["userspace"] == version
    assert diagnosis.installed_driver(state["packages"]) == diagnosis.DriverPackage(
        branch, server, is_open
    )
    # the lab's verdict, the same for every branch: modules for the kernel booted next
    assert [v.id for v in diagnosis.classify_driver_state(state)] == [
        "driver-not-loaded/not-installed-for-kernel"
    ]


@pytest.mark.parametrize("name", ["595-open", "580-server"])
def test_each_branch_nvidia_smi_without_a_loaded_module_is_driver_not_loaded(name):
    """The branch's own nvidia-smi (exit 9, "couldn't communicate with the NVIDIA driver"), read
    by the NvidiaGpus fact the deploy and testinfra use."""
    fact = NvidiaGpus().process(block(f"lab/resolute-nvidia-smi-{name}.txt").lines)
    assert fact["gpus"] == [] and fact["exit_code"] == 9
    assert [v.kind for v in fact["verdicts"]] == ["driver-not-loaded"], fact["verdicts"]


@pytest.mark.parametrize("car,shown", [(True, True), (None, True), (False, False)])
def test_595_with_tensor_parallel_names_the_custom_all_reduce_report(car, shown):
    state = _state(STATE_595_OPEN, gpu_count=2, tensor_parallel=2, custom_all_reduce=car)
    found = {v.id: v for v in diagnosis.classify_state("driver-state", state)}
    assert ("driver-595-custom-all-reduce" in found) is shown
    if shown:
        v = found["driver-595-custom-all-reduce"]
        assert v.severity == diagnosis.OK  # a note to watch; the metrics section fails 0 %
        assert "noonghunna/club-3090#922" in v.why and "2x A100" in v.why
        assert "rigup-bench --arms nvlink-off" in v.fix


def test_the_deploy_preflight_sees_no_known_issue_without_the_rig_context():
    state = _state(STATE_580_OPEN, kernel="7.0.0-22-generic")
    ids = [v.id for v in diagnosis.classify_state("driver-state", state)]
    assert not [i for i in ids if i.startswith(("driver-580-", "driver-595-"))], ids


def test_doctor_driver_section_reads_the_595_rig_and_its_running_vllm(settings):
    settings = {**settings, "vllm_tensor_parallel_size": 2}
    cfg = doctor_config(settings, MODEL, {"name": "q", "revision": "r", "repo_id": "a/b"})
    lines = block(STATE_595_OPEN).output

    def runner(argv):
        if argv == ["sh", "-c", DRIVER_STATE_COMMAND]:
            return 0, lines
        if argv[:2] == ["systemctl", "show"]:
            return 0, "4242\n"
        if argv[:2] == ["ps", "-ww"]:
            return 0, "/opt/rigup/vllm/venv/bin/python -m vllm.entrypoints.openai.api_server\n"
        raise AssertionError(argv)

    section = doctor.check_driver(cfg, runner)
    ids = [v.id for v in section.verdicts]
    assert "driver-595-custom-all-reduce" in ids, ids
    (v,) = [v for v in section.verdicts if v.id == "driver-595-custom-all-reduce"]
    assert "tensor parallel 2" in v.what and "custom all-reduce on" in v.what
