"""vLLM's dev mode (vllm_server_dev_mode) and sleep mode (vllm_enable_sleep_mode): off by
default, rendered into the environment and argv, and refused before any change where the
unguarded dev-mode routes would face anything but loopback (single rigs, a router's replicas,
a cluster's leader), or where another key would turn them on behind the setting's back."""

from __future__ import annotations

import pytest

from roles.doctor.settings import bench_arms
from roles.settings import validate
from roles.vllm.cpu import cpu_serve_args
from roles.vllm.flags import managed_args, service_env
from roles.vllm.settings import DEV_MODE_ENV, DEV_MODE_ROUTES


def test_dev_mode_and_sleep_mode_are_off_by_default(settings):
    assert settings["vllm_server_dev_mode"] is False
    assert settings["vllm_enable_sleep_mode"] is False
    assert DEV_MODE_ENV not in service_env(settings, "/var/lib/rigup/vllm")
    assert "--enable-sleep-mode" not in managed_args(settings, "/m")


def test_dev_mode_renders_the_environment_and_sleep_mode_the_flag(settings):
    data = {**settings, "vllm_server_dev_mode": True, "vllm_enable_sleep_mode": True}
    assert validate(data) == []
    assert service_env(data, "/var/lib/rigup/vllm")[DEV_MODE_ENV] == "1"
    assert managed_args(data, "/m").count("--enable-sleep-mode") == 1


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "rig-a.lan"])
def test_dev_mode_beyond_loopback_is_refused_naming_both_keys(settings, host):
    (problem,) = validate({**settings, "vllm_server_dev_mode": True, "vllm_host": host})
    assert problem.startswith("vllm_server_dev_mode: True with vllm_host"), problem
    assert "answer without the API key" in problem and "/collective_rpc" in problem


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1", "localhost"])
def test_dev_mode_on_loopback_passes(settings, host):
    assert validate({**settings, "vllm_server_dev_mode": True, "vllm_host": host}) == []


def test_beyond_loopback_without_dev_mode_is_unchanged(settings):
    assert validate({**settings, "vllm_host": "0.0.0.0"}) == []


def test_a_replica_rig_cannot_have_dev_mode(settings):
    """A router's replica must bind beyond loopback (roles/router/replicas.py), so its dev
    mode is refused by the same rule, naming the key."""
    replica = {**settings, "vllm_host": "10.77.0.2", "vllm_server_dev_mode": True}
    assert [p.split(":")[0] for p in validate(replica)] == ["vllm_server_dev_mode"]


def test_a_cluster_leader_with_its_api_on_the_lan_cannot_have_dev_mode(settings):
    leader = {
        **settings,
        "cluster_name": "pair",
        "vllm_nnodes": 2,
        "vllm_pipeline_parallel_size": 2,
        "vllm_speculative_config": None,
        "cluster_private_address": "10.77.0.1",
        "cluster_private_ifname": "enp5s0",
        "vllm_host": "0.0.0.0",
    }
    assert validate(leader) == []
    assert [p.split(":")[0] for p in validate({**leader, "vllm_server_dev_mode": True})] == [
        "vllm_server_dev_mode"
    ]


def test_sleep_mode_needs_the_dev_routes(settings):
    (problem,) = validate({**settings, "vllm_enable_sleep_mode": True})
    assert problem.startswith("vllm_enable_sleep_mode: True needs vllm_server_dev_mode"), problem


@pytest.mark.parametrize("value", ["1", "0", 1])
def test_the_dev_mode_variable_is_refused_in_vllm_env(settings, value):
    (problem,) = validate({**settings, "vllm_env": {DEV_MODE_ENV: value}})
    assert problem.startswith(f"vllm_env: {DEV_MODE_ENV} is rigup's"), problem


def test_the_dev_mode_variable_is_refused_in_a_bench_arm():
    problem = bench_arms({"dev": {"what": "dev mode", "env": {DEV_MODE_ENV: "1"}}})
    assert problem and problem.startswith(f"arm dev: env {DEV_MODE_ENV}"), problem


def test_sleep_mode_cannot_be_smuggled_in_extra_args(settings):
    (problem,) = validate({**settings, "vllm_extra_args": ["--enable-sleep-mode"]})
    assert problem.startswith("vllm_extra_args: --enable-sleep-mode"), problem


def test_every_problem_at_once(settings):
    problems = validate(
        {
            **settings,
            "vllm_server_dev_mode": True,
            "vllm_host": "0.0.0.0",
            "vllm_env": {DEV_MODE_ENV: "1"},
        }
    )
    assert [p.split(":")[0] for p in problems] == ["vllm_server_dev_mode", "vllm_env"]


def test_the_cpu_build_leaves_sleep_mode_out_with_vllms_reason(settings):
    data = {**settings, "vllm_device": "cpu", "vllm_server_dev_mode": True}
    data["vllm_enable_sleep_mode"] = True
    args, notes, _ = cpu_serve_args(managed_args(data, "/m"), data, list(range(4)))
    assert "--enable-sleep-mode" not in args
    assert any("Sleep mode is not supported on current platform" in n for n in notes), notes
    # the dev routes stay on: they are the environment's, not a flag
    assert service_env(data, "/h")[DEV_MODE_ENV] == "1"


def test_the_routes_named_are_the_ones_the_issue_measured_answering_without_the_key():
    paths = {path for _, path in DEV_MODE_ROUTES}
    for path in ("/sleep", "/wake_up", "/collective_rpc", "/reset_prefix_cache", "/pause"):
        assert path in paths
    assert {"/resume", "/update_weights"} <= paths
    assert all(not p.startswith(("/v1", "/v2", "/inference")) for p in paths)
