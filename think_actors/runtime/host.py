"""``HostedAgent``: one agent as an actor process hosts it (counts its calls, refuses call cycles, hibernates it),
and ``AgentHost``, the async actor that hosts one agent in a process of its own (the default).

``shared.SharedHost`` hosts many ``HostedAgent`` in one process instead (a class with ``hosting = "shared"``).
Both are handed the class of the runtime the agent uses to reach other actors (``handles._ActorRuntime``), so
this module does not import the handles that start it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import ray

from .. import metrics, registry, tracing
from .._turn import chain
from ..agent import Think
from ..batching import BatchLimits, _batches, unpack_call
from ..chat_stream import ChatStream
from ..errors import (
    AgentCycleError,
    AgentHibernatedError,
    ConfigurationError,
)
from ..hooks import TurnResult
from ..logs import configure_logging, set_process_agent
from ..mcp.manager import local_connect
from ..mcp.shared import ray_connect
from ..messages import UIMessage
from ..models import set_model_resolver
from .channel import ReplyTo, deliver
from .config import RuntimeConfig, _set_current
from .model_pool import PoolResolver

log = logging.getLogger("think_actors")


def _process_setup(config: RuntimeConfig) -> None:
    """Per-process set-up inside actors: config, quiet logs, string model ids served by the pool."""
    _set_current(config)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    configure_logging(config.log_level)  # the level, and LOG_FORMAT (agent path, request id) unless configured
    # The driver's decision (ta.init(tracing=...) or its OTEL_* environment), never this worker's own.
    tracing.configure(config.tracing or False, node_id=ray.get_runtime_context().get_node_id())
    set_model_resolver(PoolResolver(config))


_FORWARDED_METHODS = frozenset(
    {
        "add_tool_result",
        "add_tool_approval",
        "steer",
        "set_client_tools",
        "chat_terminal",
        "remember_chat_terminal",
        "wait_until_stable",
        "pending_continuation_id",
        "submit_messages",
        "inspect_submission",
        "list_submissions",
        "search_messages",
        "cancel_submission",
        "delete_submission",
        "delete_submissions",
        "wait_for_submission",
        "prompt",
        "pending_approvals",
        "approve_execution",
        "reject_execution",
        "add_mcp_server",
        "remove_mcp_server",
        "get_mcp_servers",
        "wait_for_mcp_connections",
        "schedule",
        "list_schedules",
        "cancel_schedule",
        "run_scheduled_task",
    }
)


def _check_cycle(path: str, callers: tuple[str, ...]) -> None:
    if path in callers:
        cycle = [*callers[callers.index(path) :], path]
        raise AgentCycleError(
            f"agent call cycle: {' -> '.join(cycle)} (an agent waits for itself)", agent=path, cycle=cycle
        )


def _counted(method: Any) -> Any:
    """A HostedAgent method that counts as work while it runs (a stream, for as long as it streams): an agent with
    a call in progress never hibernates, and a call that arrives while it hibernates is refused, never half-run.
    It runs once the host's own start of the agent has ended (see ``HostedAgent.__init__``)."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: HostedAgent, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            self._begin_call()
            try:
                await self._started()
                async for item in method(self, *args, **kwargs):
                    yield item
            finally:
                self._end_call()

        return stream

    @functools.wraps(method)
    async def call(self: HostedAgent, *args: Any, **kwargs: Any) -> Any:
        self._begin_call()
        try:
            await self._started()
            return await method(self, *args, **kwargs)
        finally:
            self._end_call()

    return call


def hosted_options(options: dict[str, Any], config: RuntimeConfig) -> dict[str, Any]:
    """An agent's constructor options as the cluster hosts it: the cluster's data dir and store URL unless given."""
    options = dict(options)
    options.setdefault("data_dir", config.data_dir)
    if config.store_url:
        options.setdefault("store", config.store_url)
    return options


