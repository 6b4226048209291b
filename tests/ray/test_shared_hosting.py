"""Agents hosted many to a process (``hosting = "shared"``, ``runtime/shared.py``): each keeps its own history,
turn queue, idle timeout and store; their turns run at once in one process; a hibernating agent leaves its host
running and wakes into it; a crashed host restarts and finishes the interrupted turns of its agents unasked; a
handle, ``get`` and a pickled handle reach them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
import ray
from ray_agents import BadlyHosted, SharedDiesMidTurn, SharedEcho, SharedPaced, SharedSleepy

import think_actors as ta
from think_actors import registry
from think_actors.runtime import _require_config, handles
from think_actors.runtime.shared import shared_host_name
from think_actors.store import agent_path

pytestmark = pytest.mark.usefixtures("ray_runtime")


def texts(messages: list[ta.UIMessage]) -> list[str]:
    return [m.text for m in messages]


def names_on_one_host(agent_class: type[ta.Think], prefix: str, count: int) -> list[str]:
    """``count`` agent names whose agents the same shared host holds."""
    config, kind = _require_config(), ta.agent.kebab_case(agent_class.__name__)
    by_host: dict[str, list[str]] = {}
    for i in range(1000):
        name = f"{prefix}-{i}"
        names = by_host.setdefault(shared_host_name(config, agent_path(kind, name)), [])
        names.append(name)
        if len(names) == count:
            return names
    raise AssertionError("no shared host got enough names")


async def test_shared_agents_share_their_hosts_processes_and_keep_their_own_histories(unique: str) -> None:
    agents = [await ta.spawn(SharedEcho, f"{unique}-{i}") for i in range(6)]
    try:
        for i, agent in enumerate(agents):
            await agent.save_messages(f"hello {i}")
        infos = [await agent.info() for agent in agents]
        assert len({info["pid"] for info in infos}) <= _require_config().shared_hosts
        by_host: dict[str, set[int]] = {}
        for info in infos:
            by_host.setdefault(info["host"], set()).add(info["pid"])
        assert all(len(pids) == 1 for pids in by_host.values())  # one process per host, whatever it holds
        for i, agent in enumerate(agents):
            assert texts(await agent.get_messages()) == [f"hello {i}", f"echo: hello {i}"]
            record = registry.lookup("think_actors", agent.path)
            assert (
                record is not None
                and record.resident
                and record.host == shared_host_name(_require_config(), agent.path)
            )
        with pytest.raises(ValueError):  # no actor of its own
            ray.get_actor(agents[0].path, namespace="think_actors")
    finally:
        for agent in agents:
            await agent.kill(restart=False)


async def test_turns_of_two_agents_in_one_host_run_at_once(unique: str) -> None:
    first, second = [await ta.spawn(SharedPaced, name) for name in names_on_one_host(SharedPaced, unique, 2)]
    try:
        assert (await first.info())["pid"] == (await second.info())["pid"]
        began = time.monotonic()
        answers = await asyncio.gather(first.chat("one").collect(), second.chat("two").collect())
        took = time.monotonic() - began
        assert [[c.delta for c in a if c.type == "text-delta"] for a in answers] == [["echo: one"], ["echo: two"]]
        # One after the other they take at least 1.0 s (two 0.5 s model waits): anything less ran them at once.
        assert took < 1.0, f"two 0.5 s turns in one host took {took:.2f} s: they did not run at once"
        # One agent's turn queue is its own: two turns of one agent still run one after the other.
        began = time.monotonic()
        await asyncio.gather(first.chat("three").collect(), first.chat("four").collect())
        assert time.monotonic() - began >= 1.0
        # Each turn's reply follows its own message (the two calls may reach the actor in either order).
        last = texts(await first.get_messages())[-4:]
        assert sorted([last[:2], last[2:]]) == [["four", "echo: four"], ["three", "echo: three"]]
    finally:
        await first.kill(restart=False)
        await second.kill(restart=False)


async def test_a_shared_agent_hibernates_without_its_host_and_wakes_into_it(unique: str) -> None:
    agent = await ta.spawn(SharedSleepy, unique)
    await agent.save_messages("first")
    pid = (await agent.info())["pid"]
    host = ray.get_actor(shared_host_name(_require_config(), agent.path), namespace="think_actors")
    for _ in range(200):
        record = registry.lookup("think_actors", agent.path)
        if record is not None and not record.resident and agent.path not in await host.resident.remote():
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the agent did not hibernate")

    chunks = await agent.chat("second").collect()  # the old handle: the host loads it again from its store

    assert [c.delta for c in chunks if c.type == "text-delta"] == ["echo: second"]
    assert texts(await agent.get_messages()) == ["first", "echo: first", "second", "echo: second"]
    assert (await agent.info())["pid"] == pid  # no process started for the wake
    again = await ta.get(SharedSleepy, unique)
    assert texts(await again.get_messages())[-1] == "echo: second"
    await agent.kill(restart=False)


async def test_a_crashed_host_restarts_and_finishes_the_interrupted_turn_unasked(
    ray_runtime: Any, unique: str, watch: tuple[Any, str]
) -> None:
    recorder, watch_name = watch
    options = {"watch": watch_name, "namespace": ray_runtime.namespace}
    crasher_name, bystander_name = names_on_one_host(SharedDiesMidTurn, unique, 2)
    crasher = await ta.spawn(SharedDiesMidTurn, crasher_name, **options)
    bystander = await ta.spawn(SharedDiesMidTurn, bystander_name, **options)
    try:
        pid = (await crasher.info())["pid"]
        stream = crasher.chat("question")
        with pytest.raises(ta.AgentUnavailableError):
            await stream.collect()
        # Nobody calls the agent: its restarted host loads it again and its start finishes the turn.
        assert await recorder.wait_finished.remote(stream.request_id, 120.0) == ["completed"]
        for _ in range(100):
            try:
                messages = await crasher.get_messages()
                break
            except ta.AgentUnavailableError:
                await asyncio.sleep(0.2)
        # The recovery continued the cut answer (as in test_recovery_under_load): its last delta arrived again.
        assert messages[0].text == "question" and messages[-1].role == "assistant"
        assert messages[-1].text.endswith(", second half.")
        assert (await crasher.info())["pid"] != pid
        assert (await bystander.info())["pid"] != pid  # the crash of one agent's process is its host's
        assert registry.lookup("think_actors", bystander.path).resident  # type: ignore[union-attr]
    finally:
        await crasher.kill(restart=False)
        await bystander.kill(restart=False)


async def test_kill_without_restart_lets_one_agent_go_and_its_next_call_loads_it(unique: str) -> None:
    gone, kept = [await ta.spawn(SharedEcho, name) for name in names_on_one_host(SharedEcho, unique, 2)]
    try:
        await gone.save_messages("before")
        pid = (await kept.info())["pid"]
        await gone.kill(restart=False)
        assert not registry.lookup("think_actors", gone.path).resident  # type: ignore[union-attr]
        assert registry.lookup("think_actors", kept.path).resident  # type: ignore[union-attr]
        assert (await kept.info())["pid"] == pid
        assert texts(await gone.get_messages()) == ["before", "echo: before"]  # loaded again by the call
        assert registry.lookup("think_actors", gone.path).resident  # type: ignore[union-attr]
    finally:
        await gone.kill(restart=False)
        await kept.kill(restart=False)


@ray.remote(num_cpus=0)
def _chat_from_a_task(handle: Any, message: str) -> list[str]:
    async def run() -> list[str]:
        chunks = await handle.chat(message).collect()
        return [c.delta for c in chunks if c.type == "text-delta"]

    return asyncio.run(run())


async def test_a_pickled_handle_and_get_reach_a_shared_agent(unique: str) -> None:
    agent = await ta.spawn(SharedEcho, unique)
    try:
        assert await _chat_from_a_task.remote(agent, "from a task") == ["echo: from a task"]
        found = await ta.get(SharedEcho, unique)
        assert found.shared and texts(await found.get_messages()) == ["from a task", "echo: from a task"]
    finally:
        await agent.kill(restart=False)


async def test_an_unknown_hosting_says_which_there_are(unique: str) -> None:
    with pytest.raises(ta.ConfigurationError, match=r"'actor' .* or 'shared'"):
        await ta.spawn(BadlyHosted, unique)


async def test_provisioning_a_shared_agent_starts_its_host_before_its_first_call(unique: str) -> None:
    name = shared_host_name(_require_config(), agent_path("shared-echo", unique))
    with contextlib.suppress(ValueError):  # no host of that name runs, and this process has not started one
        ray.kill(ray.get_actor(name, namespace="think_actors"), no_restart=True)
    for _ in range(200):
        try:
            ray.get_actor(name, namespace="think_actors")
        except ValueError:
            break
        await asyncio.sleep(0.05)
    handles._hosts_started.clear()

    handle = ta.provision(SharedEcho, unique)

    host = None
    for _ in range(200):  # its host starts in the background; no call has been made
        try:
            host = ray.get_actor(name, namespace="think_actors")
            break
        except ValueError:
            await asyncio.sleep(0.05)
    assert host is not None
    assert handle.path not in await host.resident.remote()
    assert [c.delta for c in await handle.chat("first").collect() if c.type == "text-delta"] == ["echo: first"]
    assert handle.path in await host.resident.remote()
    await handle.kill(restart=False)
