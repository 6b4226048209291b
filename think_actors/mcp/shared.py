"""Shared MCP connections on Ray: one connection per server and node, in a named actor that many agents call.

A stdio server is a process per connection: a hundred agents that each start ``npx some-server`` start a hundred
processes. A server declared ``shared=True`` is instead connected once per node, by the actor
``mcp:<name>:<digest of its config>:<node id>`` (detached, so it outlives the agent that started it; pinned to
its node). Every agent of the node that declares the same server gets a ``SharedConnection``: a proxy that
follows the actor's listing (a long poll, so ``tools/list_changed`` reaches each agent) and sends it the calls.
A proxy whose actor died gets it again (a new one, connecting again) on its next call.

This is the one module of ``think_actors.mcp`` that imports ray; the runtime uses ``ray_connect`` as the
manager's connection factory. Servers without ``shared`` keep a connection in the agent's own actor.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
from collections.abc import Callable
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .adapter import ListedTool, Progress
from .config import ConnectionState, McpServerConfig
from .manager import Connect, ServerConnection
from .results import McpToolError

__all__ = ["SharedConnection", "SharedMcpServer", "ray_connect", "shared_actor_name"]

log = logging.getLogger(__name__)

_POLL_S = 30.0  # how long one long poll of the listing waits for a change before it asks again


def shared_actor_name(config: McpServerConfig, node_id: str) -> str:
    """The name of the actor that hosts ``config``'s shared connection on the node ``node_id``."""
    digest = hashlib.sha256(config.model_dump_json().encode()).hexdigest()[:12]
    return f"mcp:{config.name}:{digest}:{node_id}"


