"""Which agents a gateway serves: the agent behind ``/agents/{class}/{name}``, in process or on Ray.

``get`` finds or starts an agent (a socket's chat may create it); ``find`` never creates one (reads use it, so a
read cannot create agents). Also the ``mcp`` state a socket gets on connect, read from the agent it found.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from ..agent import Think, kebab_case
from ..delegation import LocalAgentHandle
from ..errors import AgentUnavailableError, ConfigurationError
from ..quotas import Quotas
from ..store import MemoryStore, Store
from . import protocol
from .access import LocalQuotas, quota_path

__all__ = ["AgentDirectory", "LocalDirectory", "RayDirectory"]

log = logging.getLogger("think_actors.gateway")


class AgentDirectory:
    """Finds (and on demand starts) the agent behind ``/agents/{class}/{name}``: in process or on Ray."""

    def __init__(self, classes: Iterable[type[Think]]):
        self.classes = {kebab_case(cls.__name__): cls for cls in classes}

    def agent_class(self, slug: str) -> type[Think]:
        cls = self.classes.get(slug)
        if cls is None:
            known = ", ".join(sorted(self.classes)) or "none"
            raise _refused(web.HTTPNotFound, f"no agent class {slug!r} here; the classes are: {known}")
        return cls

    async def get(self, slug: str, name: str) -> Any:
        raise NotImplementedError

    async def find(self, slug: str, name: str) -> Any | None:
        """The agent if it exists, else None; never creates it (reads use this, so they cannot create agents)."""
        raise NotImplementedError

    def quota_keeper(self, quotas: Quotas, gateway_id: str) -> Any:
        """Where the gateway counts its users' quotas (``access.py``): every gateway of these agents asks it."""
        raise NotImplementedError


async def _mcp_state(agent: Any) -> dict[str, Any]:
    """The ``mcp`` field of the agent's ``cf_agent_mcp_servers`` frame: its MCP servers' states (a Ray handle's
    ``get_mcp_servers``, or the in-process agent's); the empty state for an agent that has none or cannot say."""
    target = agent.agent if isinstance(agent, LocalAgentHandle) else agent
    get = getattr(target, "get_mcp_servers", None)
    if get is None:
        return protocol.EMPTY_MCP_STATE
    try:
        states = get()
        if asyncio.iscoroutine(states):
            states = await states
    except Exception:
        log.warning("the MCP servers' states of %s could not be read: sent as none", target, exc_info=True)
        return protocol.EMPTY_MCP_STATE
    return protocol.mcp_servers_state(states) if states else protocol.EMPTY_MCP_STATE


class LocalDirectory(AgentDirectory):
    """Agents as objects in the gateway's own process (tests, a single-process app)."""

    def __init__(self, classes: Iterable[type[Think]], *, data_dir: str | None = None, **options: Any):
        super().__init__(classes)
        store = options.get("store")
        if store is not None and not isinstance(store, MemoryStore):
            # One store object holds one agent's conversation: shared, every agent would read and write the same one.
            raise ConfigurationError(
                f"LocalDirectory builds an agent per name, so it cannot share one {type(store).__name__}: give "
                "data_dir= (a SQLite file per agent) or store_url= (a database with a schema per agent), or "
                "store=ta.MemoryStore() for agents kept in memory, each its own"
            )
        self.options = {"data_dir": data_dir, **options} if data_dir else dict(options)
        self._agents: dict[str, Any] = {}

    def _build(self, cls: type[Think], name: str) -> Think:
        options = dict(self.options)
        if isinstance(options.get("store"), MemoryStore):
            options["store"] = MemoryStore()  # each agent its own conversation, as each gets its own file
        return cls(name, **options)

    async def get(self, slug: str, name: str) -> Any:
        cls = self.agent_class(slug)
        key = f"{slug}/{name}"
        handle = self._agents.get(key)
        if handle is None:
            agent = self._build(cls, name)
            handle = self._agents[key] = LocalAgentHandle(agent)
            if agent.mcp_servers:
                # As an agent actor does before it starts: its first turn has its MCP servers' tools.
                await agent.wait_for_mcp_connections(max(s.connect_timeout_s for s in agent.mcp_servers) + 5)
        return handle

    def quota_keeper(self, quotas: Quotas, gateway_id: str) -> Any:
        """The counts in this process, saved under ``data_dir`` (a restarted gateway goes on with them)."""
        return LocalQuotas(quotas, quota_path(self.options.get("data_dir")))

    async def find(self, slug: str, name: str) -> Any | None:
        """An agent this directory has, or one whose store holds it (from before a restart)."""
        cls = self.agent_class(slug)
        key = f"{slug}/{name}"
        if key in self._agents:
            return self._agents[key]
        agent = self._build(cls, name)  # builds its store object; nothing is opened or written yet
        exists = getattr(agent.store, "exists", None)
        if not await (exists() if exists is not None else Store.exists(agent.store)):
            return None
        return self._agents.setdefault(key, LocalAgentHandle(agent))  # a socket may have made it meanwhile


class RayDirectory(AgentDirectory):
    """Agents as Ray actors: spawned, or found and woken, by name."""

    # The runtime is imported when a Ray directory is first used, not with this module: it loads ray (~0.4 s,
    # 75 MiB), which a gateway of in-process agents does not need. No circle: the runtime imports no gateway module.

    async def get(self, slug: str, name: str) -> Any:
        from ..runtime import spawn

        return await spawn(self.agent_class(slug), name)

    def quota_keeper(self, quotas: Quotas, gateway_id: str) -> Any:
        """The cluster's quotas actor, which every gateway of the cluster asks."""
        from ..runtime import _require_config
        from ..runtime.quotas import RemoteQuotas

        return RemoteQuotas(quotas, _require_config(), gateway_id)

    async def find(self, slug: str, name: str) -> Any | None:
        """An agent the cluster started or provisioned (its registry record), woken if it hibernates."""
        from ..runtime import get

        cls = self.agent_class(slug)
        try:
            return await get(cls, name)
        except AgentUnavailableError as err:
            if err.retryable:  # it exists, and could not be woken just now
                raise
            return None


def _refused(kind: type[web.HTTPException], message: str, headers: dict[str, str] | None = None) -> web.HTTPException:
    """An HTTP error whose body is ``{"error": message}``."""
    return kind(text=json.dumps({"error": message}), content_type="application/json", headers=headers)
