"""MCP tools in process: an agent uses the tools of a real MCP server (tests/mcp_servers.py, written with the
official ``mcp`` SDK and run as a subprocess over stdio or streamable HTTP) through every tool hook.

Covered: listing (prefix, schema, hints), a call through allow / changed input / block / substitute /
after_tool_call / needs_approval, structured, image and embedded-resource results, an ``isError`` result, a slow
server hitting the call timeout, a server killed mid-call and the reconnect of the next call, tools/list_changed
between turns, servers added and removed at run time, and a crash of the agent mid-call (effect ledger,
``reconcile_tool_call``, hints counting as idempotent).
"""

from __future__ import annotations

import asyncio
import copy
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import MCP_TEST_SERVERS, McpHttpServer

import think_actors as ta
from think_actors._turn.recovery import UNKNOWN_OUTCOME
from think_actors.testing import ScriptedModel, step, text, tool_call

WAIT_S = 90.0  # upper bounds only: a busy machine (load 30 was seen) starts a server in tens of seconds


class ServerLog:
    """The file the test server appends ``<tool> <argument>`` to for each call it receives."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    async def wait_for(self, line: str, timeout_s: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while line not in self.lines():
            if time.monotonic() > deadline:
                raise AssertionError(f"the server never logged {line!r}: {self.lines()}")
            await asyncio.sleep(0.02)


@pytest.fixture
def server_log(tmp_path: Path) -> ServerLog:
    return ServerLog(tmp_path / "calls.log")


def stdio_server(log: ServerLog, *, hold_s: float = 0, **options: Any) -> ta.mcp.McpServerConfig:
    env = {"MCP_TEST_LOG": str(log.path), "MCP_TEST_HOLD_S": str(hold_s)}
    options.setdefault("connect_timeout_s", WAIT_S)
    return ta.mcp.stdio(
        sys.executable, str(MCP_TEST_SERVERS), "stdio", name=options.pop("name", "t"), env=env, **options
    )


@pytest.fixture
async def http_server(server_log: ServerLog) -> AsyncIterator[McpHttpServer]:
    server = McpHttpServer(server_log.path, start_timeout_s=WAIT_S)
    await server.start()
    yield server
    await server.kill()


class McpAgent(ta.Think):
    """Records the tool hooks; ``decide`` answers before_tool_call."""

    def __init__(self, *args: Any, servers: list[ta.mcp.McpServerConfig], **kwargs: Any) -> None:
        self.mcp_servers = servers
        super().__init__(*args, **kwargs)
        self.decide: Callable[[ta.ToolCallContext], Any] = lambda ctx: None
        self.before: list[ta.ToolCallContext] = []
        self.after: list[ta.ToolCallResultContext] = []
        self.reconciled: list[ta.ToolReconcileContext] = []

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        self.before.append(ctx)
        return self.decide(ctx)

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.after.append(ctx)

    async def reconcile_tool_call(self, ctx: ta.ToolReconcileContext) -> Any:
        self.reconciled.append(ctx)
        return None


@pytest.fixture
async def agents() -> AsyncIterator[Callable[..., McpAgent]]:
    made: list[McpAgent] = []

    def make(*servers: ta.mcp.McpServerConfig, model: ScriptedModel | None = None, **kwargs: Any) -> McpAgent:
        agent = McpAgent(
            model=model or ScriptedModel(), store=kwargs.pop("store", ta.MemoryStore()), servers=list(servers)
        )
        made.append(agent)
        return agent

    yield make
    for agent in made:
        await agent.close()


def tool_parts(agent: ta.Think) -> dict[str, tuple[str, Any]]:
    return {
        p.tool_call_id: (p.state, p.output if p.state == "output-available" else p.error_text)
        for m in agent.get_messages()
        for p in m.parts
        if isinstance(p, ta.ToolPart)
    }


def offered(request: ta.ModelRequest) -> list[str]:
    return sorted(t["function"]["name"] for t in request.tools)


def text_output(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "structuredContent": {"result": value}}


# ------------------------------------------------------------------ listing


async def test_tools_are_listed_with_the_prefix_the_schema_and_the_hints(agents: Any, server_log: ServerLog) -> None:
    agent = agents(stdio_server(server_log), stdio_server(server_log, name="bare", prefix=""))
    states = await agent.wait_for_mcp_connections(WAIT_S)
    names = [
        "add",
        "broken",
        "crash",
        "document",
        "echo",
        "grow",
        "header",
        "lookup",
        "pay",
        "pixel",
        "refuse",
        "sleep",
    ]
    assert {n: (s.state, s.error, s.tool_count) for n, s in states.items()} == {
        "t": ("ready", None, len(names)),
        "bare": ("ready", None, len(names)),
    }
    assert sorted(states["t"].tools) == [f"t_{n}" for n in names]
    assert sorted(states["bare"].tools) == names
    tools = {t.name: t for t in agent.get_tools()}
    add = tools["t_add"]
    assert (add.description, add.idempotent, add.needs_approval, add.executable) == (
        "Add two integers (structured result).",
        True,  # readOnlyHint
        False,
        True,
    )
    assert add.input_schema["properties"].keys() == {"a", "b"} and add.input_schema["required"] == ["a", "b"]
    assert (tools["t_pay"].idempotent, tools["t_lookup"].idempotent, tools["echo"].idempotent) == (False, True, False)


async def test_a_server_that_cannot_start_is_failed_with_its_error_and_has_no_tools(agents: Any) -> None:
    agent = agents(
        ta.mcp.stdio("/nonexistent/mcp-server", name="gone", connect_timeout_s=WAIT_S),
        ta.mcp.stdio(sys.executable, "-c", "pass", name="quits", connect_timeout_s=WAIT_S),
    )
    states = await agent.wait_for_mcp_connections(WAIT_S)
    assert (states["gone"].state, states["gone"].tool_count) == ("failed", 0)
    assert "nonexistent" in (states["gone"].error or "")
    assert (states["quits"].state, states["quits"].error) == (
        "failed",
        "the server closed the connection (it exited or crashed) before the handshake ended",
    )
    assert agent.get_tools() == []


# ------------------------------------------------------------------ every hook


async def test_a_call_goes_through_every_tool_hook(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [
            step(
                tool_call("t_echo", {"text": "as is"}, id="allow"),
                tool_call("t_add", {"a": 1, "b": 2}, id="change"),
                tool_call("t_echo", {"text": "secret"}, id="block"),
                tool_call("t_pixel", {}, id="substitute"),
            ),
            text("done"),
        ]
    )
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)

    def decide(ctx: ta.ToolCallContext) -> Any:
        return {
            "allow": ta.Allow(),
            "change": ta.Allow(input={"a": 40, "b": 2}),
            "block": ta.Block("no secrets"),
            "substitute": ta.Substitute({"content": [{"type": "text", "text": "no pixels today"}]}),
        }[ctx.tool_call_id]

    agent.decide = decide
    result = await agent.save_messages("go")
    assert result.status == "completed"
    total = {"total": 42, "terms": [40, 2]}
    assert tool_parts(agent) == {
        "allow": ("output-available", text_output("as is")),
        "change": (
            "output-available",
            {
                "content": [{"type": "text", "text": '{\n  "total": 42,\n  "terms": [\n    40,\n    2\n  ]\n}'}],
                "structuredContent": total,
            },
        ),
        "block": ("output-available", "no secrets"),
        "substitute": ("output-available", {"content": [{"type": "text", "text": "no pixels today"}]}),
    }
    # Only the allowed calls reached the server, the changed one with its new input.
    assert sorted(server_log.lines()) == ["add 40 2", "echo as is"]
    assert [(c.tool_call_id, c.tool_name, c.input) for c in agent.before] == [
        ("allow", "t_echo", {"text": "as is"}),
        ("change", "t_add", {"a": 1, "b": 2}),
        ("block", "t_echo", {"text": "secret"}),
        ("substitute", "t_pixel", {}),
    ]
    after = {c.tool_call_id: (c.tool_name, c.success, c.output) for c in agent.after}
    assert after["change"] == ("t_add", True, tool_parts(agent)["change"][1])
    assert after["block"] == ("t_echo", True, "no secrets")
    # The model saw each result as a tool message, then answered.
    assert [m["role"] for m in model.requests[1].messages][-4:] == ["tool"] * 4
    assert agent.get_messages()[-1].text == "done"
    model.assert_complete()


async def test_needs_approval_gates_the_servers_tools_it_names(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [step(tool_call("t_pay", {"amount": 5}, id="p"), tool_call("t_echo", {"text": "hi"}, id="e")), text("paid")]
    )
    agent = agents(stdio_server(server_log, needs_approval=["pay"]), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    assert {t.name: t.needs_approval for t in agent.get_tools()}["t_pay"] is True
    await agent.save_messages("pay 5")
    assert tool_parts(agent) == {"p": ("approval-requested", None), "e": ("output-available", text_output("hi"))}
    assert server_log.lines() == ["echo hi"]  # nothing paid before a person approved
    await agent.add_tool_approval("p", True, auto_continue=True)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert tool_parts(agent)["p"] == ("output-available", text_output("paid 5"))
    assert server_log.lines() == ["echo hi", "pay 5"]
    assert agent.get_messages()[-1].text == "paid"


# ------------------------------------------------------------------ results


async def test_structured_image_and_resource_results_keep_their_mcp_shape(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [
            step(
                tool_call("t_add", {"a": 2, "b": 3}, id="s"),
                tool_call("t_pixel", {}, id="i"),
                tool_call("t_document", {}, id="r"),
            ),
            text("ok"),
        ]
    )
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    chunks = [c async for c in agent.chat("show me")]
    outputs = {c.tool_call_id: c.output for c in chunks if c.type == "tool-output-available"}
    assert outputs["s"]["structuredContent"] == {"total": 5, "terms": [2, 3]}
    [image, caption] = outputs["i"]["content"]
    assert (image["type"], image["mimeType"], caption) == ("image", "image/png", {"type": "text", "text": "a pixel"})
    assert image["data"].startswith("iVBORw0KGgo")  # base64 PNG
    assert outputs["r"] == {
        "content": [
            {
                "type": "resource",
                "resource": {"uri": "memo://notes/1", "mimeType": "text/plain", "text": "remember the milk"},
            }
        ]
    }
    assert tool_parts(agent)["i"] == ("output-available", outputs["i"])  # persisted as streamed


async def test_an_is_error_result_is_a_tool_error_and_the_turn_goes_on(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel([tool_call("t_refuse", {"reason": "not today"}, id="x"), text("sorry")])
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    chunks = [c async for c in agent.chat("try")]
    [err] = [c for c in chunks if c.type == "tool-output-error"]
    assert err.error_text == "Error executing tool refuse: refused: not today"
    [after] = agent.after
    assert (after.success, after.error) == (False, err.error_text)
    assert agent.get_messages()[-1].text == "sorry"


# ------------------------------------------------------------------ failures


async def test_an_invalid_result_is_a_clear_tool_error(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [tool_call("t_broken", {}, id="b"), tool_call("t_echo", {"text": "fine"}, id="e"), text("ok")]
    )
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    await agent.save_messages("break it")
    assert tool_parts(agent) == {
        "b": (
            "output-error",
            "MCP server 't' returned an invalid result for 'broken': "
            "Invalid structured content returned by tool broken: 'terms' is a required property",
        ),
        "e": ("output-available", text_output("fine")),
    }


async def test_a_slow_server_hits_the_call_timeout_and_the_connection_stays(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [tool_call("t_sleep", {"seconds": 30}, id="slow"), tool_call("t_echo", {"text": "quick"}, id="q"), text("ok")]
    )
    agent = agents(stdio_server(server_log, call_timeout_s=0.5), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    started = time.monotonic()
    await agent.save_messages("wait")
    assert time.monotonic() - started < 25  # not the 30 s the server would take
    assert tool_parts(agent) == {
        "slow": ("output-error", "MCP tool 'sleep' of server 't' did not answer within 0.5s (timed out)"),
        "q": ("output-available", text_output("quick")),
    }
    assert agent.get_mcp_servers()["t"].state == "ready"


async def test_a_server_killed_mid_call_is_a_tool_error_and_the_next_call_reconnects(
    agents: Any, server_log: ServerLog
) -> None:
    model = ScriptedModel(
        [
            tool_call("t_crash", {"note": "boom"}, id="c"),
            text("it crashed"),
            tool_call("t_echo", {"text": "again"}, id="e"),
            text("back"),
        ]
    )
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    await agent.save_messages("crash it")
    state, error = tool_parts(agent)["c"]
    assert state == "output-error"
    assert error.startswith("MCP server 't' closed the connection while 'crash' ran") and error.endswith(
        "the next call reconnects"
    )
    assert agent.get_messages()[-1].text == "it crashed"
    assert agent.get_mcp_servers()["t"].state == "failed"
    assert agent.get_mcp_servers()["t"].tool_count == 12  # the tools stay: their next call reconnects
    await agent.save_messages("again")
    assert tool_parts(agent)["e"] == ("output-available", text_output("again"))
    assert agent.get_mcp_servers()["t"].state == "ready"
    assert server_log.lines() == ["crash boom", "echo again"]


async def test_list_changed_refreshes_the_tool_set_before_the_next_turn(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [
            tool_call("t_grow", {"name": "fresh"}, id="g"),
            text("grown"),
            tool_call("t_fresh", {}, id="f"),
            text("used it"),
        ]
    )
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    version = agent._mcp.version
    await agent.save_messages("grow")
    assert await agent._mcp.wait_changed(version, WAIT_S)
    await agent.save_messages("use it")
    assert "t_fresh" not in offered(model.requests[0]) and "t_fresh" in offered(model.requests[2])
    assert tool_parts(agent)["f"] == ("output-available", text_output("fresh was added"))


async def test_a_turn_right_after_a_tool_that_added_tools_is_offered_them(agents: Any, server_log: ServerLog) -> None:
    # The server adds a tool and announces tools/list_changed before the call returns; the next turn starts at
    # once (chained save_messages, as schedules and agent-to-agent calls run them), with no wait in between.
    model = ScriptedModel(
        [
            tool_call("t_grow", {"name": "fresh"}, id="g"),
            text("grown"),
            tool_call("t_fresh", {}, id="f"),
            text("used it"),
        ]
    )
    agent = agents(stdio_server(server_log), model=model)
    await agent.wait_for_mcp_connections(WAIT_S)
    await agent.save_messages("grow")
    await agent.save_messages("use it")
    assert "t_fresh" in offered(model.requests[2])
    assert tool_parts(agent)["f"] == ("output-available", text_output("fresh was added"))


async def test_a_turn_waits_for_a_listing_announced_before_it_started(server_log: ServerLog) -> None:
    connection = ta.mcp.McpConnection(stdio_server(server_log))
    try:
        assert await connection.wait_ready(WAIT_S)
        assert await connection.settle(0.01)  # nothing announced: nothing to wait for
        before = connection.listings
        assert await connection.run("grow", {"name": "later"}) == text_output("added later")
        # The call returned after the listing its notification asked for.
        assert connection.listings == before + 1 and not connection.unsettled()
        assert "later" in {t.name for t in connection.tools}
    finally:
        await connection.close()


async def test_a_call_during_the_first_connect_joins_it(server_log: ServerLog) -> None:
    connection = ta.mcp.McpConnection(stdio_server(server_log))
    connection.start()
    try:
        calls = [connection.run("echo", {"text": str(i)}) for i in range(3)]
        assert await asyncio.gather(*calls) == [text_output(str(i)) for i in range(3)]
        assert (connection.state, connection.connects) == ("ready", 1)
    finally:
        await connection.close()
    assert connection.state == "closed"
    with pytest.raises(ta.mcp.McpToolError, match="was removed from the agent"):
        await connection.run("echo", {"text": "late"})


# ------------------------------------------------------------------ at run time


async def test_servers_are_added_and_removed_at_run_time(agents: Any, server_log: ServerLog) -> None:
    model = ScriptedModel(
        [text("none yet"), tool_call("late_echo", {"text": "hello"}, id="e"), text("echoed"), text("gone")]
    )
    agent = agents(model=model)
    await agent.save_messages("anything?")
    assert agent.get_mcp_servers() == {} and offered(model.requests[0]) == []
    state = await agent.add_mcp_server(stdio_server(server_log, name="late"))
    assert (state.name, state.state, state.tool_count) == ("late", "ready", 12)
    await agent.save_messages("echo")
    assert tool_parts(agent)["e"] == ("output-available", text_output("hello"))
    assert await agent.remove_mcp_server("late") is True
    assert await agent.remove_mcp_server("late") is False
    await agent.save_messages("and now?")
    assert agent.get_mcp_servers() == {} and offered(model.requests[-1]) == []
    assert (await agent.add_mcp_server(stdio_server(server_log, name="x"))).state == "ready"
    with pytest.raises(ValueError, match="already has an MCP server named 'x'"):
        await agent.add_mcp_server(stdio_server(server_log, name="x"))


# ------------------------------------------------------------------ streamable HTTP


async def test_streamable_http_sends_headers_survives_a_server_killed_mid_call_and_reconnects(
    agents: Any, http_server: McpHttpServer, server_log: ServerLog
) -> None:
    model = ScriptedModel(
        [
            step(tool_call("h_header", {"name": "X-Team"}, id="h"), tool_call("h_add", {"a": 1, "b": 1}, id="a")),
            text("ok"),
            tool_call("h_sleep", {"seconds": 60}, id="down"),
            text("it is down"),
            tool_call("h_echo", {"text": "up"}, id="up"),
            text("it is up"),
        ]
    )
    config = ta.mcp.http(http_server.url, name="h", headers={"X-Team": "blue"}, call_timeout_s=30, connect_timeout_s=30)
    agent = agents(config, model=model)
    states = await agent.wait_for_mcp_connections(WAIT_S)
    assert (states["h"].state, states["h"].transport, states["h"].target) == ("ready", "http", http_server.url)
    await agent.save_messages("who am I")
    assert tool_parts(agent)["h"] == ("output-available", text_output("blue"))
    assert tool_parts(agent)["a"][1]["structuredContent"] == {"total": 2, "terms": [1, 1]}

    turn = asyncio.create_task(agent.save_messages("sleep"))
    await server_log.wait_for("sleep 60.0")
    await http_server.kill()  # in the middle of the call
    await turn
    assert tool_parts(agent)["down"][0] == "output-error"
    assert tool_parts(agent)["down"][1].startswith("MCP server 'h' closed the connection while 'sleep' ran")
    assert agent.get_messages()[-1].text == "it is down"

    await http_server.start()
    await agent.save_messages("echo again")
    assert tool_parts(agent)["up"] == ("output-available", text_output("up"))


# ------------------------------------------------------------------ durable turns


async def crash_mid_call(
    agents: Any, server_log: ServerLog, tool: str, argument: str, call: dict[str, Any]
) -> ta.MemoryStore:
    """Run a turn until the server is inside ``tool``; return the agent's store as a crash there leaves it."""
    store = ta.MemoryStore()
    agent = agents(
        stdio_server(server_log, hold_s=300), model=ScriptedModel([tool_call(f"t_{tool}", call, id="c1")]), store=store
    )
    await agent.wait_for_mcp_connections(WAIT_S)
    task = asyncio.create_task(agent.save_messages("go"))
    await server_log.wait_for(f"{tool} {argument}")  # the effect is recorded before the call reaches the server
    snapshot = copy.deepcopy(store)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await agent.close()  # its server process dies with it
    return snapshot


