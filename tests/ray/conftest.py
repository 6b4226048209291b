"""One Ray for the whole session (address="local", no dashboard).

``ta.shutdown()`` stops the local cluster this session started. Under CI (``CI`` set) the teardown also runs
``ray stop --force`` so nothing survives a crashed worker; on a developer's machine it does not, since it would
kill every other Ray there (a benchmark, another test run). ``.ci/run`` runs it again after the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_agents import RecoveryWatch

import think_actors as ta
from think_actors import registry


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[object]:
    data_dir = tempfile.mkdtemp(prefix="think-actors-ray-")
    # Ray's default metrics report interval (10 s): at 1 s every live worker's export and the node agent receiving
    # them took a tenth of the two cores all suite long; the metrics test waits for the next report instead.
    config = ta.init(num_cpus=2, data_dir=data_dir, model_pool_size=1)
    try:
        yield config
    finally:
        ta.shutdown()
        if os.environ.get("CI"):
            ray_cli = Path(sys.executable).with_name("ray")
            subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, check=False, timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def _kill_the_modules_actors() -> Iterator[None]:
    """After each module, kill the named actors it started (its agents, their crash controls ...), but not the
    runtime's own (``think_actors/...``: model servers, shared MCP connections, the scheduler). Agents are
    detached and never hibernate by default: left alive, a hundred idle worker processes took over a core by the
    suite's middle and slowed every later test. A module, not a test: some modules run agents across tests."""
    before = _named_actors()
    yield
    for name, namespace in _named_actors() - before:
        if name.startswith("think_actors/"):
            continue
        try:
            ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
        except ValueError:  # gone meanwhile (hibernated, killed by the test)
            continue
        if registry.lookup(namespace, name) is not None:
            registry.mark_hibernated(namespace, name)  # what AgentHandle.kill(restart=False) leaves: not resident


def _named_actors() -> set[tuple[str, str]]:
    if not ray.is_initialized():
        return set()
    return {(a["name"], a["namespace"]) for a in ray.util.list_named_actors(all_namespaces=True)}


@pytest.fixture
def watch(ray_runtime: Any, unique: str) -> Iterator[tuple[Any, str]]:
    """A RecoveryWatch actor (``ray_agents``) the test's agents report to, and its name."""
    name = f"recovery-watch/{unique}"
    actor = RecoveryWatch.options(name=name, namespace=ray_runtime.namespace, lifetime="detached").remote()
    yield actor, name
    ray.kill(actor)


@pytest.fixture
def unique() -> str:
    """A fresh agent name: detached actors outlive a test, so every test names its own."""
    return "t-" + uuid.uuid4().hex[:10]
