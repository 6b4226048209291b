"""The Ray runtime: every agent a named async actor; parents stream children; tools on other actors.

The only module that imports ``ray``. Rules it keeps (see stack-notes): a Ray stream item costs ~400 µs
whatever its size, so streams carry batches of chunks; agent actors never import litellm (string model ids
are served by a per-node pool of model actors); errors are unwrapped from ``RayTaskError`` so callers catch
the project's own classes; a call cycle A -> B -> A fails fast instead of hanging.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from . import registry
from ._turn import chain
from ._turn.journal import units
from .agent import Think, kebab_case
from .batching import _batches, _is_last, _unpack
from .errors import (
    AgentCycleError,
    AgentHibernatedError,
    AgentUnavailableError,
    ConfigurationError,
)
from .hooks import TurnResult
from .logs import configure_logging, set_process_agent
from .mcp import McpServerConfig, McpServerState
from .mcp.manager import local_connect
from .mcp.shared import ray_connect
from .messages import UIMessage
from .models import set_model_resolver
from .observability import Event
from .schedule import TaskInfo
from .store import STORE_ENV, agent_path, check_store_url
from .submissions import Submission
from .tools import Tool, ToolContext

__all__ = [
    "AgentHandle",
    "AgentListing",
    "RuntimeConfig",
    "get",
    "init",
    "is_initialized",
    "list_agents",
    "provision",
    "shutdown",
    "spawn",
]

log = logging.getLogger("think_actors")


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeConfig:
    """How agent actors are created; shipped to every actor that creates more actors."""

    namespace: str = "think_actors"
    data_dir: str = ""
    store_url: str = ""  # "" means each agent's SQLite file under data_dir
    model_pool_size: int = 2
    max_restarts: int = -1  # Ray restarts a crashed agent without limit; recovery budgets bound crash loops
    batch_max: int = 1024
    flush_s: float = 0.003
    log_level: int = logging.WARNING
    idle_timeout_s: float | None = None  # agents hibernate after this long without work (a class may override)
    fast_model_path: bool = True


_config: RuntimeConfig | None = None


def _unwrap(err: BaseException) -> BaseException:
    """The project's error inside a Ray error (the same class, the same fields), else a clear one."""
    if isinstance(err, RayTaskError):
        cause = err.cause
        if isinstance(cause, BaseException):
            return _unwrap(cause)
    if isinstance(err, ActorDiedError | ActorUnavailableError | RayActorError):
        return AgentUnavailableError(f"agent actor unavailable: {err}", retryable=True)
    return err


def _process_setup(config: RuntimeConfig) -> None:
    """Per-process set-up inside actors: config, quiet logs, string model ids served by the pool."""
    global _config
    _config = config
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    configure_logging(config.log_level)  # the level, and LOG_FORMAT (agent path, request id) unless configured
    from .model_pool import PoolResolver

    set_model_resolver(PoolResolver(config))


