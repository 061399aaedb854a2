"""testinfra against every host of a pyinfra inventory, with expectations from the same settings.

    pytest tests/infra --inventory inventory/lab.py
    pytest tests/infra --inventory inventory/rig.py

Hosts, connection details and expected values all come from the inventory and
inventory/group_data/all.py through pyinfra's own inventory loader, so there is no second copy
of any value. A failing test about a service attaches the service's journal to the report.
Services that listen on a host's loopback are reached from the controller through an SSH tunnel
(the ``forward`` fixture), so controller-side clients such as OpenAI's SDK talk to them.
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import testinfra
from pyinfra.api import State
from pyinfra.context import ctx_state
from pyinfra_cli.inventory import make_inventory

from roles.common.paths import Layout
from roles.common.urls import local_probe_address
from roles.model import placed_path
from roles.model.paths import ModelPaths
from roles.modes import ModeTargets
from roles.modes.budget import MODES
from roles.vllm.paths import VllmPaths
from tests.infra.checks import active_mode_of, mode_skip_reason

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


@dataclass(frozen=True)
class SshTarget:
    """How the controller reaches a pyinfra inventory host over SSH: its user, address, port,
    key and known_hosts options, as pyinfra connects (testinfra and tunnels share them)."""

    user: str
    hostname: str
    port: int
    key: str | None
    options: tuple[str, ...]  # ssh -o options

    @classmethod
    def of(cls, rig) -> SshTarget:
        data = rig.data
        options = ["-o", "BatchMode=yes"]
        if data.get("ssh_known_hosts_file"):
            options += ["-o", f"UserKnownHostsFile={data.get('ssh_known_hosts_file')}"]
        if data.get("ssh_strict_host_key_checking"):
            options += ["-o", f"StrictHostKeyChecking={data.get('ssh_strict_host_key_checking')}"]
        return cls(
            user=data.get("ssh_user") or "root",
            hostname=data.get("ssh_hostname") or rig.name,
            port=int(data.get("ssh_port") or 22),
            key=data.get("ssh_key") or None,
            options=tuple(options),
        )

    def argv(self, *args: str) -> list[str]:
        """``ssh`` to this host with ``args`` before the destination."""
        key = ["-i", self.key] if self.key else []
        return [
            "ssh",
            "-p",
            str(self.port),
            *key,
            *self.options,
            *args,
            f"{self.user}@{self.hostname}",
        ]


def _testinfra_host(rig):
    """A testinfra host for a pyinfra inventory host (ssh with its key/port/known_hosts, or local)."""
    if rig.name.startswith("@local"):
        return testinfra.get_host("local://")
    target = SshTarget.of(rig)
    kwargs = {"ssh_extra_args": shlex.join(target.options)}
    if target.key:
        kwargs["ssh_identity_file"] = target.key
    sudo = target.user != "root"
    url = f"ssh://{target.user}@{target.hostname}:{target.port}"
    return testinfra.get_host(url, sudo=sudo, **kwargs)


def _free_local_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _open_tunnel(target: SshTarget, address: str, port: int, timeout: float = 30.0):
    """``(ssh process, local port)``: ``ssh -N -L 127.0.0.1:<local>:<address>:<port>``, once the
    local port accepts connections. Raises ``RuntimeError`` with ssh's error when it exits."""
    for _ in range(3):  # another process may take the free port before ssh binds it
        local = _free_local_port()
        forward = f"127.0.0.1:{local}:{address}:{port}"
        argv = target.argv("-N", "-o", "ExitOnForwardFailure=yes", "-L", forward)
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", local), timeout=1).close()
                return proc, local
            except OSError:
                time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise RuntimeError(
                f"ssh -L {forward} to {target.hostname}: no listener after {timeout} s"
            )
        error = proc.stderr.read().decode(errors="replace").strip()
        if "Address already in use" not in error:
            raise RuntimeError(f"ssh -L {forward} to {target.hostname} failed: {error}")
    raise RuntimeError(f"ssh -L to {target.hostname}: no free local port after 3 tries: {error}")


@pytest.fixture(scope="session")
def host(rig):
    """testinfra host for the inventory host under test (overrides testinfra's own fixture)."""
    return _testinfra_host(rig)


@pytest.fixture(scope="session")
def forward(rig):
    """``forward(bind, port) -> local port``: a port on the controller's loopback that reaches
    the service a host runs on ``bind:port`` (``bind`` as the service's setting: a wildcard is
    reached on the host's 127.0.0.1), through ``ssh -N -L`` with the host's own SSH settings.
    Each tunnel is opened once and closed at the end of the session. On ``@local`` there is
    nothing to forward: the port itself."""
    tunnels: dict[tuple[str, int], tuple[subprocess.Popen, int]] = {}

    def open_tunnel(bind: str, port: int) -> int:
        address = local_probe_address(str(bind))
        if rig.name.startswith("@local"):
            return int(port)
        if (address, int(port)) not in tunnels:
            tunnels[address, int(port)] = _open_tunnel(SshTarget.of(rig), address, int(port))
        return tunnels[address, int(port)][1]

    yield open_tunnel
    for proc, _ in tunnels.values():
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    """On a failing test marked ``@pytest.mark.unit("x.service")``, attach that unit's journal
    and what the diagnosis library says about it (rigup-explain)."""
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
        verdicts = tb.run(f"/opt/rigup/bin/rigup-explain {shlex.quote(unit)} 2>&1")
        report.sections.append((f"rigup-explain {unit}", verdicts.stdout))
    return report


@pytest.fixture(scope="session")
def active_mode(host) -> str | None:
    """The GPU mode the host is in (``"llm"``, ``"media"``): the mode whose target
    (roles.modes.budget.MODES) is up, read with the deploy's own fact (roles.modes.ModeTargets);
    None when no mode target is up."""
    fact = ModeTargets()
    return active_mode_of(
        fact.process(host.run(fact.command(list(MODES.values()))).stdout.splitlines())
    )


@pytest.fixture(autouse=True)
def _serving_mode(request: pytest.FixtureRequest) -> None:
    """Skip a test marked ``@pytest.mark.serving("x.service")`` when the host is not in that
    unit's mode (:func:`mode_skip_reason`). Autouse: it runs before the test's own fixtures (a
    tunnel to a stopped service would fail them)."""
    marker = request.node.get_closest_marker("serving")
    if marker is None:
        return
    reason = mode_skip_reason(marker.args[0], request.getfixturevalue("active_mode"))
    if reason:
        pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "unit(name): the systemd unit a test is about")
    config.addinivalue_line(
        "markers",
        "serving(name): the test needs the unit serving; skipped with the reason when the host "
        "is in the other GPU mode (the unit is stopped there by design)",
    )


# ---- many rigs (roles/cluster) ----------------------------------------------------------------
@pytest.fixture(scope="session")
def cluster_member(rig, request):
    """This rig's place in its cluster (roles/cluster/member.py ``ClusterMember``), from the
    whole inventory as the deploy reads it; None when it serves alone."""
    from roles.cluster.group import member_of

    if (rig.data.get("vllm_nnodes") or 1) == 1:
        return None
    hosts = _load_hosts(request.config.getoption("--inventory"))
    return member_of(rig.name, {h.name: h.data for h in hosts})
