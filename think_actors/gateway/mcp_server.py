"""Agents as an MCP server: each agent class a gateway serves is an MCP tool, "chat with this agent".

MCP clients (Claude Desktop, IDEs, other frameworks' agents, think_actors' own ``ta.mcp.http``) list the tools and
call one: ``{"message": "...", "agent_name": "..."}`` (``agent_name`` is optional: without it every caller talks to
the agent named ``mcp``). The call runs a turn of that agent, as a chat over the gateway's WebSocket would, and its
result is the reply's text plus structured content ``{agent, name, requestId, messageId, status}``. While the turn
streams, a client that sent a progress token gets a progress notification per text delta and per tool call. An
unknown tool (agent class), a bad agent name, a bad input and a failed or aborted turn are tool errors
(``isError``) whose text says what happened. Not built: a client that gives up on a call (a timeout, a cancel)
does not stop the turn, which runs to its end and is stored. Over stateless HTTP the client's
``notifications/cancelled`` reaches a fresh server that never saw the call (and SDK 2.3's runner logs "no handler"
for it even within a session); the call's own stream stays open until the reply, so no disconnect is seen either.

Two ways to serve it, one server (the official SDK's low-level ``Server``, no hand-written JSON-RPC):

- streamable HTTP at ``/mcp`` on the gateway (``Gateway(..., mcp=True)``, ``think-actors serve --mcp``). aiohttp
  is no ASGI server, so ``McpEndpoint`` hands each request to the SDK's ``StreamableHTTPSessionManager`` through a
  small ASGI bridge. It is stateless (no session id, no GET stream): every POST is served alone, so any gateway
  of a cluster answers any request, and a reply streams back over the POST's own SSE response. The route sits
  behind the gateway's guard (``security.py``: the token, the Origin rule, loopback-only without a token), so
  the SDK's own DNS-rebinding check is off: one rule set, already tested, for every route.
- stdio (``think-actors serve --mcp-stdio``): how Claude Desktop starts a server; ``run_stdio``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import mcp_types as types
from aiohttp import web
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ..agent import Think
from ..errors import InvalidAgentNameError, ThinkError
from ..identity import Principal
from ..store import validate_agent_name
from .access import PRINCIPAL, Access, QuotaExceeded
from .directory import AgentDirectory
from .turns import _tokens

__all__ = ["DEFAULT_AGENT_NAME", "McpEndpoint", "agents_mcp_server", "run_stdio"]

DEFAULT_AGENT_NAME = "mcp"
"""The agent a call without ``agent_name`` talks to."""

_VERSION = "0.1.0"
_INPUT_KEYS = frozenset({"message", "agent_name"})
_SCOPE_KEY = "think_actors.principal"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


def _tool(slug: str, cls: type[Think]) -> types.Tool:
    about = (cls.__dict__.get("__doc__") or "").strip().split("\n\n", 1)[0] or str(cls.instructions or "").strip()
    return types.Tool(
        name=slug,
        title=f"Chat with {cls.__name__}",
        description=(
            f"Send a message to a {cls.__name__} agent (think_actors) and get its reply. Each agent_name is one "
            f"conversation, kept between calls (default {DEFAULT_AGENT_NAME!r})." + (f" {about}" if about else "")
        ),
        input_schema={
            "type": "object",
            "properties": {
                "message": {"type": "string", "minLength": 1, "description": "What to say to the agent."},
                "agent_name": {
                    "type": "string",
                    "description": f"Which {cls.__name__}: one conversation per name (default {DEFAULT_AGENT_NAME!r}).",
                },
            },
            "required": ["message"],
            "additionalProperties": False,
        },
        annotations=types.ToolAnnotations(read_only_hint=False, idempotent_hint=False, open_world_hint=True),
    )


def _error(text: str, **facts: Any) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=facts or None, is_error=True
    )


class _Reply:
    """The reply of a turn as its chunks arrive: its text, its message id, how it ended; what to tell as progress."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {}
        self.message_id: str | None = None
        self.error: str | None = None
        self.aborted: str | None = None
        self.steps = 0

    def add(self, chunk: Any) -> str | None:
        """Take one chunk; returns the progress message it is worth, or None."""
        kind = chunk.type
        if kind == "start" and chunk.message_id:
            self.message_id = chunk.message_id
        elif kind == "text-delta":
            self.texts.setdefault(chunk.id, []).append(chunk.delta)
            return str(chunk.delta)
        elif kind == "tool-input-available":
            return f"calling {chunk.tool_name}"
        elif kind == "tool-output-available" and not getattr(chunk, "preliminary", False):
            return "tool finished"
        elif kind == "tool-output-error":
            return f"tool failed: {chunk.error_text}"
        elif kind == "error":
            self.error = chunk.error_text
        elif kind == "abort":
            self.aborted = chunk.reason or "aborted"
        return None

    @property
    def text(self) -> str:
        return "\n\n".join("".join(parts) for parts in self.texts.values())

    @property
    def status(self) -> str:
        return "error" if self.error is not None else "aborted" if self.aborted is not None else "completed"


