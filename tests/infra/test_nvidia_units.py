"""NVIDIA layer units and configuration (roles/nvidia): present, valid and hardened on every host,
with configuration equal to the settings. Needs no GPU, so it runs on the lab too; whether they
are enabled and applied on a GPU host is tests/infra/test_gpu.py."""

import json

import pytest

from roles.nvidia import NVLINK_UNIT, POWER_UNIT, NvidiaPaths, nvlink_config, power_config


@pytest.mark.parametrize("unit", [POWER_UNIT, NVLINK_UNIT])
def test_unit_verifies_and_is_hardened(host, unit, request):
    request.node.add_marker(pytest.mark.unit(unit))
    out = host.run(f"systemd-analyze verify {unit}")
    problems = [x for x in (out.stdout + out.stderr).splitlines() if unit.split(".")[0] in x]
    assert out.rc == 0 and not problems, f"systemd-analyze verify {unit}: {out.stdout}{out.stderr}"
    props = host.run(
        f"systemctl show {unit} -p Type -p RemainAfterExit -p ProtectSystem -p NoNewPrivileges "
        "-p PrivateNetwork -p Before"
    ).stdout
    got = dict(line.split("=", 1) for line in props.splitlines() if "=" in line)
    assert (got.get("Type"), got.get("RemainAfterExit")) == ("oneshot", "yes"), got
    assert (got.get("ProtectSystem"), got.get("NoNewPrivileges"), got.get("PrivateNetwork")) == (
        "strict",
        "yes",
        "yes",
    ), f"{unit} is less hardened than rigup's unit: {got}; re-run deploys/nvidia.py"
    assert "vllm.service" in got.get("Before", ""), f"{unit} must run before vllm.service: {got}"


@pytest.mark.parametrize(
    "path_field,render", [("power_config", power_config), ("nvlink_config", nvlink_config)]
)
def test_configuration_matches_settings(host, data, path_field, render):
    f = host.file(getattr(NvidiaPaths.from_data(data), path_field))
    assert f.exists, f"{f.path} is missing: run deploys/nvidia.py"
    assert json.loads(f.content_string) == render(data), (
        f"{f.path} differs from the settings: re-run deploys/nvidia.py"
    )


def test_persistence_dropin(host, data):
    f = host.file("/etc/systemd/system/nvidia-persistenced.service.d/rigup-persistence.conf")
    assert f.exists, f"{f.path} is missing: run deploys/nvidia.py"
    want = "--persistence-mode" if data.get("nvidia_persistence_mode") else "--no-persistence-mode"
    assert f" {want} " in f.content_string, f"{f.path} does not set {want}"


def test_tools_run_on_the_host(host, data):
    """The on-target library and scripts import and parse with the host's python3."""
    np = NvidiaPaths.from_data(data)
    for script in ("rigup-gpu-power", "rigup-nvlink"):
        out = host.run(f"/usr/bin/python3 {np.bin}/{script} --help")
        assert out.rc == 0, f"{script} does not run with /usr/bin/python3: {out.stderr[-500:]}"
