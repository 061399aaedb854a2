"""roles/services.py: a GPU service is its role's footprint plus one registry line.

A made-up service registered beside the three real ones reaches the modes, the VRAM budget,
the port, GPU-index and manifest checks and the doctor's config with no other edit; the shared
layers that used to name each service name none.
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from roles import services as registry
from roles.common.checks import (
    UNIX_NAME,
    boolean,
    host_address,
    integer,
    matches,
    number,
    service_port,
)
from roles.common.footprint import MODES, DiskNeeds, ServiceFootprint, registry_problems
from roles.common.paths import ServicePaths
from roles.common.setting import ServiceKeys, TypedSettings, declared, optional, rules, setting
from roles.doctor.config import doctor_config
from roles.modes import mode_services
from roles.modes.budget import budget_problems, budget_report, mode_shares
from roles.settings import validate

REPO = Path(__file__).resolve().parents[2]
MODEL = "/srv/models/llm"


@dataclass(frozen=True)
class RouterSettings(TypedSettings):
    """A made-up LLM router's settings, declared as a role declares its own."""

    router_install: bool = setting(boolean)
    router_user: str = setting(matches(UNIX_NAME, "a Unix user name"))
    router_host: str = setting(host_address)
    router_port: int = setting(service_port)
    router_start_timeout_s: int = setting(integer(1, 3600))
    router_gpu_index: int = setting(integer(0, 15))
    router_vram_gib: float = setting(number(0.0, 1024.0, lo_open=True))


def _settings_module() -> types.ModuleType:
    module = types.ModuleType("router_settings")
    module.SETTINGS = declared(RouterSettings)
    module.RULES = rules(module.SETTINGS)
    module.OPTIONAL = optional(module.SETTINGS)
    module.consistency = lambda values: []
    return module


@dataclass(frozen=True)
class RouterPaths(ServicePaths):
    COMPONENT: ClassVar[str] = "router"


def _vram(data) -> list[tuple[int, float, str]]:
    return [(int(data.get("router_gpu_index")), float(data.get("router_vram_gib")), "estimate")]


ROUTER = ServiceFootprint(
    name="router",
    component="Router",
    unit="router.service",
    mode="llm",
    keys=ServiceKeys(
        user="router_user",
        host="router_host",
        port="router_port",
        start_timeout_s="router_start_timeout_s",
    ),
    ready_path="/ready",
    vram=_vram,
    settings=_settings_module(),
    paths=RouterPaths,
    disk=DiskNeeds(0.1, "a test service's", 0.1, "a test service's"),
    install_key="router_install",
    gpu_index_key="router_gpu_index",
    share_keys=("router_vram_gib",),
)


@pytest.fixture
def with_router(monkeypatch, settings):
    """The registry with the router's line added, and its settings set as all.py would."""
    monkeypatch.setattr(registry, "SERVICES", (*registry.SERVICES, ROUTER))
    settings.update(
        router_install=True,
        router_user="router",
        router_host="127.0.0.1",
        router_port=8200,
        router_start_timeout_s=60,
        router_gpu_index=0,
        router_vram_gib=0.5,
    )
    return settings


def test_the_shipped_registry_is_consistent():
    assert registry_problems(registry.SERVICES) == []
    assert [s.unit for s in registry.SERVICES] == [
        "vllm.service",
        "voxcpm.service",
        "comfyui.service",
    ]


def test_a_registered_service_is_in_its_mode(with_router):
    assert mode_services(with_router)["llm"] == ["router.service", "vllm.service"]
    with_router["router_install"] = False
    assert mode_services(with_router)["llm"] == ["vllm.service"]


def test_a_registered_service_is_in_the_budget(with_router):
    assert [s.service for s in mode_shares(with_router)["llm"]] == ["vllm", "vllm", "router"]
    assert "router 0.5 GiB = estimate" in budget_report(with_router)["llm"][0]
    # 23.36 GiB of vLLM + 0.5 GiB fit a 24 GiB card; 1 GiB does not
    assert validate(with_router) == []
    with_router["router_vram_gib"] = 1.0
    (problem,) = validate(with_router)
    assert problem.startswith("VRAM budget: llm mode oversubscribes GPU 0: 24.4 of 24 GiB")
    assert problem.endswith(
        "lower a share (router_vram_gib, vllm_gpu_memory_utilization) or put services on "
        "different GPUs (router_gpu_index)"
    )