def init(
    address: str | None = None,
    *,
    namespace: str = "think_actors",
    data_dir: str | None = None,
    store: str | None = None,
    num_cpus: int | None = None,
    model_pool_size: int = 2,
    max_restarts: int = -1,
    idle_timeout_s: float | None = None,
    quiet: bool = True,
    fast_model_path: bool | None = None,
    **ray_kwargs: Any,
) -> RuntimeConfig:
    """Start (or join) Ray for think_actors. Local Ray by default; ``address="auto"`` joins a running cluster.

    ``data_dir`` is where agents' SQLite stores live (default ``$THINK_ACTORS_DATA_DIR`` or ``./.think_actors``).
    ``idle_timeout_s``: an agent with nothing to do for that long hibernates (its actor exits; its store keeps
    everything) and any handle, ``spawn``, ``get`` or the gateway wakes it; a class's own ``idle_timeout_s``
    wins. None (the default) keeps agents resident.
    ``store`` is a store URL for every agent (default ``$THINK_STORE``): ``postgresql://user@host/db`` when agents
    run on more than one node, or ``sqlite:///dir``; it travels to every actor. A URL of another scheme raises
    ``ConfigurationError`` before Ray starts.
    ``max_restarts`` is how often Ray restarts a crashed agent actor: by default (-1) always, so the agent stays
    reachable, and what gives up on a turn that kills its process again and again is the turn's recovery budget
    (the class's ``chat_recovery``, ``ChatRecoveryConfig``), which ends the turn and calls
    ``on_chat_recovery_exhausted``. A finite count is Ray's over the actor's whole life, not per turn: once it is
    spent Ray declares the actor dead, every call gets ``AgentUnavailableError`` and the interrupted turn is never
    finished. One crash loop takes up to ``max_total_attempts + 1`` restarts (``max_attempts + 1`` if no attempt
    gets further), so a count you set must stay above that. A process that dies in its own start-up, before its
    recovery counts an attempt, spends no budget: only a finite count ends that loop.
    ``fast_model_path`` lets the model-server pool stream OpenAI-wire providers through ``OpenAIWireClient``
    (default: on, unless ``$THINK_FAST_MODEL_PATH`` is ``0``); off, every model call goes through litellm.
    Calling it again returns the same config.
    """
    global _config
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    resolved_dir = os.path.abspath(data_dir or os.environ.get("THINK_ACTORS_DATA_DIR") or ".think_actors")
    store_url = store or os.environ.get(STORE_ENV) or ""
    store_url = check_store_url(store_url) if store_url else ""
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {
            "address": address or "local",
            "namespace": namespace,
            "include_dashboard": False,
            "log_to_driver": not quiet,
            "logging_level": logging.ERROR if quiet else logging.INFO,
        }
        if kwargs["address"] == "local":
            kwargs["num_cpus"] = num_cpus
            # Workers import agent classes by module name: give them the driver's import path.
            paths = [os.path.abspath(p or ".") for p in sys.path if os.path.isdir(p or ".")]
            kwargs["runtime_env"] = {
                "env_vars": {
                    "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "THINK_ACTORS_DATA_DIR": resolved_dir,
                    **({STORE_ENV: store_url} if store_url else {}),
                }
            }
        kwargs.update(ray_kwargs)
        ray.init(**kwargs)
    _config = RuntimeConfig(
        namespace=namespace,
        data_dir=resolved_dir,
        store_url=store_url,
        model_pool_size=model_pool_size,
        max_restarts=max_restarts,
        log_level=logging.WARNING if quiet else logging.INFO,
        idle_timeout_s=idle_timeout_s,
        # Decided here, in the driver, so every model server of the cluster follows the driver's setting.
        fast_model_path=_fast_path_setting(fast_model_path),
    )
    return _config


def _fast_path_setting(setting: bool | None) -> bool:
    from .models.fast_path import fast_path_enabled  # no litellm: the driver never loads it

    return fast_path_enabled(setting)


def is_initialized() -> bool:
    return _config is not None and ray.is_initialized()


def shutdown() -> None:
    """Disconnect from Ray (a local cluster started by ``init`` stops with it)."""
    global _config
    _config = None
    if ray.is_initialized():
        ray.shutdown()


def _require_config() -> RuntimeConfig:
    if _config is None:
        if ray.is_initialized():
            return init()
        raise ConfigurationError("think_actors runtime is not started: call ta.init() first")
    return _config


