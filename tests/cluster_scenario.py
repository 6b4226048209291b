"""Runs tests/multinode/scenario.py once for the session: a cluster of several Ray nodes on this machine, in a
subprocess, whose facts tests/test_multinode.py and tests/test_schedule_cluster.py assert (conftest's
``multinode_facts``).

The cluster (``ray.cluster_utils.Cluster``: a head and two workers, each a real raylet) lives in a subprocess
because this session may already hold a local Ray and one process holds one Ray. The scenario runs every check in
one cluster lifetime and prints its facts. Whatever happens, nothing of the run is left behind: the scenario shuts
its cluster down in a ``finally``, and this module kills its process group on a timeout and then every process
that carries the run's marker in its environment (Ray's workers are in process groups of their own).
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
SCENARIO_TIMEOUT_S = 300
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


def run_scenario(server: PostgresServer) -> Iterator[dict[str, Any]]:
    """Run the scenario once against a fresh database on ``server`` and yield its facts, plus ``left_behind`` and
    ``seconds``; the database is dropped when the generator ends."""
    database = f"multinode_{uuid.uuid4().hex[:12]}"
    _psql(server, f'CREATE DATABASE "{database}"')
    run = uuid.uuid4().hex
    env = {**os.environ, MARKER: run}
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, str(SCENARIO), server.dsn(database)],
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
        _psql(server, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


def check(facts: dict[str, Any], name: str) -> dict[str, Any]:
    """The facts of one check, failing with its traceback if it raised (or the set-up's, if that did)."""
    for stage in ("setup", name):
        if "error" in facts.get(stage, {}):
            pytest.fail(f"the scenario's {stage} raised:\n{facts[stage]['error']}", pytrace=False)
    assert name in facts, f"the scenario never ran the {name!r} check; its stderr ends:\n{facts['stderr'][-3000:]}"
    result: dict[str, Any] = facts[name]
    return result
