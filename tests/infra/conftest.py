"""testinfra against every host of a pyinfra inventory, with expectations from the same settings.

    pytest tests/infra --inventory inventory/lab.py
    pytest tests/infra --inventory inventory/rig.py

Hosts, connection details and expected values all come from the inventory and
inventory/group_data/all.py through pyinfra's own inventory loader, so there is no second copy
of any value. A failing test about a service attaches the service's journal to the report.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import testinfra
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory

from roles.common.paths import Layout
from roles.model import placed_path
from roles.model.paths import ModelPaths
from roles.vllm.paths import VllmPaths

REPO = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--inventory",
        default=str(REPO / "inventory" / "lab.py"),
        help="pyinfra inventory file whose hosts are tested (default: inventory/lab.py)",
    )


def _load_hosts(inventory_file: str) -> list:
    ctx_state.set(State())
    inventory = make_inventory(inventory_file, cwd=str(REPO))
    return list(inventory)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "rig" in metafunc.fixturenames:
        hosts = _load_hosts(metafunc.config.getoption("--inventory"))
        metafunc.parametrize("rig", hosts, ids=[h.name for h in hosts], scope="session")


def _testinfra_host(rig):
    """A testinfra host for a pyinfra inventory host (ssh with its key/port/known_hosts, or local)."""
    if rig.name.startswith("@local"):
        return testinfra.get_host("local://")
    data = rig.data
    hostname = data.get("ssh_hostname") or rig.name
    user = data.get("ssh_user") or "root"
    port = data.get("ssh_port") or 22
    extra = ["-o", "BatchMode=yes"]
    if data.get("ssh_known_hosts_file"):
        extra += ["-o", f"UserKnownHostsFile={data.get('ssh_known_hosts_file')}"]
    if data.get("ssh_strict_host_key_checking"):
        extra += ["-o", f"StrictHostKeyChecking={data.get('ssh_strict_host_key_checking')}"]
    kwargs = {"ssh_extra_args": shlex.join(extra)}
    if data.get("ssh_key"):
        kwargs["ssh_identity_file"] = data.get("ssh_key")
    sudo = user != "root"
    return testinfra.get_host(f"ssh://{user}@{hostname}:{port}", sudo=sudo, **kwargs)


@pytest.fixture(scope="session")
def host(rig):
    """testinfra host for the inventory host under test (overrides testinfra's own fixture)."""
    return _testinfra_host(rig)


@pytest.fixture(scope="session")
def data(rig):
    """The host's settings: group_data/all.py merged with the inventory's per-host values."""
    return rig.data


@pytest.fixture(scope="session")
def paths(data) -> Layout:
    """rigup's layout on the host (prefix, etc, state, uv...)."""
    return Layout.from_data(data)


@pytest.fixture(scope="session")
def vllm_paths(data) -> VllmPaths:
    return VllmPaths.from_data(data)


@pytest.fixture(scope="session")
def model_paths(data) -> ModelPaths:
    return ModelPaths.from_data(data)


@pytest.fixture(scope="session")
def llm_dir(data) -> str:
    """Where the LLM vLLM serves is placed: ``<model_store_dir>/<name>/<revision>``."""
    return placed_path(data, data.get("model_llm_manifest"))


@pytest.fixture(scope="session")
def has_gpus(data) -> bool:
    return data.get("nvidia_gpu_count") > 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failing test marked ``@pytest.mark.unit("x.service")``, attach that unit's journal."""
    report = yield
    marker = item.get_closest_marker("unit")
    if report.failed and call.when == "call" and marker and "host" in item.funcargs:
        unit = marker.args[0]
        tb = item.funcargs["host"]
        out = tb.run(
            f"journalctl -u {shlex.quote(unit)} -n 60 --no-pager 2>&1; "
            f"systemctl status {shlex.quote(unit)} --no-pager 2>&1"
        )
        report.sections.append((f"journal of {unit}", out.stdout))
    return report


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit(name): the systemd unit a test is about")
