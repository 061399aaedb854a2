"""vllm.service's processes: torch.distributed's TCP store listens on the loopback address its
init method names, not on every interface.

Why: vLLM 0.22.1 starts tensor parallel with ``init_process_group(init_method=
"tcp://<VLLM_LOOPBACK_IP>:<port>")`` (vllm/v1/executor/multiproc_executor.py), and the rank that
hosts the store is handed that address, but torch 2.11's TCPStore server binds the wildcard
address whatever the host (torch/csrc/distributed/c10d/TCPStoreLibUvBackend.cpp,
``UvTcpServer::makeWithPort``: ``::``, then ``0.0.0.0``; measured in the lab: ``*:<port>``).
The store speaks an unauthenticated protocol. No setting of vLLM or torch changes that bind;
TCPStore takes an already listening socket instead (``master_listen_fd``, what torchelastic
uses), so this module wraps ``torch.distributed.rendezvous._create_c10d_store``: for the rank
that hosts the store (rank 0) and a loopback host, it binds that host and port itself and hands
the socket over. Any other host, rank or torchelastic's agent store goes to torch as it is.

Python imports this module at start-up (``sitecustomize``: vllm.service's PYTHONPATH names its
directory, roles/vllm/flags.py ``service_env``), in every process of the service, the spawned
workers included. It imports nothing of torch: the wrap is made when torch imports
``torch.distributed.rendezvous``. Standard library only.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import ipaddress
import socket
import sys

#: the module whose store factory is wrapped, once it is imported
RENDEZVOUS = "torch.distributed.rendezvous"
#: listen(2) backlog of the store's socket: torch's own (DEFAULT_BACKLOG in
#: TCPStoreLibUvBackend.cpp)
BACKLOG = 16384


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and addresses in 127.0.0.0/8 or ``::1``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_listener(host: str, port: int) -> socket.socket:
    """A TCP socket listening on ``host:port`` (a loopback address; ``localhost`` is 127.0.0.1),
    with SO_REUSEADDR as torch sets it. Raises ``OSError`` when the port is taken."""
    address = "127.0.0.1" if host == "localhost" else host
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def wrap(module) -> None:
    """Wrap ``module._create_c10d_store`` (``module``: torch.distributed.rendezvous) so that the
    store rank 0 hosts for a loopback host listens on that host only."""
    create = module._create_c10d_store

    @functools.wraps(create)
    def create_c10d_store(hostname, port, rank, world_size, timeout, use_libuv=True):
        if rank != 0 or not is_loopback(hostname) or module._torchelastic_use_agent_store():
            return create(hostname, port, rank, world_size, timeout, use_libuv)
        listener = loopback_listener(hostname, port)
        return module.TCPStore(
            host_name=hostname,
            port=port,
            world_size=world_size,
            is_master=True,
            timeout=timeout,
            multi_tenant=True,
            use_libuv=use_libuv,
            master_listen_fd=listener.detach(),  # the store owns and closes it
        )

    module._create_c10d_store = create_c10d_store


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds :data:`RENDEZVOUS` through the other finders and runs :func:`wrap` right after the
    module body, then leaves ``sys.meta_path``."""

    def find_spec(self, fullname, path, target=None):
        if fullname != RENDEZVOUS:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            wrap(module)

        spec.loader.exec_module = exec_module
        return spec


if RENDEZVOUS not in sys.modules:
    sys.meta_path.insert(0, _WrapOnImport())
