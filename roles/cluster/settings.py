"""Rules for the cluster role's settings (inventory/group_data/all.py, "Many rigs").

One model served across several rigs with vLLM 0.22.1's own multi-node launcher: every rig runs
the same ``vllm serve`` with ``--nnodes N --node-rank R --master-addr <leader> --master-port P``
(vllm/engine/arg_utils.py ``add_cli_args``, "--nnodes"/"--node-rank"/"--master-addr"/
"--master-port"), the followers with ``--headless`` (vllm/entrypoints/openai/cli_args.py).
Pipeline parallel runs across the rigs (one stage per rig), tensor parallel inside each.

These are the checks of one rig's own values; the rules across the rigs of a cluster (one leader,
ranks unique and complete, the same locks) are in roles/cluster/group.py.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roles.common.checks import Check, boolean, integer, matches, service_port
from roles.common.setting import (
    Setting,
    TypedSettings,
    declared,
    each_rule,
    optional,
    rules,
    setting,
)

#: A cluster's name: letters, digits, '.', '_', '-'; "" = this rig serves alone.
CLUSTER_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]{0,63})?$")
#: A Linux interface name: at most 15 bytes (IFNAMSIZ - 1, include/uapi/linux/if.h), no '/' or
#: white space; "" = none (a rig that serves alone).
IFNAME = re.compile(r"^([A-Za-z0-9_.:-]{1,15})?$")
#: Most rigs in one cluster (pipeline stages): far above what a link of 10/25 GbE carries well.
MAX_NODES = 16


def ip_address_or_empty(value: Any) -> str | None:
    """An IPv4 or IPv6 address literal (no host name: the firewall and vLLM's ``VLLM_HOST_IP``
    need the address itself), or "" (a rig that serves alone)."""
    if not isinstance(value, str):
        return f"must be a string (an IP address such as '10.77.0.1', or ''), got {value!r}"
    if value == "":
        return None
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return f"must be an IP address such as '10.77.0.1' (not a host name), got {value!r}"
    if address.is_loopback or address.is_unspecified or address.is_multicast:
        return (
            f"{value} is a loopback, unspecified or multicast address; use the rig's private link"
        )
    return None


@dataclass(frozen=True)
class ClusterSettings(TypedSettings):
    """One rig's part in a cluster (defaults and meaning in inventory/group_data/all.py, "Many
    rigs"). ``vllm_nnodes`` = 1 (the default): the rig serves alone and none of this renders."""

    cluster_name: str = setting(
        matches(CLUSTER_NAME, "a name of letters, digits, '.', '_', '-' or ''")
    )
    vllm_nnodes: int = setting(integer(1, MAX_NODES))
    vllm_node_rank: int = setting(integer(0, MAX_NODES - 1))
    vllm_pipeline_parallel_size: int = setting(integer(1, MAX_NODES))
    vllm_master_port: int = setting(service_port)
    cluster_private_address: str = setting(ip_address_or_empty)
    cluster_private_ifname: str = setting(
        matches(IFNAME, "a network interface name such as 'enp5s0' or ''")
    )
    cluster_firewall: bool = setting(boolean)
    cluster_watch_interval_s: int = setting(integer(5, 600))
    cluster_watch_failures: int = setting(integer(1, 20))
    cluster_probe_timeout_s: int = setting(integer(5, 600))

    @property
    def clustered(self) -> bool:
        """True when this rig is one of several serving one model."""
        return self.vllm_nnodes > 1


SETTINGS: tuple[Setting, ...] = declared(ClusterSettings)
RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def alone_means_alone(values: Mapping[str, Any]) -> list[str]:
    """A rig that serves alone (``vllm_nnodes`` = 1) is rank 0 with one pipeline stage: rigup
    runs pipeline parallel only across rigs, tensor parallel inside each."""
    if values["vllm_nnodes"] != 1:
        return []
    problems = []
    if values["vllm_node_rank"] != 0:
        problems.append(
            f"vllm_node_rank: {values['vllm_node_rank']} on a rig that serves alone "
            "(vllm_nnodes = 1); set vllm_nnodes to the number of rigs, or the rank to 0"
        )
    if values["vllm_pipeline_parallel_size"] != 1:
        problems.append(
            f"vllm_pipeline_parallel_size: {values['vllm_pipeline_parallel_size']} on a rig that "
            "serves alone (vllm_nnodes = 1); rigup runs one pipeline stage per rig, so set "
            "vllm_nnodes too, or keep it 1 (tensor parallel splits the model inside a rig)"
        )
    return problems


