"""Think: an LLM chat agent that owns its history and its turn queue, with the Think lifecycle hooks.

The class runs without Ray: construct it, then ``chat`` / ``save_messages`` in-process. The Ray runtime hosts
the same class inside an actor. Every hook is an async method with a no-op default; override what you need.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from . import mcp as _mcp
from . import metrics as _metrics
from ._turn.agent_runs import run_as_tool
from ._turn.driver import TurnOutcome, TurnSpec, normalize_input, turn_stream
from ._turn.durable import attach_durable
from ._turn.engine import Engine
from ._turn.queue import TurnQueue
from .agent_durable import DurableEntryPoints
from .channels import Channel, channel_table, check_channel
from .chat_stream import ChatStream
from .delegation import LocalAgentHandle
from .errors import ConfigurationError
from .extensions import Extension
from .extensions.chain import check_extensions
from .hooks import (
    ChatRecoveryConfig,
    ContextOverflowConfig,
    TurnResult,
)
from .identity import Principal
from .lifecycle import LifecycleHooks
from .limits import RunLimits
from .mcp import McpManager, McpServerConfig, McpServerState
from .messages import UIMessage, new_id
from .models import ModelClient
from .observability import Event
from .run_account import RunTicket
from .schedule import AgentSchedules, ScheduledTask
from .session import Session
from .store import LATEST, MemoryStore, MessageHit, Store, agent_path, check_store_url, validate_agent_name
from .tools import ClientToolSchema, Tool, check_tool_names, client_tools_of
from .turn_metadata import check_metadata

__all__ = ["ChatStream", "Think", "kebab_case"]

log = logging.getLogger("think_actors")

DEFAULT_INSTRUCTIONS = "You are a helpful assistant."


def kebab_case(name: str) -> str:
    """``ResearchLead`` -> ``research-lead`` (how classes appear in agent paths and gateway URLs)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


