"""Shared helpers of the port of Cloudflare's own Think tests (``cloudflare/agents`` at a0e134b).

Written from the reference's tests, not from think_actors' own suite: ``Recorder`` logs what each hook saw the
way the reference's test agents do (``getBeforeTurnLog``, ``getStepLog``, ``getAfterToolCallLog``, ...), and
``echo_tool`` is the reference's ``echo`` test tool with its execute counter and its execute modes.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel

WAIT_S = 5.0


class Recorder(ta.Think):
    """Logs every hook call as ``(hook, ctx)`` in ``self.log``; overrides come from attributes a test sets.

    ``turn_config`` is what ``before_turn`` returns, ``step_config(ctx)`` what ``before_step`` returns,
    ``decision(ctx)`` (awaited when it is a coroutine) what ``before_tool_call`` returns.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log: list[tuple[str, Any]] = []
        self.turn_config: ta.TurnConfig | None = None
        self.step_config: Callable[[ta.StepContext], Any] | None = None
        self.decision: Callable[[ta.ToolCallContext], Any] | None = None
        self.events: list[ta.Event] = []
        for channel in ("agents:chat", "agents:message", "agents:transcript"):
            self.observe(channel, self.events.append)

    def seen(self, hook: str) -> list[Any]:
        return [ctx for name, ctx in self.log if name == hook]

    def hooks(self, *, skip: tuple[str, ...] = ("on_chunk",)) -> list[str]:
        return [name for name, _ in self.log if name not in skip]

    def event_types(self, prefix: str = "") -> list[str]:
        return [e.type for e in self.events if e.type.startswith(prefix)]

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.log.append(("before_turn", ctx))
        return self.turn_config

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        self.log.append(("before_step", ctx))
        return self.step_config(ctx) if self.step_config else None

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        self.log.append(("on_chunk", ctx))

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        self.log.append(("before_tool_call", ctx))
        if self.decision is None:
            return None
        decided = self.decision(ctx)
        return await decided if asyncio.iscoroutine(decided) else decided

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.log.append(("after_tool_call", ctx))

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.log.append(("on_step_finish", ctx))

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.log.append(("on_chat_response", result))

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self.log.append(("on_chat_error", (error, ctx)))
        return error


class EchoTool:
    """The reference's ``echo`` test tool: counts executions; ``mode`` picks how execute returns its value.

    Modes (the reference's ``setEchoExecuteMode``): ``default`` (a value), ``async-generator`` (two preliminary
    yields then the value), ``async-iterable`` (a coroutine returning an async iterator),
    ``sync-iterable`` (a plain function returning an async iterator).
    """

    def __init__(self, mode: str = "default", *, needs_approval: bool = False) -> None:
        self.mode = mode
        self.runs: list[dict[str, Any]] = []
        self.tool = self._build(needs_approval)

    def _build(self, needs_approval: bool) -> ta.Tool:
        owner = self

        async def values(message: str) -> AsyncIterator[str]:
            yield f"echo-prelim-1: {message}"
            yield f"echo-prelim-2: {message}"
            yield f"echo: {message}"

        if self.mode == "async-generator":

            async def generator(message: str) -> AsyncIterator[str]:
                owner.runs.append({"message": message})
                async for value in values(message):
                    yield value

            return ta.tool(generator, name="echo", description="Echo a message", needs_approval=needs_approval)
        if self.mode == "async-iterable":

            async def coroutine(message: str) -> Any:
                owner.runs.append({"message": message})
                return values(message)

            return ta.tool(coroutine, name="echo", description="Echo a message", needs_approval=needs_approval)
        if self.mode == "sync-iterable":

            def plain(message: str) -> Any:
                owner.runs.append({"message": message})
                return values(message)

            return ta.tool(plain, name="echo", description="Echo a message", needs_approval=needs_approval)

        async def scalar(message: str) -> str:
            owner.runs.append({"message": message})
            return f"echo: {message}"

        return ta.tool(scalar, name="echo", description="Echo a message", needs_approval=needs_approval)


def texts(agent: ta.Think) -> list[tuple[str, str]]:
    """The transcript as ``(role, text)`` pairs."""
    return [(m.role, m.text) for m in agent.get_messages()]


def tool_parts(agent: ta.Think) -> list[ta.ToolPart]:
    return [p for m in agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart)]


def types(chunks: list[Any]) -> list[str]:
    return [c.type for c in chunks]