def test_a_registered_services_gpu_index_is_checked(with_router):
    with_router["router_gpu_index"] = 3
    assert budget_problems(with_router) == [
        "router_gpu_index: GPU 3 does not exist on a host that declares 2 GPU(s) "
        "(nvidia_gpu_count); use 0..1 (the llm mode runs router there)"
    ]


def test_a_registered_services_port_collision_is_refused(with_router):
    with_router["router_port"] = with_router["vllm_port"]
    assert validate(with_router) == [
        f"router_port: {with_router['vllm_port']} is vllm_port too; give each service its own port"
    ]


def test_a_registered_services_settings_are_checked_and_known(with_router):
    """Its keys are settings (no 'not a rigup setting'), each checked, and required."""
    with_router["router_port"] = "8200"
    del with_router["router_vram_gib"]
    assert validate(with_router) == [
        "router_port: must be an integer, got '8200'",
        "router_vram_gib: missing (set it in inventory/group_data/all.py)",
    ]


def test_a_registered_service_is_in_the_doctors_config(with_router):
    cfg = doctor_config(with_router, MODEL)
    assert cfg["modes"]["llm"] == {
        "target": MODES["llm"],
        "services": ["router.service", "vllm.service"],
    }
    (venv,) = [v for v in cfg["venvs"] if v["name"] == "Router"]
    assert venv == {
        "name": "Router",
        "python": "/opt/rigup/router/venv/bin/python",
        "lock": "/opt/rigup/router/requirements.lock",
        "deploy": "deploys/router.py",
        "mislabelled": [],
    }


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"name": "vllm", "unit": "vllm.service"}, "vllm: name vllm is vllm's too"),
        ({"keys": registry.SERVICES[0].keys}, "port setting vllm_port is vllm's too"),
        ({"mode": "batch"}, "router: mode 'batch' is none of llm, media"),
        ({"unit": "rtr.service"}, "router: unit rtr.service is not router.service"),
        ({"api_key": False}, "router: an API without a key needs its opt-in setting"),
    ],
)
def test_a_footprint_that_does_not_fit_the_registry_is_named(change, problem):
    bad = ServiceFootprint(**{**ROUTER.__dict__, **change})
    assert problem in "; ".join(registry_problems((*registry.SERVICES, bad)))


#: The shared layers: what they read of a service comes from its footprint, so none of them
#: names a service's unit or one of its settings (their own vLLM sections aside: the doctor's
#: benchmark is vLLM's).
SHARED = (
    "roles/settings.py",
    "roles/modes/__init__.py",
    "roles/modes/budget.py",
    "roles/modes/settings.py",
    "roles/common/service.py",
    "roles/common/footprint.py",
    "tests/infra/checks.py",
    "tests/infra/test_modes.py",
    "tests/infra/test_hardening.py",
)


@pytest.mark.parametrize("path", SHARED)
def test_the_shared_layers_name_no_service(path):
    """The places that named each service before the registry (ports, GPU index, the budget's
    service map and formulas, the modes' installed flags, the manifests, the sandbox ceilings and
    API table of testinfra) are gone: code outside comments and docstrings names no unit and no
    ``<service>_`` setting of a registered service."""
    text = (REPO / path).read_text(encoding="utf-8")
    code = re.sub(r'"""(.|\n)*?"""', "", text)
    code = "\n".join(line.split("#", 1)[0] for line in code.splitlines())
    names = "|".join(s.name for s in registry.SERVICES)
    found = re.findall(rf"\b(?:{names})(?:\.service|_\w+)", code)
    assert found == [], f"{path} names services: {sorted(set(found))}"


def test_the_grep_finds_what_it_looks_for():
    """The search of the test above finds a service named in code (it cannot pass vacuously)."""
    code = 'ports = ("vllm_port", "comfyui.service")  # voxcpm_port\n'
    code = "\n".join(line.split("#", 1)[0] for line in code.splitlines())
    names = "|".join(s.name for s in registry.SERVICES)
    assert re.findall(rf"\b(?:{names})(?:\.service|_\w+)", code) == [
        "vllm_port",
        "comfyui.service",
    ]
