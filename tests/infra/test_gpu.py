"""NVIDIA layer on a host with GPUs: driver loaded and consistent, GPU count, compute capability,
persistence mode, power limit, NVLink and P2P, units enabled, no GPU failure in this boot's kernel
log. Expectations come from the settings (inventory/group_data/all.py and the inventory). Skipped
on hosts that declare no GPUs (the lab).

Each failure says what is wrong, why and what fixes it, in the words of the diagnosis library
(rigup/diagnosis) that the deploy, the boot units and rigup-nvidia-diagnose use too.
Read-only: nothing here changes a GPU setting.
"""

import json

import pytest

from rigup import diagnosis
from rigup.nvidia import (
    DRIVER_STATE_COMMAND,
    GPU_QUERY_COMMAND,
    diagnose_driver,
    explain,
    parse_driver_state,
    parse_nvlink_status,
    parse_p2p_matrix,
    parse_topology,
    read_gpu_query,
    verify_interconnect,
)
from roles.nvidia import NVLINK_UNIT, PERSISTENCED, POWER_UNIT, NvidiaPaths
from roles.nvidia.branches import driver_metapackage


@pytest.fixture(scope="module", autouse=True)
def _needs_gpus(data):
    if data.get("nvidia_gpu_count") == 0:
        pytest.skip("the host declares no NVIDIA GPUs (nvidia_gpu_count = 0)")


@pytest.fixture(scope="module")
def state(host):
    return parse_driver_state(host.run(DRIVER_STATE_COMMAND).stdout.splitlines())


@pytest.fixture(scope="module")
def gpus(host, state):
    out = host.run(GPU_QUERY_COMMAND)
    query = read_gpu_query(out.stdout + out.stderr, out.rc)
    failed = diagnosis.failures(explain(query.verdicts, state))
    assert not failed, "; ".join(map(str, failed))
    return query.gpus


def test_driver_loaded_and_consistent(host, state):
    failed = diagnosis.failures(diagnose_driver(state))
    assert not failed, "; ".join(map(str, failed))
    smi = host.run("nvidia-smi --query-gpu=driver_version --format=csv,noheader")
    versions = set(smi.stdout.split())
    assert versions == {state["loaded"]}, (
        f"nvidia-smi reports driver {versions}, the loaded module is {state['loaded']}: reboot"
    )


def test_no_gpu_failure_in_this_boots_kernel_log(state):
    verdicts = diagnosis.classify_kernel_log("\n".join(state["kernel_log"]))
    failed = diagnosis.failures(verdicts)
    assert not failed, "; ".join(f"{v} (seen: {v.evidence[0]})" for v in failed)


def test_compute_capability_matches_the_setting(gpus, data):
    want = str(data.get("nvidia_gpu_compute_capability"))
    wrong = {f"GPU {g.index} {g.name}": g.compute_capability for g in gpus
             if g.compute_capability != want}  # fmt: skip
    assert not wrong, (
        f"nvidia_gpu_compute_capability is {want} but the GPUs report {wrong}: set it to what "
        "they report (it decides which KV cache dtypes vLLM may use)"
    )


def test_gpu_count_matches_inventory(gpus, data):
    want = data.get("nvidia_gpu_count")
    assert len(gpus) == want, (
        f"the driver sees {len(gpus)} GPU(s) ({[g.name for g in gpus]}), the inventory declares "
        f"{want}: check `nvidia-smi -L` and `journalctl -k | grep -i nvrm`"
    )


def test_persistence_mode(gpus, data):
    want = "Enabled" if data.get("nvidia_persistence_mode") else "Disabled"
    wrong = {
        f"GPU {g.index} {g.uuid}": g.persistence_mode for g in gpus if g.persistence_mode != want
    }
    assert not wrong, (
        f"persistence mode is not {want} on {wrong}: converge with deploys/nvidia.py "
        f"({PERSISTENCED} with rigup's drop-in sets it at boot)"
    )


