"""The router role's settings, its replica URLs from the inventory's rigs and its argv."""

from __future__ import annotations

import dataclasses

import jinja2
import pytest

from roles.common.footprint import registry_problems
from roles.common.service import FILES, JINJA
from roles.router.flags import router_argv
from roles.router.footprint import FOOTPRINT as ROUTER
from roles.router.replicas import replica_urls
from roles.router.settings import POLICIES
from roles.router.unit import router_spec
from roles.services import SERVICES
from roles.settings import SettingsError, require_valid_settings, validate


def _enabled(settings):
    settings.update(router_enabled=True)
    return settings


def test_shipped_router_is_off_and_valid(settings):
    assert settings["router_enabled"] is False
    assert validate(settings) == []
    assert validate(_enabled(settings)) == []


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("router_enabled", "yes"),
        ("router_version", "0.1.16"),
        ("router_user", "Root User"),
        ("router_host", "0.0.0.0; rm -rf /"),
        ("router_port", 80),
        ("router_port", 70000),
        ("router_replica_group", "replica rigs"),
        ("router_replica_address", "10.0.0.2/24"),
        ("router_replica_firewall", "on"),
        ("router_policy", "kv_aware"),
        ("router_health_check_interval_s", 0),
        ("router_health_check_timeout_s", 1.5),
        ("router_health_failure_threshold", True),
        ("router_start_timeout_s", 0),
        ("router_replica_startup_timeout_s", "2m"),
    ],
)
def test_bad_router_setting_is_refused_by_name(settings, key, value):
    settings[key] = value
    problems = validate(settings)
    assert [p.split(":")[0] for p in problems] == [key], problems


def test_every_problem_of_a_run_at_once_before_any_change(settings):
    _enabled(settings).update(
        router_policy="fastest",
        router_health_check_timeout_s=30,
        router_port=8000,
        router_metrics_port=8000,
    )
    with pytest.raises(SettingsError) as refused:
        require_valid_settings(settings, "rig")
    message = str(refused.value)
    assert "router_policy" in message and "router_port: 8000 is vllm_port too" in message
    assert "router_metrics_port: 8000 is router_port too" in message


def test_timeout_must_end_before_the_next_check(settings):
    _enabled(settings).update(router_health_check_interval_s=5, router_health_check_timeout_s=5)
    assert [p.split(":")[0] for p in validate(settings)] == ["router_health_check_timeout_s"]
    settings["router_enabled"] = False
    assert validate(settings) == []


def test_replicas_are_awaited_less_than_systemd_waits(settings):
    _enabled(settings).update(router_replica_startup_timeout_s=300, router_start_timeout_s=300)
    assert [p.split(":")[0] for p in validate(settings)] == ["router_replica_startup_timeout_s"]


def test_router_port_clashes_only_with_installed_services(settings):
    _enabled(settings).update(router_port=settings["voxcpm_port"])
    assert validate(settings) == [
        f"router_port: {settings['voxcpm_port']} is voxcpm_port too; give the router its own port"
    ]
    settings["voxcpm_install"] = False
    assert validate(settings) == []


def _rig(**data):
    return {"vllm_host": "0.0.0.0", "vllm_port": 8000} | data


def test_replica_urls_from_the_group_rigs():
    urls, problems = replica_urls(
        [
            ("rig-a.lan", _rig()),
            ("rig-b.lan", _rig(router_replica_address="10.10.0.2", vllm_port=8001)),
            ("rig-c.lan", _rig(router_replica_address="fd00::3")),
        ]
    )
    assert problems == []
    assert urls == ["http://rig-a.lan:8000", "http://10.10.0.2:8001", "http://[fd00::3]:8000"]


@pytest.mark.parametrize(
    ("data", "named"),
    [
        (_rig(vllm_host="127.0.0.1"), "rig-b: vllm_host: 127.0.0.1 is loopback"),
        (_rig(vllm_host="::1"), "rig-b: vllm_host: ::1 is loopback"),
        (_rig(vllm_port=None), "rig-b: vllm_port"),
        (_rig(vllm_port="8000"), "rig-b: vllm_port"),
        (_rig(router_replica_address="a b"), "rig-b: router_replica_address"),
        (_rig(router_replica_address="rig-a"), "rig-b: router_replica_address: http://rig-a:8000"),
    ],
)
def test_replica_problems_name_the_rig_and_key(data, named):
    urls, problems = replica_urls([("rig-a", _rig()), ("rig-b", data)])
    assert urls == ["http://rig-a:8000"]
    assert len(problems) == 1 and problems[0].startswith(named), problems


