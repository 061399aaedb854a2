"""What every rigup unit and path shows to the rest of the host: the sandbox of each unit
(`systemd-analyze security`), nothing under rigup's paths writable by every user, uv's lock
files root-only, every socket of rigup's services on loopback (the API a setting binds beyond it
only with an API key or its named opt-in), and the units' address filter as a second wall."""

from __future__ import annotations

import re

import pytest

from lab.hub_lab import HUB_UNIT
from roles.cluster.unit import ENGINE_UNIT
from roles.comfyui.footprint import FOOTPRINT
from roles.comfyui.paths import ComfyuiPaths
from roles.common.facts import ListeningSockets
from roles.common.urls import is_loopback
from roles.nvidia import NVLINK_UNIT, POWER_UNIT
from roles.services import SERVICES, by_unit
from tests.infra.checks import writable_by_every_user

#: The exposure each unit reached in the lab (systemd 257), and what it may not exceed: a higher
#: score means a sandbox setting was lost. (systemd-analyze security: 0 safe ... 10 exposed)
CEILINGS = {
    **{s.unit: s.sandbox_ceiling for s in SERVICES},
    POWER_UNIT: 1.5,
    NVLINK_UNIT: 1.0,
}


def _installed(host, unit: str) -> bool:
    return host.run(f"systemctl cat {unit}").rc == 0


@pytest.mark.parametrize("unit", list(CEILINGS))
def test_unit_sandbox_exposure(host, unit, request):
    if not _installed(host, unit):
        pytest.skip(f"{unit} is not installed on this host")
    request.node.add_marker(pytest.mark.unit(unit))
    out = host.run(f"systemd-analyze security --no-pager {unit}")
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", out.stdout)
    assert match, f"systemd-analyze security {unit}: {out.stdout[-500:]}{out.stderr}"
    score = float(match.group(1))
    assert score <= CEILINGS[unit], (
        f"{unit} exposure {score} is above {CEILINGS[unit]}: a sandbox setting of rigup's unit "
        f"is missing (`systemd-analyze security {unit}` lists them); re-run the deploy"
    )


def _rigup_roots(data, paths) -> list[str]:
    roots = [paths.prefix, paths.etc, paths.state, paths.tmp, paths.uv_cache]
    roots.append(data.get("model_store_dir"))
    if FOOTPRINT.installed(data):
        roots.append(ComfyuiPaths.from_data(data).base)
    return roots


def test_no_world_writable_file_under_rigup_paths(host, data, paths):
    """Nothing under rigup's directories is writable by every user. What lies in a directory
    others cannot enter is out of their reach whatever its mode, and is not counted: uv's lock
    files, which uv makes 0666 whatever the umask, in rigup's 0700 temp directory (a build of a
    source distribution, on a cold uv cache) and uv cache (test_base checks both directories;
    tests/infra/checks.py says how)."""
    found = writable_by_every_user(host, _rigup_roots(data, paths))
    assert not found, (
        f"writable by every user under rigup's paths (mode, owner, path): {found[:20]}. "
        "`chmod o-w` on each repairs it; re-running the deploy repairs the directories and uv "
        "lock files it manages, not files put there by hand or by another program"
    )


def test_uv_lock_files_are_root_only(host, paths):
    """A lock file any user can open, any user can flock, stalling every converge's uv."""
    out = host.run(f"find {paths.prefix} -maxdepth 3 -name .lock -printf '%m %u %p\\n'")
    locks = out.stdout.splitlines()
    assert locks, f"no uv lock file under {paths.prefix}: is the host converged?"
    loose = [line for line in locks if not line.startswith("600 root ")]
    assert not loose, f"uv lock files others can open: {loose}; re-run the deploy"


def _listening(host) -> list[dict]:
    fact = ListeningSockets()
    return fact.process(host.run(fact.command()).stdout.splitlines()) or []


#: Each service's API: the settings of the address and port it serves on (its unit binds them).
API = {s.unit: (s.keys.host, s.keys.port) for s in SERVICES}
#: rigup's services, and the lab's Hugging Face-compatible server (lab/hub_lab.py) where it runs
RIGUP_UNITS = (*API, HUB_UNIT)


def _api_beyond_loopback(data, unit: str, port: int) -> bool:
    """True for ``unit``'s API port when its setting binds it beyond loopback (by choice: the
    next test checks its key or opt-in)."""
    if unit not in API:
        return False
    host_key, port_key = API[unit]
    return port == int(data.get(port_key)) and not is_loopback(str(data.get(host_key)))


def _cluster_socket(member, unit: str, sock: dict) -> bool:
    """True for a socket of the engine's unit (vllm.service) on a rig of a cluster (roles/cluster) that its engine
    opens to the peer rigs: on the private address, or torch's store on the master port (bound
    to every address); the cluster's firewall lets only the peers reach them."""
    if member is None or unit != ENGINE_UNIT:
        return False
    return sock["address"] == member.address or sock["port"] == member.master_port