class Think(LifecycleHooks, DurableEntryPoints):
    """An LLM chat agent: class attributes configure it, hooks customise its turns.

    Attributes:
        model: A litellm model id (``"openai/gpt-4o-mini"``) or a ModelClient (e.g. ``ScriptedModel``).
        instructions: The system prompt.
        max_steps: Model requests per turn at most (each tool round trip is one step).
        send_reasoning: Whether reasoning chunks are streamed.
        tools: Extra tools (``@tool`` methods on the class are collected automatically).
        capability_prompt: Whether to tell the model which tools this turn offers.
        data_dir: Where SQLite stores live (default ``$THINK_ACTORS_DATA_DIR`` or ``./.think_actors``).
        store_url: Where the agent's store lives, as a URL: ``postgresql://...`` (a cluster's shared database) or
            ``sqlite:///dir``. Default ``$THINK_STORE``; with neither, a SQLite file per agent under ``data_dir``.
        context_overflow: Context-window overflow recovery (``ContextOverflowConfig``); None (the default) is off.
        chat_recovery: How turns a crash interrupted are finished after a restart (``ChatRecoveryConfig``).
        message_concurrency: What the gateway does with a chat request that arrives while a turn runs: ``"queue"``
            (default), ``"latest"`` / ``"merge"`` (only the newest runs, seeing every message), ``"drop"``,
            ``{"strategy": "debounce", "debounce_ms": 750}``, or ``"steer"`` (it joins the running turn).
        chat_stream_stall_timeout_s: The stream watchdog: a model stream silent for longer is stopped, its partial
            reply kept, and the turn resumed by the same bounded recovery as after a crash. None (default): off.
        metrics: Whether this class's agents record metrics (``think_actors.metrics``; on by default, off for
            every agent of a process with ``THINK_ACTORS_METRICS=0``).
        mcp_servers: MCP servers whose tools join every turn (``ta.mcp.stdio(...)``, ``ta.mcp.http(...)``); they
            connect when the agent first needs them, and ``wait_for_mcp_connections`` waits for them.
        include_mcp_tools: Whether the MCP servers' tools are offered to the model (Think's ``includeMcpTools``).
        schedules: Tasks that run on a schedule (Think's ``getScheduledTasks()``): ``ta.every("1 hour", "check
            the inbox")``, ``ta.cron("0 9 * * mon-fri", handler="report")``; registered when the agent is
            provisioned or spawned on Ray and when it starts (``LocalScheduler.attach`` in process).
        default_timezone: The zone of wall-clock schedules that name none (Think's ``getDefaultTimezone()``);
            None means UTC.
        hosting: On Ray, ``"actor"`` (the default): each agent is an actor, a process of its own. ``"shared"``:
            the agents of the class live in the cluster's shared host actors, many to a process
            (``ta.init(shared_hosts=N)``): turns cost a node far less CPU and memory and a wake starts no process,
            but an agent that crashes its process takes the other agents of its host down with it (they restart
            and recover as one actor does).
        run_limits: The ``RunLimits`` of every turn of this agent that starts a run (a turn called without
            ``limits=`` and not started by a parent's agent tool): one budget, deadline and set of caps for the turn
            and every agent it starts. None (default): no limits.
        max_concurrent_agent_tools: Child agents this agent's agent tools may run at once (Think's
            ``maxConcurrentAgentTools``); over it a call fails at once with ``maxConcurrentAgentTools (N)
            exceeded``, which its model sees as the tool's error. None (default): no cap.
        channels: The ``ta.Channel``s the agent answers on besides ``"web"`` (always there): each may put
            instructions before the system prompt, narrow the tools offered and bound the steps of the turns that
            come from it (``chat(..., channel="email")``).
        prompt_caching: Whether requests mark the prompt's stable prefix for providers that cache only what is
            marked (Claude on Anthropic, Bedrock, Vertex AI, Azure AI). None (default): where litellm's model table
            says the model supports it; True: on every Claude model; False: never. OpenAI, DeepSeek and Gemini
            cache on their own either way; ``Usage.cached_input_tokens`` reports the hits.
        extensions: ``ta.Extension`` instances (``[ta.RedactPII(), ta.AuditLog()]``): their tools, context blocks and
            hooks join the agent's; their hooks run after the agent's own, in list order (docs: Extensions).
    """

    model: str | ModelClient | None = None
    instructions: str | None = None
    max_steps: int = 10
    send_reasoning: bool = True
    tools: Sequence[Tool] = ()
    capability_prompt: bool = True
    data_dir: str | None = None
    store_url: str | None = None
    context_overflow: ContextOverflowConfig | None = None
    chat_recovery: ChatRecoveryConfig = ChatRecoveryConfig()
    chat_stream_stall_timeout_s: float | None = None
    message_concurrency: str | dict[str, Any] = "queue"
    metrics: bool = True
    mcp_servers: Sequence[McpServerConfig] = ()
    include_mcp_tools: bool = True
    schedules: Sequence[ScheduledTask] = ()
    default_timezone: str | None = None
    hosting: str = "actor"
    run_limits: RunLimits | None = None
    max_concurrent_agent_tools: int | None = None
    channels: Sequence[Channel] = ()
    prompt_caching: bool | None = None
    extensions: Sequence[Extension] = ()

    def __init__(
        self,
        name: str = "default",
        *,
        path: str | None = None,
        model: str | ModelClient | None = None,
        instructions: str | None = None,
        tools: Sequence[Tool] | None = None,
        max_steps: int | None = None,
        store: Store | str | None = None,
        data_dir: str | None = None,
    ):
        self.name = validate_agent_name(name)
        self.path = path or agent_path(kebab_case(type(self).__name__), name)
        if model is not None:
            self.model = model
        if instructions is not None:
            self.instructions = instructions
        if tools is not None:
            self.tools = tuple(tools)
        check_tool_names(type(self).__name__, self.tools)
        check_extensions(self, self.tools)
        self._channels = channel_table(type(self).__name__, self.channels)
        if max_steps is not None:
            self.max_steps = max_steps
        if data_dir is not None:
            self.data_dir = data_dir
        if isinstance(store, str):  # a URL: checked now, so a bad one fails here rather than at the first turn
            self.store_url, store = check_store_url(store), None
        elif self.store_url is not None:
            self.store_url = check_store_url(self.store_url)
        self._engine = Engine(self, store=store, hook_defaults=Think)
        self._durable = attach_durable(self._engine)
        self._mcp = McpManager(self.mcp_servers, observers=self._engine.observers)  # it publishes its changes
        self._schedules: AgentSchedules | None = None
        if _metrics.enabled(type(self)):
            self._engine.observers.subscribe("agents:chat", _metrics.MetricsRecorder())

    def get_system_prompt(self, tools: dict[str, Tool]) -> str:
        """The system prompt of a turn: ``instructions`` plus, when tools are offered, what they are."""
        prompt = self.instructions or DEFAULT_INSTRUCTIONS
        if self.capability_prompt and tools:
            prompt += (
                "\n\nTools available in this turn: " + ", ".join(sorted(tools)) + ". "
                "Do not claim access to capabilities that are not exposed as tools in this turn."
            )
        return prompt

    def get_tools(self) -> Sequence[Tool]:
        """Tools added at run time; merged after the class's tools.

        The default is the tools of the agent's MCP servers (when ``include_mcp_tools``); an override that keeps
        them returns ``[*super().get_tools(), ...]``.
        """
        return self._mcp.tools() if self.include_mcp_tools else ()

    # ------------------------------------------------------------------ MCP servers

    async def add_mcp_server(
        self, server: McpServerConfig | str, *, timeout_s: float | None = None, **options: Any
    ) -> McpServerState:
        """Connect an MCP server at run time; its tools join the turns that start after it connected.

        ``server`` is a ``ta.mcp.stdio(...)`` / ``ta.mcp.http(...)`` config, or a name with the options of one:
        ``add_mcp_server("files", url="http://127.0.0.1:8000/mcp")`` or ``add_mcp_server("x", command="npx",
        args=[...])``. Waits for it to connect (at most ``timeout_s``; None: its connect timeout) and returns its
        state: a server that failed to connect is added all the same, ``failed`` with the error, and each call
        of a tool of it tries again.
        """
        if isinstance(server, str):
            if "url" in options:
                server = _mcp.http(options.pop("url"), name=server, **options)
            elif "command" in options:
                server = _mcp.stdio(options.pop("command"), *options.pop("args", ()), name=server, **options)
            else:
                raise ConfigurationError(f"add_mcp_server({server!r}): give a url= or a command=")
        return await self._mcp.add(server, timeout_s=timeout_s)

    async def remove_mcp_server(self, name: str) -> bool:
        """Disconnect the MCP server ``name`` (a stdio server's process stops); whether the agent had it."""
        return await self._mcp.remove(name)

    def get_mcp_servers(self) -> dict[str, McpServerState]:
        """Each MCP server's state by name: ``connecting`` / ``ready`` / ``failed`` (with the error), its tools."""
        return self._mcp.states()

    async def wait_for_mcp_connections(self, timeout_s: float | None = 10.0) -> dict[str, McpServerState]:
        """Start connecting the declared MCP servers and wait until each is ready or failed (at most ``timeout_s``).

        As Think's ``waitForMcpConnections``: call it before the first turn so that turn sees the servers' tools.
        Returns every server's state; a server still connecting after the timeout goes on in the background.
        """
        return await self._mcp.wait(timeout_s)

    async def _settle_tools(self) -> None:
        """Before a turn builds its tool set: the listings MCP servers announced and have not sent yet (bounded)."""
        if self.include_mcp_tools:
            await self._mcp.settle()

    # ------------------------------------------------------------------ entry points

    def chat(
        self,
        message: Any = "",
        *,
        client_tools: Sequence[ClientToolSchema | dict[str, Any]] | None = None,
        on_client_tool_call: Callable[..., Any] | None = None,
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
        output: Any = None,
        branch_from: str | None = None,
        limits: RunLimits | dict[str, Any] | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ChatStream:
        """Start a streamed turn: ``async for chunk in agent.chat("hi")``.

        ``message`` is a str, a UIMessage, a list of them, or a function of the transcript evaluated when the
        turn starts. ``client_tools`` are offered for this turn only; with ``on_client_tool_call``
        (``async (tool_name, input, tool_call_id) -> output``) they run inline, else a call ends the turn.
        ``branch_from`` regenerates: the model sees the history up to that message, and the new reply is stored
        as a sibling of the old one under it (a new branch; the old reply stays in the tree).
        A failed turn ends the stream with an ``error`` chunk whose text ``on_chat_error`` chose.
        ``limits`` (``ta.RunLimits``) bounds the turn and every agent it starts, together (default: the class's
        ``run_limits``); a turn that reaches one ends with ``RunLimitError``. ``principal`` (``ta.Principal``) is
        who sends the turn: stamped on its user messages, seen by every hook (``ctx.principal``,
        ``active_principal``), recorded on its trace span. Pass only one your server authenticated. ``channel``
        names where the turn comes from (one of the class's ``channels``, or ``"web"``) and ``metadata`` is the
        turn's own facts (a dict of JSON values, Think's turn metadata): both are stamped on the user messages it
        stores (``metadata.channel``, ``metadata.turnMetadata``) and seen by the hooks (``ctx.channel``,
        ``ctx.metadata``, ``active_channel``, ``active_turn_metadata``).
        """
        engine = self._engine
        TurnQueue.check_not_nested(engine, "chat")
        if request_id is not None and request_id in engine.aborts:
            raise ConfigurationError(f"request id {request_id!r} is already in use by a live turn")
        spec = self._spec(
            "rpc",
            request_id,
            input=message if callable(message) else normalize_input(message),  # bad input fails here, not mid-stream
            body=body,
            output=output,
            client_tools=client_tools_of(client_tools, on_client_tool_call),
            branch_from=branch_from,
            limits=RunLimits.of(limits),
            principal=Principal.of(principal),
            channel=self._channel(channel),
            metadata=check_metadata(metadata),
        )
        return ChatStream(engine, spec)

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
        """Append ``messages`` (or a function of the transcript, evaluated when the turn starts) and run a turn.

        Waits for the turn (and its ``on_chat_response``). ``output`` asks for structured output: a pydantic model
        class (``TurnResult.output`` is then an instance of it) or a ``response_format`` dict (the parsed JSON);
        ``before_turn`` may still choose another with ``TurnConfig.output``. Raises NestedTurnError from inside a
        turn; a setup failure (no model, no messages, ``before_turn`` raising) raises what ``on_chat_error``
        returned; stream errors come back as ``status="error"`` with that text in ``error``. ``limits`` as in
        ``chat``: a turn that reaches one returns ``status="error"`` and ``limit`` naming it; ``principal``,
        ``channel`` and ``metadata`` as in ``chat``.
        """
        TurnQueue.check_not_nested(self._engine, "save_messages")
        spec = self._spec(
            "programmatic",
            None,
            input=messages if callable(messages) else normalize_input(messages),
            body=body,
            output=output,
            raise_setup_errors=True,
            limits=RunLimits.of(limits),
            principal=Principal.of(principal),
            channel=self._channel(channel),
            metadata=check_metadata(metadata),
        )
        return await self._drain(spec)

    async def continue_last_turn(self, *, body: dict[str, Any] | None = None, channel: str | None = None) -> TurnResult:
        """Run a continuation turn (no new input) when the latest message is the assistant's; else skip (the
        result still says ``continuation=True``, as the reference's ``runTurn({continuation: true})`` does). It runs
        on ``channel``, else the channel of the latest user message."""
        engine = self._engine
        TurnQueue.check_not_nested(engine, "continue_last_turn")
        await engine.ensure_started()
        if not engine.messages or engine.messages[-1].role != "assistant":
            return TurnResult(request_id="", status="skipped", continuation=True)
        spec = self._spec(
            "programmatic", None, continuation=True, body=body, raise_setup_errors=True, channel=self._channel(channel)
        )
        return await self._drain(spec)

    async def add_messages(self, messages: Any, *, parent_id: str | None = LATEST, mode: str = "append") -> None:
        """Write messages without a turn (safe inside a tool). Entries chain under ``parent_id``.

        ``mode="append"`` leaves an existing id alone; ``mode="upsert"`` replaces it in place.
        """
        engine = self._engine
        await engine.ensure_started()
        if callable(messages):
            messages = messages(self.get_messages())
        items = normalize_input(messages)
        if mode not in ("append", "upsert"):
            raise ConfigurationError(f"add_messages mode must be 'append' or 'upsert', not {mode!r}")
        parent = parent_id
        for message in items:
            if mode == "upsert" and await engine.store.get_message(message.id) is not None:
                await engine.replace(message)
            else:
                await engine.store.append_message(message, parent)
            parent = message.id
        await engine.reload()

    async def steer(self, messages: Any) -> bool:
        """Add messages to the turn running now: they are stored and join its next step's request.

        Returns False (and stores nothing) when no turn runs, or the running turn will not take another step;
        send them as a turn of their own then. The gateway's ``message_concurrency = "steer"`` uses this.
        """
        engine = self._engine
        items = normalize_input(messages)
        if not items or engine.queue.active_request_id is None:
            return False
        engine.steered.extend(items)
        return True

    async def set_client_tools(self, client_tools: Sequence[ClientToolSchema | dict[str, Any]]) -> None:
        """Replace the stored client tools (a client sends them with its requests and tool results): continuations
        offer them, and their waiting calls are pending interactions (``has_pending_interaction``), even after a
        restart. The client tools of one ``chat()`` are for that turn only."""
        engine = self._engine
        await engine.ensure_started()
        await engine.remember_turn_context(engine.last_body, client_tools_of(client_tools, None))

    async def chat_terminal(self) -> dict[str, Any] | None:
        """How the last chat turn failed, as the gateway replays it to a tab that was away: ``{"requestId",
        "frames"}``, or None. Stored with the agent, so a restarted gateway or agent still replays it."""
        engine = self._engine
        await engine.ensure_started()
        record = await engine.store.get_kv(_CHAT_TERMINAL_KEY)
        return record if isinstance(record, dict) else None

    async def remember_chat_terminal(self, record: dict[str, Any] | None) -> None:
        """Store (or, with None, forget) the failed turn ``chat_terminal`` returns; a later turn supersedes it."""
        if record is not None and not (isinstance(record, dict) and isinstance(record.get("requestId"), str)):
            raise ConfigurationError("a chat terminal record is a dict with the failed request's requestId")
        engine = self._engine
        await engine.ensure_started()
        await engine.store.set_kv(_CHAT_TERMINAL_KEY, record)

    def get_messages(self) -> list[UIMessage]:
        """The active transcript (a copy): every message, whatever compaction shows the model."""
        return list(self._engine.messages)

    async def load_messages(self) -> list[UIMessage]:
        """Start the agent if needed and return its transcript."""
        await self._engine.ensure_started()
        return self.get_messages()

    async def search_messages(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """Start the agent if needed and search every message it stored (``Session.search``): stemmed full text,
        best first; ``ConfigurationError`` for a blank query or a limit outside 1..1000."""
        await self._engine.ensure_started()
        session = self._engine.session
        assert session is not None  # set by the start
        return await session.search(query, limit=limit)

    def cancel_chat(self, request_id: str, reason: str | None = None) -> bool:
        """Abort a queued or running turn; False when the id is unknown or finished."""
        return self._engine.aborts.cancel(request_id, reason)

    def cancel_all_chats(self, reason: str | None = None) -> None:
        """Abort every queued or running turn (the queue itself is untouched)."""
        self._engine.aborts.cancel_all(reason)

    async def clear(self) -> None:
        """Delete the history. Queued turns and pending submissions are skipped; a running turn is aborted and
        writes nothing."""
        engine = self._engine
        engine.queue.reset()
        engine.aborts.cancel_all("cleared")
        await engine.ensure_started()
        await self._durable.submissions.skip_pending()
        await engine.store.clear_messages()
        await engine.store.clear_turn_state()
        await engine.remember_turn_context(None, [])
        await self._durable.interactions.reset()  # no continuation survives the history it would continue
        await engine.store.set_kv(_CHAT_TERMINAL_KEY, None)
        if engine.session is not None:
            await engine.session.clear()
        engine.messages = []
        engine.publish("message:clear", {})  # the gateway tells the agent's sockets, whoever cleared (reference)

    async def wait_idle(self) -> None:
        """Wait until no turn runs or waits."""
        await self._engine.queue.wait_idle()

    async def close(self) -> None:
        """Abort turns, close the MCP connections and the store."""
        self._engine.aborts.cancel_all("closed")
        await self._mcp.close()
        await self._engine.close()

    def emit(self, chunk: Any) -> None:
        """Put a chunk (e.g. a transient ``data-*`` chunk, or its dict form) into the running turn's stream.

        Called from a tool or from ``before_tool_call`` / ``after_tool_call``, it keeps its place among that
        call's chunks (forwarded child chunks, the call's output). From any other hook it goes out before the
        turn's next chunk. Outside a turn (``on_chat_response`` included: the stream has ended) it is dropped.
        """
        self._engine.emit(chunk)

    def observe(self, channel: str, callback: Callable[[Event], Any]) -> Callable[[], None]:
        """Subscribe ``callback(event)`` to an observability channel (``"agents:chat"``, ``"agents:message"``,
        ``"agents:transcript"``, or ``"chat"`` for short); returns a function that unsubscribes.

        Events: ``chat:turn:start`` / ``chat:turn:finish`` (status, durationMs, steps, usage, costUsd, toolCalls,
        firstChunkMs), ``chat:request:failed`` (stage, messagesPersisted, error), ``chat:context:compacted``,
        ``chat:transcript:repaired``, ``message:error``, ``message:clear``, and on ``"agents:stream"``
        ``stream:start`` (requestId, trigger: a ``chat()`` or ``save_messages()`` turn, whose chunks
        ``attach(requestId)`` gives while that channel has a subscriber). Callbacks run in the agent's event
        loop; an async callback is scheduled as a task; one that raises is logged.
        """
        return self._engine.observers.subscribe(channel, callback)

    @property
    def store(self) -> Store:
        """The agent's store: the one given, else the one ``store_url`` / ``$THINK_STORE`` names, else a SQLite file
        under ``data_dir``."""
        return self._engine.store

    @property
    def active_principal(self) -> Principal | None:
        """Who sent the turn running now (``chat(..., principal=...)``, a gateway's authenticated user; for a
        continuation or a recovery, the sender of the latest user message), else None. The same as the hooks'
        ``ctx.principal``, for code that has no ``ctx``: a tool, ``before_tool_call``, ``on_chunk``."""
        return self._engine.principal

    @property
    def active_channel(self) -> str | None:
        """The channel of the turn running now (``ctx.channel``), else None."""
        return self._engine.channel

    @property
    def active_turn_metadata(self) -> dict[str, Any] | None:
        """The metadata of the turn running now (``ctx.metadata``; Think's ``activeTurnMetadata``), else None."""
        return self._engine.turn_metadata

    @property
    def session(self) -> Session | None:
        """The session ``configure_session`` returned, once the agent has started."""
        return self._engine.session

    def child_path(self, agent_class: type[Think], name: str) -> str:
        """The path of this agent's child ``name`` of class ``agent_class`` (``sub_agent`` names it so)."""
        return f"{self.path}/{agent_path(kebab_case(agent_class.__name__), name)}"

    async def sub_agent(
        self, agent_class: type[Think], name: str, *, node_id: str | None = None, **options: Any
    ) -> Any:
        """A handle to the child agent ``name`` of class ``agent_class``, named under this agent's path.

        The child has its own history, queue and store. On Ray it is its own actor, placed like ``ta.spawn``
        places one (spread over the nodes, or softly on ``node_id``); in-process it is an object owned by this
        agent and ``node_id`` is ignored. The handle offers ``chat`` (async iterator of chunks),
        ``save_messages``, ``get_messages``, ``cancel_chat``, ``clear`` ...
        """
        engine = self._engine
        path = self.child_path(agent_class, name)
        if self.store_url is not None:  # children keep their rows where the parent keeps its own
            options.setdefault("store", self.store_url)
        if engine.runtime is not None:
            return await engine.runtime.sub_agent(agent_class, name, path, options, node_id)
        child = engine.children.get(path)
        if child is None:
            if isinstance(engine.store, MemoryStore):
                options.setdefault("store", type(engine.store)())
            options.setdefault("data_dir", self.data_dir)
            child = engine.children[path] = LocalAgentHandle(agent_class(name, path=path, **options))
        return child

    async def run_as_tool(
        self, run_id: str, input: Any, *, output: Any = None, run: RunTicket | None = None
    ) -> AsyncIterator[Any]:
        """Run (or re-attach to) the agent-tool run ``run_id``: its chunks, then an ``AgentRunResult``.

        Idempotent by ``run_id``: a finished run returns its stored result without running again; a live run
        is joined (its chunks so far are replayed). Raises NestedTurnError from inside one of this agent's turns.
        ``run`` is the parent's run (``RunLimits``), which the child's turn belongs to.
        """
        async for item in run_as_tool(self._engine, run_id, input, output, run):
            yield item

    # ------------------------------------------------------------------ internals

    def _channel(self, name: Any) -> str | None:
        """``name`` checked as a ``channel=`` argument: None, or a channel this class answers on."""
        return check_channel(type(self).__name__, self._channels, name)

    def _spec(self, trigger: str, request_id: str | None, **kwargs: Any) -> TurnSpec:
        engine = self._engine
        request_id = request_id or new_id()
        return TurnSpec(
            request_id=request_id,
            trigger=trigger,
            signal=engine.aborts.signal(request_id),
            generation=engine.queue.generation,
            **kwargs,
        )

    async def _drain(self, spec: TurnSpec) -> TurnResult:
        await self._engine.ensure_started()
        async for _ in turn_stream(self._engine, spec):
            pass
        outcome: TurnOutcome = spec.outcome
        if spec.signal.aborted and outcome.status == "completed":
            outcome.status = "aborted"
        return TurnResult(
            request_id=spec.request_id,
            status=outcome.status,  # type: ignore[arg-type]
            message=outcome.message,
            error=outcome.error,
            continuation=spec.continuation,
            output=outcome.output,
            usage=outcome.usage,
            cost_usd=outcome.cost_usd,
            tree_usage=outcome.tree_usage,
            limit=outcome.limit,
        )


_CHAT_TERMINAL_KEY = "gateway:chat-terminal"