class _AgentTools:
    """The tools/list and tools/call handlers over a directory's agent classes."""

    def __init__(self, directory: AgentDirectory, access: Access | None = None):
        self.directory = directory
        self.access = access  # the gateway's: who may call which agent, and how much (None over stdio: local)

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_tool(slug, cls) for slug, cls in sorted(self.directory.classes.items())])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        slug, arguments = params.name, params.arguments or {}
        if slug not in self.directory.classes:
            known = ", ".join(sorted(self.directory.classes)) or "none"
            return _error(f"no agent class {slug!r} here: the tools (agent classes) are {known}")
        unknown = sorted(set(arguments) - _INPUT_KEYS)
        if unknown:
            return _error(f"unknown input {', '.join(unknown)}: give message (and agent_name, optionally)")
        message, name = arguments.get("message"), arguments.get("agent_name")
        if not isinstance(message, str) or not message.strip():
            return _error("give message: what to say to the agent, a non-empty string")
        name = DEFAULT_AGENT_NAME if name is None else name
        if not isinstance(name, str):
            return _error(f"agent_name must be a string, not {type(name).__name__}")
        try:
            validate_agent_name(name)
        except InvalidAgentNameError as err:
            return _error(f"agent_name {name!r} is not an agent name: {err.message}")
        facts: dict[str, Any] = {"agent": slug, "name": name}
        principal = _principal(ctx)
        if self.access is not None and principal is not None:
            reason = await self.access.refusal(principal, f"{slug}/{name}", "chat")
            if reason is not None:
                return _error(f"chat refused: {reason}", **facts)
            try:
                await self.access.start_turn(principal)
            except QuotaExceeded as err:
                return _error(f"quota {err.quota}: {err.message}", **facts)
        try:
            agent = await self.directory.get(slug, name)
        except ThinkError as err:
            return _error(f"the {slug} agent {name!r} could not be reached: {err.message}", **facts)
        except Exception as err:
            return _error(f"the {slug} agent {name!r} could not be reached: {type(err).__name__}: {err}", **facts)
        return await self._turn(ctx, agent, message, facts, principal)

    async def _turn(
        self,
        ctx: ServerRequestContext[Any],
        agent: Any,
        message: str,
        facts: dict[str, Any],
        principal: Principal | None = None,
    ) -> types.CallToolResult:
        request_id = f"mcp-{uuid.uuid4().hex[:16]}"
        facts["requestId"] = request_id
        reply = _Reply()
        try:
            stream = agent.chat(message, request_id=request_id, principal=principal)
            async for chunk in stream:
                update = reply.add(chunk)
                if update is not None:
                    reply.steps += 1
                    with contextlib.suppress(Exception):  # a lost progress notification must not cost the turn
                        await ctx.session.report_progress(reply.steps, None, update)
        except asyncio.CancelledError:
            # The SDK cancelled the call (the gateway shuts down): the turn stops too, rather than run for nobody.
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await agent.cancel_chat(request_id, "the MCP client cancelled the call")
            raise
        except ThinkError as err:
            return _error(f"the turn failed: {err.message}", **facts, status="error")
        except Exception as err:
            return _error(f"the turn failed: {type(err).__name__}: {err}", **facts, status="error")
        if self.access is not None and principal is not None:
            await self.access.turn_used(principal, _tokens(stream.outcome))
        facts.update(messageId=reply.message_id, status=reply.status)
        if reply.error is not None:
            return _error(f"the turn failed: {reply.error}", **facts)
        if reply.aborted is not None:
            return _error(f"the turn was aborted: {reply.aborted}", **facts)
        return types.CallToolResult(content=[types.TextContent(type="text", text=reply.text)], structured_content=facts)