def test_power_limit(gpus, data):
    want = data.get("nvidia_power_limit_w")
    wrong = {}
    for g in gpus:
        target = g.default_power_limit_w if want is None else float(want)
        if g.power_limit_w is None or abs(g.power_limit_w - target) > 0.5:
            wrong[f"GPU {g.index} {g.uuid}"] = f"{g.power_limit_w:g} W, expected {target:g} W"
    assert not wrong, (
        f"power limit differs from nvidia_power_limit_w = {want}: {wrong}. Converge with "
        f"deploys/nvidia.py ({POWER_UNIT} applies and verifies it at every boot)"
    )


def test_nvlink_and_p2p(host, data, gpus):
    count = data.get("nvidia_gpu_count")
    if count < 2:
        pytest.skip("one GPU: no interconnect")
    outputs = {}
    for args in ("nvlink -s", "topo -m", "topo -p2p r"):
        out = host.run(f"nvidia-smi {args}")
        verdicts, _ = diagnosis.classify_nvidia_smi(
            diagnosis.clean_lines(out.stdout + out.stderr), out.rc
        )
        assert out.rc == 0, f"`nvidia-smi {args}` failed: " + "; ".join(map(str, verdicts))
        outputs[args] = out.stdout
    result = verify_interconnect(
        parse_nvlink_status(outputs["nvlink -s"]),
        parse_topology(outputs["topo -m"]),
        parse_p2p_matrix(outputs["topo -p2p r"]),
        gpu_count=count,
        expected_links=data.get("nvlink_expected_links"),
    )
    if not data.get("nvlink_required") and not result.verified:
        pytest.skip(f"NVLink optional and not verified: {result.problems}")
    assert result.verified, "; ".join(result.problems)


@pytest.mark.parametrize("unit", [PERSISTENCED, POWER_UNIT, NVLINK_UNIT])
def test_units_enabled_and_applied(host, unit, request):
    request.node.add_marker(pytest.mark.unit(unit))
    service = host.service(unit)
    assert service.is_enabled, f"{unit} is not enabled: converge with deploys/nvidia.py"
    assert (
        service.is_running or host.run(f"systemctl is-active {unit}").stdout.strip() == "active"
    ), f"{unit} is not active: `journalctl -u {unit}` says why"


def test_interconnect_environment_for_vllm(host, data):
    if data.get("nvidia_gpu_count") < 2:
        pytest.skip("one GPU: no interconnect")
    env_file = host.file(NvidiaPaths.from_data(data).interconnect_env)
    assert env_file.exists, f"{env_file.path} is missing: {NVLINK_UNIT} has not run"
    env = dict(
        x.split("=", 1)
        for x in env_file.content_string.splitlines()
        if "=" in x and not x.startswith("#")
    )
    verified = host.run(
        f"/usr/bin/python3 {NvidiaPaths.from_data(data).bin}/rigup-nvlink --json --config "
        f"{NvidiaPaths.from_data(data).nvlink_config}"
    )
    result = json.loads(verified.stdout)
    if result["verified"]:
        assert env.get("NCCL_P2P_LEVEL") == "NVL" and not env.get("RIGUP_VLLM_INTERCONNECT_ARGS"), (
            env
        )
    else:
        assert env.get("NCCL_P2P_DISABLE") == "1", env
        assert env.get("RIGUP_VLLM_INTERCONNECT_ARGS") == "--disable-custom-all-reduce", env


def test_driver_packages_held(host, data):
    held = set(host.run("apt-mark showhold").stdout.split())
    branch, variant = data.get("nvidia_driver_branch"), data.get("nvidia_driver_variant")
    want = (
        {driver_metapackage(branch, variant)}
        if data.get("nvidia_install_path") == "ubuntu"
        else {"nvidia-open"}
    )
    assert want <= held, (
        f"{sorted(want - held)} not held (apt-mark showhold): an automatic upgrade could leave a "
        "driver/library mismatch; converge with deploys/nvidia.py"
    )
