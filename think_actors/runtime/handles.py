"""``AgentHandle``: a picklable handle to an agent actor, and how an agent's actor is started (``_spawn_path``).

A handle wakes a hibernating or provisioned agent by starting its actor again; an agent in an actor reaches other
actors (its children, actor tools, task tools) through ``_ActorRuntime``, which ``AgentHost`` is handed.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from .. import registry, tracing
from .._turn import chain
from ..agent import Think
from ..batching import pack_call
from ..errors import (
    AgentUnavailableError,
    ConfigurationError,
)
from ..hooks import TurnResult
from ..identity import Principal
from ..limits import RunLimits
from ..messages import UIMessage, new_id
from ..observability import Event
from ..run_account import RunAccount, RunTicket
from ..store import MessageHit
from ..tools import RUN_CONTEXT, ClientToolSchema, Tool, ToolContext, run_facts
from . import accounts
from .calls import _call, _hibernated, _restarting, _until_restarted, _unwrap, call_actor_method
from .config import RuntimeConfig, _require_config
from .handle_forwards import ForwardedMethods
from .host import AgentHost, hosted_options
from .placement import _actor_options
from .shared import shared_host, shared_host_name
from .stream import RemoteStream, open_channel

log = logging.getLogger("think_actors")


async def _spawn_path(
    agent_class: type[Think],
    name: str,
    path: str,
    options: dict[str, Any],
    config: RuntimeConfig,
    node_id: str | None = None,
) -> AgentHandle:
    if not (isinstance(agent_class, type) and issubclass(agent_class, Think)):
        raise ConfigurationError(f"spawn needs a Think subclass, got {agent_class!r}")
    options = hosted_options(options, config)
    if agent_class.hosting == "shared":
        shared = shared_host(config, path, _ActorRuntime)
        try:
            await shared.ready.remote(path, (agent_class, name, options))
        except (RayTaskError, RayActorError, ActorUnavailableError) as err:
            raise _unwrap(err) from None
        return AgentHandle(shared, path, agent_class.__name__, shared=True)
    if agent_class.hosting != "actor":
        raise ConfigurationError(
            f"{agent_class.__name__}.hosting is {agent_class.hosting!r}: use 'actor' (a process per agent) or "
            "'shared' (many agents to a process)"
        )
    host: Any = AgentHost
    for wait_s in (*_NAME_RELEASE_WAITS_S, None):
        actor = host.options(**_actor_options(config, path, node_id)).remote(
            agent_class, name, path, options, config, _ActorRuntime
        )
        try:
            await actor.ready.remote()
        except (RayTaskError, RayActorError, ActorUnavailableError) as err:
            # The name's actor was hibernating (get_if_exists found it idle and leaving): nothing ran. Once it
            # has let go of the name, the same options start a new actor.
            if wait_s is not None and _hibernated(err, path, actor):
                await asyncio.sleep(wait_s)
                continue
            raise _unwrap(err) from None
        return AgentHandle(actor, path, agent_class.__name__)
    raise AssertionError("unreachable")


_hosts_started: set[tuple[str, str]] = set()


def start_shared_host(config: RuntimeConfig, path: str) -> None:
    """Have the shared host of the agent at ``path`` start now, in the background (once per host and process), so
    the agent's first call does not wait for a process to boot: ``provision`` of a shared class calls it."""
    key = (config.namespace, shared_host_name(config, path))
    if key not in _hosts_started:
        _hosts_started.add(key)
        shared_host(config, path, _ActorRuntime)


# How long a spawn waits, each time, for a hibernating actor to let go of its name (about 6 s in all: an actor's
# exit on a loaded node takes seconds).
_NAME_RELEASE_WAITS_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.0)


_WAKE_ATTEMPTS = 4


