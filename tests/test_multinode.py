"""Agents on a cluster of several Ray nodes on this machine, their stores in a real PostgreSQL.

The cluster (``ray.cluster_utils.Cluster``: a head and two workers, each a real raylet) lives in a subprocess,
tests/multinode/scenario.py, because this session may already hold a local Ray and one process holds one Ray.
The scenario runs every check in one cluster lifetime and prints its facts; each test here asserts one check.
Whatever happens, nothing of the run is left behind: the scenario shuts its cluster down in a ``finally``, and
this module kills its process group on a timeout and then every process that carries the run's marker in its
environment (Ray's workers are in process groups of their own).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PostgresServer

SCENARIO = Path(__file__).parent / "multinode" / "scenario.py"
SCENARIO_TIMEOUT_S = 150
MARKER = "THINK_ACTORS_MULTINODE_RUN"


def marked_processes(run: str) -> list[int]:
    """Processes whose environment carries ``MARKER=run``: the scenario, its nodes and their workers."""
    needle = f"{MARKER}={run}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def reap(run: str, grace_s: float = 45.0) -> list[int]:
    """Wait for the run's processes to exit (workers notice their raylet's end within seconds; a worker still
    booting when its raylet ends, such as a warm worker being pre-started, only once its boot reaches the raylet,
    which takes tens of seconds on a loaded machine), then kill the rest; returns the ones that had to be killed."""
    deadline = time.monotonic() + grace_s
    while (left := marked_processes(run)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


def _psql(server: PostgresServer, sql: str) -> None:
    command = [str(server.bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.dsn(), "-c", sql]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def scenario(postgres_server: PostgresServer) -> Iterator[dict[str, Any]]:
    """Run the scenario once against a fresh database (about 25 s on an idle 2-core machine); its facts, plus
    ``left_behind`` and ``seconds``."""
    database = f"multinode_{uuid.uuid4().hex[:12]}"
    _psql(postgres_server, f'CREATE DATABASE "{database}"')
    run = uuid.uuid4().hex
    env = {**os.environ, MARKER: run}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, str(SCENARIO), postgres_server.dsn(database)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        try:
            out, err = process.communicate(timeout=SCENARIO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate()
            pytest.fail(f"the scenario ran past {SCENARIO_TIMEOUT_S} s; its stderr ends:\n{err[-4000:]}")
        finally:
            seconds = time.monotonic() - started
            left_behind = reap(run)
        lines = [line for line in out.splitlines() if line.startswith("SCENARIO-RESULT ")]
        if process.returncode != 0 or not lines:
            pytest.fail(f"the scenario failed (exit {process.returncode}); its stderr ends:\n{err[-4000:]}")
        facts: dict[str, Any] = json.loads(lines[-1].removeprefix("SCENARIO-RESULT "))
        facts["left_behind"] = left_behind
        facts["seconds"] = seconds
        facts["stderr"] = err
        yield facts
    finally:
        _psql(postgres_server, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def check(facts: dict[str, Any], name: str) -> dict[str, Any]:
    """The facts of one check, failing with its traceback if it raised (or the set-up's, if that did)."""
    for stage in ("setup", name):
        if "error" in facts.get(stage, {}):
            pytest.fail(f"the scenario's {stage} raised:\n{facts[stage]['error']}", pytrace=False)
    assert name in facts, f"the scenario never ran the {name!r} check; its stderr ends:\n{facts['stderr'][-3000:]}"
    result: dict[str, Any] = facts[name]
    return result


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