def _actor_options(config: RuntimeConfig, path: str, node_id: str | None = None) -> dict[str, Any]:
    return {
        "name": path,
        "namespace": config.namespace,
        "get_if_exists": True,
        "lifetime": "detached",  # a child outlives a restarting parent; re-attach finds it by name
        "max_restarts": config.max_restarts,
        "max_task_retries": 0,  # turns are not idempotent: never re-run one behind the caller's back
        "num_cpus": 0,  # agents wait on models and children; they do not compute
        # Ray puts an actor that asks for no resource at all on a random node whatever its strategy (measured with
        # Ray 2.60; ray-project/ray#25360 fixed hard node affinity only): one byte of memory makes SPREAD and soft
        # node affinity hold.
        "memory": 1,
        # Soft: when that node is gone, a restart places the agent on another one.
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=True) if node_id else "SPREAD",
        "max_concurrency": 1000,  # cancel_chat and reads must get through while a turn runs
    }


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
    options = dict(options)
    options.setdefault("data_dir", config.data_dir)
    if config.store_url:
        options.setdefault("store", config.store_url)
    host: Any = AgentHost
    actor = host.options(**_actor_options(config, path, node_id)).remote(agent_class, name, path, options, config)
    handle = AgentHandle(actor, path, agent_class.__name__)
    await handle._ready()
    return handle


async def spawn(agent_class: type[Think], name: str, *, node_id: str | None = None, **options: Any) -> AgentHandle:
    """Get or create the agent ``name`` of ``agent_class`` as a named actor; its history loads from its store.

    ``options`` go to the class's constructor (``model=``, ``instructions=``, ``data_dir=`` ...) when the actor
    is created; an existing actor is returned as it is. New agents are spread over the nodes; ``node_id`` (a hex
    id from ``ray.nodes()``) asks for that node, softly: if it is gone, Ray places the agent elsewhere.
    """
    config = _require_config()
    path = agent_path(kebab_case(agent_class.__name__), name)
    return await _spawn_path(agent_class, name, path, options, config, node_id)


async def get(agent_class: type[Think], name: str) -> AgentHandle:
    """The existing agent ``name`` of ``agent_class``, woken if it hibernates; AgentUnavailableError if the
    cluster never started it."""
    config = _require_config()
    path = agent_path(kebab_case(agent_class.__name__), name)
    try:
        actor = ray.get_actor(path, namespace=config.namespace)
    except ValueError:
        if registry.lookup(config.namespace, path) is None:
            raise AgentUnavailableError(
                f"no agent {path!r} in namespace {config.namespace!r}: start it with ta.spawn", agent=path
            ) from None
        handle = AgentHandle(None, path, agent_class.__name__)
        await handle._wake()
        return handle
    return AgentHandle(actor, path, agent_class.__name__)


def provision(agent_class: type[Think], name: str, **options: Any) -> AgentHandle:
    """Make the agent ``name`` addressable without starting its actor: the first call through the handle (or
    ``get``, ``spawn``, the gateway) starts it, as it wakes a hibernated one. An agent that exists is left as it
    is. Costs one registry write, no process: a cluster can hold far more agents than it can keep resident."""
    if not (isinstance(agent_class, type) and issubclass(agent_class, Think)):
        raise ConfigurationError(f"provision needs a Think subclass, got {agent_class!r}")
    config = _require_config()
    path = agent_path(kebab_case(agent_class.__name__), name)
    options = dict(options)
    options.setdefault("data_dir", config.data_dir)
    registry.record_provisioned(config.namespace, path, agent_class, name, options)
    return AgentHandle(None, path, agent_class.__name__)


