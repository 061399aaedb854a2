"""Ports and bind addresses (roles/common/urls.py) and the ListeningSockets fact
(roles/common/facts.py) on output captured from `ss -Hltnp` and /proc/<pid>/cgroup."""

from __future__ import annotations

import pytest

from roles.common.facts import ListeningSockets
from roles.common.urls import binds_overlap, port_holders

# `ss -Hltnp` on the lab machine (Debian 13, systemd-nspawn sharing the controller's network: the
# controller's own sockets are listed without a process), then each pid's cgroup.
SS = [
    'LISTEN 0      128        127.0.0.1:2280       0.0.0.0:*    users:(("sshd",pid=58,fd=3))',
    "LISTEN 0      2048       127.0.0.1:12280      0.0.0.0:*    "
    'users:(("python3.11",pid=9766,fd=13))',
    "LISTEN 0      4096         0.0.0.0:8000       0.0.0.0:*",
    "LISTEN 0      4096            [::]:22            [::]:*",
    "LISTEN 0      4096   127.0.0.53%lo:53         0.0.0.0:*    "
    'users:(("systemd-resolve",pid=300,fd=15),("systemd-resolve",pid=301,fd=15))',
    "@cgroups",
    "58 0::/system.slice/ssh.service",
    "9766 0::/system.slice/voxcpm.service",
    "300 0::/system.slice/systemd-resolved.service",
    "301 ",
]


@pytest.fixture
def sockets():
    return ListeningSockets().process(SS)


def test_fact_reads_address_port_process_and_unit(sockets):
    assert sockets[0] == {
        "address": "127.0.0.1",
        "port": 2280,
        "processes": [{"name": "sshd", "pid": 58, "unit": "ssh.service"}],
    }
    assert sockets[2] == {"address": "0.0.0.0", "port": 8000, "processes": []}
    assert sockets[3]["address"] == "::"
    resolver = sockets[4]
    assert resolver["address"] == "127.0.0.53" and resolver["port"] == 53
    assert [p["unit"] for p in resolver["processes"]] == ["systemd-resolved.service", ""]


def test_fact_without_ss():
    assert ListeningSockets().process(["@no-ss"]) is None


@pytest.mark.parametrize(
    "bind,address,overlap",
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("127.0.0.1", "0.0.0.0", True),
        ("0.0.0.0", "127.0.0.1", True),
        ("127.0.0.1", "::", True),
        ("::", "10.0.0.5", True),
        ("127.0.0.1", "10.0.0.5", False),
        ("127.0.0.1", "::1", False),
        ("localhost", "::1", True),
        ("localhost", "10.0.0.5", False),
        ("rig.lan", "10.0.0.5", True),  # a name may resolve to any address
        ("[::1]", "::1", True),
    ],
)
def test_binds_overlap(bind, address, overlap):
    assert binds_overlap(bind, address) is overlap


def test_the_port_of_another_process_is_named(sockets):
    assert port_holders(sockets, "127.0.0.1", 2280, "voxcpm.service") == [
        "sshd (pid 58, ssh.service) on 127.0.0.1:2280"
    ]


def test_the_services_own_process_does_not_count(sockets):
    assert port_holders(sockets, "127.0.0.1", 12280, "voxcpm.service") == []
    assert port_holders(sockets, "127.0.0.1", 12280, "comfyui.service") == [
        "python3.11 (pid 9766, voxcpm.service) on 127.0.0.1:12280"
    ]


def test_a_socket_of_a_process_this_host_cannot_see(sockets):
    (holder,) = port_holders(sockets, "127.0.0.1", 8000, "vllm.service")
    assert holder.startswith("a process this host does not show") and "0.0.0.0:8000" in holder


def test_a_free_port_or_another_address(sockets):
    assert port_holders(sockets, "127.0.0.1", 8100, "voxcpm.service") == []
    assert port_holders(sockets, "10.0.0.5", 53, "voxcpm.service") == []  # 127.0.0.53 only
    assert port_holders(sockets, "0.0.0.0", 22, "voxcpm.service")  # [::]:22 takes every address