def build_agent(
    agent_class: type[Think],
    name: str,
    path: str,
    options: dict[str, Any],
    config: RuntimeConfig,
    runtime_class: Callable[[Think, RuntimeConfig], Any],
) -> Think:
    """The agent as the cluster hosts it, in its own ``AgentHost`` or for a moment in a burst runner (``runner``):
    built with its options, reaching other actors through ``runtime_class`` (``handles._ActorRuntime``)."""
    agent = agent_class(name, path=path, **options)
    agent._engine.runtime = runtime_class(agent, config)
    # MCP servers declared shared=True are connected once per node by a named actor, the others in this process.
    agent._mcp.set_connect(ray_connect(config.namespace, local_connect))
    return agent


async def load_agent(agent: Think) -> bool:
    """Start ``agent`` as its host does: its MCP servers, then its history, which schedules the recovery of
    interrupted turns and the drain of pending submissions. False (logged) when the load failed."""
    if agent.mcp_servers:
        # Connected before the agent starts (Think's waitForMcpConnections), after a restart or a wake too: the
        # first turn sees the servers' tools, and a recovered call in doubt sees their idempotent hints. A
        # failure here must not keep the agent (and its recovery) from starting.
        try:
            await agent.wait_for_mcp_connections(max(s.connect_timeout_s for s in agent.mcp_servers) + 5)
        except Exception:
            log.exception("agent %r: its MCP servers could not be waited for; starting without them", agent.path)
    try:
        await agent.load_messages()
    except Exception:
        log.exception("agent %r could not start; the next call to it starts it again", agent.path)
        return False
    return True