async def settle_recovery(agent: ta.Think) -> None:
    """Wait until the agent's recovery work (restart scan, stall continuations) is done."""
    await asyncio.wait_for(agent._engine.recovery.idle(), WAIT_S)


class Held(ScriptedModel):
    """A scripted model that stops request ``request`` after its ``after``-th event until ``release`` is set.

    ``held`` is set when it stops, so "while the stream is open" is a state the test waits for, not a timing.
    """

    def __init__(self, steps: list[Any], *, after: int = 1, request: int = 1) -> None:
        super().__init__(steps)
        self.after = after
        self.request = request
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    def stream(self, request: Any) -> Any:
        inner = super().stream(request)
        number = len(self.requests)

        async def holding() -> Any:
            count = 0
            async for event in inner:
                yield event
                count += 1
                if number == self.request and count == self.after and not self.release.is_set():
                    self.held.set()
                    await self.release.wait()

        return holding()


class Freezer:
    """Freezes a turn for good at a named point: what a process killed there leaves behind."""

    def __init__(self, at: str | None) -> None:
        self.at = at
        self.frozen = asyncio.Event()

    async def point(self, name: str) -> None:
        if name == self.at:
            self.frozen.set()
            await asyncio.Event().wait()


async def killed_at(start: Callable[[], Any], freezer: Freezer, store: ta.MemoryStore) -> ta.MemoryStore:
    """Run ``start()`` until ``freezer`` freezes it; return a byte-for-byte copy of what the store then held."""
    task = asyncio.ensure_future(start())
    await asyncio.wait_for(freezer.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    task.cancel()
    return snapshot


# -- the WebSocket gateway ------------------------------------------------------------------------------------


def chat_request(request_id: str, *messages: dict[str, Any], **body: Any) -> str:
    payload = {"messages": list(messages), **body}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(payload)}}
    )


def wire_user(text: str, id: str) -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]}


async def next_frame(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
    return frame


async def until_done(ws: Any, request_id: str | None = None) -> list[dict[str, Any]]:
    """Frames up to the first ``done`` response frame (of ``request_id`` when given)."""
    frames = []
    while True:
        frame = await next_frame(ws)
        frames.append(frame)
        if (
            frame["type"] == "cf_agent_use_chat_response"
            and frame["done"]
            and (request_id is None or frame["id"] == request_id)
        ):
            return frames


async def until_type(ws: Any, frame_type: str) -> list[dict[str, Any]]:
    frames = []
    while True:
        frame = await next_frame(ws)
        frames.append(frame)
        if frame["type"] == frame_type:
            return frames


RESUME_REPLIES = ("cf_agent_stream_pending", "cf_agent_stream_resuming", "cf_agent_stream_resume_none")


async def handled(ws: Any) -> list[dict[str, Any]]:
    """Wait until the socket's earlier frames are handled: frames of a socket run in order, so once a resume
    request sent now is answered, every frame before it was. Returns the frames read meanwhile."""
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request"}))
    frames = []
    while True:
        frame = await next_frame(ws)
        frames.append(frame)
        if frame["type"] in RESUME_REPLIES:
            return frames


def wire_chunk_types(frames: list[dict[str, Any]]) -> list[str]:
    return [
        json.loads(f["body"])["type"]
        for f in frames
        if f["type"] == "cf_agent_use_chat_response" and f["body"] and not f.get("error")
    ]


async def skip_greeting(ws: Any) -> dict[str, Any]:
    """Read the three frames a socket gets on connect (transcript or resuming offer, identity, MCP state)."""
    first = await next_frame(ws)
    await next_frame(ws)
    await next_frame(ws)
    return first


@pytest.fixture
async def gateway() -> AsyncIterator[Callable[..., Any]]:
    """``await gateway(AgentClass, **agent_options)`` → ``(client, agent_of(name))`` over one in-process gateway."""
    clients: list[TestClient] = []

    async def make(*classes: type[ta.Think], **options: Any) -> tuple[TestClient, Callable[..., Any]]:
        options.setdefault("store", ta.MemoryStore())
        directory = LocalDirectory(list(classes), **options)
        client = TestClient(TestServer(Gateway(directory).app()))
        await client.start_server()
        clients.append(client)

        async def agent_of(slug: str, name: str) -> Any:
            return (await directory.get(slug, name)).agent

        return client, agent_of

    yield make
    for client in clients:
        await client.close()