class AgentHandle(ForwardedMethods):
    """A handle to an agent actor, with the engine's entry points. Picklable: pass it to other actors.

    ``shared``: the actor is the agent's shared host (``shared.py``), and every call names the agent first."""

    def __init__(self, actor: Any, path: str, class_name: str, *, shared: bool = False):
        self._actor = actor
        self.path = path
        self.class_name = class_name
        self.shared = shared
        self._route: tuple[str, ...] = (path,) if shared else ()

    def __repr__(self) -> str:
        return f"AgentHandle({self.class_name}, {self.path!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial(AgentHandle, shared=self.shared), (self._actor, self.path, self.class_name))

    async def _invoke(self, method: str, *args: Any, safe: bool = False) -> Any:
        """Call an actor method; an agent found hibernating is woken and the call sent again (it never ran). A
        ``safe`` call (a read, or one the agent answers once however often it comes) also waits for an actor Ray
        is restarting, up to ``restart_wait_s``."""
        return await self._resend(lambda: getattr(self._actor, method).remote(*self._route, *args), safe=safe)

    async def _resend(self, send: Callable[[], Awaitable[Any]], *, safe: bool = False) -> Any:
        """Await ``send()`` against the agent's actor, started first if it never ran; when the call found the agent
        hibernating (so nothing of it ran), wake the agent and send it again; when its actor was down and the call
        is ``safe``, send it again until the restarted actor answers."""
        if self._actor is None:  # provisioned, never started
            await self._wake()
        for attempt in range(_WAKE_ATTEMPTS):
            try:
                return await send()
            except (RayTaskError, RayActorError, ActorUnavailableError) as err:
                if attempt + 1 < _WAKE_ATTEMPTS and _hibernated(err, self.path, self._actor):
                    await self._wake()
                    continue
                if _restarting(err):
                    if safe:
                        return await _until_restarted(send, err, _require_config().restart_wait_s)
                    raise AgentUnavailableError(
                        f"agent {self.path!r}: its actor went down during the call, which may or may not have run; "
                        "Ray restarts it and the agent resumes an interrupted turn by itself. Read what happened "
                        "(get_messages, list_submissions) or follow the turn with attach(request_id, position=0); "
                        f"a submission with a submission_id is safe to send again ({err})",
                        agent=self.path,
                        retryable=True,
                    ) from None
                raise _unwrap(err) from None
        raise AssertionError("unreachable")

    def _started(self, start: Callable[[], Any]) -> Any:
        """The remote stream, or None for a provisioned agent: the stream starts it at its first item."""
        return None if self._actor is None else start()

    async def _wake(self) -> None:
        """Start the agent's actor again from its registry record (the handle then points at the new actor)."""
        config = _require_config()
        args = registry.spawn_args(config.namespace, self.path)
        if args is None:
            raise AgentUnavailableError(f"no agent {self.path!r} was ever started here", agent=self.path)
        agent_class, name, options = args
        for _ in range(_WAKE_ATTEMPTS):
            # The old actor may still hold the name for a moment while it exits: ask again until the new one runs.
            try:
                fresh = await _spawn_path(agent_class, name, self.path, options, config)
            except AgentUnavailableError:
                await asyncio.sleep(0.1)
                continue
            self._actor, self.shared, self._route = fresh._actor, fresh.shared, fresh._route
            return
        raise AgentUnavailableError(f"agent {self.path!r} could not be woken", agent=self.path, retryable=True)

    async def info(self) -> dict[str, Any]:
        """``{"path", "pid", "node_id", "messages"}`` of the live actor (woken if it hibernates)."""
        info: dict[str, Any] = await self._invoke("ready", safe=True)
        return info

    def chat(
        self,
        message: Any = "",
        *,
        client_tools: Sequence[ClientToolSchema | dict[str, Any]] | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        output: Any = None,
        on_client_tool_call: Callable[..., Any] | None = None,
        branch_from: str | None = None,
        limits: RunLimits | dict[str, Any] | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> RemoteStream:
        """Stream a turn of the agent: ``async for chunk in handle.chat("hi")`` (chunks cross in batches and are
        unbatched here). The stream's ``request_id``, ``status``, ``outcome`` and ``collect()`` are those of
        ``Think.chat``'s ``ChatStream``; ``on_client_tool_call`` is refused (it would run in this process)."""
        if on_client_tool_call is not None:
            raise ConfigurationError("on_client_tool_call runs in the caller's process; it cannot cross actors")
        request_id = request_id or new_id()
        options = {
            "client_tools": client_tools,
            "body": body,
            "request_id": request_id,
            "output": output,
            "branch_from": branch_from,
            "limits": RunLimits.of(limits),  # checked here: a bad field fails in the caller, before any call
            "principal": Principal.of(principal),
            "channel": channel,  # checked by the agent (its class's channels), before its turn is queued
            "metadata": metadata,
        }
        caller_chain = chain.CHAIN.get()
        trace = tracing.carrier()  # the caller's span: the agent's turn is its child, in whichever process
        reply_to, inbox, inflow = open_channel()

        def start() -> Any:
            return self._actor.chat.options(num_returns="streaming").remote(
                *self._route, pack_call(message, options, caller_chain, trace), reply_to
            )

        return RemoteStream(
            self._started(start),
            request_id,
            resumable=True,
            handle=self,
            restart=start,
            position=0,
            channel=(inbox, inflow),
        )

    def attach(self, request_id: str, *, position: int | None = None) -> RemoteStream:
        """Follow a turn the actor resumed after a crash (see ``Think.attach``): its chunks so far, then the rest;
        with ``position`` (what ``RemoteStream.position`` counted) only what the caller does not hold yet."""
        caller_chain = chain.CHAIN.get()
        trace = tracing.carrier()
        reply_to, inbox, inflow = open_channel()

        def start() -> Any:
            return self._actor.attach.options(num_returns="streaming").remote(
                *self._route, pack_call(request_id, position, caller_chain, trace), reply_to
            )

        resumable = position is not None  # only a stream that knows its position can say how to resume it
        return RemoteStream(
            self._started(start),
            request_id,
            resumable=resumable,
            handle=self,
            restart=start,
            position=position,
            channel=(inbox, inflow),
            safe=resumable,  # with a position, sending it again while the actor restarts repeats nothing
        )

    def run_as_tool(self, run_id: str, input: Any, *, output: Any = None, run: RunTicket | None = None) -> RemoteStream:
        """``Think.run_as_tool`` on the actor: the run's chunks, then its ``AgentRunResult``. ``run``'s account must
        be one other processes reach (``accounts.share_account``)."""
        caller_chain = chain.CHAIN.get()
        trace = tracing.carrier()
        reply_to, inbox, inflow = open_channel()

        def start() -> Any:
            return self._actor.run_as_tool.options(num_returns="streaming").remote(
                *self._route, pack_call(run_id, input, output, caller_chain, trace, run), reply_to
            )

        return RemoteStream(self._started(start), run_id, handle=self, restart=start, channel=(inbox, inflow))

    async def save_messages(
        self,
        messages: Any,
        *,
        body: dict[str, Any] | None = None,
        output: Any = None,
        limits: RunLimits | dict[str, Any] | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TurnResult:
        """``Think.save_messages`` on the actor: run a turn and wait for its ``TurnResult``. ``output`` (a pydantic
        model class, pickled to the actor: define it at the top level of a module) gives ``TurnResult.output``
        as an instance of it; ``limits`` bounds the turn and every agent it starts."""
        result: TurnResult = await self._invoke(
            "save_messages",
            messages,
            body,
            chain.CHAIN.get(),
            tracing.carrier(),
            output,
            RunLimits.of(limits),
            Principal.of(principal),
            channel,
            metadata,
        )
        return result

    async def continue_last_turn(self, *, body: dict[str, Any] | None = None, channel: str | None = None) -> TurnResult:
        """``Think.continue_last_turn`` on the actor."""
        result: TurnResult = await self._invoke(
            "continue_last_turn", body, chain.CHAIN.get(), tracing.carrier(), channel
        )
        return result

    async def add_messages(self, messages: Any, **options: Any) -> None:
        """``Think.add_messages`` on the actor: write messages without a turn."""
        await self._invoke("add_messages", messages, options)

    async def get_messages(self) -> list[UIMessage]:
        """The agent's transcript (``Think.load_messages`` on the actor, woken if it hibernates)."""
        messages: list[UIMessage] = await self._invoke("get_messages", safe=True)
        return messages

    async def load_messages(self) -> list[UIMessage]:
        """The agent's transcript, as ``Think.load_messages`` (the same as ``get_messages`` on a handle): code that
        takes an agent or a handle awaits this one."""
        return await self.get_messages()

    async def search_messages(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """``Think.search_messages`` on the actor (woken if it hibernates): its stored messages matching ``query``."""
        hits: list[MessageHit] = await self._forward_safe("search_messages", query, limit=limit)
        return hits

    async def cancel_chat(self, request_id: str, reason: str | None = None) -> bool:
        """``Think.cancel_chat`` on the actor (awaited, where the in-process one is not): whether it aborted a turn."""
        return bool(await self._invoke("cancel_chat", request_id, reason))

    async def clear(self) -> None:
        """``Think.clear`` on the actor: delete the history."""
        await self._invoke("clear")

    async def _forward(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._invoke("forward", method, args, kwargs)

    async def _forward_safe(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """``_forward`` of a read: it waits for a restarting actor (``restart_wait_s``)."""
        return await self._invoke("forward", method, args, kwargs, safe=True)

    async def observe(self, channel: str, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Subscribe ``callback(event)`` to one of the agent's observability channels (see ``Think.observe``).

        Returns once the subscription is live in the actor; the callback runs in this process (an async one is
        awaited in order). Call the returned function to unsubscribe.
        """

        async def subscribe() -> Any:
            generator = self._actor.events.options(num_returns="streaming").remote(*self._route, channel)
            await (await generator.__anext__())  # the actor subscribed (or refused the channel)
            return generator

        generator = await self._resend(subscribe)
        task = asyncio.ensure_future(_deliver_events(generator, callback))

        def unsubscribe() -> None:
            task.cancel()
            ray.cancel(generator)

        return unsubscribe

    async def kill(self, *, restart: bool = True) -> None:
        """Kill the actor (with ``restart=True`` Ray brings it back and it reloads its history; without, the agent
        stays addressable, not resident: the next call starts it again). A shared agent: ``restart=True`` kills its
        host's process (every agent of the host restarts); ``restart=False`` lets this agent go from its host."""
        if self._actor is None:
            return
        if self.shared and not restart:
            await _call(self._actor.unload.remote(self.path))
            return
        ray.kill(self._actor, no_restart=not restart)
        if not restart:
            registry.mark_hibernated(_require_config().namespace, self.path)


async def _deliver_events(generator: Any, callback: Callable[[Event], Any]) -> None:
    try:
        async for ref in generator:
            for event in await ref:
                result = callback(event)
                if inspect.isawaitable(result):
                    await result
    except asyncio.CancelledError:
        raise
    except (RayTaskError, RayActorError, ActorUnavailableError) as err:
        log.warning("observability stream ended: %s", _unwrap(err))
    except Exception:
        log.exception("observability callback raised; the subscription ended")


class _ActorRuntime:
    """What an agent hosted in an actor uses to reach other actors (set as the engine's ``runtime``)."""

    def __init__(self, agent: Think, config: RuntimeConfig):
        self.agent = agent
        self.config = config
        self._task_functions: dict[int, Any] = {}

    async def share_account(self, ticket: RunTicket) -> RunAccount:
        """The run's account as the agent's children in other actors reach it."""
        return await accounts.share_account(ticket, self.config)

    async def find_account(self, run_id: str) -> RunAccount | None:
        """The run's account in the cluster's accounts actor, if the run spans processes (a recovered turn's)."""
        return await accounts.find_account(run_id, self.config)

    async def sub_agent(
        self, agent_class: type[Think], name: str, path: str, options: dict[str, Any], node_id: str | None = None
    ) -> AgentHandle:
        return await _spawn_path(agent_class, name, path, options, self.config, node_id)

    async def call_actor_method(self, target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
        return await call_actor_method(target, method, kwargs, namespace or self.config.namespace)

    def run_task_tool(self, tool: Tool, value: Any, context: ToolContext) -> Any:
        fn = tool.fn
        if fn is None or inspect.ismethod(fn) or tool.context_param:
            raise ConfigurationError(
                f"tool {tool.name!r} has Ray resources, so it runs as a task: make it a module-level function "
                "without a ToolContext parameter"
            )
        kwargs = {k: getattr(value, k) for k in type(value).model_fields} if hasattr(value, "model_fields") else value
        if tool.run_context:
            kwargs = {**kwargs, RUN_CONTEXT: run_facts(context)}
        remote = self._task_functions.get(id(tool))
        if remote is None:
            remote = self._task_functions[id(tool)] = ray.remote(_run_tool_task).options(**tool.remote or {})
        trace = tracing.carrier()  # the task's span is a child of the tool call's, in the task's process
        return _until_done(remote.remote(fn, kwargs, trace, self.config.tracing if trace else None))


async def _until_done(ref: Any) -> Any:
    """A task tool's result; a turn that stops waiting for it (aborted, its run's deadline) cancels the task."""
    try:
        return await _call(ref)
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise


def _run_tool_task(
    fn: Any, kwargs: dict[str, Any], trace: dict[str, str] | None = None, config: tracing.TracingConfig | None = None
) -> Any:
    if config is None:
        return _run(fn, kwargs)
    tracing.configure(config)  # a task's worker is no agent's: it traces as the agent that sent the task says
    tracing.adopt(trace)
    with tracing.operation(f"run_task {getattr(fn, '__name__', 'tool')}", {}):
        return _run(fn, kwargs)


def _run(fn: Any, kwargs: dict[str, Any]) -> Any:
    result = fn(**kwargs)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return result
