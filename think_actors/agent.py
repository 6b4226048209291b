"""Think: an LLM chat agent that owns its history and its turn queue, with the Think lifecycle hooks.

The class runs without Ray: construct it, then ``chat`` / ``save_messages`` in-process. The Ray runtime hosts
the same class inside an actor. Every hook is an async method with a no-op default; override what you need.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from ._turn.abort import AbortRegistry
from ._turn.convert import default_repair
from ._turn.driver import TurnOutcome, TurnSpec, normalize_input, turn_stream
from ._turn.queue import TurnQueue
from .chunks import ToolUpdate
from .errors import ConfigurationError, ThinkError
from .hooks import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    ErrorClassification,
    StepConfig,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
    TurnResult,
)
from .messages import MessagePart, ToolPart, UIMessage, new_id
from .models import ModelClient
from .session import Session
from .store import LATEST, MemoryStore, SQLiteStore, Store, agent_path, validate_agent_name
from .tools import ClientToolSchema, Tool, ToolContext, client_tool

__all__ = ["ChatStream", "Think", "kebab_case"]

log = logging.getLogger("think_actors")

DEFAULT_INSTRUCTIONS = "You are a helpful assistant."
DATA_DIR_ENV = "THINK_ACTORS_DATA_DIR"


def kebab_case(name: str) -> str:
    """``ResearchLead`` -> ``research-lead`` (how classes appear in agent paths and gateway URLs)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "-", name).lower()