def _principal(ctx: ServerRequestContext[Any]) -> Principal | None:
    """Who sent the MCP request: the gateway authenticated it and put it in the request's ASGI scope."""
    scope = getattr(ctx.request, "scope", None)
    found = scope.get(_SCOPE_KEY) if isinstance(scope, dict) else None
    return found if isinstance(found, Principal) else None


def agents_mcp_server(
    directory: AgentDirectory, *, name: str = "think-actors", access: Access | None = None
) -> Server[Any]:
    """The SDK's low-level ``Server`` whose tools are the directory's agent classes."""
    tools = _AgentTools(directory, access)
    return Server(name, version=_VERSION, on_list_tools=tools.list_tools, on_call_tool=tools.call_tool)


class McpEndpoint:
    """``/mcp`` on a gateway: the agents' MCP server over streamable HTTP, in the gateway's aiohttp app."""

    PATH = "/mcp"

    def __init__(self, directory: AgentDirectory, *, max_body_bytes: int, access: Access | None = None):
        self.server = agents_mcp_server(directory, access=access)
        # The gateway's guard checks token, Origin and Host before a request gets here (module docstring).
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self._manager = StreamableHTTPSessionManager(
            self.server, stateless=True, security_settings=security, max_request_body_size=max_body_bytes
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Future[web.StreamResponse]] = set()

    def mount(self, app: web.Application) -> None:
        app.router.add_route("*", self.PATH, self._handle)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._close)

    async def _start(self, app: web.Application) -> None:
        # The manager's task group must be entered and left by one task: a task of its own, for the app's life.
        ready = asyncio.Event()

        async def hold() -> None:
            async with self._manager.run():
                ready.set()
                await self._stop.wait()

        self._task = asyncio.create_task(hold(), name="mcp-endpoint")
        started = asyncio.ensure_future(ready.wait())
        await asyncio.wait({started, self._task}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.is_set():
            started.cancel()
            await self._task  # raises why the manager could not start

    async def _close(self, app: web.Application) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        finished = asyncio.Event()
        task = asyncio.ensure_future(_serve_asgi(self._manager.handle_request, request, finished))
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            # aiohttp cancels the handler of a client that left (with handler_cancellation on): the SDK hears a
            # disconnect and winds the request down itself. Cancelling it instead could cost a session it just
            # opened (one whose answer was sent in full before the client closed the connection).
            finished.set()
            raise


async def _serve_asgi(
    app: Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]],
    request: web.Request,
    finished: asyncio.Event,
) -> web.StreamResponse:
    """Serve an aiohttp request with an ASGI application (HTTP only; the body is read whole first).

    ``finished`` is set when the response ended or the client went away: then ``receive()`` says disconnect.
    """
    body = await request.read()
    response: web.StreamResponse | None = None
    body_sent = False
    peer = request.transport.get_extra_info("peername") if request.transport is not None else None
    host, _, port = (request.host or "").rpartition(":")
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.rel_url.raw_path.encode(),
        "query_string": request.rel_url.raw_query_string.encode(),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": (host, int(port)) if port.isdigit() else None,
        _SCOPE_KEY: request.get(PRINCIPAL),  # the call's handler authorizes the agent it names for them
    }

    async def receive() -> Message:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for key, value in message.get("headers") or ():
                response.headers.add(key.decode("latin-1"), value.decode("latin-1"))
            if response.headers.get("Content-Type", "").startswith("text/event-stream"):
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await response.prepare(request)  # a stream's headers go out now, before its first event
            return
        if message["type"] != "http.response.body" or response is None or finished.is_set():
            return
        try:
            if not response.prepared:
                await response.prepare(request)
            if message.get("body"):
                await response.write(message["body"])
            if not message.get("more_body", False):
                await response.write_eof()
                finished.set()
        except (ConnectionError, RuntimeError):  # the client went away mid-response
            finished.set()

    try:
        await app(scope, receive, send)
    finally:
        finished.set()
    if response is None:
        return web.json_response({"error": "the MCP endpoint sent no response"}, status=500)
    if not response.prepared:  # a response without a body
        await response.prepare(request)
        await response.write_eof()
    return response


async def run_stdio(directory: AgentDirectory) -> None:
    """Serve the agents' MCP server on stdin/stdout until the client closes them."""
    server = agents_mcp_server(directory)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())
