"""MCP tools on Ray: an agent actor uses a real MCP server's tools in a turn through its hooks; per agent by
default (its own stdio process), ``shared=True`` one connection per node in a named actor for every agent (the
test counts the server processes); connections come back after the actor restarts or hibernates; a call in
doubt after the actor is killed mid-call is reconciled.

The server is tests/mcp_servers.py (the official SDK), which appends its pid to ``MCP_TEST_STARTS`` when it
starts and each call to ``MCP_TEST_LOG``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from helpers import MCP_TEST_SERVERS, McpHttpServer

import think_actors as ta
from think_actors._turn.recovery import UNKNOWN_OUTCOME
from think_actors.models import FinishEvent, ModelRequest, TextDelta, ToolCallDelta, Usage
from think_actors.testing import ScriptedModel, step, text, tool_call

# Actors and server processes start slowly on a busy 2-core machine: a bound per test above the default 120 s.
pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(240)]

WAIT_S = 90.0  # upper bounds only: a busy machine starts actors and servers slowly


class McpOnRay(ta.Think):
    """Declares the test server (per agent, or ``shared``); ``before_tool_call`` doubles ``t_add``'s ``a``."""

    model = ScriptedModel(
        [
            step(tool_call("t_echo", {"text": "from ray"}, id="e"), tool_call("t_add", {"a": 20, "b": 2}, id="a")),
            text("done"),
        ]
        * 3
    )

    def __init__(self, name: str, *, log_dir: str, shared: bool = False, hold_s: float = 0, **kwargs: Any) -> None:
        env = {
            "MCP_TEST_LOG": os.path.join(log_dir, "calls.log"),
            "MCP_TEST_STARTS": os.path.join(log_dir, "starts.log"),
            "MCP_TEST_HOLD_S": str(hold_s),
        }
        self.mcp_servers = [
            ta.mcp.stdio(
                sys.executable,
                str(MCP_TEST_SERVERS),
                "stdio",
                name="t",
                env=env,
                shared=shared,
                connect_timeout_s=WAIT_S,
            )
        ]
        super().__init__(name, **kwargs)

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        if ctx.tool_name == "t_add":
            return ta.Allow(input={**ctx.input, "a": ctx.input["a"] * 2})
        return None


class Grower(McpOnRay):
    """Adds the tool ``fresh`` to the server (which announces tools/list_changed)."""

    model = ScriptedModel([tool_call("t_grow", {"name": "fresh"}, id="g"), text("grown")])


class FreshUser(McpOnRay):
    """Calls the tool ``fresh`` that another agent had the server add."""

    model = ScriptedModel([tool_call("t_fresh", {}, id="f"), text("used it")])


class GrowThenUse(McpOnRay):
    """Has the server add the tool ``fresh``, then (the next turn) calls it."""

    model = ScriptedModel(
        [tool_call("t_grow", {"name": "fresh"}, id="g"), text("grown"), tool_call("t_fresh", {}, id="f"), text("ok")]
    )


class SleepyMcp(McpOnRay):
    idle_timeout_s = 1.0


class PayModel:
    """Pays 7 until a tool result is in the request, then answers: no script position, so a restarted actor
    asks it again and gets the same answer."""

    model_id = "pay"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        if any(m["role"] == "tool" for m in request.messages):
            yield TextDelta("could not tell")
            yield FinishEvent("stop", Usage())
        else:
            yield ToolCallDelta(0, "p", "t_pay", '{"amount": 7}')
            yield FinishEvent("tool_calls", Usage())


class PayOnRay(ta.Think):
    """Pays through an MCP server over HTTP that holds the call, so the actor can be killed in the middle of it.
    The server is the test's process, as a payment service would be: killing the actor leaves the call in doubt.
    (A stdio server is the actor's child, and Ray kills a dying worker's children first: the actor could then see
    the connection close, and record that, before it dies.)"""

    model = PayModel()

    def __init__(self, name: str, *, url: str, **kwargs: Any) -> None:
        self.mcp_servers = [ta.mcp.http(url, name="t", connect_timeout_s=WAIT_S)]
        super().__init__(name, **kwargs)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"  # a zombie has exited