def test_rigup_services_listen_on_loopback_only(host, data, cluster_member):
    """Every TCP socket a rigup service's processes listen on, in the mode the host is in
    (bin/rigup-lab lists both), is on loopback: the API, and the sockets vLLM's engine opens
    for itself (torch.distributed's store, gloo and NCCL, ZeroMQ; roles/vllm/flags.py
    service_env keeps them there). The one exception is an API a setting binds beyond
    loopback, which the next test holds to its key or opt-in. The listing is printed."""
    listing, wide = [], []
    for sock in _listening(host):
        where = f"{sock['address']}:{sock['port']}"
        for proc in sock["processes"]:
            if proc["unit"] not in RIGUP_UNITS:
                continue
            line = f"{proc['unit']} {proc['name']} (pid {proc['pid']}) {where}"
            listing.append(line)
            if (
                not is_loopback(sock["address"])
                and not _api_beyond_loopback(data, proc["unit"], sock["port"])
                and not _cluster_socket(cluster_member, proc["unit"], sock)
            ):
                wide.append(line)
    print("rigup services listening:\n  " + "\n  ".join(sorted(set(listing)) or ["none"]))
    assert not wide, (
        f"rigup services listen beyond loopback: {sorted(set(wide))}. vLLM's own sockets "
        "follow roles/vllm/flags.py service_env (re-run deploys/vllm.py); an API follows its "
        "*_host setting"
    )


@pytest.mark.parametrize("unit", list(API))
def test_a_loopback_service_unit_allows_loopback_only(host, data, unit, cluster_member):
    """The second wall: a service whose API is bound to loopback gets no IP traffic from or to
    other hosts (IPAddressDeny=any, IPAddressAllow=localhost). systemd enforces it with a cgroup
    BPF filter, so only on the unified cgroup hierarchy (cgroup v2: Ubuntu 26.04); whether it is
    in force on this host is printed."""
    if not _installed(host, unit):
        pytest.skip(f"{unit} is not installed on this host")
    bind = str(data.get(API[unit][0]))
    if not is_loopback(bind):
        pytest.skip(f"{unit} serves beyond loopback ({API[unit][0]} = {bind}): no address filter")
    out = host.run(f"systemctl show {unit} -p IPAddressDeny -p IPAddressAllow")
    got = {k: set(v.split()) for k, _, v in (x.partition("=") for x in out.stdout.split("\n"))}
    assert got.get("IPAddressDeny") == {"0.0.0.0/0", "::/0"}, (
        f"{unit} does not deny other addresses: {got}; re-run its deploy"
    )
    # on a rig of a cluster vllm.service reaches its peer rigs too (roles/cluster/unit.py)
    peers = cluster_member.peer_addresses if cluster_member and unit == ENGINE_UNIT else ()
    allowed = {f"{p}/{128 if ':' in p else 32}" for p in peers}
    assert got.get("IPAddressAllow") == {"127.0.0.0/8", "::1/128", *allowed}, (
        f"{unit} bound to loopback must allow loopback (and its peer rigs) only: {got}; re-run "
        "its deploy"
    )
    fs = host.run("stat -fc %T /sys/fs/cgroup").stdout.strip()
    print(f"{unit}: IP address filter {'in force' if fs == 'cgroup2fs' else 'NOT in force'} ({fs})")


def test_services_beyond_loopback_have_a_key_or_their_opt_in(host, data):
    """The API of a service its setting binds beyond loopback: the service has its API key
    (stored root-only, 0600) and answers /v1/* without it 401, or, for one without
    authentication (ComfyUI), its footprint's opt-in setting is set
    (comfyui_allow_network_without_auth)."""
    exposed = []
    for sock in _listening(host):
        units = {p["unit"] for p in sock["processes"]}
        for unit in sorted(units & set(API)):
            if is_loopback(sock["address"]) or not _api_beyond_loopback(data, unit, sock["port"]):
                continue  # other sockets: test_rigup_services_listen_on_loopback_only
            where = f"{sock['address']}:{sock['port']}"
            service = by_unit(unit)
            if not service.api_key:
                assert data.get(service.open_api_key), (
                    f"{unit} listens on {where} without {service.open_api_key}"
                )
                exposed.append(f"{unit} {where} (opt-in)")
                continue
            f = host.file(service.paths.from_data(data).api_key_file)
            assert f.exists and (f.user, f.mode) == ("root", 0o600), (
                f"{unit} listens on {where} and has no root-only API key at {f.path}"
            )
            status = host.run(
                f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{sock['port']}/v1/models"
            ).stdout
            assert status == "401", f"{unit} on {where} answers /v1/models without a key: {status}"
            exposed.append(f"{unit} {where} (key)")
    print(f"rigup services beyond loopback: {exposed or 'none'}")
