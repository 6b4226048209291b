"""Shared fixtures (helpers live in tests/helpers.py, importable as ``helpers``)."""

from __future__ import annotations

import atexit
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from cluster_scenario import run_scenario
from helpers import STORE_KINDS, open_test_store
from postgres_server import PostgresServer, PostgresUnavailable, find_bin_dir

import think_actors as ta
from think_actors.store.postgres import close_pools
from think_actors.testing import ScriptedModel


@pytest.fixture
def scripted() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def memory_store() -> AsyncIterator[ta.MemoryStore]:
    store = ta.MemoryStore()
    yield store
    await store.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server, started the first time a test asks for one and stopped at session end.

    Missing server binaries skip the tests that need it, and fail them under CI (``scripts/install-system-deps.sh``
    installs them, and ``.ci/run`` sets CI), so CI never leaves the PostgreSQL store untested.
    """
    if find_bin_dir() is None and not os.environ.get("CI"):
        pytest.skip(
            "PostgreSQL's server binaries are not installed: run scripts/install-system-deps.sh as root "
            "(or apt-get install postgresql)"
        )
    try:
        server = PostgresServer()
        server.start()
    except PostgresUnavailable as exc:
        unavailable = str(exc)
    else:
        unavailable = ""
    if unavailable:  # failed outside the except block, so the report is the message alone
        pytest.fail(f"the PostgreSQL store tests need a PostgreSQL server: {unavailable}", pytrace=False)
    atexit.register(server.stop)  # also when the session is cut short
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def multinode_facts(postgres_server: PostgresServer) -> Iterator[dict[str, Any]]:
    """The facts of tests/multinode/scenario.py, run once for the session (tests/cluster_scenario.py): the
    multi-node checks and the scheduler's node loss share one cluster."""
    yield from run_scenario(postgres_server)


def _psql(server: PostgresServer, sql: str) -> None:
    subprocess.run(
        [str(server.bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.dsn(), "-c", sql],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, empty database on the session's server, dropped after the test.

    Sync on purpose, so a sync parametrized fixture can ask for it with ``request.getfixturevalue``. A test that
    opens stores on it must close the shared pools (``close_pools``) before it ends; the ``store`` fixtures do.
    """
    name = f"test_{uuid.uuid4().hex[:16]}"
    _psql(postgres_server, f'CREATE DATABASE "{name}"')
    try:
        yield postgres_server.dsn(name)
    finally:
        _psql(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=STORE_KINDS)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """``(kind, where)``: the store kind under test and its file path or database URL."""
    kind: str = request.param
    if kind == "postgres":
        return kind, request.getfixturevalue("postgres_url")
    return kind, str(tmp_path / "agent.db")


@pytest.fixture
async def store(store_location: tuple[str, str]) -> AsyncIterator[ta.Store]:
    """One agent's store of every kind in STORE_KINDS."""
    s = open_test_store(*store_location)
    try:
        yield s
    finally:
        await s.close()
        await close_pools()