def test_an_empty_group_is_refused():
    assert replica_urls([]) == ([], ["router_replica_group: the group has no rig"])


def test_argv(settings):
    urls = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    argv = router_argv("/opt/rigup/router/venv/bin/vllm-router", settings, urls)
    assert argv == [
        "/opt/rigup/router/venv/bin/vllm-router",
        "--host",
        "127.0.0.1",
        "--port",
        "8080",
        "--worker-urls",
        *urls,
        "--policy",
        "cache_aware",
        "--health-check-endpoint",
        "/health",
        "--health-check-interval-secs",
        "10",
        "--health-check-timeout-secs",
        "5",
        "--health-failure-threshold",
        "3",
        "--worker-startup-timeout-secs",
        "120",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        "29000",
    ]
    assert not any("key" in a.lower() for a in argv)
    with pytest.raises(ValueError, match="router_replica_group"):
        router_argv("vllm-router", settings, [])


def test_policies_are_vllm_router_choices():
    # vllm_router/router_args.py 0.1.17 --policy choices (the real binary runs them in
    # tests/router/test_router_real.py)
    upstream = {
        "random",
        "round_robin",
        "cache_aware",
        "kv_aware",
        "power_of_two",
        "consistent_hash",
        "sticky_least_loaded",
    }
    assert set(POLICIES) <= upstream


def _render_unit(spec) -> str:
    """The unit as GpuService.install renders it (roles/common/service.py)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, **JINJA)
    template = env.from_string((FILES / "service.unit.j2").read_text())
    return template.render(
        s=spec,
        target=spec.target,
        after_extra="",
        pid_key="",
        writable=[spec.home],
        wait_ready="/opt/rigup/bin/wait-ready",
        loopback_only=spec.localhost_only,
    )


def test_router_unit_uses_no_gpu_and_starts_at_boot(settings):
    urls = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]
    spec = router_spec(_enabled(settings), urls)
    text = _render_unit(spec)
    assert "ExecStart=/opt/rigup/router/venv/bin/vllm-router --host 127.0.0.1 --port 8080 " in text
    assert "--worker-urls http://10.0.0.1:8000 http://10.0.0.2:8000 --policy cache_aware" in text
    assert "WantedBy=multi-user.target" in text and "After=network-online.target\n" in text
    assert "rigup-llm.target" not in text and "rigup-media.target" not in text
    assert not [line for line in text.splitlines() if "nvidia" in line and line[0] != "#"]
    assert "DevicePolicy=closed" in text and "NoNewPrivileges=yes" in text
    assert "PrivateDevices=yes" in text
    assert "ExecStartPost=/opt/rigup/bin/wait-ready http://127.0.0.1:8080/health $MAINPID" in text
    assert "User=vllm-router" in text and "TimeoutStartSec=300" in text
    # bound to loopback by default, yet it must reach the replica rigs
    assert "IPAddressDeny" not in text


def test_a_gpu_service_unit_keeps_its_mode_and_devices(settings):
    gpu = dataclasses.replace(
        router_spec(settings, ["http://r:1"]), mode="llm", target="rigup-llm.target"
    )
    text = _render_unit(gpu)
    for line in (
        "Requires=rigup-llm.target",
        "PartOf=rigup-llm.target",
        "WantedBy=rigup-llm.target",
    ):
        assert line in text
    assert "DeviceAllow=char-nvidia* rw" in text and "nvidia-persistenced.service" in text
    assert "PrivateDevices=yes" not in text
    # a loopback GPU service that connects nowhere is confined to localhost; the router is not
    confined = dataclasses.replace(gpu, connects_out=False)
    assert confined.localhost_only and "IPAddressDeny=any" in _render_unit(confined)
    assert not gpu.localhost_only


def test_router_footprint_says_it_uses_no_gpu(settings):
    assert not ROUTER.uses_gpu and ROUTER.target == "multi-user.target"
    assert ROUTER.shares(_enabled(settings)) == []
    assert ROUTER not in SERVICES and all(s.uses_gpu for s in SERVICES)
    assert registry_problems([ROUTER]) == ["router: mode '' is none of llm, media"]
