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
from ._turn.convert import default_repair
from ._turn.driver import TurnOutcome, TurnSpec, normalize_input, turn_stream
from ._turn.durable import attach_durable
from ._turn.engine import Engine
from ._turn.queue import TurnQueue
from .delegation import LocalAgentHandle
from .errors import ConfigurationError
from .hooks import (
    ChatErrorContext,
    ChatRecoveryConfig,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    ErrorClassification,
    ReconcileDecision,
    RecoveryDecision,
    StepConfig,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    ToolReconcileContext,
    TurnConfig,
    TurnContext,
    TurnResult,
)
from .mcp import McpManager, McpServerConfig, McpServerState
from .messages import MessagePart, ToolPart, UIMessage, new_id
from .models import ModelClient
from .observability import Event
from .schedule import AgentSchedules, RetryPolicy, ScheduledTask, TaskInfo, open_schedule_store, run_handler
from .session import Session
from .store import LATEST, MemoryStore, Store, agent_path, check_store_url, validate_agent_name
from .submissions import Submission
from .tools import ClientToolSchema, Tool, ToolContext, client_tool

__all__ = ["ChatStream", "Think", "kebab_case"]

log = logging.getLogger("think_actors")

DEFAULT_INSTRUCTIONS = "You are a helpful assistant."