class HostedAgent:
    """One Think agent as an actor's process hosts it: its calls (counted, so it never hibernates mid-call), its
    start, its idle watch and its hibernation. ``on_hibernated`` runs once it has hibernated (its actor exits, or
    its shared host lets it go); ``host`` names a shared host in its registry record ("" for its own actor)."""

    def __init__(
        self,
        agent_class: type[Think],
        name: str,
        path: str,
        options: dict[str, Any],
        config: RuntimeConfig,
        runtime_class: Callable[[Think, RuntimeConfig], Any],
        *,
        on_hibernated: Callable[[], None],
        host: str = "",
    ):
        self.config = config
        self.agent = build_agent(agent_class, name, path, options, config, runtime_class)
        self.path = path
        self._calls = 0
        self._last_work = time.monotonic()
        self._hibernating = False
        self._on_hibernated = on_hibernated
        self._own_process = not host
        self._watch: asyncio.Future[None] | None = None
        own: Any = getattr(agent_class, "idle_timeout_s", None)
        self.idle_timeout_s: float | None = own if own is not None else config.idle_timeout_s
        node_id = ray.get_runtime_context().get_node_id()
        registry.record_resident(config.namespace, path, agent_class, name, options, node_id, host=host)
        # Start the agent as soon as the actor is up, not at the first call: after a crash and restart, what it
        # had accepted (pending submissions, interrupted turns) must go on without anyone asking. A task on the
        # actor's own event loop (Ray 2.60 runs an async actor's constructor on it), never a call to itself: Ray
        # refuses that call while it still counts the actor as restarting, and the start was lost (stack-notes).
        self._start_up = asyncio.get_running_loop().create_task(self._start_agent())

    async def _start_agent(self) -> None:
        """Load the agent, which schedules the recovery of interrupted turns and the pending submissions."""
        await load_agent(self.agent)
        try:
            await self.agent.sync_schedules()  # the class's schedules, in the store the cluster's scheduler reads
        except Exception:
            log.exception("agent %r: its class's schedules could not be registered", self.path)
        if self.idle_timeout_s is not None and self.idle_timeout_s > 0:
            self._watch = asyncio.ensure_future(self._watch_idle(self.idle_timeout_s))

    async def _started(self) -> None:
        """Wait for the actor's own start of the agent, so no call overtakes the recovery that start schedules."""
        if not self._start_up.done():
            await asyncio.shield(self._start_up)

    def _begin_call(self) -> None:
        if self._hibernating:
            raise AgentHibernatedError(f"agent {self.path!r} is hibernating", agent=self.path, retryable=True)
        self._calls += 1

    def _end_call(self) -> None:
        self._calls -= 1
        self._last_work = time.monotonic()

    async def _watch_idle(self, timeout_s: float) -> None:
        """Hibernate once nothing has happened for ``timeout_s``: no call, no turn, no submission, no continuation
        about to fire, no recovery (an open gateway socket is a call: its event subscription)."""
        period = min(max(timeout_s / 4, 0.05), 5.0)
        while True:
            await asyncio.sleep(period)
            if self._calls or self.agent._engine.resident_reason() is not None:
                self._last_work = time.monotonic()
            elif time.monotonic() - self._last_work >= timeout_s:
                await self._hibernate()
                return

    async def _hibernate(self) -> None:
        # From here every new call is refused (the caller's handle wakes a new actor); nothing is in progress.
        self._hibernating = True
        try:
            await self.agent.close()
        except Exception:
            log.exception("closing agent %s to hibernate failed", self.path)
        registry.mark_hibernated(self.config.namespace, self.path)
        log.info("agent %s hibernates after %.1f s without work", self.path, self.idle_timeout_s or 0)
        metrics.flush()  # its last turns' metric points, which wait up to a second for the next ones
        await asyncio.to_thread(tracing.flush, 5.0)  # the spans of its last turns leave with it, not after
        self._on_hibernated()

    def _enter(self, caller_chain: tuple[str, ...], trace: dict[str, str] | None = None) -> None:
        """Refuse a call that would wait for this agent's own turn; else carry the chain on to our callees, and
        make the caller's span (``trace``, its W3C trace context) the parent of what this call runs."""
        _check_cycle(self.path, caller_chain)
        chain.CHAIN.set((*caller_chain, self.path))
        tracing.adopt(trace)

    @_counted
    async def ready(self) -> dict[str, Any]:
        messages = await self.agent.load_messages()
        return {
            "path": self.path,
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "messages": len(messages),
        }

    @_counted
    async def chat(self, call: bytes, reply_to: ReplyTo | None = None) -> AsyncIterator[bytes]:
        """A turn: ``call`` is ``pack_call(message, options, caller_chain, trace)`` (one argument costs Ray less);
        its batches go to ``reply_to`` when the caller gave one (``channel.deliver``)."""
        message, options, caller_chain, trace = unpack_call(call)
        self._enter(caller_chain, trace)
        await self.agent.load_messages()
        stream = _then_outcome(self.agent.chat(message, **options))
        hold = not self.config.first_chunk_at_once
        batches = functools.partial(self._durable_batches, stream, hold_opening=hold)
        async for item in deliver(batches, self.config, reply_to):
            yield item

    @_counted
    async def run_as_tool(self, call: bytes, reply_to: ReplyTo | None = None) -> AsyncIterator[bytes]:
        """``call`` is ``pack_call(run_id, input, output, caller_chain, trace, run)``."""
        run_id, input, output, caller_chain, trace, run = unpack_call(call)
        self._enter(caller_chain, trace)
        stream = self.agent.run_as_tool(run_id, input, output=output, run=run)
        async for item in deliver(functools.partial(_batches, stream), self.config, reply_to):
            yield item

    @_counted
    async def attach(self, call: bytes, reply_to: ReplyTo | None = None) -> AsyncIterator[bytes]:
        """``call`` is ``pack_call(request_id, position, caller_chain, trace)``."""
        request_id, position, caller_chain, trace = unpack_call(call)
        self._enter(caller_chain, trace)
        stream = self.agent.attach(request_id, position=position)
        async for item in deliver(functools.partial(self._durable_batches, stream), self.config, reply_to):
            yield item

    async def _durable_batches(
        self, stream: AsyncIterator[Any], limits: BatchLimits, *, hold_opening: bool = False
    ) -> AsyncGenerator[bytes, None]:
        """The batches of a turn's ``stream``, each once the turn's log holds it: a crash loses nothing the caller
        saw."""
        engine = self.agent._engine
        batches = _batches(stream, limits, hold_opening=hold_opening)
        async with contextlib.aclosing(batches):
            async for batch in batches:
                await engine.durable()
                # A turn that ended before this batch left wrote its log at its end; if that write was refused (a
                # newer process owns the agent), its last chunks are not the log's and never leave.
                engine.check_owner()
                yield batch

    @_counted
    async def save_messages(
        self,
        messages: Any,
        body: dict[str, Any] | None,
        caller_chain: tuple[str, ...],
        trace: dict[str, str] | None = None,
        output: Any = None,
        limits: Any = None,
        principal: Any = None,
        channel: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TurnResult:
        self._enter(caller_chain, trace)
        return await self.agent.save_messages(
            messages, body=body, output=output, limits=limits, principal=principal, channel=channel, metadata=metadata
        )

    @_counted
    async def continue_last_turn(
        self,
        body: dict[str, Any] | None,
        caller_chain: tuple[str, ...],
        trace: dict[str, str] | None = None,
        channel: str | None = None,
    ) -> TurnResult:
        self._enter(caller_chain, trace)
        return await self.agent.continue_last_turn(body=body, channel=channel)

    @_counted
    async def add_messages(self, messages: Any, options: dict[str, Any]) -> None:
        await self.agent.add_messages(messages, **options)

    @_counted
    async def get_messages(self) -> list[UIMessage]:
        return await self.agent.load_messages()

    @_counted
    async def cancel_chat(self, request_id: str, reason: str | None) -> bool:
        return self.agent.cancel_chat(request_id, reason)

    @_counted
    async def clear(self) -> None:
        await self.agent.clear()

    @_counted
    async def forward(
        self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any], trace: dict[str, str] | None = None
    ) -> Any:
        if method not in _FORWARDED_METHODS:
            raise ConfigurationError(f"{method!r} is not an agent method a handle may call")
        tracing.adopt(trace)  # a submission keeps its submitter's span, for the drain's span to link to
        result = getattr(self.agent, method)(*args, **kwargs)
        return await result if inspect.isawaitable(result) else result  # get_mcp_servers is synchronous

    @_counted
    async def events(self, channel: str) -> AsyncIterator[list[Any]]:
        """Stream the agent's events on ``channel`` in batches; the first (empty) batch says it is subscribed."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        unsubscribe = self.agent.observe(channel, queue.put_nowait)
        try:
            yield []
            while True:
                batch = [await queue.get()]
                while not queue.empty():
                    batch.append(queue.get_nowait())
                yield batch
        finally:
            unsubscribe()


async def _then_outcome(stream: ChatStream) -> AsyncGenerator[Any, None]:
    """A chat turn's chunks, then its ``TurnOutcome``: the caller's ``RemoteStream`` takes it off the end, so its
    ``status`` and ``outcome`` are those of the in-process stream."""
    async with contextlib.aclosing(stream.__aiter__()) as chunks:  # an early close ends the turn at once
        async for chunk in chunks:
            yield chunk
    yield stream.outcome


def _exit_actor() -> None:
    ray.get_runtime_context().current_actor.__ray_terminate__.remote()


@ray.remote
class AgentHost(HostedAgent):
    """Hosts one Think agent in an async actor: a process of its own."""

    def __init__(
        self,
        agent_class: type[Think],
        name: str,
        path: str,
        options: dict[str, Any],
        config: RuntimeConfig,
        runtime_class: Callable[[Think, RuntimeConfig], Any],
    ):
        _process_setup(config)
        set_process_agent(path)  # this process hosts one agent: its records name it outside turns too
        super().__init__(agent_class, name, path, options, config, runtime_class, on_hibernated=_exit_actor)