@dataclass(frozen=True, slots=True)
class AgentListing:
    """The agents of a namespace: every one addressable, and which are resident on which node."""

    agents: list[registry.AgentRecord]

    @property
    def addressable(self) -> int:
        return len(self.agents)

    @property
    def resident(self) -> int:
        return sum(1 for a in self.agents if a.resident)

    def resident_by_node(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for agent in self.agents:
            if agent.resident:
                counts[agent.node_id] = counts.get(agent.node_id, 0) + 1
        return counts


def list_agents() -> AgentListing:
    """Every agent the cluster has started in this namespace: resident (its actor runs, on which node) or
    hibernated (only its store holds it; the next call wakes it)."""
    config = _require_config()
    return AgentListing(registry.list_records(config.namespace))


def _hibernated(err: BaseException, path: str) -> bool:
    """Whether a failed call never reached a live agent because the agent hibernates (safe to wake and resend)."""
    if isinstance(err, RayTaskError) and isinstance(err.cause, AgentHibernatedError):
        return True
    if isinstance(err, ActorDiedError | RayActorError) and not isinstance(err, RayTaskError):
        record = registry.lookup(_require_config().namespace, path)
        return record is not None and not record.resident
    return False


_WAKE_ATTEMPTS = 4


class RemoteStream:
    """Chunks of a streamed remote call, unbatched. Closing it early cancels the remote turn.

    When the actor dies during a turn, the error says so and names the turn: the restarted actor resumes it,
    and ``resume()`` follows the resumed turn from ``position``, the units (``journal.units``) of the turn's
    stream this caller received: every chunk of the reply reaches it once. A chunk reaches the caller only once
    the agent's log holds it, so what the caller saw is what the recovery continues from.
    """

    def __init__(
        self,
        generator: Any,
        request_id: str | None = None,
        *,
        resumable: bool = False,
        handle: AgentHandle | None = None,
        restart: Callable[[], Any] | None = None,
        position: int | None = None,
    ):
        self.request_id = request_id
        self.position = position  # None: this stream does not know where in its turn's stream it began
        self._resumable = resumable
        self._generator = generator
        self._items: AsyncIterator[Any] | None = None
        self._done = False
        self._handle = handle  # with ``restart``: a call that found the agent hibernating wakes it and is resent
        self._restart = restart
        self._received = False

    def __aiter__(self) -> AsyncIterator[Any]:
        # An async generator: ``async for`` then takes each chunk without a coroutine of ours per chunk.
        if self._items is None:
            self._items = self._unbatched()
        return self._items

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    async def _unbatched(self) -> AsyncIterator[Any]:
        while not self._done:
            if self._generator is None:  # a provisioned agent: start it, then the call
                assert self._handle is not None and self._restart is not None
                await self._handle._wake()
                self._generator = self._restart()
            try:
                data = await (await self._generator.__anext__())
            except StopAsyncIteration:
                self._done = True
                return
            except (RayTaskError, RayActorError, ActorUnavailableError) as err:
                handle, restart = self._handle, self._restart
                if not self._received and handle is not None and restart is not None and _hibernated(err, handle.path):
                    await handle._wake()  # nothing of the call ran: the agent was hibernating
                    self._generator = restart()
                    self._restart = None  # once
                    continue
                self._done = True
                error = _unwrap(err)
                if self._resumable and isinstance(error, AgentUnavailableError):
                    raise AgentUnavailableError(
                        f"the agent actor died during turn {self.request_id!r}; it restarts and resumes the turn "
                        f"from its store: follow it with stream.resume(), which is "
                        f"handle.attach({self.request_id!r}, position={self.position}) ({err})",
                        request_id=self.request_id,
                        retryable=True,
                    ) from None
                raise error from None
            self._received = True
            if _is_last(data):
                # The remote generator has returned: end here rather than wait for Ray's end-of-stream message.
                self._done = True
            if self.position is None:
                for item in _unpack(data):
                    yield item
                continue
            for item in _unpack(data):
                self.position += units(item)
                yield item

    def resume(self) -> RemoteStream:
        """The rest of this stream's turn after an interruption, from ``position``: ``handle.attach(request_id,
        position=...)``. Resume the stream it returns in turn if that is interrupted too."""
        if self._handle is None or self.request_id is None or self.position is None:
            raise ConfigurationError(
                "only a chat() stream, or an attach() stream given a position, knows where to resume from"
            )
        return self._handle.attach(self.request_id, position=self.position)

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            if self._generator is not None:
                ray.cancel(self._generator)

    async def collect(self) -> list[Any]:
        return [item async for item in self]


async def _call(ref: Any) -> Any:
    try:
        return await ref
    except (RayTaskError, RayActorError, ActorUnavailableError) as err:
        raise _unwrap(err) from None


class AgentHandle:
    """A handle to an agent actor, with the engine's entry points. Picklable: pass it to other actors."""

    def __init__(self, actor: Any, path: str, class_name: str):
        self._actor = actor
        self.path = path
        self.class_name = class_name

    def __repr__(self) -> str:
        return f"AgentHandle({self.class_name}, {self.path!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (AgentHandle, (self._actor, self.path, self.class_name))

    async def _ready(self) -> dict[str, Any]:
        info: dict[str, Any] = await _call(self._actor.ready.remote())
        return info

    async def _invoke(self, method: str, *args: Any) -> Any:
        """Call an actor method; an agent found hibernating is woken and the call sent again (it never ran)."""
        return await self._resend(lambda: getattr(self._actor, method).remote(*args))

    async def _resend(self, send: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``send()`` against the agent's actor, started first if it never ran; when the call found the agent
        hibernating (so nothing of it ran), wake the agent and send it again."""
        if self._actor is None:  # provisioned, never started
            await self._wake()
        for attempt in range(_WAKE_ATTEMPTS):
            try:
                return await send()
            except (RayTaskError, RayActorError, ActorUnavailableError) as err:
                if attempt + 1 < _WAKE_ATTEMPTS and _hibernated(err, self.path):
                    await self._wake()
                    continue
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
            self._actor = fresh._actor
            return
        raise AgentUnavailableError(f"agent {self.path!r} could not be woken", agent=self.path, retryable=True)

    async def info(self) -> dict[str, Any]:
        """``{"path", "pid", "node_id", "messages"}`` of the live actor (woken if it hibernates)."""
        info: dict[str, Any] = await self._invoke("ready")
        return info

    def chat(
        self,
        message: Any = "",
        *,
        client_tools: Any = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        output: Any = None,
        on_client_tool_call: Any = None,
        branch_from: str | None = None,
    ) -> RemoteStream:
        """Stream a turn of the agent (chunks arrive in batches and are unbatched here)."""
        if on_client_tool_call is not None:
            raise ConfigurationError("on_client_tool_call runs in the caller's process; it cannot cross actors")
        from .messages import new_id

        request_id = request_id or new_id()
        options = {
            "client_tools": client_tools,
            "body": body,
            "request_id": request_id,
            "output": output,
            "branch_from": branch_from,
        }
        caller_chain = chain.CHAIN.get()

        def start() -> Any:
            return self._actor.chat.options(num_returns="streaming").remote(message, options, caller_chain)

        return RemoteStream(self._started(start), request_id, resumable=True, handle=self, restart=start, position=0)

    def attach(self, request_id: str, *, position: int | None = None) -> RemoteStream:
        """Follow a turn the actor resumed after a crash (see ``Think.attach``): its chunks so far, then the rest;
        with ``position`` (what ``RemoteStream.position`` counted) only what the caller does not hold yet."""
        caller_chain = chain.CHAIN.get()

        def start() -> Any:
            return self._actor.attach.options(num_returns="streaming").remote(request_id, position, caller_chain)

        resumable = position is not None  # only a stream that knows its position can say how to resume it
        return RemoteStream(
            self._started(start), request_id, resumable=resumable, handle=self, restart=start, position=position
        )

    def run_as_tool(self, run_id: str, input: Any, *, output: Any = None) -> RemoteStream:
        caller_chain = chain.CHAIN.get()

        def start() -> Any:
            return self._actor.run_as_tool.options(num_returns="streaming").remote(run_id, input, output, caller_chain)

        return RemoteStream(self._started(start), run_id, handle=self, restart=start)

    async def save_messages(self, messages: Any, *, body: dict[str, Any] | None = None) -> TurnResult:
        result: TurnResult = await self._invoke("save_messages", messages, body, chain.CHAIN.get())
        return result

    async def continue_last_turn(self, *, body: dict[str, Any] | None = None) -> TurnResult:
        result: TurnResult = await self._invoke("continue_last_turn", body, chain.CHAIN.get())
        return result

    async def add_messages(self, messages: Any, **options: Any) -> None:
        await self._invoke("add_messages", messages, options)

    async def get_messages(self) -> list[UIMessage]:
        messages: list[UIMessage] = await self._invoke("get_messages")
        return messages

    async def cancel_chat(self, request_id: str, reason: str | None = None) -> bool:
        return bool(await self._invoke("cancel_chat", request_id, reason))

    async def clear(self) -> None:
        await self._invoke("clear")

    async def submit_messages(
        self,
        messages: Any,
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Submission:
        """``Think.submit_messages`` on the actor: returns once the submission is committed in its store."""
        kwargs = {"submission_id": submission_id, "idempotency_key": idempotency_key, "metadata": metadata}
        return await self._forward("submit_messages", messages, **kwargs)  # type: ignore[no-any-return]

    async def inspect_submission(self, submission_id: str) -> Submission | None:
        return await self._forward("inspect_submission", submission_id)  # type: ignore[no-any-return]

    async def list_submissions(self, status: Any = None, limit: int = 50) -> list[Submission]:
        return await self._forward("list_submissions", status, limit)  # type: ignore[no-any-return]

    async def cancel_submission(self, submission_id: str, reason: str | None = None) -> bool:
        return bool(await self._forward("cancel_submission", submission_id, reason))

    async def delete_submission(self, submission_id: str) -> bool:
        return bool(await self._forward("delete_submission", submission_id))

    async def delete_submissions(
        self, status: Any = None, *, completed_before: float | None = None, limit: int = 100
    ) -> int:
        kwargs = {"completed_before": completed_before, "limit": limit}
        return int(await self._forward("delete_submissions", status, **kwargs))

    async def wait_for_submission(self, submission_id: str, *, timeout_s: float | None = None) -> Submission:
        return await self._forward(  # type: ignore[no-any-return]
            "wait_for_submission", submission_id, timeout_s=timeout_s
        )

    async def add_tool_result(self, tool_call_id: str, output: Any = None, **options: Any) -> bool:
        """``Think.add_tool_result`` on the actor."""
        return bool(await self._forward("add_tool_result", tool_call_id, output, **options))

    async def add_tool_approval(self, tool_call_id: str, approved: bool, **options: Any) -> bool:
        """``Think.add_tool_approval`` on the actor."""
        return bool(await self._forward("add_tool_approval", tool_call_id, approved, **options))

    async def wait_until_stable(self, *, timeout_s: float | None = None) -> None:
        await self._forward("wait_until_stable", timeout_s=timeout_s)

    async def pending_continuation_id(self) -> str | None:
        """``Think.pending_continuation_id`` on the actor."""
        return await self._forward("pending_continuation_id")  # type: ignore[no-any-return]

    async def set_client_tools(self, client_tools: Any) -> None:
        """``Think.set_client_tools`` on the actor."""
        await self._forward("set_client_tools", client_tools)

    async def steer(self, messages: Any) -> bool:
        """``Think.steer`` on the actor."""
        return bool(await self._forward("steer", messages))

    async def chat_terminal(self) -> dict[str, Any] | None:
        """``Think.chat_terminal`` on the actor."""
        return await self._forward("chat_terminal")  # type: ignore[no-any-return]

    async def remember_chat_terminal(self, record: dict[str, Any] | None) -> None:
        """``Think.remember_chat_terminal`` on the actor."""
        await self._forward("remember_chat_terminal", record)

    async def add_mcp_server(
        self, server: McpServerConfig | str, *, timeout_s: float | None = None, **options: Any
    ) -> McpServerState:
        """``Think.add_mcp_server`` on the actor (the connection lives there, or in the node's shared actor)."""
        state: McpServerState = await self._forward("add_mcp_server", server, timeout_s=timeout_s, **options)
        return state

    async def remove_mcp_server(self, name: str) -> bool:
        """``Think.remove_mcp_server`` on the actor."""
        removed: bool = await self._forward("remove_mcp_server", name)
        return removed

    async def get_mcp_servers(self) -> dict[str, McpServerState]:
        """``Think.get_mcp_servers`` on the actor."""
        states: dict[str, McpServerState] = await self._forward("get_mcp_servers")
        return states

    async def wait_for_mcp_connections(self, timeout_s: float | None = 10.0) -> dict[str, McpServerState]:
        """``Think.wait_for_mcp_connections`` on the actor."""
        states: dict[str, McpServerState] = await self._forward("wait_for_mcp_connections", timeout_s)
        return states

    async def schedule(self, when: Any, prompt: str | None = None, **options: Any) -> TaskInfo:
        """``Think.schedule`` in the agent (woken if it hibernates); a handler is given by name (``handler=``)."""
        info: TaskInfo = await self._forward("schedule", when, prompt, **options)
        return info

    async def list_schedules(self) -> list[TaskInfo]:
        return list(await self._forward("list_schedules"))

    async def cancel_schedule(self, task_id: str) -> bool:
        return bool(await self._forward("cancel_schedule", task_id))

    async def run_scheduled_task(self, handler: str, facts: dict[str, Any]) -> bool:
        return bool(await self._forward("run_scheduled_task", handler, facts))

    async def _forward(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._invoke("forward", method, args, kwargs)

    async def observe(self, channel: str, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Subscribe ``callback(event)`` to one of the agent's observability channels (see ``Think.observe``).

        Returns once the subscription is live in the actor; the callback runs in this process (an async one is
        awaited in order). Call the returned function to unsubscribe.
        """

        async def subscribe() -> Any:
            generator = self._actor.events.options(num_returns="streaming").remote(channel)
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
        stays addressable, not resident: the next call starts it again)."""
        if self._actor is None:
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
        "cancel_submission",
        "delete_submission",
        "delete_submissions",
        "wait_for_submission",
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
    """An AgentHost method that counts as work while it runs (a stream, for as long as it streams): an agent with
    a call in progress never hibernates, and a call that arrives while it hibernates is refused, never half-run.
    It runs once the actor's own start of the agent has ended (see ``AgentHost.__init__``)."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def stream(self: AgentHost, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            self._begin_call()
            try:
                await self._started()
                async for item in method(self, *args, **kwargs):
                    yield item
            finally:
                self._end_call()

        return stream

    @functools.wraps(method)
    async def call(self: AgentHost, *args: Any, **kwargs: Any) -> Any:
        self._begin_call()
        try:
            await self._started()
            return await method(self, *args, **kwargs)
        finally:
            self._end_call()

    return call


@ray.remote
class AgentHost:
    """Hosts one Think agent in an async actor."""

    def __init__(self, agent_class: type[Think], name: str, path: str, options: dict[str, Any], config: RuntimeConfig):
        _process_setup(config)
        set_process_agent(path)  # this process hosts one agent: its records name it outside turns too
        self.config = config
        self.agent = agent_class(name, path=path, **options)
        self.agent._engine.runtime = _ActorRuntime(self.agent, config)
        # MCP servers declared shared=True are connected once per node by a named actor, the others in this one.
        self.agent._mcp.set_connect(ray_connect(config.namespace, local_connect))
        self.path = path
        self._calls = 0
        self._last_work = time.monotonic()
        self._hibernating = False
        self._watch: asyncio.Future[None] | None = None
        own: Any = getattr(agent_class, "idle_timeout_s", None)
        self.idle_timeout_s: float | None = own if own is not None else config.idle_timeout_s
        node_id = ray.get_runtime_context().get_node_id()
        registry.record_resident(config.namespace, path, agent_class, name, options, node_id)
        # Start the agent as soon as the actor is up, not at the first call: after a crash and restart, what it
        # had accepted (pending submissions, interrupted turns) must go on without anyone asking. A task on the
        # actor's own event loop (Ray 2.60 runs an async actor's constructor on it), never a call to itself: Ray
        # refuses that call while it still counts the actor as restarting, and the start was lost (stack-notes).
        self._start_up = asyncio.get_running_loop().create_task(self._start_agent())

    async def _start_agent(self) -> None:
        """Load the agent, which schedules the recovery of interrupted turns and the pending submissions."""
        if self.agent.mcp_servers:
            # Connected before the agent starts (Think's waitForMcpConnections), after a restart or a wake too: the
            # first turn sees the servers' tools, and a recovered call in doubt sees their idempotent hints. A
            # failure here must not keep the agent (and its recovery) from starting.
            try:
                await self.agent.wait_for_mcp_connections(max(s.connect_timeout_s for s in self.agent.mcp_servers) + 5)
            except Exception:
                log.exception("agent %r: its MCP servers could not be waited for; starting without them", self.path)
        try:
            await self.agent.load_messages()
        except Exception:
            log.exception("agent %r could not start; the next call to it starts it again", self.path)
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
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()

    def _enter(self, caller_chain: tuple[str, ...]) -> None:
        """Refuse a call that would wait for this agent's own turn; else carry the chain on to our callees."""
        _check_cycle(self.path, caller_chain)
        chain.CHAIN.set((*caller_chain, self.path))

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
    async def chat(self, message: Any, options: dict[str, Any], caller_chain: tuple[str, ...]) -> AsyncIterator[bytes]:
        self._enter(caller_chain)
        await self.agent.load_messages()
        stream = self.agent.chat(message, **options)
        durable = self.agent._engine.durable
        async for batch in _batches(stream.__aiter__(), self.config):
            await durable()  # what leaves the process is in the log first: a crash loses nothing the caller saw
            yield batch

    @_counted
    async def run_as_tool(
        self, run_id: str, input: Any, output: Any, caller_chain: tuple[str, ...]
    ) -> AsyncIterator[bytes]:
        self._enter(caller_chain)
        async for batch in _batches(self.agent.run_as_tool(run_id, input, output=output), self.config):
            yield batch

    @_counted
    async def attach(
        self, request_id: str, position: int | None, caller_chain: tuple[str, ...]
    ) -> AsyncIterator[bytes]:
        self._enter(caller_chain)
        durable = self.agent._engine.durable
        async for batch in _batches(self.agent.attach(request_id, position=position), self.config):
            await durable()
            yield batch

    @_counted
    async def save_messages(
        self, messages: Any, body: dict[str, Any] | None, caller_chain: tuple[str, ...]
    ) -> TurnResult:
        self._enter(caller_chain)
        return await self.agent.save_messages(messages, body=body)

    @_counted
    async def continue_last_turn(self, body: dict[str, Any] | None, caller_chain: tuple[str, ...]) -> TurnResult:
        self._enter(caller_chain)
        return await self.agent.continue_last_turn(body=body)

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
    async def forward(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if method not in _FORWARDED_METHODS:
            raise ConfigurationError(f"{method!r} is not an agent method a handle may call")
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


class _ActorRuntime:
    """What an agent hosted in an actor uses to reach other actors (set as the engine's ``runtime``)."""

    def __init__(self, agent: Think, config: RuntimeConfig):
        self.agent = agent
        self.config = config
        self._task_functions: dict[int, Any] = {}

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
        remote = self._task_functions.get(id(tool))
        if remote is None:
            remote = self._task_functions[id(tool)] = ray.remote(_run_tool_task).options(**tool.remote or {})
        return _call(remote.remote(fn, kwargs))


def _run_tool_task(fn: Any, kwargs: dict[str, Any]) -> Any:
    result = fn(**kwargs)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return result


async def call_actor_method(target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
    """Call ``method`` of an actor handle or named actor and await it, unwrapping Ray errors."""
    actor = target
    if isinstance(target, str):
        try:
            actor = ray.get_actor(target, namespace=namespace or _require_config().namespace)
        except ValueError:
            raise AgentUnavailableError(f"no actor named {target!r}", agent=target) from None
    return await _call(getattr(actor, method).remote(**kwargs))