def member_complete(values: Mapping[str, Any]) -> list[str]:
    """A rig of a cluster names its cluster, its rank below ``vllm_nnodes``, one pipeline stage
    per rig, and its private link (address and interface)."""
    nnodes = values["vllm_nnodes"]
    if nnodes == 1:
        return []
    problems = []
    if not values["cluster_name"]:
        problems.append(
            f"cluster_name: empty on a rig of {nnodes} (vllm_nnodes); name the cluster in the "
            "group data of its rigs"
        )
    if values["vllm_node_rank"] >= nnodes:
        problems.append(
            f"vllm_node_rank: {values['vllm_node_rank']} is not below vllm_nnodes ({nnodes}); "
            f"ranks are 0..{nnodes - 1}, 0 the leader"
        )
    if values["vllm_pipeline_parallel_size"] != nnodes:
        problems.append(
            f"vllm_pipeline_parallel_size: {values['vllm_pipeline_parallel_size']} with "
            f"vllm_nnodes = {nnodes}; rigup runs one pipeline stage per rig (tensor parallel "
            f"inside each), so set it to {nnodes}"
        )
    for key, what in (
        ("cluster_private_address", "this rig's address on the link between the rigs"),
        ("cluster_private_ifname", "the interface of that link (vLLM's gloo and NCCL use it)"),
    ):
        if not values[key]:
            problems.append(f"{key}: empty on a rig of {nnodes} (vllm_nnodes); set it to {what}")
    return problems


def stage_fills_the_rig(values: Mapping[str, Any]) -> list[str]:
    """On a cluster of GPU rigs each rig's stage uses all of its GPUs, one tensor-parallel shard
    each: vLLM 0.22.1 gives every node ``world_size // nnodes`` local ranks
    (vllm/engine/arg_utils.py ``create_engine_config``: ``local_world_size``)."""
    gpus, tp = values["nvidia_gpu_count"], values["vllm_tensor_parallel_size"]
    if values["vllm_nnodes"] == 1 or gpus == 0:
        return []
    if tp != gpus:
        return [
            f"vllm_tensor_parallel_size: {tp} on a rig of a cluster that declares {gpus} GPU(s) "
            "(nvidia_gpu_count); each rig runs one pipeline stage on all of its GPUs, so they "
            "must be equal"
        ]
    return []


def no_drafter_across_rigs(values: Mapping[str, Any]) -> list[str]:
    """No speculative decoding across rigs: vLLM 0.22.1 gives the drafter the target's
    pipeline_parallel_size (vllm/config/speculative.py) and refuses pipeline parallel for a
    model without ``SupportsPP`` (vllm/config/model.py ``verify_with_parallel_config``), which
    Qwen3.6's MTP head (``Qwen3_5MTP``, vllm/model_executor/models/qwen3_5_mtp.py) is not: its
    argument check fails "Pipeline parallelism is not supported for this model" (measured:
    tests/vllm/test_cluster_argv.py)."""
    spec = values["vllm_speculative_config"]
    if values["vllm_nnodes"] > 1 and spec:
        return [
            f"vllm_speculative_config: {spec.get('method')!r} speculative decoding with "
            f"pipeline parallel across {values['vllm_nnodes']} rigs: vLLM 0.22.1 refuses it "
            '("Pipeline parallelism is not supported for this model": the MTP drafter '
            "Qwen3_5MTP does not implement SupportsPP); set it to None in the cluster's group data"
        ]
    return []


#: The rules over several of one rig's keys (roles.common.setting.each_rule).
CONSISTENCY = (alone_means_alone, member_complete, stage_fills_the_rig, no_drafter_across_rigs)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Problems of the rules over several of one rig's keys (:data:`CONSISTENCY`)."""
    return each_rule(values, CONSISTENCY)


#: The multi-node flags of ``vllm serve`` rigup renders on a rig of a cluster (flag -> the
#: setting it comes from; roles/cluster/group.py ``ClusterMember.vllm_args``): managed, so
#: ``vllm_extra_args`` may not set them (roles/vllm/settings.py ``MANAGED``).
CLUSTER_FLAGS: dict[str, str] = {
    "--pipeline-parallel-size": "vllm_pipeline_parallel_size",
    "--nnodes": "vllm_nnodes",
    "--node-rank": "vllm_node_rank",
    "--master-addr": "cluster_private_address (the leader's)",
    "--master-port": "vllm_master_port",
    "--headless": "vllm_node_rank (followers)",
}
#: vLLM 0.22.1's short spellings of them (vllm/engine/arg_utils.py ``add_cli_args``)
CLUSTER_ALIASES: dict[str, str] = {
    "-pp": "--pipeline-parallel-size",
    "-n": "--nnodes",
    "-r": "--node-rank",
}
