"""An agent's MCP servers: the declared and the added ones, their connections, states and tools.

``tools()`` is what the turn's tool set gets: a snapshot, rebuilt only when a server's listing changed, so
assembling a turn costs no I/O. Declared servers start connecting the first time the agent asks for them (in
the agent's event loop); ``wait(timeout_s)`` waits for them, as Think's ``waitForMcpConnections``. A server that
failed to connect has no tools until it connects; one whose connection was lost keeps its tools, and the next
call of one of them reconnects.

Where a server's connection lives is the ``connect`` factory's business: in this process by default, or (on
Ray, ``shared=True``) behind the handle of a node's shared connection actor.

Whoever shows the servers (the gateway's ``cf_agent_mcp_servers`` frame) learns of every change of a server's
state or tools from the agent's observability events: with ``observers``, the manager publishes
``mcp:servers:changed`` (``{"servers": {name: McpServerState}}``, on ``agents:message``) after each one, while
that channel has a subscriber. Events cross actors through the agent's handle, so this is a push on Ray too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from ..observability import Observers
from ..tools import Tool
from .adapter import ListedTool, McpCaller, mcp_tool
from .config import ConnectionState, McpServerConfig

__all__ = ["MCP_SERVERS_CHANGED", "Connect", "McpManager", "McpServerState", "ServerConnection", "local_connect"]

MCP_SERVERS_CHANGED = "mcp:servers:changed"
"""The observability event published after a server's state or tool list changed."""


class ServerConnection(McpCaller, Protocol):
    """What the manager needs of a server's connection (``McpConnection``, or a shared one's proxy)."""

    config: McpServerConfig
    state: ConnectionState
    error: str | None
    tools: list[ListedTool]
    listings: int

    def start(self) -> None: ...

    async def wait_ready(self, timeout_s: float | None = None) -> bool: ...

    def unsettled(self) -> bool: ...

    async def settle(self, timeout_s: float = ...) -> bool: ...

    async def close(self) -> None: ...


class McpServerState(BaseModel):
    """One MCP server of an agent as ``get_mcp_servers()`` reports it.

    ``state`` is ``connecting``, ``ready``, ``failed`` (``error`` says why; the next call reconnects) or
    ``closed``; ``tools`` are the names the model calls them by.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    transport: str
    target: str
    state: ConnectionState
    error: str | None = None
    tool_count: int = 0
    tools: tuple[str, ...] = ()
    shared: bool = False


Connect = Callable[[McpServerConfig, Callable[[], None], Callable[[], None]], ServerConnection]
"""Makes a server's connection: ``connect(config, on_tools_changed, on_state_changed)``."""


def local_connect(
    config: McpServerConfig, on_tools_changed: Callable[[], None], on_state_changed: Callable[[], None]
) -> ServerConnection:
    # Imported here, not at the top: the SDK costs a second or more to import, and an agent without MCP
    # servers (most agents, every actor process) must not pay it. No cycle: connection imports only config and
    # results.
    from .connection import McpConnection

    return McpConnection(config, on_tools_changed=on_tools_changed, on_state_changed=on_state_changed)


