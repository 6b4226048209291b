"""Shared hosts: actors that host many agents each, for classes with ``hosting = "shared"``.

An agent of its own actor is a process of its own: on a node full of agents, every turn pays for Ray's per-process
costs and for caches other processes have evicted, and every wake is a process booting. A shared host is one async
actor holding many ``host.HostedAgent`` (the same per-agent host an ``AgentHost`` actor has: counted calls, cycle
checks, idle watch, hibernation), so its agents' turns run warm and a wake loads an agent into a running process.

- Which host: the agent path's CRC-32 over ``RuntimeConfig.shared_hosts`` named actors
  (``think_actors/shared-host-<i>``, spread over the nodes, started on first use, restarted by Ray like an agent
  actor). Every call names its agent.
- An agent not loaded in its host (never started, hibernated, or lost with a restart) is loaded from its registry
  record at its next call, as a handle wakes an actor.
- A host that restarts after a crash loads again, at once, every agent the registry says it held: their
  interrupted turns and pending submissions go on as they do in a restarted agent actor. The crash of one agent's
  process is the crash of every agent of its host.
- Each agent keeps its own store (and lease), history, turn queue and idle timeout; only the process is shared.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import ray

from .. import registry
from ..agent import Think
from ..errors import AgentUnavailableError
from .channel import ReplyTo
from .config import RuntimeConfig
from .host import HostedAgent, _process_setup
from .placement import _actor_options

log = logging.getLogger("think_actors")

_MAX_CONCURRENCY = 100_000  # every call of every agent it holds: turns, reads, event subscriptions


def shared_host_name(config: RuntimeConfig, path: str) -> str:
    """The name of the shared host that holds the agent at ``path``."""
    return f"think_actors/shared-host-{zlib.crc32(path.encode()) % max(1, config.shared_hosts)}"


def shared_host(config: RuntimeConfig, path: str, runtime_class: Callable[[Think, RuntimeConfig], Any]) -> Any:
    """The shared host actor of the agent at ``path``, started if it does not run yet."""
    name = shared_host_name(config, path)
    options = {**_actor_options(config, name), "max_concurrency": _MAX_CONCURRENCY}
    return SharedHost.options(**options).remote(config, runtime_class, name)  # type: ignore[attr-defined]


def hosted_shared(namespace: str, path: str) -> bool:
    """Whether the agent at ``path`` belongs to a class with ``hosting = "shared"`` (from its registry record)."""
    spawn = registry.spawn_args(namespace, path)
    return spawn is not None and getattr(spawn[0], "hosting", "actor") == "shared"


Spawn = tuple[type[Think], str, dict[str, Any]]


@ray.remote
class SharedHost:
    """Hosts many Think agents in one async actor; every method takes the agent's path first."""

    def __init__(self, config: RuntimeConfig, runtime_class: Callable[[Think, RuntimeConfig], Any], name: str):
        _process_setup(config)
        self.config = config
        self.name = name
        self._runtime_class = runtime_class
        self.agents: dict[str, HostedAgent] = {}
        # After a crash the agents this host held start again at once, so what they had accepted goes on unasked.
        for record in registry.list_records(config.namespace):
            if record.resident and record.host == name:
                try:
                    self._hosted(record.path)
                except Exception:
                    log.exception("shared host %s could not start agent %r again", name, record.path)

    def _hosted(self, path: str, spawn: Spawn | None = None) -> HostedAgent:
        """The agent at ``path``, loaded here from ``spawn`` (or its registry record) if it is not."""
        hosted = self.agents.get(path)
        if hosted is not None and not hosted._hibernating:
            return hosted
        if spawn is None:
            spawn = registry.spawn_args(self.config.namespace, path)
            if spawn is None:
                raise AgentUnavailableError(f"no agent {path!r} was ever started here", agent=path)
        agent_class, name, options = spawn
        box: list[HostedAgent] = []

        def let_go() -> None:
            if box and self.agents.get(path) is box[0]:
                del self.agents[path]

        hosted = HostedAgent(
            agent_class, name, path, options, self.config, self._runtime_class, on_hibernated=let_go, host=self.name
        )
        box.append(hosted)
        self.agents[path] = hosted
        return hosted

    async def ready(self, path: str, spawn: Spawn | None = None) -> dict[str, Any]:
        info: dict[str, Any] = await self._hosted(path, spawn).ready()
        return {**info, "host": self.name}

    async def unload(self, path: str) -> bool:
        """Let the agent go as if it hibernated (``AgentHandle.kill(restart=False)``); False if it was not here."""
        hosted = self.agents.get(path)
        if hosted is None:
            return False
        if hosted._watch is not None:
            hosted._watch.cancel()
        await hosted._hibernate()
        return True

    async def resident(self) -> list[str]:
        """The paths of the agents loaded here."""
        return sorted(self.agents)

    async def chat(self, path: str, call: bytes, reply_to: ReplyTo | None = None) -> AsyncIterator[bytes]:
        async for batch in self._hosted(path).chat(call, reply_to):
            yield batch

    async def run_as_tool(self, path: str, call: bytes, reply_to: ReplyTo | None = None) -> AsyncIterator[bytes]:
        async for batch in self._hosted(path).run_as_tool(call, reply_to):
            yield batch

    async def attach(self, path: str, call: bytes, reply_to: ReplyTo | None = None) -> AsyncIterator[bytes]:
        async for batch in self._hosted(path).attach(call, reply_to):
            yield batch

    async def events(self, path: str, channel: str) -> AsyncIterator[list[Any]]:
        async for batch in self._hosted(path).events(channel):
            yield batch

    async def save_messages(self, path: str, *args: Any) -> Any:  # a TurnResult
        return await self._hosted(path).save_messages(*args)

    async def continue_last_turn(self, path: str, *args: Any) -> Any:  # a TurnResult
        return await self._hosted(path).continue_last_turn(*args)

    async def add_messages(self, path: str, messages: Any, options: dict[str, Any]) -> None:
        await self._hosted(path).add_messages(messages, options)

    async def get_messages(self, path: str) -> Any:  # list[UIMessage]
        return await self._hosted(path).get_messages()

    async def cancel_chat(self, path: str, request_id: str, reason: str | None) -> Any:  # bool
        return await self._hosted(path).cancel_chat(request_id, reason)

    async def clear(self, path: str) -> None:
        await self._hosted(path).clear()

    async def forward(self, path: str, *args: Any) -> Any:
        return await self._hosted(path).forward(*args)