class ChatStream:
    """The chunks of one ``chat()`` turn. ``request_id`` is known before the turn starts, so
    ``agent.cancel_chat(stream.request_id)`` works while the turn still waits in the queue."""

    def __init__(self, agent: Think, spec: TurnSpec):
        self.request_id = spec.request_id
        self._agent = agent
        self._spec = spec
        self._iterator: AsyncIterator[Any] | None = None

    def __aiter__(self) -> AsyncIterator[Any]:
        if self._iterator is None:
            self._iterator = turn_stream(self._agent, self._spec)
        return self._iterator

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    async def aclose(self) -> None:
        """Stop reading: a running turn is aborted (its partial reply is kept)."""
        if self._iterator is not None:
            await self._iterator.aclose()  # type: ignore[attr-defined]
        else:
            self._agent._aborts.remove(self.request_id)

    @property
    def status(self) -> str:
        """``completed``, ``error``, ``aborted`` or ``skipped`` once the stream has ended."""
        return self._spec.outcome.status

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
    """

    model: str | ModelClient | None = None
    instructions: str | None = None
    max_steps: int = 10
    send_reasoning: bool = True
    tools: Sequence[Tool] = ()
    capability_prompt: bool = True
    data_dir: str | None = None

    _class_tools: dict[str, Tool] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        collected: dict[str, Tool] = {}
        for klass in reversed(cls.__mro__):
            for value in vars(klass).values():
                if isinstance(value, Tool):
                    collected[value.name] = value
        cls._class_tools = collected

    def __init__(
        self,
        name: str = "default",
        *,
        path: str | None = None,
        model: str | ModelClient | None = None,
        instructions: str | None = None,
        tools: Sequence[Tool] | None = None,
        max_steps: int | None = None,
        store: Store | None = None,
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
        self._store = store
        self._session: Session | None = None
        self._messages: list[UIMessage] = []
        self._started = False
        self._queue = TurnQueue()
        self._aborts = AbortRegistry()
        self._in_response_hook = False
        self._emitted: list[Any] = []
        self._children: dict[str, Any] = {}
        self._agent_runs: dict[str, Any] = {}
        self._runtime: Any = None  # set by the Ray runtime when hosted in an actor

    # ------------------------------------------------------------------ lifecycle hooks

    async def configure_session(self, session: Session) -> Session | None:
        """Configure the session once, when the agent starts (before its history loads).

        Return the session (or a replacement); None keeps it. Raising fails the agent's start.
        """
        return session

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """Change the turn before its first model request. Turn lock held; once per turn, every entry point.

        Return a TurnConfig to override the model, prompt, messages, tools, limits or sampling; None keeps all.
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
        """Observe a finished step (text, reasoning, tool calls and results, finish reason, usage).

        Turn lock held; once per step, after its tool calls, before the next step. The return value is ignored.
        Raising ends the turn with an error (the partial reply is kept).
        """

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Observe a finished turn after its assistant message is persisted. Turn lock still held.

        Fires for ``completed``, ``error`` and ``aborted`` turns, not for skipped ones. Raising is logged and
        ignored. Start follow-up work with ``submit_messages``; a blocking turn from here raises.
        """

    async def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> Any:
        """Choose the error to report for a failed turn (stages ``turn``, ``stream``, ...).

        Return the error (default) or a replacement; its message is what the caller sees. Raising is logged
        and the original error is reported.
        """
        return error

    async def classify_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> ErrorClassification | None:
        """Classify a provider error that ended a turn's stream; None means no opinion.

        Turn lock held; once per failed stream, with ``ctx.stage == "stream"``. ``"context_overflow"`` is what
        compact-and-retry acts on; the other categories are recorded only. Raising counts as no opinion.
        """
        return None

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
        """Tools added at run time; merged after the class's tools."""
        return ()

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
    ) -> ChatStream:
        """Start a streamed turn: ``async for chunk in agent.chat("hi")``.

        ``message`` is a str, a UIMessage, a list of them, or a function of the transcript evaluated when the
        turn starts. ``client_tools`` are offered for this turn only; with ``on_client_tool_call``
        (``async (tool_name, input, tool_call_id) -> output``) they run inline, else a call ends the turn.
        """
        TurnQueue.check_not_nested(self, "chat")
        if request_id is not None and request_id in self._aborts:
            raise ConfigurationError(f"request id {request_id!r} is already in use by a live turn")
        spec = self._spec(
            "rpc",
            request_id,
            input=message if callable(message) else normalize_input(message),  # bad input fails here, not mid-stream
            body=body,
            output=output,
            client_tools=_client_tools(client_tools, on_client_tool_call),
        )
        return ChatStream(self, spec)

    async def save_messages(self, messages: Any, *, body: dict[str, Any] | None = None) -> TurnResult:
        """Append ``messages`` (or a function of the transcript, evaluated when the turn starts) and run a turn.

        Waits for the turn. Raises NestedTurnError from inside a turn, and setup errors (no model, no messages,
        ``before_turn`` raising); stream errors come back as ``status="error"``.
        """
        TurnQueue.check_not_nested(self, "save_messages")
        spec = self._spec(
            "programmatic",
            None,
            input=messages if callable(messages) else normalize_input(messages),
            body=body,
            raise_setup_errors=True,
        )
        return await self._drain(spec)

    async def continue_last_turn(self, *, body: dict[str, Any] | None = None) -> TurnResult:
        """Run a continuation turn (no new input) when the latest message is the assistant's; else skip."""
        TurnQueue.check_not_nested(self, "continue_last_turn")
        await self._ensure_started()
        if not self._messages or self._messages[-1].role != "assistant":
            return TurnResult(request_id="", status="skipped")
        spec = self._spec("programmatic", None, continuation=True, body=body, raise_setup_errors=True)
        return await self._drain(spec)

    async def add_messages(self, messages: Any, *, parent_id: str | None = LATEST, mode: str = "append") -> None:
        """Write messages without a turn (safe inside a tool). Entries chain under ``parent_id``.

        ``mode="append"`` leaves an existing id alone; ``mode="upsert"`` replaces it in place.
        """
        await self._ensure_started()
        if callable(messages):
            messages = messages(self.get_messages())
        items = normalize_input(messages)
        if mode not in ("append", "upsert"):
            raise ConfigurationError(f"add_messages mode must be 'append' or 'upsert', not {mode!r}")
        parent = parent_id
        for message in items:
            if mode == "upsert" and await self.store.get_message(message.id) is not None:
                await self._replace_message(message)
            else:
                await self.store.append_message(message, parent)
            parent = message.id
        self._messages = await self.store.load_messages()

    def get_messages(self) -> list[UIMessage]:
        """The active transcript (a copy)."""
        return list(self._messages)

    async def load_messages(self) -> list[UIMessage]:
        """Start the agent if needed and return its transcript."""
        await self._ensure_started()
        return self.get_messages()

    def cancel_chat(self, request_id: str, reason: str | None = None) -> bool:
        """Abort a queued or running turn; False when the id is unknown or finished."""
        return self._aborts.cancel(request_id, reason)

    def cancel_all_chats(self, reason: str | None = None) -> None:
        """Abort every queued or running turn (the queue itself is untouched)."""
        self._aborts.cancel_all(reason)

    async def clear(self) -> None:
        """Delete the history. Queued turns are skipped; a running turn is aborted and writes nothing."""
        self._queue.reset()
        self._aborts.cancel_all("cleared")
        await self._ensure_started()
        await self.store.clear_messages()
        self._messages = []

    async def wait_idle(self) -> None:
        """Wait until no turn runs or waits."""
        await self._queue.wait_idle()

    async def close(self) -> None:
        """Abort turns and close the store."""
        self._aborts.cancel_all("closed")
        if self._store is not None:
            await self._store.close()

    def emit(self, chunk: Any) -> None:
        """Put a chunk (e.g. a transient ``data-*`` chunk) into the running turn's stream, from a hook or tool.

        It goes out before the next chunk of the turn. Outside a turn it is dropped.
        """
        if self._queue.active_request_id is not None:
            self._emitted.append(chunk)

    async def sub_agent(self, agent_class: type[Think], name: str, **options: Any) -> Any:
        """A handle to the child agent ``name`` of class ``agent_class``, named under this agent's path.

        The child has its own history, queue and store. On Ray it is its own actor; in-process it is an
        object owned by this agent. The handle offers ``chat`` (async iterator of chunks), ``save_messages``,
        ``get_messages``, ``cancel_chat``, ``clear`` ...
        """
        path = f"{self.path}/{agent_path(kebab_case(agent_class.__name__), name)}"
        if self._runtime is not None:
            return await self._runtime.sub_agent(agent_class, name, path, options)
        from .delegation import LocalAgentHandle

        child = self._children.get(path)
        if child is None:
            store = type(self._store)() if isinstance(self._store, MemoryStore) else None
            options.setdefault("data_dir", self.data_dir)
            child = self._children[path] = LocalAgentHandle(agent_class(name, path=path, store=store, **options))
        return child

    async def run_as_tool(self, run_id: str, input: Any, *, output: Any = None) -> AsyncIterator[Any]:
        """Run (or re-attach to) the agent-tool run ``run_id``: its chunks, then an ``AgentRunResult``.

        Idempotent by ``run_id``: a finished run returns its stored result without running again; a live run
        is joined (its chunks so far are replayed). Raises NestedTurnError from inside one of this agent's turns.
        """
        from ._turn.agent_runs import run_as_tool

        async for item in run_as_tool(self, run_id, input, output):
            yield item

    # ------------------------------------------------------------------ internals used by the engine

    def _take_emitted(self) -> list[Any]:
        emitted, self._emitted = self._emitted, []
        return emitted

    @property
    def store(self) -> Store:
        if self._store is None:
            data_dir = self.data_dir or os.environ.get(DATA_DIR_ENV) or os.path.join(os.getcwd(), ".think_actors")
            self._store = SQLiteStore.for_agent(data_dir, self.path)
        return self._store

    async def _ensure_started(self) -> None:
        if self._started:
            return
        session = Session(self.path, self.store)
        self._session = await self.configure_session(session) or session
        self._store = self._session.store
        self._messages = await self.store.load_messages()
        self._started = True

    def _spec(self, trigger: str, request_id: str | None, **kwargs: Any) -> TurnSpec:
        request_id = request_id or new_id()
        return TurnSpec(
            request_id=request_id,
            trigger=trigger,
            signal=self._aborts.signal(request_id),
            generation=self._queue.generation,
            **kwargs,
        )

    async def _drain(self, spec: TurnSpec) -> TurnResult:
        await self._ensure_started()
        async for _ in turn_stream(self, spec):
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
        )

    def _overrides(self, hook: str) -> bool:
        return getattr(type(self), hook) is not getattr(Think, hook)

    def _collect_tools(self) -> dict[str, Tool]:
        tools = {name: t.bind(self) for name, t in self._class_tools.items()}
        for extra in (*self.tools, *self.get_tools()):
            tools[extra.name] = extra.bind(self)
        return tools

    def _start_tool(self, tool: Tool, value: Any, context: ToolContext) -> Any:
        """Start one tool execution; the runtime overrides where remote tools run."""
        if tool.executor is not None:
            return tool.executor(value, context)
        if tool.remote is not None and self._runtime is not None:
            return self._runtime.run_task_tool(tool, value, context)
        return tool.call(value, context)

    async def _append(self, message: UIMessage) -> None:
        if await self.store.append_message(message):
            self._messages.append(message)

    async def _upsert(self, message: UIMessage) -> None:
        await self.store.upsert_message(message)
        for i in range(len(self._messages) - 1, -1, -1):
            if self._messages[i].id == message.id:
                self._messages[i] = message
                return
        self._messages.append(message)

    async def _replace_message(self, message: UIMessage) -> None:
        await self.store.update_message(message)
        for i, existing in enumerate(self._messages):
            if existing.id == message.id:
                self._messages[i] = message

    async def _apply_tool_update(self, update: ToolUpdate) -> None:
        """Apply a tool result to the earlier message holding its call (first write wins)."""
        for message in reversed(self._messages):
            updated = update.apply(message)
            if updated is not None:
                await self._replace_message(updated)
                return

    async def _report_error(self, error: BaseException, ctx: ChatErrorContext) -> str:
        try:
            reported = await self.on_chat_error(error, ctx)
        except Exception:
            log.exception("on_chat_error raised; reporting the original error")
            reported = error
        if reported is None:
            reported = error
        message = getattr(reported, "message", None) if isinstance(reported, ThinkError) else None
        return message or str(reported) or type(reported).__name__

    async def _classify(self, error: BaseException, request_id: str) -> str | None:
        try:
            return await self.classify_chat_error(error, ChatErrorContext(request_id=request_id, stage="stream"))
        except Exception:
            log.exception("classify_chat_error raised; treating the error as unclassified")
            return None

    async def _fire_response(self, result: ChatResponseResult) -> None:
        if self._in_response_hook:  # a response hook triggered from inside another is not called
            return
        self._in_response_hook = True
        try:
            await self.on_chat_response(result)
        except Exception:
            log.exception("on_chat_response raised (ignored)")
        finally:
            self._in_response_hook = False


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
