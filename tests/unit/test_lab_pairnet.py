"""The lab pair's network plan (lab/pairnet.py), its relay routes and the machine settings a
pair's machine gets (lab/render.py, lab/pair.py): pure, no root."""

from __future__ import annotations

import ipaddress

import pytest

from lab import pairnet, render
from lab.config import LabConfig, LabError
from lab.pair import pair_configs


def test_plan_puts_every_address_inside_the_private_subnet():
    net = pairnet.plan("rigs", ("rigs-a", "rigs-b"))
    subnet = ipaddress.ip_network(net.subnet)
    addresses = [r.address for r in net.rigs] + [net.controller, *net.relayed.values()]
    assert len(set(addresses)) == len(addresses)
    assert all(ipaddress.ip_address(a) in subnet for a in addresses)
    assert [r.address for r in net.rigs] == ["10.77.0.1", "10.77.0.2"]
    assert net.controller == "10.77.0.254"
    assert net.namespaces == ("rigs-link", "rigs-a", "rigs-b")


def test_plan_follows_another_subnet():
    net = pairnet.plan("p2", ("x", "y", "z"), "192.168.50.0/28")
    assert [r.address for r in net.rigs] == ["192.168.50.1", "192.168.50.2", "192.168.50.3"]
    assert net.controller == "192.168.50.14"
    assert [r.netns for r in net.rigs] == ["p2-a", "p2-b", "p2-c"]


def test_plan_refuses_every_bad_value_at_once():
    with pytest.raises(LabError) as err:
        pairnet.plan("Rigs_with_a_long_name", ("a",), "8.8.8.0/24")
    text = str(err.value)
    assert "pair name 'Rigs_with_a_long_name'" in text
    assert "machines ['a']" in text
    assert "subnet '8.8.8.0/24'" in text


def test_interface_names_fit_ifnamsiz():
    net = pairnet.plan("abcdefghij", ("m1", "m2"))
    names = [pairnet.BRIDGE, pairnet.RIG_IFNAME, *(r.port for r in net.rigs)]
    assert all(len(n.encode()) <= 15 for n in names)


def test_up_argvs_make_namespaces_first_and_address_only_inside_them():
    net = pairnet.plan("rigs", ("rigs-a", "rigs-b"))
    argvs = pairnet.up_argvs(net)
    assert argvs[:3] == [["ip", "netns", "add", ns] for ns in net.namespaces]
    # every later command names a namespace of the pair: nothing is made on the controller's own
    for argv in argvs[3:]:
        assert argv[1] == "-n" and argv[2] in net.namespaces, argv
    assert not any("route" in argv for argv in argvs)
    veths = [a for a in argvs if "veth" in a]
    assert [a[a.index("netns") + 1] for a in veths] == ["rigs-a", "rigs-b"]


def test_leftovers_are_only_the_pairs_namespaces():
    net = pairnet.plan("rigs", ("rigs-a", "rigs-b"))
    found = pairnet.leftover_namespaces(net, ["rigs-a", "other-a", "rigs-link", "rigs-c"])
    assert found == ["rigs-a", "rigs-link"]
    assert pairnet.down_argvs(found) == [
        ["ip", "netns", "delete", "rigs-a"],
        ["ip", "netns", "delete", "rigs-link"],
    ]


def test_relay_routes_ssh_to_the_same_port_and_archives_by_name():
    net = pairnet.plan("rigs", ("rigs-a", "rigs-b"))
    routes = pairnet.relay_routes(net, {"rigs-a": 2301, "rigs-b": 2302})
    assert routes[:2] == [
        {"listen_ns": "", "listen": ["127.0.0.1", 2301], "connect_ns": "rigs-link",
         "connect": ["10.77.0.1", 2301]},
        {"listen_ns": "", "listen": ["127.0.0.1", 2302], "connect_ns": "rigs-link",
         "connect": ["10.77.0.2", 2302]},
    ]  # fmt: skip
    archives = routes[2:]
    assert {(r["connect"][0], r["connect"][1]) for r in archives} == {
        (h, p) for h in pairnet.RELAYED_HOSTS for p in (80, 443)
    }
    for r in archives:
        assert r["listen_ns"] == "rigs-link" and r["connect_ns"] == ""
        assert r["listen"][0] == net.relayed[r["connect"][0]]


def test_hosts_lines_name_the_relay_addresses_and_the_rigs():
    net = pairnet.plan("rigs", ("rigs-a", "rigs-b"))
    lines = net.hosts_lines().splitlines()
    assert f"{net.relayed['pypi.org']}\tpypi.org" in lines
    assert "10.77.0.2\trigs-b" in lines


def test_pair_configs_from_env():
    net, configs, state = pair_configs(
        {"RIGUP_LAB_PAIR": "rigs", "RIGUP_LAB_SSH_PORT": "2310", "RIGUP_LAB_STATE_DIR": "/var/x"}
    )
    assert [(c.name, c.ssh_port, c.netns, c.address) for c in configs] == [
        ("rigs-a", 2310, "rigs-a", "10.77.0.1"),
        ("rigs-b", 2311, "rigs-b", "10.77.0.2"),
    ]
    assert str(configs[1].state_dir) == "/var/x/rigs-b"
    assert str(state) == "/var/x/pair"
    assert "pypi.org" in configs[0].extra_hosts


def test_nspawn_joins_the_namespace_only_for_a_pair_machine():
    alone = LabConfig(name="m")
    assert not any(a.startswith("--network") for a in render.nspawn_argv(alone))
    _, configs, _ = pair_configs({"RIGUP_LAB_STATE_DIR": "/var/x"})
    argv = render.nspawn_argv(configs[0])
    assert "--network-namespace-path=/run/netns/rigs-a" in argv
    assert "--resolv-conf=off" in argv
    assert "--capability=CAP_NET_ADMIN" in argv  # the rig's firewall (nft)
    assert "--capability=CAP_NET_ADMIN" not in render.nspawn_argv(alone)


def test_sshd_listens_on_the_pair_address():
    assert "ListenAddress 10.77.0.1\n" in render.sshd_dropin_text(2301, "10.77.0.1")
    assert render.ssh_socket_dropin_text(2301, "10.77.0.1").endswith(
        "ListenStream=10.77.0.1:2301\n"
    )
    assert render.hosts_text("rigs-a", "10.77.0.2\trigs-b\n").endswith("10.77.0.2\trigs-b\n")


def test_relay_carries_a_connection_both_ways():
    """Within one namespace (no root): what the client sends reaches the target, the target's
    answer comes back, and a half-close travels through."""
    import socket
    import threading

    from lab import relay

    target = socket.create_server(("127.0.0.1", 0))
    got = []

    def answer():
        conn, _ = target.accept()
        with conn:
            data = b""
            while chunk := conn.recv(4096):
                data += chunk
            got.append(data)
            conn.sendall(data.upper())

    threading.Thread(target=answer, daemon=True).start()
    route = relay.Route("", ("127.0.0.1", 0), "", target.getsockname())
    (server,) = relay.listen_all([route])
    threading.Thread(target=relay.serve, args=(server, route), daemon=True).start()
    with socket.create_connection(server.getsockname(), timeout=5) as client:
        client.sendall(b"hello rig" * 1000)
        client.shutdown(socket.SHUT_WR)
        back = b""
        while chunk := client.recv(4096):
            back += chunk
    assert got == [b"hello rig" * 1000]
    assert back == b"HELLO RIG" * 1000


def test_the_cli_names_the_pair_commands():
    from lab import __main__ as cli

    for command in ("pair-up", "pair-destroy"):
        assert cli.build_parser().parse_args([command]).command == command