async def until(predicate: Any, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


def outputs(messages: list[ta.UIMessage]) -> dict[str, Any]:
    return {
        p.tool_call_id: p.output if p.state == "output-available" else (p.state, p.error_text)
        for m in messages
        for p in m.parts
        if isinstance(p, ta.ToolPart)
    }


ECHO = {"content": [{"type": "text", "text": "from ray"}], "structuredContent": {"result": "from ray"}}


async def test_an_agent_actor_uses_the_servers_tools_through_its_hooks(unique: str, tmp_path: Path) -> None:
    agent = await ta.spawn(McpOnRay, unique, log_dir=str(tmp_path))
    states = await agent.wait_for_mcp_connections(WAIT_S)
    assert (states["t"].state, states["t"].tool_count) == ("ready", 12)
    await agent.save_messages("go")
    found = outputs(await agent.get_messages())
    assert found["e"] == ECHO
    assert found["a"]["structuredContent"] == {"total": 42, "terms": [40, 2]}  # the hook's input ran
    assert sorted(lines(tmp_path / "calls.log")) == ["add 40 2", "echo from ray"]
    assert len(lines(tmp_path / "starts.log")) == 1
    state = await agent.add_mcp_server("late", command=sys.executable, args=[str(MCP_TEST_SERVERS), "stdio"])
    assert (state.state, state.tool_count) == ("ready", 12)
    assert set((await agent.get_mcp_servers()).keys()) == {"t", "late"}
    assert await agent.remove_mcp_server("late") is True


async def test_shared_servers_start_one_process_per_node_for_many_agents(unique: str, tmp_path: Path) -> None:
    shared_dir, own_dir = tmp_path / "shared", tmp_path / "own"
    shared_dir.mkdir()
    own_dir.mkdir()
    many = await asyncio.gather(
        *(ta.spawn(McpOnRay, f"{unique}-s{i}", log_dir=str(shared_dir), shared=True) for i in range(4))
    )
    for agent in many:
        states = await agent.wait_for_mcp_connections(WAIT_S)
        assert (states["t"].state, states["t"].shared, states["t"].tool_count) == ("ready", True, 12)
    await asyncio.gather(*(agent.save_messages("go") for agent in many))
    for agent in many:
        assert outputs(await agent.get_messages())["e"] == ECHO
    assert len(lines(shared_dir / "starts.log")) == 1  # one process for the four agents
    assert lines(shared_dir / "calls.log").count("echo from ray") == 4

    own = await asyncio.gather(*(ta.spawn(McpOnRay, f"{unique}-o{i}", log_dir=str(own_dir)) for i in range(2)))
    for agent in own:
        await agent.wait_for_mcp_connections(WAIT_S)
    assert len(lines(own_dir / "starts.log")) == 2  # per agent by default


async def test_list_changed_on_a_shared_connection_reaches_every_agent(unique: str, tmp_path: Path) -> None:
    grower = await ta.spawn(Grower, f"{unique}-g", log_dir=str(tmp_path), shared=True)
    user = await ta.spawn(FreshUser, f"{unique}-u", log_dir=str(tmp_path), shared=True)
    for agent in (grower, user):
        assert (await agent.wait_for_mcp_connections(WAIT_S))["t"].tool_count == 12
    await grower.save_messages("grow")
    deadline = time.monotonic() + WAIT_S
    while "t_fresh" not in (await user.get_mcp_servers())["t"].tools:  # the proxy's long poll brings the listing
        assert time.monotonic() < deadline, "the other agent never saw the new tool"
        await asyncio.sleep(0.05)
    await user.save_messages("use it")
    fresh = {
        "content": [{"type": "text", "text": "fresh was added"}],
        "structuredContent": {"result": "fresh was added"},
    }
    assert outputs(await user.get_messages())["f"] == fresh
    assert len(lines(tmp_path / "starts.log")) == 1


@pytest.mark.parametrize("shared", [False, True])
async def test_a_turn_right_after_a_tool_that_added_tools_is_offered_them_on_ray(
    unique: str, tmp_path: Path, shared: bool
) -> None:
    # Back to back, no wait: the call that changed the tools returns once the agent has the new listing (through
    # the node's shared connection too).
    agent = await ta.spawn(GrowThenUse, f"{unique}-{shared}", log_dir=str(tmp_path), shared=shared)
    assert (await agent.wait_for_mcp_connections(WAIT_S))["t"].tool_count == 12
    await agent.save_messages("grow")
    await agent.save_messages("use it")
    assert outputs(await agent.get_messages())["f"]["structuredContent"] == {"result": "fresh was added"}


async def test_the_connection_comes_back_after_a_restart_and_after_hibernation(unique: str, tmp_path: Path) -> None:
    agent = await ta.spawn(SleepyMcp, unique, log_dir=str(tmp_path))
    await agent.wait_for_mcp_connections(WAIT_S)
    await agent.save_messages("first")
    [first] = [int(pid) for pid in lines(tmp_path / "starts.log")]

    await agent.kill(restart=True)
    await until(lambda: len(lines(tmp_path / "starts.log")) == 2, "the restarted actor did not reconnect")
    await until(lambda: not alive(first), "the dead actor's server process lives on")
    await agent.save_messages("after the restart")  # the first turn of the new actor already has the tools
    assert list(outputs(await agent.get_messages()).values()).count(ECHO) == 2

    second = int(lines(tmp_path / "starts.log")[1])
    await until(lambda: not alive(second), "hibernating did not stop the server process")  # idle 1 s: hibernated
    await agent.save_messages("after waking")
    assert len(lines(tmp_path / "starts.log")) == 3
    assert list(outputs(await agent.get_messages()).values()).count(ECHO) == 3


async def test_a_call_in_doubt_after_the_actor_is_killed_mid_call_is_reconciled(unique: str, tmp_path: Path) -> None:
    server = McpHttpServer(tmp_path / "calls.log", hold_s=600, start_timeout_s=WAIT_S)
    await server.start()
    try:
        await _pay_and_kill_mid_call(unique, tmp_path, server.url)
    finally:
        await server.kill()


async def _pay_and_kill_mid_call(unique: str, tmp_path: Path, url: str) -> None:
    agent = await ta.spawn(PayOnRay, unique, url=url)
    await agent.wait_for_mcp_connections(WAIT_S)
    await agent.submit_messages("pay 7", submission_id="s1")
    await until(lambda: "pay 7" in lines(tmp_path / "calls.log"), "the payment never reached the server")
    await agent.kill(restart=True)  # mid-call: the effect is recorded as started, never finished

    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            final = await agent.wait_for_submission("s1", timeout_s=5)
            if final.status in ("completed", "error"):
                break
        except (ta.AgentUnavailableError, TimeoutError):
            pass
        assert time.monotonic() < deadline, "the submission did not finish after the restart"
        await asyncio.sleep(0.2)
    messages = await agent.get_messages()
    assert outputs(messages)["p"] == ("output-error", UNKNOWN_OUTCOME)
    assert lines(tmp_path / "calls.log") == ["pay 7"]  # never paid twice
    assert messages[-1].text == "could not tell"
