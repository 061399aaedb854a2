"""One rig's place in its cluster (:class:`ClusterMember`), what its vllm.service, firewall and
supervisor render from. Pure, no pyinfra and no role imported (roles/vllm/flags.py uses it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClusterMember:
    """One rig's place in its cluster: everything its vllm.service, firewall and supervisor
    render from. ``peers``: ``(host name, private address)`` of every other rig, by rank."""

    name: str
    cluster: str
    rank: int
    nnodes: int
    pipeline_parallel_size: int
    master_addr: str
    master_port: int
    address: str
    ifname: str
    peers: tuple[tuple[str, str], ...]
    leader: str
    firewall: bool = True

    @property
    def is_leader(self) -> bool:
        """Rank 0 runs the API server; the others run ``--headless``."""
        return self.rank == 0

    def vllm_args(self) -> list[str]:
        """The multi-node flags of ``vllm serve`` (vLLM 0.22.1's spellings, arg_utils.py and
        cli_args.py): ``["--pipeline-parallel-size", "2", "--nnodes", "2", "--node-rank", "1",
        "--master-addr", "10.77.0.1", "--master-port", "29501", "--headless"]``
        (``--headless`` on followers only)."""
        args = [
            "--pipeline-parallel-size", str(self.pipeline_parallel_size),
            "--nnodes", str(self.nnodes),
            "--node-rank", str(self.rank),
            "--master-addr", self.master_addr,
            "--master-port", str(self.master_port),
        ]  # fmt: skip
        return args if self.is_leader else [*args, "--headless"]

    def env(self) -> dict[str, str]:
        """What replaces the single rig's loopback addresses (roles/vllm/flags.py
        ``LOOPBACK_ENV``): vLLM's own address (``VLLM_HOST_IP``: its cross-node message queues,
        vllm/utils/network_utils.py ``get_ip``) and the interface gloo and NCCL use between the
        rigs. ``VLLM_LOOPBACK_IP`` stays 127.0.0.1: the ranks inside a rig still meet there."""
        return {
            "VLLM_HOST_IP": self.address,
            "GLOO_SOCKET_IFNAME": self.ifname,
            "NCCL_SOCKET_IFNAME": self.ifname,
        }

    @property
    def peer_addresses(self) -> tuple[str, ...]:
        """The private addresses of the other rigs."""
        return tuple(address for _, address in self.peers)