@ray.remote
class SharedMcpServer:
    """Hosts one ``McpConnection`` for every agent of a node that declares the same server."""

    def __init__(self, config: McpServerConfig):
        # Imported here: the SDK loads in this actor's process, not in the agents' that only talk to it.
        from .connection import McpConnection

        self._changed = asyncio.Event()
        self._connection = McpConnection(config, on_tools_changed=self._on_change)

    def _on_change(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _snapshot(self) -> dict[str, Any]:
        c = self._connection
        return {"state": c.state, "error": c.error, "tools": list(c.tools), "listings": c.listings}

    async def snapshot(self, after: int = -1, timeout_s: float = _POLL_S) -> dict[str, Any]:
        """The connection's state and listing once it has more than ``after`` listings or failed (or on timeout)."""
        self._connection.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                while self._connection.listings <= after and self._connection.state in ("connecting", "ready"):
                    if self._connection.state == "connecting":
                        await self._connection.wait_ready(timeout_s)
                        if self._connection.listings > after:
                            break
                    await self._changed.wait()
        return self._snapshot()

    async def run(self, tool_name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The tool's output, and the listings the connection had when it returned: a call during which the server
        announced new tools returns after their listing, and the caller fetches it before it goes on."""
        output = await self._connection.run(tool_name, arguments)  # progress stays here: not streamed back
        return output, self._connection.listings

    def pid(self) -> int:
        return os.getpid()


class SharedConnection:
    """An agent's proxy of a node's shared connection (see the module docstring)."""

    def __init__(
        self,
        config: McpServerConfig,
        on_change: Callable[[], None],
        namespace: str,
        node_id: str,
        on_state_changed: Callable[[], None] | None = None,
    ):
        self.config = config
        self.state: ConnectionState = "connecting"
        self.error: str | None = None
        self.tools: list[ListedTool] = []
        self.listings = 0
        self._on_change = on_change
        self._on_state_changed = on_state_changed
        self._namespace = namespace
        self._node_id = node_id
        self._actor: Any = None
        self._follow: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._closed = False

    def _get_actor(self) -> Any:
        if self._actor is None:
            self._actor = SharedMcpServer.options(  # type: ignore[attr-defined]
                name=shared_actor_name(self.config, self._node_id),
                namespace=self._namespace,
                get_if_exists=True,
                lifetime="detached",
                scheduling_strategy=NodeAffinitySchedulingStrategy(self._node_id, soft=True),
                num_cpus=0,
                memory=1,  # as the agents' actors: an actor asking for no resource at all ignores node affinity
                max_concurrency=1000,  # every agent of the node calls it at once
            ).remote(self.config)
        return self._actor

    def _set(self, state: ConnectionState, error: str | None) -> None:
        changed = (state, error) != (self.state, self.error)
        self.state, self.error = state, error
        if changed and self._on_state_changed is not None:
            self._on_state_changed()

    def _apply(self, snapshot: dict[str, Any]) -> None:
        self._set(snapshot["state"], snapshot["error"])
        if snapshot["listings"] != self.listings or snapshot["tools"] != self.tools:
            self.tools, self.listings = list(snapshot["tools"]), snapshot["listings"]
            self._on_change()
        if self.state != "connecting":
            self._ready.set()

    async def _follow_listing(self) -> None:
        while not self._closed:
            try:
                self._apply(await self._get_actor().snapshot.remote(self.listings, _POLL_S))
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the actor died: the next round (or call) gets a new one
                self._actor = None
                self._set("failed", f"the shared connection's actor failed: {_cause(err)}")
                self._ready.set()
                await asyncio.sleep(1.0)
            if self.state == "failed":
                await asyncio.sleep(1.0)  # a failed server: ask again now and then, without spinning

    def start(self) -> None:
        if self._closed or (self._follow is not None and not self._follow.done()):
            return
        self._follow = asyncio.get_running_loop().create_task(self._follow_listing())

    async def wait_ready(self, timeout_s: float | None = None) -> bool:
        self.start()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        return self.state == "ready"

    async def run(
        self, tool_name: str, arguments: dict[str, Any], on_progress: Progress | None = None
    ) -> dict[str, Any]:
        """Run the tool in the node's actor (its progress notifications are not forwarded). A call that changed the
        server's tools returns once this proxy has the new listing too."""
        try:
            actor = self._get_actor()
            output, listings = await actor.run.remote(tool_name, arguments)
            if listings > self.listings:
                self._apply(await actor.snapshot.remote(self.listings, 0.0))
            return output  # type: ignore[no-any-return]
        except RayTaskError as err:
            cause = _cause(err)
            if isinstance(cause, McpToolError):
                raise cause from None
            raise McpToolError(f"MCP server {self.config.name!r} (shared): {cause}") from None
        except (ActorDiedError, ActorUnavailableError, RayActorError) as err:
            self._actor = None
            raise McpToolError(
                f"the shared connection to MCP server {self.config.name!r} died while {tool_name!r} ran "
                f"({type(err).__name__}); the next call reconnects"
            ) from None

    def unsettled(self) -> bool:
        return False

    async def settle(self, timeout_s: float = 0.0) -> bool:
        """Nothing to wait for here: a call that changed the tools brought their listing back with it, and a change
        the server makes by itself arrives by the long poll."""
        return True

    async def close(self) -> None:
        """Stop following the shared connection (it stays up for the node's other agents)."""
        self._closed = True
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)
        self._set("closed", self.error)


def _cause(err: BaseException) -> BaseException:
    cause = getattr(err, "cause", None)
    return cause if isinstance(cause, BaseException) else err


def ray_connect(namespace: str, local: Connect) -> Connect:
    """The connection factory of an agent on Ray: ``shared`` servers through the node's actor, others ``local``."""
    node_id = ray.get_runtime_context().get_node_id()

    def connect(
        config: McpServerConfig, on_tools_changed: Callable[[], None], on_state_changed: Callable[[], None]
    ) -> ServerConnection:
        if config.shared:
            return SharedConnection(config, on_tools_changed, namespace, node_id, on_state_changed)
        return local(config, on_tools_changed, on_state_changed)

    return connect
