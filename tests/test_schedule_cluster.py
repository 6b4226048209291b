"""The cluster's scheduler survives the loss of its node, and two schedulers racing fire each occurrence once.

tests/multinode/schedule_scenario.py runs in a subprocess (a ``ray.cluster_utils.Cluster`` of a head and one
worker, stores in a real PostgreSQL) and prints its facts; this module asserts them. Nothing of the run is left
behind: the scenario shuts its cluster down in a ``finally``, and the fixture kills its process group on a timeout
and then every process that carries the run's marker (as tests/test_multinode.py does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import PostgresServer
from test_multinode import MARKER, reap

SCENARIO = Path(__file__).parent / "multinode" / "schedule_scenario.py"
SCENARIO_TIMEOUT_S = 300


def _psql(server: PostgresServer, sql: str) -> None:
    command = [str(server.bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.dsn(), "-c", sql]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def facts(postgres_server: PostgresServer) -> Iterator[dict[str, Any]]:
    database = f"schedule_{uuid.uuid4().hex[:12]}"
    _psql(postgres_server, f'CREATE DATABASE "{database}"')
    run = uuid.uuid4().hex
    process = subprocess.Popen(
        [sys.executable, str(SCENARIO), postgres_server.dsn(database)],
        env={**os.environ, MARKER: run},
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
            left_behind = reap(run)
        lines = [line for line in out.splitlines() if line.startswith("SCENARIO-RESULT ")]
        if process.returncode != 0 or not lines:
            pytest.fail(f"the scenario failed (exit {process.returncode}); its stderr ends:\n{err[-4000:]}")
        result: dict[str, Any] = json.loads(lines[-1].removeprefix("SCENARIO-RESULT "))
        if "error" in result:
            pytest.fail(f"the scenario raised:\n{result['error']}\nits stderr ends:\n{err[-3000:]}", pytrace=False)
        result["run"]["left_behind"] = left_behind
        yield result["run"]
    finally:
        _psql(postgres_server, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.mark.timeout(SCENARIO_TIMEOUT_S + 60)
def test_the_scheduler_restarts_on_another_node_and_fires_each_occurrence_once(facts: dict[str, Any]) -> None:
    assert (facts["scheduler_before"], facts["scheduler_after"]) == ("w1", "head")
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
