"""A killed agent comes back with its history; errors cross actors as the project's own classes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from ray_agents import EntryAgent, NoModel, ServerBacked, Survivor

import think_actors as ta
from think_actors.testing import ScriptedModel, ScriptedOpenAIServer, error, text


async def info_after_restart(agent: Any, old_pid: int, deadline_s: float = 30.0) -> dict[str, Any]:
    """Poll ``info()`` (bounded) until a process other than ``old_pid`` answers."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            info = await agent.info()
            if info["pid"] != old_pid:
                return info
        except ta.AgentUnavailableError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{agent.path} did not come back within {deadline_s} s")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(60)
async def test_a_killed_agent_restarts_with_its_history(ray_runtime: Any, unique: str) -> None:
    agent = await ta.spawn(Survivor, unique)
    await agent.save_messages("before the crash")
    old = await agent.info()

    await agent.kill(restart=True)
    info = await info_after_restart(agent, old["pid"])

    assert info["messages"] == 2  # reloaded from its SQLite store by the new process
    assert [m.text for m in await agent.get_messages()] == ["before the crash", "echo: before the crash"]
    result = await agent.save_messages("after the crash")
    assert (result.status, result.message.text if result.message else None) == ("completed", "echo: after the crash")
    assert len(await agent.get_messages()) == 4


async def test_model_errors_arrive_in_band(ray_runtime: Any, unique: str) -> None:
    slow = ta.RateLimitError("slow", retryable=True)
    agent = await ta.spawn(EntryAgent, unique, model=ScriptedModel([error(slow, after=text("par")), text("ok")]))

    chunks = await agent.chat("hi").collect()

    assert [c.type for c in chunks] == ["start", "start-step", "text-start", "text-delta", "error"]
    assert chunks[-1].error_text == "slow"
    assert [m.text for m in await agent.get_messages()] == ["hi", "par"]  # the partial reply is kept
    assert (await agent.save_messages("again")).status == "completed"  # the agent carries on


async def test_a_remote_setup_error_raises_the_same_class_in_the_caller(ray_runtime: Any, unique: str) -> None:
    agent = await ta.spawn(NoModel, unique)

    with pytest.raises(ta.ConfigurationError) as raised:
        await agent.save_messages("hi")

    err = raised.value
    assert type(err) is ta.ConfigurationError
    assert err.message.startswith("NoModel has no model")
    assert isinstance(err.request_id, str) and err.request_id
    assert err.facts() == {"request_id": err.request_id, "retryable": False}
    chunks = await agent.chat("hi again").collect()  # a stream reports the same failure in-band
    assert [(c.type, getattr(c, "error_text", None)) for c in chunks] == [("error", err.message)]


@pytest.mark.timeout(90)
async def test_litellm_runs_in_the_model_server_pool_never_in_the_agent(ray_runtime: Any, unique: str) -> None:
    async with ScriptedOpenAIServer() as server:
        server.add_text("Hello from the server", chunk_size=4)
        for _ in range(2):
            server.add_error(
                status=400,
                code="context_length_exceeded",
                message="This model's maximum context length is 8 tokens. You sent 9.",
            )
        agent = await ta.spawn(ServerBacked, unique, model="openai/scripted", api_base=server.base_url)

        chunks = await agent.chat("hi").collect()

        assert "".join(c.delta for c in chunks if c.type == "text-delta") == "Hello from the server"
        assert chunks[-1].type == "finish"
        [step_finished] = [c.data for c in chunks if c.type == "data-hook" and c.data["hook"] == "on_step_finish"]
        assert step_finished["litellm_imported"] is False  # the actor streamed through the pool

        overflow = await agent.chat("too long").collect()

        assert overflow[-1].type == "error"
        assert "maximum context length is 8 tokens" in overflow[-1].error_text
        result = await agent.save_messages("still too long")
        assert result.status == "error"
        assert "maximum context length" in (result.error or "")
        server.assert_complete()
        assert [r["messages"][-1]["content"] for r in server.requests] == ["hi", "too long", "still too long"]


async def test_a_model_server_that_dies_mid_stream_fails_retryably_and_the_turn_resumes(
    ray_runtime: Any, unique: str
) -> None:
    import ray

    async with ScriptedOpenAIServer() as server:
        server.add_stall("partial ans")  # streams, then goes silent: the model server dies meanwhile
        server.add_text("wer, resumed")  # what the resumed turn's request gets
        agent = await ta.spawn(ServerBacked, unique, model="openai/scripted", api_base=server.base_url)
        stream = agent.chat("hi")
        seen = []
        async for chunk in stream:
            seen.append(chunk)
            if chunk.type == "text-delta" and len([c for c in seen if c.type == "text-delta"]) == 1:
                node = ray.get_runtime_context().get_node_id()
                server_actor = ray.get_actor(f"think_actors/model-server/{node}/0", namespace=ray_runtime.namespace)
                ray.kill(server_actor, no_restart=False)
        assert seen[-1].type == "abort"
        assert "model-server actor died" in (seen[-1].reason or "")
        resumed = await agent.attach(stream.request_id).collect()
        assert resumed[-1].type == "finish"
        texts = [m.text for m in await agent.get_messages()]
        assert texts[0] == "hi" and texts[-1] == "wer, resumed"
