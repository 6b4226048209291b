"""A restarted agent actor starts recovering its interrupted turn by itself, every time, on a loaded machine.

Nothing here calls an agent between its crash and the end of its recovered turn: any call starts a restarted agent
itself, which is what hid the bug these tests pin (the actor's start-up was a call to itself, and Ray refuses such
a call while it still counts the actor as restarting, so nothing recovered until somebody happened to call). The
agents report to a RecoveryWatch actor from ``on_chat_response`` instead, and the tests wait on the watch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from cpu_load import burning_cpus
from ray.exceptions import ActorUnavailableError, RayActorError
from ray_agents import DiesMidTurn, FailsToStartOnce, HeldAtStart

import think_actors as ta

AGENTS = 6
TURNS = 2  # per agent, each turn killed once: 12 restarts that must recover with nobody calling
RECOVERY_S = 120.0  # per recovery at most: 6 restarts at once on 2 spinning cores


@pytest.fixture
def loaded_machine() -> Iterator[list[int]]:
    with burning_cpus() as pids:
        yield pids


async def until_answered(call: Any, timeout_s: float = 60.0) -> Any:
    """``await call()``, again while Ray still refuses calls to the restarting actor."""
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                return await call()
            except ta.AgentUnavailableError:
                await asyncio.sleep(0.2)  # Ray says nothing when the actor takes calls again


async def until_reachable(ray_runtime: Any, path: str, timeout_s: float = 60.0) -> None:
    """Wait until this process may call the actor named ``path`` (Ray's own ready call, no agent method: that
    would wait for, or itself start, the agent)."""
    actor = ray.get_actor(path, namespace=ray_runtime.namespace)
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                await actor.__ray_ready__.remote()
                return
            except (ActorUnavailableError, RayActorError):
                await asyncio.sleep(0.2)  # refused while this process still counts the actor as restarting


def exchanges(messages: list[ta.UIMessage]) -> list[tuple[str, str]]:
    """Each user message with the text of the last assistant message answering it."""
    pairs: list[tuple[str, str]] = []
    for message in messages:
        if message.role == "user":
            pairs.append((message.text, ""))
        elif pairs:
            pairs[-1] = (pairs[-1][0], message.text)
    return pairs


@pytest.mark.timeout(420)
async def test_turns_killed_mid_stream_finish_without_any_caller_on_a_loaded_machine(
    ray_runtime: Any, unique: str, watch: tuple[Any, str], loaded_machine: list[int]
) -> None:
    recorder, watch_name = watch
    options = {"watch": watch_name, "namespace": ray_runtime.namespace}
    agents = await asyncio.gather(*(ta.spawn(DiesMidTurn, f"{unique}-{i}", **options) for i in range(AGENTS)))

    async def crash_turns(agent: ta.AgentHandle) -> list[list[str] | None]:
        seen: list[list[str] | None] = []
        for turn in range(TURNS):
            # The last turn has finished, so calling is allowed again; but the driver may not have heard yet that
            # the restarted actor is up, and Ray would refuse the turn before it ran.
            await until_answered(agent.info)
            stream = agent.chat(f"question {turn}")
            with pytest.raises(ta.AgentUnavailableError):
                await stream.collect()
            # From here nobody calls the agent until its restarted actor has finished the turn by itself.
            seen.append(await recorder.wait_finished.remote(stream.request_id, RECOVERY_S))
            if seen[-1] is None:
                break
        return seen

    try:
        outcomes = await asyncio.gather(*(crash_turns(agent) for agent in agents))
        assert outcomes == [[["completed"]] * TURNS] * AGENTS
        report = await recorder.report.remote()
        # Every turn died once and was recovered once: its recovery streamed the answer's second delta again.
        assert sorted(report["crashes"].values()) == [2] * (AGENTS * TURNS)
        for agent in agents:
            answered = exchanges(await agent.get_messages())
            assert [question for question, _ in answered] == [f"question {turn}" for turn in range(TURNS)]
            assert all(answer.endswith(", second half.") for _, answer in answered), answered
    finally:
        for agent in agents:
            await agent.kill(restart=False)


@pytest.mark.timeout(180)
async def test_a_caller_arriving_during_start_up_follows_the_recovery_the_start_up_schedules(
    ray_runtime: Any, unique: str, watch: tuple[Any, str]
) -> None:
    recorder, watch_name = watch
    agent = await ta.spawn(HeldAtStart, unique, watch=watch_name, namespace=ray_runtime.namespace)
    stream = agent.chat("question")
    with pytest.raises(ta.AgentUnavailableError):
        await stream.collect()
    request_id = stream.request_id
    assert request_id is not None
    try:
        # The restarted actor is inside its start-up: history loaded, the interrupted turn's recovery not scheduled.
        assert await recorder.wait_at_gate.remote(60.0)
        await until_reachable(ray_runtime, agent.path)  # so the call below reaches the actor at once
        follower = asyncio.ensure_future(until_answered(lambda: agent.attach(request_id).collect()))
        # Nothing outside the actor can see the call arrive. A caller that overtook the start-up used to fail at
        # once ("no recovered turn"); two seconds without an answer say it waits for the start-up instead.
        done, _ = await asyncio.wait({follower}, timeout=2.0)
        assert not done, follower.result()
        await recorder.open_gate.remote()
        chunks = await asyncio.wait_for(follower, 60.0)

        assert chunks[-1].type == "finish"
        assert "".join(c.delta for c in chunks if c.type == "text-delta").endswith(", second half.")
        assert await recorder.wait_finished.remote(request_id, 60.0) == ["completed"]
        report = await recorder.report.remote()
        assert report["crashes"] == {request_id: 2}  # killed once, recovered once
        assert exchanges(await agent.get_messages())[-1][1].endswith(", second half.")
    finally:
        await recorder.open_gate.remote()
        await agent.kill(restart=False)


@pytest.mark.timeout(120)
async def test_a_start_up_that_fails_is_logged_and_the_next_call_starts_the_agent(
    ray_runtime: Any, unique: str, watch: tuple[Any, str]
) -> None:
    recorder, watch_name = watch
    agent = await ta.spawn(FailsToStartOnce, unique, watch=watch_name, namespace=ray_runtime.namespace)
    try:
        [line] = await recorder.wait_logged.remote(30.0)
        assert line.startswith(f"agent {agent.path!r} could not start"), line
        assert "RuntimeError: the first start fails" in line
        result = await agent.save_messages("hello")
        assert (result.status, result.message.text if result.message else None) == (
            "completed",
            "about hello: first half, second half.",
        )
    finally:
        await agent.kill(restart=False)
