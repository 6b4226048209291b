"""Test helpers: an agent that records its hooks, and stream utilities."""

from __future__ import annotations

import asyncio
import inspect
import socket
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import think_actors as ta

# The exact hook order and chunk sequence of a turn with one tool step and one text step.
TOOL_THEN_TEXT_HOOKS = [
    "before_turn",
    "before_step",
    "before_tool_call",
    "after_tool_call",
    "on_step_finish",
    "before_step",
    "on_step_finish",
    "on_chat_response",
]
TOOL_THEN_TEXT_CHUNKS = [
    "start",
    "start-step",
    "tool-input-start",
    "tool-input-delta",
    "tool-input-delta",
    "tool-input-available",
    "tool-output-available",
    "finish-step",
    "start-step",
    "text-start",
    "text-delta",
    "text-end",
    "finish-step",
    "finish",
]


class RecordingAgent(ta.Think):
    """Records every hook call as ``(name, ctx)`` in ``self.calls``, in order."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, Any]] = []

    def hooks_called(self, skip: Iterable[str] = ()) -> list[str]:
        skipped = set(skip)
        return [name for name, _ in self.calls if name not in skipped]

    def contexts(self, name: str) -> list[Any]:
        return [ctx for hook, ctx in self.calls if hook == name]

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.calls.append(("before_turn", ctx))
        return None

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        self.calls.append(("before_step", ctx))
        return None

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        self.calls.append(("on_chunk", ctx))

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        self.calls.append(("before_tool_call", ctx))
        return None

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.calls.append(("after_tool_call", ctx))

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.calls.append(("on_step_finish", ctx))

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.calls.append(("on_chat_response", result))

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self.calls.append(("on_chat_error", (error, ctx)))
        return error


async def drain(stream: Any) -> list[Any]:
    """All chunks of a chat stream."""
    return [chunk async for chunk in stream]


def chunk_types(chunks: list[Any]) -> list[str]:
    return [c.type for c in chunks]


class HookedAgent(RecordingAgent):
    """A RecordingAgent whose hooks also return something: ``turn_config`` from ``before_turn``,
    ``step_config(ctx)`` from ``before_step`` and ``decide(ctx)`` (awaited if it returns an awaitable)
    from ``before_tool_call``."""

    def __init__(
        self,
        *args: Any,
        turn_config: ta.TurnConfig | None = None,
        step_config: Callable[[ta.StepContext], ta.StepConfig | None] | None = None,
        decide: Callable[[ta.ToolCallContext], Any] | None = None,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.turn_config = turn_config
        self.step_config = step_config
        self.decide = decide

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        await super().before_turn(ctx)
        return self.turn_config

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        await super().before_step(ctx)
        return self.step_config(ctx) if self.step_config is not None else None

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        await super().before_tool_call(ctx)
        if self.decide is None:
            return None
        decision = self.decide(ctx)
        return await decision if inspect.isawaitable(decision) else decision


async def greeting(ws: Any, timeout_s: float = 10.0) -> dict[str, Any]:
    """Read what a gateway socket sends on connect and return its first frame (the transcript, or the resuming
    offer when a stream runs); the identity and MCP-state frames that follow it are checked here."""
    import asyncio
    import json

    first, identity, mcp = [json.loads((await asyncio.wait_for(ws.receive(), timeout_s)).data) for _ in range(3)]
    assert identity["type"] == "cf_agent_identity" and identity["name"] and identity["agent"], identity
    assert mcp == {"mcp": {"prompts": [], "resources": [], "servers": {}, "tools": []}, "type": "cf_agent_mcp_servers"}
    return first


# -- stores ------------------------------------------------------------------------------------------------------

STORE_KINDS = ["memory", "sqlite", "postgres"]
"""Every store the Store contract tests run against (conftest's ``store`` fixture parametrizes over these)."""


def open_test_store(kind: str, where: str, agent: str = "lead/a") -> ta.Store:
    """A store of ``kind``: ``where`` is a SQLite file path or a PostgreSQL URL (ignored for memory)."""
    if kind == "memory":
        return ta.MemoryStore()
    if kind == "sqlite":
        return ta.SQLiteStore(where, agent=agent)
    return ta.PostgresStore(where, agent)


# An OpenAI-wire request's pieces, for the model-client tests.
HELLO = [{"role": "user", "content": "hello"}]
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the docs.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


async def until(check: Any, timeout_s: float = 60, what: str = "") -> Any:
    """Poll the coroutine function ``check`` every 0.2 s until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or check}")


MCP_TEST_SERVERS = Path(__file__).parent / "mcp_servers.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class McpHttpServer:
    """tests/mcp_servers.py serving streamable HTTP on 127.0.0.1, a process of the test (not of an agent, so it
    outlives a killed agent actor); ``kill`` and ``start`` again on the same port."""

    def __init__(self, log_path: Path, *, hold_s: float = 0, start_timeout_s: float = 90.0) -> None:
        self.env = {"MCP_TEST_LOG": str(log_path), "MCP_TEST_HOLD_S": str(hold_s), "PATH": "/usr/bin:/bin"}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.start_timeout_s = start_timeout_s
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(MCP_TEST_SERVERS),
            "http",
            str(self.port),
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        deadline = time.monotonic() + self.start_timeout_s
        while True:  # listening once a connection is accepted
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                if self.process.returncode is not None or time.monotonic() > deadline:
                    raise RuntimeError("the MCP test server did not start") from None
                await asyncio.sleep(0.05)
            else:
                writer.close()
                return

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
