"""What a client of vllm-router sees while a replica is down (vllm-project/router#135), read
from captured real answers (tests/fixtures/router: the real vllm-router 0.1.17 started with
rigup's argv, one replica killed, a client asking /v1/models every 0.2 s), and the bound rigup
states for it (roles/router/flags.py replica_drop_bound_s)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from lab.router_failover import route_outcome
from roles.router.flags import replica_drop_bound_s

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "router"


def _group_data() -> dict:
    return {
        k: v
        for k, v in runpy.run_path(str(REPO / "inventory" / "group_data" / "all.py")).items()
        if k.startswith("router_")
    }


def test_drop_bound_of_the_shipped_and_the_lab_settings():
    assert replica_drop_bound_s(_group_data()) == 3 * 10 + 5
    _hosts, lab = runpy.run_path(str(REPO / "inventory" / "lab_replicas.py"))["lab_replicas"]
    assert replica_drop_bound_s(lab) == 2 * 3 + 2


def test_models_answers_500_until_the_dead_replica_is_out_then_200():
    record = json.loads((FIXTURES / "controller-a-down-v1-models.json").read_text())
    stopped, bound = record["stopped"], record["bound_s"]
    seen = route_outcome(record["results"], stopped, stopped + bound)
    assert seen["before"] and seen["before_ok"]
    # the answer: 500 with the router's line naming the dead replica's /v1/models
    assert seen["failed"], seen
    assert {f["status"] for f in seen["failed"]} == {500}
    assert all(
        f["body"].startswith("Request failed: error sending request for url (http://127.0.0.1:")
        and f["body"].endswith("/v1/models)")
        for f in seen["failed"]
    ), seen["failed"]
    # within the stated bound, then every answer is the healthy replica's list
    assert seen["last_failure_s"] <= bound
    assert 0 < seen["longest_outage_s"] <= bound
    assert seen["settled"] >= 5 and seen["settled_ok"]
    after = [r for r in record["results"] if r["t"] > stopped + bound]
    assert {m["id"] for r in after for m in r["body"]["data"]} == {"rigup-test-model"}


def test_an_outage_with_no_answer_after_it_has_no_length():
    results = [
        {"status": 200, "seconds": 0.1, "t": 10.0, "body": {}},
        {"status": 200, "seconds": 0.1, "t": 12.0, "body": {}},
        {"status": 500, "seconds": 0.1, "t": 13.0, "body": "x" * 500},
        {"status": 0, "seconds": 30.0, "t": 14.0, "body": "timed out"},
    ]
    seen = route_outcome(results, stopped=11.0, settled_at=13.5)
    assert (seen["before"], seen["after"]) == (1, 3)
    assert [f["status"] for f in seen["failed"]] == [500, 0]
    assert len(seen["failed"][0]["body"]) == 200
    assert seen["last_failure_s"] == 3.0 and seen["longest_outage_s"] is None
    assert (seen["settled"], seen["settled_ok"]) == (1, False)


def test_with_every_replica_down_the_router_answers_503_naming_no_replica():
    """The lab pair with both replicas' vLLM stopped (tests/fixtures/router/lab-all-down-*):
    the model list first fails on the dead replica it asks (500 naming it), then, once both are
    out, every route answers 503 with vllm-router's own line; nothing answers 200."""
    models = json.loads((FIXTURES / "lab-all-down-v1-models.json").read_text())
    chat = json.loads((FIXTURES / "lab-all-down-v1-chat-completions.json").read_text())
    for record in (models, chat):
        stopped = record["stopped"]
        seen = route_outcome(record["results"], stopped, stopped + record["stop_s"] + 20)
        assert seen["before"] and seen["before_ok"]
        assert seen["failed"] and seen["longest_outage_s"] is None  # no 200 after a failure
        assert seen["settled"] >= 5 and not seen["settled_ok"]
        assert seen["failed"][-1]["status"] == 503
    bodies = {(f["status"], f["body"]) for f in route_outcome(models["results"], 0, 0)["failed"]}
    assert (503, "No workers are currently available") in bodies
    assert (
        500,
        "Request failed: error sending request for url (http://10.77.0.1:8000/v1/models)",
    ) in bodies
    chat_bodies = {f["body"] for f in route_outcome(chat["results"], 0, 0)["failed"]}
    assert "No available workers (all circuits open or unhealthy)" in chat_bodies
