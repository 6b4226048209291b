"""Hibernation on Ray: an agent idle past ``idle_timeout_s`` exits its actor and keeps everything in its store;
old handles, ``get``, ``spawn`` and the gateway wake it; a turn, a running child or an open socket keeps it
resident; ``ta.list_agents()`` reports addressable and resident agents per node."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import ray
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from ray_agents import Sleepy, SleepyLead, SlowToSleep

import think_actors as ta
from think_actors import registry
from think_actors.gateway import Gateway, RayDirectory

pytestmark = pytest.mark.usefixtures("ray_runtime")


def resident(path: str) -> bool:
    try:
        ray.get_actor(path, namespace="think_actors")
    except ValueError:
        return False
    return True


async def until_hibernated(path: str, timeout_s: float = 10) -> None:
    for _ in range(int(timeout_s * 20)):
        record = registry.lookup("think_actors", path)
        if record is not None and not record.resident and not resident(path):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} did not hibernate")


async def test_spawn_meeting_an_actor_still_hibernating_starts_a_new_one(unique: str) -> None:
    agent = await ta.spawn(SlowToSleep, unique)
    await agent.save_messages("first")
    pid = (await agent.info())["pid"]
    for _ in range(500):  # until its watch marks it hibernated (its close then runs for 1.5 s)
        record = registry.lookup("think_actors", agent.path)
        if record is not None and not record.resident:
            break
        await asyncio.sleep(0.02)
    assert resident(agent.path)  # hibernating: the name still points at the actor, which refuses every call

    again = await ta.spawn(SlowToSleep, unique)  # used to raise AgentHibernatedError

    assert (await again.info())["pid"] != pid
    assert [m.text for m in await again.get_messages()] == ["first", "echo: first"]


async def test_an_idle_agent_hibernates_and_an_old_handle_wakes_it_with_its_history(unique: str) -> None:
    agent = await ta.spawn(Sleepy, unique)
    assert [c.delta for c in await agent.chat("first").collect() if c.type == "text-delta"] == ["echo: first"]
    first_pid = (await agent.info())["pid"]
    await until_hibernated(agent.path)

    # The old handle still works: the call wakes a new actor, which loads the history from the store.
    chunks = await agent.chat("second").collect()
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["echo: second"]
    assert [m.text for m in await agent.get_messages()] == ["first", "echo: first", "second", "echo: second"]
    assert (await agent.info())["pid"] != first_pid
    assert registry.lookup("think_actors", agent.path).resident  # type: ignore[union-attr]


async def test_an_old_handle_follows_an_agent_another_caller_woke(unique: str) -> None:
    """A handle whose actor hibernated, after someone else woke the agent: its calls and its chats reach the new
    actor (they used to fail: the registry said resident, and the handle kept calling the exited one)."""
    old = await ta.spawn(Sleepy, unique)
    await old.save_messages("first")
    old_pid = (await old.info())["pid"]
    await until_hibernated(old.path)
    woken = await ta.get(Sleepy, unique)  # another caller wakes it
    assert (await woken.info())["pid"] != old_pid
    assert resident(old.path)

    assert [m.text for m in await old.get_messages()] == ["first", "echo: first"]
    await until_hibernated(old.path)
    again = await ta.get(Sleepy, unique)
    chunks = await old.chat("second").collect()  # a stream from the handle that fell behind twice
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["echo: second"]
    assert (await old.info())["pid"] == (await again.info())["pid"]


async def test_get_and_spawn_wake_a_hibernated_agent_and_list_agents_counts_it(unique: str) -> None:
    agent = await ta.spawn(Sleepy, unique)
    await agent.save_messages("remember me")
    await until_hibernated(agent.path)
    listing = ta.list_agents()
    [mine] = [a for a in listing.agents if a.path == agent.path]
    assert not mine.resident and mine.agent_class.endswith("ray_agents.Sleepy")
    assert listing.addressable >= 1 and listing.resident == sum(listing.resident_by_node().values())

    woken = await ta.get(Sleepy, unique)
    assert [m.text for m in await woken.get_messages()][:2] == ["remember me", "echo: remember me"]
    assert resident(agent.path)
    await until_hibernated(agent.path)
    again = await ta.spawn(Sleepy, unique)
    assert len(await again.get_messages()) == 2
    with pytest.raises(ta.AgentUnavailableError, match=r"start it with ta\.spawn"):
        await ta.get(Sleepy, unique + "-never")


async def test_a_running_child_keeps_its_lead_resident(unique: str) -> None:
    lead = await ta.spawn(SleepyLead, unique)
    chunks = await lead.chat("go").collect()  # the helper takes 1.5 s, three idle timeouts of the lead
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["lead done"]
    record = registry.lookup("think_actors", lead.path)
    assert record is not None and record.resident  # it stayed up for the whole turn


async def test_an_open_socket_keeps_the_agent_resident_and_the_gateway_wakes_it(unique: str) -> None:
    async with TestClient(TestServer(Gateway(RayDirectory([Sleepy])).app())) as client:
        ws = await client.ws_connect(f"/agents/sleepy/{unique}")
        await greeting(ws)
        await asyncio.sleep(1.5)  # three idle timeouts, with the socket open
        path = f"sleepy/{unique}"
        assert resident(path)
        await ws.close()
        await until_hibernated(path)  # the last socket went away: nothing holds it

        ws = await client.ws_connect(f"/agents/sleepy/{unique}")
        hello = await greeting(ws)
        assert hello["type"] == "cf_agent_chat_messages"
        body = json.dumps({"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hey"}]}]})
        await ws.send_str(
            json.dumps({"type": "cf_agent_use_chat_request", "id": "r1", "init": {"method": "POST", "body": body}})
        )
        frames: list[Any] = []
        while not (frames and frames[-1]["type"] == "cf_agent_use_chat_response" and frames[-1]["done"]):
            frames.append(json.loads((await asyncio.wait_for(ws.receive(), 20)).data))
        assert any(f.get("body") and "echo: hey" in f["body"] for f in frames)
        await ws.close()


async def test_a_provisioned_agent_is_addressable_and_its_first_call_starts_it(unique: str) -> None:
    handle = ta.provision(Sleepy, unique)
    assert not resident(handle.path)
    [mine] = [a for a in ta.list_agents().agents if a.path == handle.path]
    assert not mine.resident
    chunks = await handle.chat("hello").collect()  # a stream starts it at its first item
    assert [c.delta for c in chunks if c.type == "text-delta"] == ["echo: hello"]
    assert resident(handle.path)
    again = ta.provision(Sleepy, unique)  # an agent that exists is left as it is
    assert len(await again.get_messages()) == 2
    other = ta.provision(Sleepy, unique + "-b")
    assert (await other.info())["messages"] == 0  # a plain call starts it too
