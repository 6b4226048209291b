"""The cluster's scheduler survives the loss of its node, and two schedulers racing fire each occurrence once.

The scheduler's part of tests/multinode/scenario.py (tests/multinode/schedule_checks.py): a cluster of a head and
two workers (``ray.cluster_utils.Cluster``, in a subprocess, stores in a real PostgreSQL), the scheduler on w2 and a
rival on the head, w2 removed. tests/cluster_scenario.py runs the scenario once for the session (it also serves
tests/test_multinode.py) and leaves nothing of the run behind; this module asserts the scheduler's facts.
"""

from __future__ import annotations

from typing import Any

import pytest
from cluster_scenario import SCENARIO_TIMEOUT_S, check


@pytest.fixture
def facts(multinode_facts: dict[str, Any]) -> dict[str, Any]:
    result = check(multinode_facts, "schedule")
    return {**result, "left_behind": multinode_facts["left_behind"]}


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 60)
def test_the_scheduler_restarts_on_another_node_and_fires_each_occurrence_once(facts: dict[str, Any]) -> None:
    assert facts["scheduler_before"] == "w2"
    assert facts["scheduler_after"] in ("head", "w1")  # restarted off the lost node
    assert facts["pid_changed"]
    fires = facts["fires"]
    keys = [f["key"] for f in fires]
    assert len(keys) == len(set(keys)) >= 5  # three before the loss, two after
    assert all(k.startswith("tick@") for k in keys)
    assert {f["status"] for f in fires} <= {"delivered", "cancelled"}
    # One turn per occurrence: the submissions are keyed by the occurrences, each once, each completed.
    submissions = facts["submissions"]
    assert sorted(s["submission"] for s in submissions) == sorted(f"schedule:{k}" for k in keys if k)
    assert {s["status"] for s in submissions} == {"completed"}
    history = facts["history"]
    assert history.count("tick") == history.count("echo: tick") == len(submissions)
    assert facts["left_behind"] == []


def test_two_schedulers_racing_on_the_same_rows_fire_each_occurrence_once(facts: dict[str, Any]) -> None:
    main, rival = facts["racing"]
    assert main["running"] and rival["running"] and main["owner"] != rival["owner"]
    # Each occurrence: one fire row (the unique claim), one delivery, one submission, one turn.
    keys = [f["key"] for f in facts["fires"]]
    assert len(keys) == len(set(keys)) == len(facts["submissions"])
    assert all(f["attempts"] == 1 for f in facts["fires"] if f["status"] == "delivered")
    print(f"schedule scenario: {len(keys)} occurrences, scheduler back {facts['restarted_s']} s after the loss")
