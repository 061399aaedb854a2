"""The rigs of a cluster, read from the whole inventory: the rules across them, and each rig's
view of the others (its :class:`ClusterMember`). Pure: rigs are ``{host name: settings mapping}``
(pyinfra's ``host.data`` or plain dicts), so the unit tests check bad group inventories directly.

A cluster is the rigs whose ``cluster_name`` is the same and whose ``vllm_nnodes`` is above 1.
Rank 0 is the leader: its ``cluster_private_address`` is every rig's ``--master-addr``, so the
leader's address is written once, on the leader.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from typing import Any

from roles.cluster.member import ClusterMember
from roles.cluster.settings import RULES as CLUSTER_RULES
from roles.common.setting import declared
from roles.model.manifest import ManifestError, lock_path, manifest_path
from roles.vllm.settings import RULES as VLLM_RULES
from roles.vllm.settings import VllmSettings

#: vLLM settings each rig may set for itself: its account, interpreter, API bind address, port,
#: key variable, start timeout, extra environment and CPU-build memory share. Every other vLLM
#: setting shapes the engine, whose ranks must agree: the same on every rig of a cluster.
PER_RIG_VLLM = (
    "vllm_user",
    "vllm_python",
    "vllm_host",
    "vllm_port",
    "vllm_api_key_env",
    "vllm_start_timeout_s",
    "vllm_env",
    "vllm_cpu_memory_utilization",
)
#: The settings every rig of a cluster shares (compared with the leader's): the engine's vLLM
#: settings (vllm_version and vllm_device pick the vLLM lock), the model manifest and the
#: cluster's own shared keys.
SHARED = (
    *(s.name for s in declared(VllmSettings) if s.name not in PER_RIG_VLLM),
    "vllm_nnodes",
    "vllm_pipeline_parallel_size",
    "vllm_master_port",
    "model_llm_manifest",
    "cluster_firewall",
    "cluster_watch_interval_s",
    "cluster_watch_failures",
    "cluster_probe_timeout_s",
)
_RULES = {**VLLM_RULES, **CLUSTER_RULES}


def _checked(data: Mapping[str, Any] | Any, key: str) -> Any:
    """``data[key]`` when it passes its own check, else None (that rig's own validation names
    it)."""
    value = data.get(key)
    if value is None:
        return None
    check = _RULES.get(key)
    return value if check is None or check(value) is None else None


def clusters(rigs: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{cluster name: {host name: data}}`` of the rigs whose ``vllm_nnodes`` is above 1, in
    inventory order."""
    found: dict[str, dict[str, Any]] = {}
    for name, data in rigs.items():
        nnodes, cluster = _checked(data, "vllm_nnodes"), _checked(data, "cluster_name")
        if nnodes and nnodes > 1 and cluster:
            found.setdefault(cluster, {})[name] = data
    return found


def _lock_digest(data: Any) -> str | None:
    """sha256 of the model lock the rig would be served from, "" when there is none yet, None
    when its manifest does not load (its own validation says why)."""
    ref, lock_dir = data.get("model_llm_manifest"), data.get("model_lock_dir") or ""
    if not isinstance(ref, str) or not isinstance(lock_dir, str):
        return None
    try:
        lock = lock_path(manifest_path(ref), lock_dir)
    except ManifestError:
        return None
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock.is_file() else ""


