"""Agents on a cluster of several Ray nodes on this machine, their stores in a real PostgreSQL.

tests/multinode/scenario.py runs every check in one cluster lifetime, in a subprocess, and prints its facts
(tests/cluster_scenario.py runs it once for the session, for this module and tests/test_schedule_cluster.py); each
test here asserts one check.
"""

from __future__ import annotations

from typing import Any

import pytest
from cluster_scenario import SCENARIO_TIMEOUT_S, check


@pytest.fixture
def scenario(multinode_facts: dict[str, Any]) -> dict[str, Any]:
    return multinode_facts


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 60)
def test_agents_spawned_without_a_node_are_spread_over_the_nodes(scenario: dict[str, Any]) -> None:
    spread = check(scenario, "spread")
    assert scenario["cluster"]["nodes"] == ["head", "w1", "w2"]
    assert sorted(spread["placed"].values()) == ["head", "w1", "w2"], (
        f"SPREAD should put three agents on three nodes: {spread['placed']}"
    )
    assert spread["replies"] == ["echo: hello spread-0", "echo: hello spread-1", "echo: hello spread-2"]
    assert spread["resident_by_node"] == {"head": 1, "w1": 1, "w2": 1}, "ta.list_agents() should see each node's"


def test_a_parent_on_one_node_streams_its_child_on_another(scenario: dict[str, Any]) -> None:
    facts = check(scenario, "parent_and_child")
    assert (facts["lead_node"], facts["child_node"]) == ("w1", "w2"), "spawn(node_id=) and agent_tool(node_id=)"
    assert facts["child_paths"] == ["lead/lead/helper/run-call-helper"]
    assert facts["event_kinds"][0] == "started" and facts["event_kinds"][-1] == "finished", facts["event_kinds"]
    assert facts["forwarded_text"] == "helper on <w2>", "the child's chunks, forwarded across nodes, in order"
    assert facts["lead_text"] == "lead heard: helper on <w2>"
    assert facts["finish"] == "finish"


def test_a_gateway_on_one_node_serves_agents_on_the_others(scenario: dict[str, Any]) -> None:
    facts = check(scenario, "gateway")
    assert (facts["gateway_node"], facts["url_host"]) == ("head", "127.0.0.1")
    on_workers = {name: node for name, node in check(scenario, "spread")["placed"].items() if node != "head"}
    assert {name: chat["node"] for name, chat in facts["chats"].items()} == on_workers, (
        "the gateway should have chatted with the agents of both workers"
    )
    assert sorted(on_workers.values()) == ["w1", "w2"]
    for name, chat in facts["chats"].items():
        earlier = [f"user: hello {name}", f"assistant: echo: hello {name}"]
        assert chat["before"] == earlier, f"{name}: the transcript on connect comes from the store"
        assert chat["after"] == [
            *earlier,
            f"user: through the gateway to {name}",
            f"assistant: echo: through the gateway to {name}",
        ]
        assert chat["outcome"] == "completed"


def test_every_node_gets_its_own_model_server_pool_once(scenario: dict[str, Any]) -> None:
    facts = check(scenario, "model_pools")
    assert facts["started"] == ["head", "w1", "w2"]
    assert facts["again"] == [], "a second start_model_pools starts nothing"
    assert facts["placed"] == {"head/0": "head", "w1/0": "w1", "w2/0": "w2"}, (
        "each pool runs on the node it is named for"
    )


def test_a_lost_node_s_agents_come_back_on_other_nodes_and_finish_what_they_accepted(
    scenario: dict[str, Any],
) -> None:
    facts = check(scenario, "node_loss")
    assert facts["first_reply"] == "echo: before the loss"
    assert facts["node_before"] == "w2"
    assert facts["status_when_removed"] == "running", "w2 should go while the accepted submission's turn runs"
    assert (facts["final_status"], facts["final_error"]) == ("completed", None)
    assert facts["live_nodes"] == ["head", "w1"]
    assert facts["node_after"] in ("head", "w1") and facts["pid_changed"], "re-created in another process, elsewhere"
    assert facts["history"] == [
        "user: before the loss",
        "assistant: echo: before the loss",
        "user: hold on <w2>",
        "assistant: echo: hold on <w2>",
    ], "the history from before the loss, and the submission's turn answered on the new node"
    assert facts["next_reply"] == "echo: after the loss"
    assert facts["sql"] == {
        "generation": 2,  # the restarted actor claimed the agent's next lease generation
        "roles": ["user", "assistant"] * 3,
        "submissions": ["completed"],
    }
    for name, moved in facts["bystanders"].items():
        assert moved["node"] in ("head", "w1"), f"{name} should have been re-created off w2"
        assert moved["history_kept"], f"{name} lost history in the move"
    on_w2 = [name for name, node in check(scenario, "spread")["placed"].items() if node == "w2"]
    assert sorted(facts["bystanders"]) == ["helper", *on_w2], "w2's other agents: the helper child and a spread one"


def test_the_cluster_leaves_no_process_behind(scenario: dict[str, Any]) -> None:
    assert scenario["left_behind"] == [], "processes of the run outlived it and had to be killed"


def test_a_tree_spread_over_the_nodes_stops_at_its_limit_and_at_one_cancel(scenario: dict[str, Any]) -> None:
    facts = check(scenario, "run_limits")
    assert (facts["status"], facts["limit"]) == ("error", "max_total_tokens")
    assert facts["tokens"] == facts["requests"] * 110 and facts["tokens"] - 600 < 4 * 110
    assert len(facts["nodes"]) >= 2, f"the tree's agents should be spread over the nodes: {facts['nodes']}"
    assert facts["still_running"] == 0, "every grandchild stopped by the root's cancel, on its node"
    assert facts["stopped"] == ["aborted"]
    assert facts["cancel_to_last_stopped_s"] < 20  # long before their models' 30 s (timed by bench_limits.py)


def test_a_parked_action_outlives_its_node_and_is_approved_by_another_agent(scenario: dict[str, Any]) -> None:
    facts = check(scenario, "action_pause")
    assert facts["first_reply"] == "Waiting for approval.", "the refund parked: the model was told it waits"
    assert facts["node_before"] == "w2"
    assert facts["node_after"] in ("head", "w1") and facts["pid_changed"], "re-created in another process, elsewhere"
    [execution_id] = facts["pending_before_loss"]
    assert execution_id.startswith("actpause_")
    assert facts["pending_after_loss"] == [execution_id], "the pending approval outlived w2 in PostgreSQL"
    assert facts["approver_node"] == "w1"
    assert facts["approver_tool_outputs"] == ["refunded A-1"], "the approve ran the refund and answered its output"
    assert facts["approver_reply"] == "approver heard: refunded A-1"
    assert facts["second_approve"] == {
        "status": "error",
        "executionId": execution_id,
        "error": f'Execution "{execution_id}" is no longer pending: it was approved or rejected elsewhere, or it '
        "never existed.",
    }
    assert (facts["count_before"], facts["count"]) == (0, 1), "the refund ran once, after the approval"
    assert facts["pending_after_approval"] == []
    assert facts["desk_tool_outputs"] == ["refunded A-1"], "the refund's output replaced the paused one"
    assert facts["desk_last_text"] == "Refund done.", "the conversation went on by itself after the approval"
    assert facts["sql"] == {
        "generation": 2,  # the desk re-created off w2 claimed the next lease generation
        "roles": ["user", "assistant", "assistant"],  # the turn that parked, then the continuation
        "submissions": [],
    }
