"""The lab pair as two replica rigs behind vLLM's router (docs/many-rigs.md "Replicas behind one
endpoint"): the same two machines as inventory/lab_rigs.py (lab/pair.py), each serving the tiny
checkpoint alone with its own single-node vLLM CPU engine on the same core as in the pair, bound
to its address on the pair's link; vllm-router (roles/router) on rig a in front of both. The
router's upstreams are the group ``lab_replicas`` (``router_replica_group``), each rig at its
``router_replica_address``, its address on the link; each rig's firewall lets its vLLM port in
from rig a's address only (``router_replica_firewall``, roles/router/firewall.py).

vLLM bound beyond loopback needs its API key: the controller's ``VLLM_API_KEY`` at converge time
(tests/lab/test_many_rigs.py makes one). Converged after the pair's tests, on the same machines
(the cluster's firewall and supervisor are removed by deploys/cluster.py on a rig that serves
alone):

    VLLM_API_KEY=... .venv/bin/pyinfra inventory/lab_replicas.py deploys/base.py \\
        deploys/vllm.py deploys/cluster.py deploys/modes.py deploys/router.py

The router endpoint: ``http://<rig a's address>:8080`` on the link (router_host), reached from
the rigs and from the controller's end of the bridge (lab/pairnet.py).
"""

from lab.pair import pair_configs
from lab.pair_inventory import engine_settings, machine_settings

_net, _cfgs, _state = pair_configs()

REPLICAS = {
    **engine_settings(_cfgs[0], _state, stages_per_engine=2),  # the whole model on each
    "router_replica_group": "lab_replicas",
    # round robin: every other request goes to each rig, so stopping one is seen by the router
    # (cache_aware, the shipped policy, sends sequential unrelated prompts all to one replica:
    # docs/router.md "Routing")
    "router_policy": "round_robin",
    # the router's checks of each replica, faster than a real rig's: a stopped rig is out after
    # 2 failed checks 3 s apart, each waiting at most 2 s
    "router_health_check_interval_s": 3,
    "router_health_check_timeout_s": 2,
    "router_health_failure_threshold": 2,
}


def _rig(i: int) -> tuple[str, dict]:
    cfg = _cfgs[i]
    data = {
        **machine_settings(cfg, core=i),  # the core it has in the pair
        "vllm_host": cfg.address,
        "router_replica_address": cfg.address,
    }
    if i == 0:
        data.update(router_enabled=True, router_host=cfg.address)
    return cfg.name, data


lab_replicas = ([_rig(0), _rig(1)], REPLICAS)