async def restart_after_crash(
    agents: Any, server_log: ServerLog, store: ta.MemoryStore, model: ScriptedModel
) -> McpAgent:
    agent = agents(stdio_server(server_log), model=model, store=store)
    await agent.wait_for_mcp_connections(WAIT_S)  # before the agent starts: recovery sees the server's tools
    await agent.load_messages()
    await asyncio.wait_for(agent._engine.recovery.idle(), WAIT_S)
    await agent.wait_until_stable(timeout_s=WAIT_S)
    return agent


async def test_a_call_in_doubt_after_a_crash_is_reconciled_not_rerun(agents: Any, server_log: ServerLog) -> None:
    store = await crash_mid_call(agents, server_log, "pay", "5", {"amount": 5})
    agent = await restart_after_crash(agents, server_log, store, ScriptedModel([text("I could not tell")]))
    [ctx] = agent.reconciled
    assert (ctx.tool_call_id, ctx.tool_name, ctx.input, ctx.idempotent) == ("c1", "t_pay", {"amount": 5}, False)
    assert tool_parts(agent)["c1"] == ("output-error", UNKNOWN_OUTCOME)
    assert server_log.lines() == ["pay 5"]  # never paid twice


async def test_a_read_only_call_in_doubt_is_rerun_after_a_crash(agents: Any, server_log: ServerLog) -> None:
    store = await crash_mid_call(agents, server_log, "lookup", "k", {"key": "k"})
    agent = await restart_after_crash(agents, server_log, store, ScriptedModel([text("found it")]))
    [ctx] = agent.reconciled
    assert (ctx.tool_name, ctx.idempotent) == ("t_lookup", True)  # readOnlyHint
    assert tool_parts(agent)["c1"] == ("output-available", text_output("value of k"))
    assert server_log.lines() == ["lookup k", "lookup k"]
    assert agent.get_messages()[-1].text == "found it"