def kebab_case(name: str) -> str:
    """``ResearchLead`` -> ``research-lead`` (how classes appear in agent paths and gateway URLs)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


class ChatStream:
    """The chunks of one ``chat()`` turn. ``request_id`` is known before the turn starts, so
    ``agent.cancel_chat(stream.request_id)`` works while the turn still waits in the queue."""

    def __init__(self, engine: Engine, spec: TurnSpec):
        self.request_id = spec.request_id
        self._engine = engine
        self._spec = spec
        self._iterator: AsyncIterator[Any] | None = None

    def __aiter__(self) -> AsyncIterator[Any]:
        if self._iterator is None:
            self._iterator = turn_stream(self._engine, self._spec)
        return self._iterator

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    async def aclose(self) -> None:
        """Stop reading: a running turn is aborted (its partial reply is kept)."""
        if self._iterator is not None:
            await self._iterator.aclose()  # type: ignore[attr-defined]
        else:
            self._engine.aborts.remove(self.request_id)

    @property
    def status(self) -> str:
        """``completed``, ``error``, ``aborted`` or ``skipped`` once the stream has ended."""
        return self._spec.outcome.status

    @property
    def outcome(self) -> TurnOutcome:
        """How the turn ended (status, message, error, output, usage) once the stream has ended."""
        return self._spec.outcome

    async def collect(self) -> list[Any]:
        return [chunk async for chunk in self]


class Think:
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
            the inbox")``, ``ta.cron("0 9 * * mon-fri", handler="report")``; registered when the agent starts.
        default_timezone: The zone of wall-clock schedules that name none (Think's ``getDefaultTimezone()``);
            None means UTC.
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

    # ------------------------------------------------------------------ lifecycle hooks

    async def configure_session(self, session: Session) -> Session | None:
        """Configure the session once, when the agent starts (before its history loads).

        Return the session (or a replacement); None keeps it. Raising fails the agent's start.
        """
        return session

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """Change the turn before its first model request. Turn lock held; once per turn, every entry point.

        Return a TurnConfig to override the model, prompt, messages, tools, limits or sampling, or to rewrite the
        model's stream (``transform``, an async generator function over each step's model events); None keeps all.
        Raising fails the turn (stage ``turn``): ``chat`` streams an error chunk, ``save_messages`` raises.
        """
        return None

    async def before_step(self, ctx: StepContext) -> StepConfig | None:
        """Change one step before its model request. Turn lock held; once per step.

        Return a StepConfig (model, tool_choice, active_tools, instructions, messages, provider_options) for this
        step only; None keeps all. Raising ends the turn with an error.
        """
        return None

    async def on_chunk(self, ctx: ChunkContext) -> None:
        """Observe each model-level stream part (text, reasoning, tool input, tool call, tool result).

        Turn lock held; awaited, so a slow hook slows the stream. Not called at all unless overridden. The
        return value is ignored; raising ends the turn with an error (the partial reply is kept).
        """

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Decide whether a tool call runs. Turn lock held; once per call, calls of a step concurrently.

        Return None or Allow() to run it, Allow(input=...) to run it with new input, Block(reason) to skip it,
        or Substitute(output) to answer for it. Raising becomes a tool error the model sees; the turn goes on.
        """
        return None

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """Observe a finished tool call (success, output or error, duration), blocked and substituted ones too.

        Turn lock held; once per executed call, as each finishes. The return value is ignored. Raising ends the
        turn with an error (the partial reply is kept).
        """

    async def on_step_finish(self, ctx: StepResult) -> None:
        """Observe a finished step: the whole step record (text, reasoning, files, sources, tool calls and
        results, finish reason, usage, warnings, request, response id/model/timestamp, provider metadata, cost).

        Turn lock held; once per step, after its tool calls, before the next step. The return value is ignored.
        Raising ends the turn with an error (stage ``stream``; the partial reply is kept).
        """

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Observe a finished turn whose assistant message was persisted. Turn lock already released.

        Fires for every entry point (``chat``, child-agent calls, ``save_messages``, ``continue_last_turn``) with
        ``completed`` (even for an empty reply), ``aborted``, or ``error`` when a partial reply with at least one
        part was persisted; a turn that fails before any part exists fires only ``on_chat_error``. Not fired for
        skipped turns or for an attempt discarded by context-overflow recovery.

        The lock is released before this runs (the seed's contract; the reference's code runs it inside the
        slot), so ``save_messages``, ``continue_last_turn`` and ``chat`` work here: the new turn queues behind
        turns already waiting, and the next queued turn may start while this hook runs. The entry point that ran
        the turn returns only after this hook finished. A turn started from here does not fire this hook again
        (re-entrancy guard), so a follow-up turn does not recurse. Raising is logged and ignored.
        """

    async def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> Any:
        """Choose the error to report for a failed turn. Called exactly once per failed turn, at every stage.

        Stages (``ctx.stage``): ``persist`` (the input could not be resolved or stored), ``turn`` (setup: no
        model, no messages, ``before_turn`` raising), ``transcript`` (repairing the transcript failed),
        ``stream`` (a provider error before or during the stream, an error event inside it, a hook or the
        consumer raising). ``ctx.messages_persisted`` says whether the user's input is stored;
        ``ctx.classification`` is ``"context_overflow"`` only when overflow recovery could not save the turn.
        The partial reply, if any, is persisted before this runs. Turn lock held.

        This is the seed's contract (the reference's code skips in-band stream errors): return the error
        (default), a replacement exception, or any value; its message (``str(x)``) is what every caller sees —
        the ``error`` chunk, ``TurnResult.error``, the exception ``save_messages`` raises for a setup failure,
        and the ``chat:request:failed`` event. Returning None keeps the error. Raising is logged and the original
        error is reported.
        """
        return error

    async def classify_chat_error(self, error: Any, ctx: ChatErrorContext) -> ErrorClassification | None:
        """Classify a failed model request, before ``on_chat_error``; None (the default) means no opinion.

        Called only when ``context_overflow.reactive`` is on, with ``ctx = ChatErrorContext(stage="stream",
        request_id=...)`` (so it may ``self.cancel_chat(ctx.request_id)`` to stop the recovery). ``error`` is the
        project's error — ``ContextOverflowError``, or a ``ProviderError`` with ``status_code`` and the
        provider's ``response_body`` — or, for an error event inside the stream, the error text as a ``str``.
        ``"context_overflow"`` starts compact-and-retry; the other categories are reserved: they change nothing
        and are not passed to ``on_chat_error``. Assign ``classify_chat_error =
        ta.default_context_overflow_classifier`` for the shipped classifier. May be sync or async. Turn lock
        held. Raising counts as no opinion.
        """
        return None

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> RecoveryDecision | dict[str, bool] | None:
        """Decide how a turn a crash interrupted is finished, when the agent starts again. Turn lock held.

        ``ctx.kind`` is ``"continue"`` (a partial reply exists) or ``"retry"`` (the user's message is unanswered).
        Return ``RecoveryDecision(persist=..., resume=...)`` (or ``{"persist": ..., "continue": ...}``): persist
        False keeps only the partial's settled tool results; resume False ends the turn without a continuation.
        None keeps both True. Raising is logged and the defaults apply.
        """
        return None

    async def on_chat_recovery_exhausted(self, ctx: ChatRecoveryContext) -> None:
        """Observe a turn recovery gave up on (``ctx.reason``: ``max_attempts``, ``work_budget``,
        ``no_progress_timeout``, ``disabled``); ``on_chat_error`` then reports it (stage ``recovery``).
        Raising is logged and ignored."""

    async def reconcile_tool_call(self, ctx: ToolReconcileContext) -> ReconcileDecision | None:
        """Decide a tool call that started before a crash and has no recorded end (it may have had its effect).

        Return ``Rerun()`` to run it again, ``Substitute(output)`` to settle it with a result, or
        ``Fail(error)`` to settle it with an error the model sees. None (the default) re-runs tools declared
        ``idempotent=True`` and fails the others, saying their outcome is unknown — a payment tool is never
        charged twice. Raising settles the call with an error. Turn lock held.
        """
        return None

    async def on_submission_status(self, submission: Submission) -> None:
        """Observe a submission's status change: accepted (``pending``), ``running``, and its final status.

        Awaited before the change is reported on (``submit_messages`` returns after the ``pending`` call). The
        turn lock may or may not be held. The return value is ignored; raising is logged and ignored.
        """

    def repair_interrupted_tool_part(self, part: ToolPart) -> ToolPart | MessagePart | None:
        """Repair a tool call that has no result, before the next model request sees the transcript.

        Turn lock held; once per unsettled tool part (except ``approval-responded``) of a turn's transcript.
        Return the part to keep (default: an error result), another part (e.g. a text part), or None to drop
        it; the repaired message is persisted. Raising fails the turn's setup (stage ``turn``).
        """
        return default_repair(part)

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
    ) -> ChatStream:
        """Start a streamed turn: ``async for chunk in agent.chat("hi")``.

        ``message`` is a str, a UIMessage, a list of them, or a function of the transcript evaluated when the
        turn starts. ``client_tools`` are offered for this turn only; with ``on_client_tool_call``
        (``async (tool_name, input, tool_call_id) -> output``) they run inline, else a call ends the turn.
        ``branch_from`` regenerates: the model sees the history up to that message, and the new reply is stored
        as a sibling of the old one under it (a new branch; the old reply stays in the tree).
        A failed turn ends the stream with an ``error`` chunk whose text ``on_chat_error`` chose.
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
            client_tools=_client_tools(client_tools, on_client_tool_call),
            branch_from=branch_from,
        )
        return ChatStream(engine, spec)

    async def save_messages(self, messages: Any, *, body: dict[str, Any] | None = None) -> TurnResult:
        """Append ``messages`` (or a function of the transcript, evaluated when the turn starts) and run a turn.

        Waits for the turn (and its ``on_chat_response``). Raises NestedTurnError from inside a turn; a setup
        failure (no model, no messages, ``before_turn`` raising) raises what ``on_chat_error`` returned; stream
        errors come back as ``status="error"`` with that text in ``error``.
        """
        TurnQueue.check_not_nested(self._engine, "save_messages")
        spec = self._spec(
            "programmatic",
            None,
            input=messages if callable(messages) else normalize_input(messages),
            body=body,
            raise_setup_errors=True,
        )
        return await self._drain(spec)

    async def continue_last_turn(self, *, body: dict[str, Any] | None = None) -> TurnResult:
        """Run a continuation turn (no new input) when the latest message is the assistant's; else skip (the
        result still says ``continuation=True``, as the reference's ``runTurn({continuation: true})`` does)."""
        engine = self._engine
        TurnQueue.check_not_nested(engine, "continue_last_turn")
        await engine.ensure_started()
        if not engine.messages or engine.messages[-1].role != "assistant":
            return TurnResult(request_id="", status="skipped", continuation=True)
        spec = self._spec("programmatic", None, continuation=True, body=body, raise_setup_errors=True)
        return await self._drain(spec)

    async def submit_messages(
        self,
        messages: Any,
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Submission:
        """Accept ``messages`` durably and run their turn later, in order (reference §1.7).

        Returns once the submission is committed to the store (``status="pending"``, ``accepted=True``); its turn
        runs in the background through the normal turn queue, appending the messages only when it starts. A retry
        with the same ``submission_id`` or ``idempotency_key`` returns the existing submission with
        ``accepted=False`` and stores nothing. Never waits on the queue, so it is safe inside a turn, a tool and
        ``on_chat_response``. Raises ConfigurationError for empty input or an id and key naming two submissions.
        """
        return await self._durable.submissions.submit(
            messages, submission_id=submission_id, idempotency_key=idempotency_key, metadata=metadata
        )

    async def inspect_submission(self, submission_id: str) -> Submission | None:
        """The submission's current state, or None when there is none."""
        await self._engine.ensure_started()
        return await self._durable.submissions.inspect(submission_id)

    async def list_submissions(self, status: str | Sequence[str] | None = None, limit: int = 50) -> list[Submission]:
        """Submissions (of a status or statuses), newest first (by acceptance time, then id, as Think lists them);
        ``limit`` (clamped to 1..100, as Think's) keeps the newest."""
        await self._engine.ensure_started()
        return await self._durable.submissions.list_some(status, limit)

    async def cancel_submission(self, submission_id: str, reason: str | None = None) -> bool:
        """Abort a pending or running submission (its status becomes ``aborted``); False if it is already final."""
        await self._engine.ensure_started()
        return await self._durable.submissions.cancel(submission_id, reason)

    async def delete_submission(self, submission_id: str) -> bool:
        """Delete a final submission; pending and running ones are kept (False)."""
        await self._engine.ensure_started()
        return await self._durable.submissions.delete(submission_id)

    async def delete_submissions(
        self, status: str | Sequence[str] | None = None, *, completed_before: float | None = None, limit: int = 100
    ) -> int:
        """Delete final submissions (of ``status``, completed before a unix time); returns how many.

        The earliest finished go first (by completion time, then acceptance time, as Think deletes them); ``limit``
        is clamped to 1..500."""
        await self._engine.ensure_started()
        return await self._durable.submissions.delete_many(status, completed_before, limit)

    async def wait_for_submission(self, submission_id: str, *, timeout_s: float | None = None) -> Submission:
        """Wait until the submission's status is final and return it."""
        await self._engine.ensure_started()
        return await self._durable.submissions.wait(submission_id, timeout_s)

    async def schedule(
        self,
        when: Any,
        prompt: str | Callable[..., Any] | None = None,
        *,
        handler: str | None = None,
        metadata: dict[str, Any] | None = None,
        task_id: str | None = None,
        retry: RetryPolicy | None = None,
        timezone: str | None = None,
    ) -> TaskInfo:
        """Schedule a prompt (a string: it becomes a submission) or a handler (a method of this agent, or its name).

        ``when``: seconds from now or a datetime (once), or a spec (``"every 2 hours"``, ``"every day at 09:00 in
        Europe/Paris"``, ``"0 9 * * mon-fri"``). See ``think_actors.schedule`` for occurrences and DST rules.
        """
        if callable(prompt):
            handler, prompt = getattr(prompt, "__name__", ""), None
        return await self._schedule_binding().schedule(
            when, prompt, handler=handler, metadata=metadata, task_id=task_id, retry=retry, timezone=timezone
        )

    async def list_schedules(self) -> list[TaskInfo]:
        """This agent's scheduled tasks, the next to run first."""
        return await self._schedule_binding().list()

    async def cancel_schedule(self, task_id: str) -> bool:
        """Remove a scheduled task (and a retry it was waiting for); False when there was none."""
        return await self._schedule_binding().cancel(task_id)

    async def run_scheduled_task(self, handler: str, facts: dict[str, Any]) -> bool:
        """Run a handler task's occurrence (the scheduler calls this); False if that occurrence already ran."""
        await self._engine.ensure_started()
        return await run_handler(self, handler, facts)

    def attach_schedules(self, schedules: AgentSchedules) -> None:
        """Keep this agent's scheduled tasks in ``schedules`` (``LocalScheduler.attach`` and the runtime call it)."""
        self._schedules = schedules

    async def sync_schedules(self) -> None:
        """Register the class's ``schedules`` in the schedule store (on Ray, when the actor starts)."""
        if self.schedules or self._schedules is not None:
            await self._schedule_binding().sync_class(self.schedules)

    def _schedule_binding(self) -> AgentSchedules:
        if self._schedules is None:
            if self._engine.runtime is None:
                raise ConfigurationError(
                    f"agent {self.path!r} runs in process without a scheduler: attach it with "
                    "`await ta.LocalScheduler().attach(agent)`, or spawn it on Ray"
                )
            store = open_schedule_store(self.store_url, self.data_dir)  # the store the cluster's scheduler reads
            self._schedules = AgentSchedules(
                store, self.path, type(self).__name__, default_timezone=self.default_timezone
            )
        return self._schedules

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
        await engine.remember_turn_context(engine.last_body, _client_tools(client_tools, None))

    async def add_tool_result(
        self, tool_call_id: str, output: Any = None, *, error: str | None = None, auto_continue: bool = False
    ) -> bool:
        """Answer a client tool's call (or any call still waiting) with ``output``, or ``error``.

        The first answer wins; False when no call waits under that id. With ``auto_continue`` the turn goes on
        after 50 ms of quiet (so a batch coalesces), unless the latest reply is mid-batch: one of its calls has its
        answer and another still waits (then the last answer of the batch continues it).
        """
        return await self._durable.interactions.add_tool_result(
            tool_call_id, output=output, error=error, auto_continue=auto_continue
        )

    async def add_tool_approval(
        self, tool_call_id: str, approved: bool, *, reason: str | None = None, auto_continue: bool = False
    ) -> bool:
        """Approve or deny a call of a ``needs_approval`` tool. Approved, the continuation runs it (through
        ``before_tool_call``, still the outer gate); denied, the model sees the denial and the tool never runs."""
        return await self._durable.interactions.add_tool_approval(
            tool_call_id, approved, reason=reason, auto_continue=auto_continue
        )

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

    def has_pending_interaction(self) -> bool:
        """Whether a call waits for a person (an approval) or a client (a call of a stored client tool, see
        ``set_client_tools``). A server tool's waiting call, or one of a client tool of one ``chat()``, is not:
        nothing can answer it any more, so the next turn or recovery repairs it."""
        return self._durable.interactions.pending()

    async def pending_continuation_id(self) -> str | None:
        """The request id of the auto-continuation that runs now, or that a tool answer armed and will run next
        (the gateway tells a client that asks for the stream this id before it starts); None when there is none."""
        await self._engine.ensure_started()
        return self._durable.interactions.upcoming()

    async def wait_until_stable(self, *, timeout_s: float | None = None) -> None:
        """Wait until no turn runs or waits and no auto-continuation is armed (it may never be, while a call
        waits for an answer: pass a timeout)."""
        await self._durable.interactions.wait_until_stable(timeout_s)

    async def attach(self, request_id: str, *, position: int | None = None) -> AsyncIterator[Any]:
        """Follow a turn that recovery resumed after a crash, by the request id of the interrupted turn (or a
        submission's or an auto-continuation's turn). Raises TurnError for an id with no such turn.

        Without ``position``: the chunks the turn streamed since this process followed it, then the rest. With
        ``position``, how much of the turn's stream the caller already holds (a delta counts its characters, every
        other chunk the log keeps one; ``RemoteStream.position`` counts it): every chunk after it, once, the part
        of the log written before a crash included.
        """
        await self._engine.ensure_started()
        async for chunk in self._durable.recovery.attach(request_id, position):
            yield chunk

    def get_messages(self) -> list[UIMessage]:
        """The active transcript (a copy): every message, whatever compaction shows the model."""
        return list(self._engine.messages)

    async def load_messages(self) -> list[UIMessage]:
        """Start the agent if needed and return its transcript."""
        await self._engine.ensure_started()
        return self.get_messages()

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
    def session(self) -> Session | None:
        """The session ``configure_session`` returned, once the agent has started."""
        return self._engine.session

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
        path = f"{self.path}/{agent_path(kebab_case(agent_class.__name__), name)}"
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

    async def run_as_tool(self, run_id: str, input: Any, *, output: Any = None) -> AsyncIterator[Any]:
        """Run (or re-attach to) the agent-tool run ``run_id``: its chunks, then an ``AgentRunResult``.

        Idempotent by ``run_id``: a finished run returns its stored result without running again; a live run
        is joined (its chunks so far are replayed). Raises NestedTurnError from inside one of this agent's turns.
        """
        async for item in run_as_tool(self._engine, run_id, input, output):
            yield item

    # ------------------------------------------------------------------ internals

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
        )


_CHAT_TERMINAL_KEY = "gateway:chat-terminal"


def _client_tools(schemas: Sequence[ClientToolSchema | dict[str, Any]] | None, executor: Any) -> list[Tool]:
    if not schemas:
        return []
    tools = []
    for schema in schemas:
        parsed = schema if isinstance(schema, ClientToolSchema) else ClientToolSchema.model_validate(schema)
        t = client_tool(parsed)
        if executor is not None:
            t.executor = _client_executor(executor, parsed.name)
        tools.append(t)
    return tools


def _client_executor(executor: Any, name: str) -> Any:
    async def run(value: Any, context: ToolContext) -> Any:
        result = executor(name, value, context.tool_call_id)
        if hasattr(result, "__await__"):
            result = await result
        return result

    return run
