"""One MCP server's connection: the SDK's ``ClientSession`` over stdio or streamable HTTP, kept alive and renewed.

The session lives in a task of its own (``_run``): the SDK's transports are anyio task groups, which must be
entered and left by one task, while tool calls come from the turns' tasks. The transport's read stream is
relayed to the session, so the end of the stream (a stdio server that exited, an HTTP stream that died) is
seen at once: the connection is marked lost, calls in flight fail with a clear error, and the next call
connects again. A call is never retried by this module: whether re-running it is safe is the turn's decision
(the effect ledger and ``reconcile_tool_call``), not the transport's.

``tools/list_changed`` notifications trigger a new listing in the background; the agent's tool set picks it up
at the next turn (a running turn keeps the tools it started with). A tool call during which the server announced a
change returns only once that listing arrived (at most ``_SETTLE_S``), and a turn starts only once every listing
announced before it arrived (``settle``), so a turn that follows a tool adding tools is offered them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import httpx2
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import ValidationError

from .adapter import ListedTool, Progress
from .config import ConnectionState, McpServerConfig
from .results import McpToolError, to_output

__all__ = ["ConnectionState", "McpConnection"]

log = logging.getLogger(__name__)

_CLIENT_INFO = types.Implementation(name="think_actors", version="0.1.0")
_SETTLE_S = 5.0  # the longest a call or a turn waits for a listing a tools/list_changed asked for


class McpConnection:
    """A client of one MCP server: connects on ``start()``, lists its tools, calls them, reconnects when lost.

    Args:
        config: The server.
        on_tools_changed: Called (no arguments) after each new listing of the server's tools.
        on_state_changed: Called (no arguments) after the state or the error changed.
    """

    def __init__(
        self,
        config: McpServerConfig,
        *,
        on_tools_changed: Callable[[], None] | None = None,
        on_state_changed: Callable[[], None] | None = None,
    ):
        self.config = config
        self.state: ConnectionState = "connecting"
        self.error: str | None = None
        self.tools: list[ListedTool] = []
        """The server's latest tool listing (kept while the connection is lost: the next call reconnects)."""
        self.listings = 0
        """How many listings have arrived (the first connect's, reconnects' and list_changed refreshes)."""
        self.connects = 0
        """How many times a session became ready."""
        self._on_tools_changed = on_tools_changed
        self._on_state_changed = on_state_changed
        self._session: ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event = asyncio.Event()
        self._stop: asyncio.Event = asyncio.Event()
        self._refresh: asyncio.Event = asyncio.Event()
        self._asked = 0  # tools/list_changed notifications received
        self._answered = 0  # of them, how many a finished listing (or a failed one) covers
        self._settled: list[asyncio.Future[None]] = []  # settle() calls waiting for the next listing to finish
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"McpConnection({self.config.name!r}, {self.state})"

    def _set(self, state: ConnectionState, error: str | None) -> None:
        changed = (state, error) != (self.state, self.error)
        self.state, self.error = state, error
        if changed and self._on_state_changed is not None:
            self._on_state_changed()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start connecting in the background, unless a session runs or is being set up."""
        if self._closed:
            return
        if self._task is not None and not self._task.done():
            return
        self._set("connecting", None)
        self._ready, self._stop = asyncio.Event(), asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"mcp:{self.config.name}")

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        """Wait until connected or failed (at most ``timeout_s``); whether the server is ready."""
        self.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        return self.state == "ready"

    async def close(self) -> None:
        """End the session (a stdio server's process is stopped); no later call reconnects."""
        self._closed = True
        task = self._task
        self._stop.set()
        if task is not None and not task.done() and self.state != "ready":
            task.cancel()  # still connecting: nothing to close gracefully
            await asyncio.gather(task, return_exceptions=True)
        elif task is not None and not task.done():
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(task)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            except asyncio.CancelledError:
                task.cancel()
                raise
        self._set("closed", self.error)

    def _lost(self, reason: str) -> None:
        if self._closed:  # our own close ended the session: nothing was lost
            self._stop.set()
            return
        if self.state == "ready":
            log.warning("MCP server %r: %s; the next call reconnects", self.config.name, reason)
            self._set("failed", reason)
        elif self.state == "connecting" and self.error is None:
            self._set("connecting", f"{reason} before the handshake ended")  # the truth, rather than the SDK's "closed"
        self._stop.set()

    # ------------------------------------------------------------------ the session's task

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        if cfg.transport == "stdio":
            params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args), env=cfg.env, cwd=cfg.cwd)
            async with stdio_client(params) as streams:
                yield streams
        else:
            timeout = httpx2.Timeout(cfg.connect_timeout_s, read=max(300.0, cfg.call_timeout_s))
            async with (
                httpx2.AsyncClient(headers=cfg.headers, timeout=timeout) as client,
                streamable_http_client(cfg.url or "", http_client=client) as streams,
            ):
                yield streams

    async def _run(self) -> None:
        cfg = self.config
        try:
            async with self._transport() as (read, write), anyio.create_task_group() as group:
                relay_send, relay_receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

                async def relay() -> None:
                    async with relay_send:
                        async for item in read:
                            await relay_send.send(item)
                    self._lost("the server closed the connection (it exited or crashed)")

                group.start_soon(relay)
                async with ClientSession(
                    relay_receive, write, message_handler=self._on_message, client_info=_CLIENT_INFO
                ) as session:
                    with anyio.fail_after(cfg.connect_timeout_s):
                        await session.initialize()
                        await self._list(session)
                    self._session = session
                    self._set("ready", None)
                    self.connects += 1
                    self._ready.set()
                    group.start_soon(self._refresher, session)
                    await self._stop.wait()
                group.cancel_scope.cancel()
        except Exception as err:
            if not self._closed and self.state != "ready":  # a ready session that was lost said so in _lost
                self._set("failed", self.error or _describe(err, cfg))
                log.warning("MCP server %r failed: %s", cfg.name, self.error)
        finally:
            self._session = None
            if self.state in ("ready", "connecting"):
                self._set("failed", self.error or "the connection ended")
            self._ready.set()

    async def _list(self, session: ClientSession) -> None:
        tools: list[types.Tool] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = [_listed(t) for t in tools]
        self.listings += 1
        if self._on_tools_changed is not None:
            self._on_tools_changed()

    async def _refresher(self, session: ClientSession) -> None:
        while True:
            await self._refresh.wait()
            self._refresh.clear()
            asked = self._asked
            try:
                with anyio.fail_after(self.config.connect_timeout_s):
                    await self._list(session)
            except Exception as err:
                log.warning("MCP server %r: listing its changed tools failed: %s", self.config.name, err)
            finally:
                self._answered = asked
                waiting, self._settled = self._settled, []
                for future in waiting:
                    if not future.done():
                        future.set_result(None)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self._asked += 1
            self._refresh.set()  # listed by the refresher: awaiting the server here would stall its reader
        elif isinstance(message, Exception):
            log.warning("MCP server %r: transport error: %s", self.config.name, message)

    def unsettled(self) -> bool:
        """Whether the server announced a tool change whose listing has not arrived yet."""
        return self._answered < self._asked and self.state == "ready"

    async def settle(self, timeout_s: float = _SETTLE_S) -> bool:
        """Wait until every listing a ``tools/list_changed`` asked for so far has arrived (at most ``timeout_s``;
        a lost connection ends the wait); whether none is pending."""
        wanted = self._asked
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self._answered < wanted and self.state == "ready":
                    future = asyncio.get_running_loop().create_future()
                    self._settled.append(future)
                    await future
        return not self.unsettled()

    # ------------------------------------------------------------------ calls

    async def _ensure_session(self) -> ClientSession:
        async with self._lock:  # concurrent calls after a loss reconnect once
            if self._closed:
                raise McpToolError(f"MCP server {self.config.name!r} was removed from the agent")
            if self._session is None or self._stop.is_set():
                if self._stop.is_set() and self._task is not None:
                    await asyncio.gather(self._task, return_exceptions=True)  # the lost session winds down
                await self.wait_ready(self.config.connect_timeout_s + 1)  # joins a connect under way
            if self._session is None:
                raise McpToolError(
                    f"MCP server {self.config.name!r} ({self.config.describe()}) is not connected: "
                    f"{self.error or 'connecting timed out'}"
                )
            return self._session

    async def run(
        self, tool_name: str, arguments: dict[str, Any], on_progress: Progress | None = None
    ) -> dict[str, Any]:
        """Call the server's tool ``tool_name``: its output, or an ``McpToolError`` (``isError`` included).

        When the server announced a change of its tools during the call (a tool that adds tools), the output comes
        once the new listing arrived (``settle``), so what runs next is offered the new tools."""
        output = to_output(await self.call(tool_name, arguments, on_progress))
        if self.unsettled():
            await self.settle()
        return output

    async def call(
        self, tool_name: str, arguments: dict[str, Any], on_progress: Progress | None = None
    ) -> types.CallToolResult:
        """Call the server's tool ``tool_name``; every failure is an ``McpToolError`` with a clear message."""
        cfg = self.config
        session = await self._ensure_session()
        started = time.monotonic()
        try:
            # The SDK's own deadline cancels the request on the server; ours is the backstop if it does not fire.
            async with asyncio.timeout(cfg.call_timeout_s + 5):
                return await session.call_tool(
                    tool_name,
                    arguments,
                    read_timeout_seconds=cfg.call_timeout_s,
                    progress_callback=_progress_callback(on_progress) if on_progress is not None else None,
                )
        except MCPError as err:
            if err.code == REQUEST_TIMEOUT:
                raise McpToolError(_timed_out(cfg, tool_name)) from None
            if err.code == CONNECTION_CLOSED:
                self._lost("the connection closed during a call")
                raise McpToolError(
                    f"MCP server {cfg.name!r} closed the connection while {tool_name!r} ran, after "
                    f"{time.monotonic() - started:.1f}s (it exited or crashed); the next call reconnects"
                ) from None
            raise McpToolError(f"MCP server {cfg.name!r} refused {tool_name!r}: {err.message}") from None
        except TimeoutError:
            raise McpToolError(_timed_out(cfg, tool_name)) from None
        except (ValidationError, RuntimeError) as err:
            first = (str(err).splitlines() or [type(err).__name__])[0]  # jsonschema's message goes on for lines
            raise McpToolError(
                f"MCP server {cfg.name!r} returned an invalid result for {tool_name!r}: {first}"
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError) as err:
            self._lost(f"the connection broke: {type(err).__name__}")
            raise McpToolError(
                f"MCP server {cfg.name!r} lost its connection while {tool_name!r} ran ({type(err).__name__}); "
                "the next call reconnects"
            ) from None


def _progress_callback(on_progress: Progress) -> Any:
    async def callback(progress: float, total: float | None, message: str | None) -> None:
        on_progress(progress, total, message)

    return callback


def _listed(tool: types.Tool) -> ListedTool:
    hints = tool.annotations
    title = tool.title or (hints.title if hints else None)
    text = tool.description or ""
    return ListedTool(
        name=tool.name,
        description=f"{title}: {text}" if title and text and title not in text else text or title or tool.name,
        input_schema=dict(tool.input_schema or {}),
        read_only=bool(hints and hints.read_only_hint),
        idempotent=bool(hints and hints.idempotent_hint),
    )


def _timed_out(cfg: McpServerConfig, tool_name: str) -> str:
    return f"MCP tool {tool_name!r} of server {cfg.name!r} did not answer within {cfg.call_timeout_s:g}s (timed out)"


def _describe(err: BaseException, cfg: McpServerConfig) -> str:
    """One line for a failed connect: the innermost real error of an exception group, with the server."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    if isinstance(err, TimeoutError):
        return f"connecting to {cfg.describe()} timed out after {cfg.connect_timeout_s:g}s"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