class McpManager:
    """The MCP servers of one agent.

    Args:
        declared: The servers of the agent's class (``mcp_servers``), connected on first use.
        connect: Makes a server's connection (default: an ``McpConnection`` in this process).
        observers: The agent's observability channels, told of every change (module docstring).
    """

    def __init__(
        self,
        declared: Iterable[McpServerConfig] = (),
        *,
        connect: Connect | None = None,
        observers: Observers | None = None,
    ):
        self._connect = connect or local_connect
        self._observers = observers
        self._configs: dict[str, McpServerConfig] = {}
        for config in declared:
            if config.name in self._configs:
                raise ValueError(f"two MCP servers are named {config.name!r}: give one a name=")
            self._configs[config.name] = config
        self._connections: dict[str, ServerConnection] = {}
        self._tools: dict[str, Tool] | None = None
        self.version = 0
        """Counts the changes of the tool set (a connect, a list_changed refresh, a removal)."""
        self._change = asyncio.Event()

    def set_connect(self, connect: Connect) -> None:
        """Where connections made from now on live (the Ray runtime sets this before the agent's first turn)."""
        self._connect = connect

    def _changed(self) -> None:
        self._tools = None
        self.version += 1
        self._change.set()
        self._change = asyncio.Event()
        self._state_changed()

    def _state_changed(self) -> None:
        if self._observers is not None and self._observers.subscribed("agents:message"):
            self._observers.publish(MCP_SERVERS_CHANGED, {"servers": self.states()})

    async def wait_changed(self, version: int, timeout_s: float | None = None) -> bool:
        """Wait until the tool set changed after ``version`` (at most ``timeout_s``); whether it did."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self.version <= version:
                    await self._change.wait()
        return self.version > version

    def start(self) -> None:
        """Start connecting every server that has no connection yet (needs a running event loop)."""
        for name, config in self._configs.items():
            if name not in self._connections:
                connection = self._connect(config, self._changed, self._state_changed)
                self._connections[name] = connection
                connection.start()

    async def add(self, config: McpServerConfig, *, timeout_s: float | None = None) -> McpServerState:
        """Add a server and wait (at most ``timeout_s``; None: its connect timeout) for it to connect."""
        if config.name in self._configs:
            raise ValueError(f"the agent already has an MCP server named {config.name!r}")
        self._configs[config.name] = config
        self.start()
        await self._connections[config.name].wait_ready(
            config.connect_timeout_s + 1 if timeout_s is None else timeout_s
        )
        return self.state(config.name)

    async def remove(self, name: str) -> bool:
        """Remove a server and close its connection; whether it was there."""
        config = self._configs.pop(name, None)
        connection = self._connections.pop(name, None)
        if connection is not None:
            await connection.close()
        if config is not None:
            self._changed()
        return config is not None

    async def wait(self, timeout_s: float | None = 10.0) -> dict[str, McpServerState]:
        """Wait until every server is connected or failed, at most ``timeout_s`` in all; their states."""
        self.start()
        await asyncio.gather(*(c.wait_ready(timeout_s) for c in self._connections.values()))
        return self.states()

    def state(self, name: str) -> McpServerState:
        config = self._configs[name]
        connection = self._connections.get(name)
        names = tuple(t.name for t in self._server_tools(name))
        return McpServerState(
            name=name,
            transport=config.transport,
            target=config.describe() if config.transport == "stdio" else _redact(config.url or ""),
            state=connection.state if connection is not None else "connecting",
            error=connection.error if connection is not None else None,
            tool_count=len(names),
            tools=names,
            shared=config.shared,
        )

    def states(self) -> dict[str, McpServerState]:
        """Every server's state by name, in declaration order."""
        return {name: self.state(name) for name in self._configs}

    def _server_tools(self, name: str) -> list[Tool]:
        connection = self._connections.get(name)
        if connection is None:
            return []
        return [mcp_tool(connection.config, t, connection) for t in connection.tools]

    def tools(self) -> list[Tool]:
        """The tools of every server by the names the model calls them by (declared servers start connecting)."""
        if len(self._connections) < len(self._configs):
            try:
                self.start()
            except RuntimeError:  # no running loop (a synchronous caller): nothing is connected yet
                return []
        if self._tools is None:
            tools: dict[str, Tool] = {}
            for name in self._configs:
                for t in self._server_tools(name):
                    tools[t.name] = t
            self._tools = tools
        return list(self._tools.values())

    async def settle(self) -> None:
        """Wait for the listings the servers announced (``tools/list_changed``) and have not sent yet, each for a
        few seconds at most: a turn calls it before it builds its tool set. Free when none is pending."""
        pending = [c for c in self._connections.values() if c.unsettled()]
        if pending:
            await asyncio.gather(*(c.settle() for c in pending))

    async def close(self) -> None:
        """Close every connection (a stdio server's process stops)."""
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)


def _redact(url: str) -> str:
    """A URL without its credentials or query (which may hold a token), for states and logs."""
    head, _, rest = url.partition("://")
    host = rest.split("@", 1)[-1] if "@" in rest.split("/", 1)[0] else rest
    return f"{head}://{host.split('?', 1)[0]}" if rest else url.split("?", 1)[0]