def cluster_problems(cluster: str, rigs: Mapping[str, Any]) -> list[str]:
    """Every problem across the rigs of one cluster, each naming the rig and the key:
    exactly one leader (rank 0), ranks unique and complete (0..vllm_nnodes - 1, one rig each),
    ``vllm_tensor_parallel_size`` × ``vllm_pipeline_parallel_size`` equal to the GPUs the rigs
    declare (``nvidia_gpu_count``, where they declare GPUs), the :data:`SHARED` settings (the
    vLLM lock, the model) equal to the leader's, the same model lock, distinct private
    addresses."""
    problems: list[str] = []
    names = list(rigs)
    ranks = {name: _checked(data, "vllm_node_rank") for name, data in rigs.items()}
    leaders = [name for name, rank in ranks.items() if rank == 0]
    if not leaders:
        problems.append(
            f"cluster {cluster!r}: vllm_node_rank: no rig is the leader (rank 0) among "
            f"{', '.join(names)}; give exactly one rig vllm_node_rank = 0"
        )
    elif len(leaders) > 1:
        problems.append(
            f"cluster {cluster!r}: vllm_node_rank: {' and '.join(leaders)} are all rank 0; "
            "exactly one rig is the leader"
        )
    reference = leaders[0] if leaders else names[0]
    ref_data = rigs[reference]
    ref_what = f"the leader {reference}" if leaders else reference

    nnodes = _checked(ref_data, "vllm_nnodes")
    if nnodes and len(rigs) != nnodes:
        problems.append(
            f"cluster {cluster!r}: vllm_nnodes: {nnodes}, but the inventory has {len(rigs)} "
            f"rig(s) in it ({', '.join(names)})"
        )
    by_rank: dict[int, list[str]] = {}
    for name, rank in ranks.items():
        if rank is not None:
            by_rank.setdefault(rank, []).append(name)
    for rank, holders in sorted(by_rank.items()):
        if rank != 0 and len(holders) > 1:
            problems.append(
                f"cluster {cluster!r}: vllm_node_rank: {' and '.join(holders)} are all rank {rank}; "
                "each rig has a rank of its own"
            )
    if nnodes:
        # rank 0 missing is said above ("no rig is the leader")
        missing = [r for r in range(1, nnodes) if r not in by_rank]
        if missing and all(r is not None for r in ranks.values()):
            problems.append(
                f"cluster {cluster!r}: vllm_node_rank: no rig has rank "
                f"{', '.join(map(str, missing))}; ranks are 0..{nnodes - 1}, one rig each"
            )

    for key in SHARED:
        want = _checked(ref_data, key)
        for name, data in rigs.items():
            have = _checked(data, key)
            if name != reference and want is not None and have is not None and have != want:
                problems.append(
                    f"{name}: {key}: {have!r}, but {ref_what} has {want!r}; every rig of "
                    f"cluster {cluster!r} runs the same"
                )

    digests = {name: _lock_digest(data) for name, data in rigs.items()}
    want_lock = digests[reference]
    for name, digest in digests.items():
        if name != reference and None not in (digest, want_lock) and digest != want_lock:
            state = lambda d: f"lock sha256 {d[:12]}" if d else "no lock yet"  # noqa: E731
            problems.append(
                f"{name}: model_llm_manifest: its model lock ({state(digest)}) differs from "
                f"{ref_what}'s ({state(want_lock)}); every rig of cluster {cluster!r} serves "
                "the same bytes: share one model_lock_dir, or copy the lock"
            )

    tp = _checked(ref_data, "vllm_tensor_parallel_size")
    pp = _checked(ref_data, "vllm_pipeline_parallel_size")
    gpus = {name: data.get("nvidia_gpu_count") for name, data in rigs.items()}
    if tp and pp and all(isinstance(g, int) and not isinstance(g, bool) for g in gpus.values()):
        total = sum(gpus.values())
        if total > 0 and tp * pp != total:
            each = ", ".join(f"{n} {g}" for n, g in gpus.items())
            problems.append(
                f"cluster {cluster!r}: vllm_tensor_parallel_size × vllm_pipeline_parallel_size = "
                f"{tp} × {pp} = {tp * pp}, but its rigs declare {total} GPU(s) "
                f"(nvidia_gpu_count: {each})"
            )

    owners: dict[str, list[str]] = {}
    for name, data in rigs.items():
        address = _checked(data, "cluster_private_address")
        if address:
            owners.setdefault(address, []).append(name)
    families = {ipaddress.ip_address(a).version for a in owners}
    if len(families) > 1:
        each = ", ".join(f"{n} {a}" for a, holders in owners.items() for n in holders)
        problems.append(
            f"cluster {cluster!r}: cluster_private_address: IPv4 and IPv6 mixed ({each}); the "
            "rigs of a cluster share one link, all on one family"
        )
    for address, holders in owners.items():
        if len(holders) > 1:
            problems.append(
                f"cluster {cluster!r}: cluster_private_address: {' and '.join(holders)} all have "
                f"{address}; each rig has an address of its own"
            )
    return problems


def group_problems(rigs: Mapping[str, Any]) -> list[str]:
    """Every problem across every cluster of the inventory ``rigs`` ({host name: data}), all at
    once ([] when each cluster is sound, or there is none)."""
    return [
        p for cluster, members in clusters(rigs).items() for p in cluster_problems(cluster, members)
    ]


def member_of(name: str, rigs: Mapping[str, Any]) -> ClusterMember | None:
    """The rig ``name``'s :class:`ClusterMember`, or None when it serves alone. Call after
    :func:`group_problems` found nothing (one leader, valid values)."""
    data = rigs[name]
    if (_checked(data, "vllm_nnodes") or 1) == 1:
        return None
    members = clusters(rigs)[data.get("cluster_name")]
    ordered = sorted(members.items(), key=lambda item: item[1].get("vllm_node_rank"))
    leader_name, leader = ordered[0]
    return ClusterMember(
        name=name,
        cluster=data.get("cluster_name"),
        rank=data.get("vllm_node_rank"),
        nnodes=data.get("vllm_nnodes"),
        pipeline_parallel_size=data.get("vllm_pipeline_parallel_size"),
        master_addr=leader.get("cluster_private_address"),
        master_port=data.get("vllm_master_port"),
        address=data.get("cluster_private_address"),
        ifname=data.get("cluster_private_ifname"),
        peers=tuple(
            (other, d.get("cluster_private_address")) for other, d in ordered if other != name
        ),
        leader=leader_name,
        firewall=bool(data.get("cluster_firewall")),
    )
