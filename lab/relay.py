"""A TCP relay between network namespaces: each route listens on an address in one namespace
and carries every connection to a fixed address in another. The lab pair (:mod:`lab.pair`) runs
one relay process for:

- the controller's SSH to each rig: ``127.0.0.1:<ssh_port>`` on the controller (its own
  namespace) -> the rig's ``<address>:<ssh_port>``, connected from the pair's link namespace
  (pyinfra, testinfra and :class:`lab.machine.LabMachine` reach the rigs as they reach the single
  lab machine);
- the package archives: ``<relay address>:80|443`` in the link namespace -> the same host name
  and port, connected from the controller's namespace. The rigs' /etc/hosts names those
  addresses (:meth:`lab.pairnet.PairNet.hosts_lines`); TLS goes through untouched, so uv and apt
  check the archives' certificates and signatures as on a rig. Only those host:port pairs are
  reachable: there is no route, no NAT and no proxy that takes any destination.

A socket belongs to the network namespace of the thread that created it (setns(2) changes the
calling thread's only), so the listeners are made after ``setns`` into their namespace and each
connection's thread enters the target namespace before it connects.

Run: ``python3 -m lab.relay SPEC.json`` (a list of :class:`Route` as dicts). Standard library
only.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import os
import socket
import sys
import threading
from pathlib import Path

#: setns(2)'s nstype for a network namespace (include/uapi/linux/sched.h)
CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"


@dataclasses.dataclass(frozen=True)
class Route:
    """Listen on ``listen`` (host, port) in namespace ``listen_ns``; connect each connection to
    ``connect`` (host name or address, port) from namespace ``connect_ns``. "" = the relay's own
    namespace (the controller's)."""

    listen_ns: str
    listen: tuple[str, int]
    connect_ns: str
    connect: tuple[str, int]

    @classmethod
    def from_dict(cls, d: dict) -> Route:
        return cls(d["listen_ns"], tuple(d["listen"]), d["connect_ns"], tuple(d["connect"]))


def _setns(path: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends, then end ``dst``'s sending side (one
    direction of a relayed connection; OSError from either side ends the copy)."""
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


def _carry(client: socket.socket, route: Route) -> None:
    try:
        if route.connect_ns:  # else: the relay's own, where every thread starts
            _setns(f"{NETNS_DIR}/{route.connect_ns}")  # this thread only
        upstream = socket.create_connection(route.connect, timeout=10)
        upstream.settimeout(None)
    except OSError as exc:
        print(f"relay: {route.connect[0]}:{route.connect[1]}: {exc}", file=sys.stderr, flush=True)
        client.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def serve(server: socket.socket, route: Route) -> None:
    """Accept on ``server`` forever, carrying each connection along ``route`` in a thread."""
    while True:
        client, _ = server.accept()
        threading.Thread(target=_carry, args=(client, route), daemon=True).start()


def listen_all(routes: list[Route]) -> list[socket.socket]:
    """One listening socket per route, each in its route's namespace (the calling thread ends in
    its own namespace again). Raises OSError when an address is taken or a namespace missing."""
    own_fd = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    servers = []
    try:
        for route in routes:
            if route.listen_ns:
                _setns(f"{NETNS_DIR}/{route.listen_ns}")
            try:
                servers.append(socket.create_server(route.listen, reuse_port=False))
            finally:
                if route.listen_ns and libc.setns(own_fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the relay's namespace")
    except OSError:
        for s in servers:
            s.close()
        raise
    finally:
        os.close(own_fd)
    return servers


def main(argv: list[str]) -> int:
    routes = [Route.from_dict(d) for d in json.loads(Path(argv[1]).read_text())]
    servers = listen_all(routes)
    print(f"relay: {len(servers)} routes listening", flush=True)
    threads = [
        threading.Thread(target=serve, args=(s, r), daemon=True)
        for s, r in zip(servers, routes, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
