"""Engine: one agent's runtime state (store, transcript, queue, aborts, emitted chunks, runs) and its operations.

``Think`` is the user's face: configuration, hooks, entry points. Everything an agent holds while it runs lives
here, in one object the engine modules work on; they reach the agent only through its public hooks and
configuration attributes, never through ``Think``'s private names.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import logging
import os
from collections.abc import Callable
from typing import Any, TypeVar

from ..chunks import ToolUpdate, parse_chunk
from ..compaction import create_compact_function, estimate_tokens
from ..errors import ConfigurationError, ThinkError, TurnError
from ..extensions.chain import add_context_blocks, chain_of, extension_tools
from ..hooks import ActionAuthorization, ChatErrorContext, ChatResponseResult
from ..identity import Principal
from ..messages import UIMessage, WireModel
from ..models import ModelRequest, TextDelta, count_tokens, resolve_model
from ..observability import Observers
from ..session import Session
from ..store import STORE_ENV, SQLiteStore, Store, open_store, superseded
from ..tools import ClientToolSchema, Tool, ToolContext, class_tools, client_tool
from .abort import AbortRegistry
from .convert import to_model_messages
from .ports import InteractionsPort, RecoveryPort, SubmissionsPort
from .queue import TurnQueue

_F = TypeVar("_F")

__all__ = ["DATA_DIR_ENV", "Engine"]

log = logging.getLogger("think_actors")

DATA_DIR_ENV = "THINK_ACTORS_DATA_DIR"
_TURN_CONTEXT_KEY = "chat:turn-context"  # the last body and client tools (reference: lastBody, lastClientTools)

# Where a chunk emitted now belongs: the ordered sink of the tool call whose hooks or function are running in this
# context, so its chunks, its forwarded child chunks and its output keep the order they happened in.
_tool_sink: contextvars.ContextVar[tuple[Engine, Callable[[Any], None]] | None] = contextvars.ContextVar(
    "think_actors_tool_sink", default=None
)
# Engines starting in this context: what their start-up calls (a hook, recovery's set-up) finds them started.
_starting: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("think_actors_starting", default=frozenset())
# Engines whose on_chat_response runs in this context: a turn started from the hook fires no hook of its own.
_in_response_hook: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "think_actors_in_response_hook", default=frozenset()
)


class Engine:
    """The runtime state of one agent and the operations every turn shares."""

    def __init__(self, agent: Any, *, store: Store | None, hook_defaults: type) -> None:
        self.agent = agent
        self.path: str = agent.path
        self._store = store
        self._hook_defaults = hook_defaults
        self._overridden: dict[str, bool] = {}
        self.session: Session | None = None
        self.messages: list[UIMessage] = []
        self.started = False
        self.queue = TurnQueue()
        self.aborts = AbortRegistry()
        self.emitted: list[Any] = []
        self.steered: list[UIMessage] = []  # messages that join the running turn at its next step
        self.last_client_tools: list[Tool] = []  # the client tools of the latest turn that had any
        self.last_body: dict[str, Any] | None = None  # the custom body of the latest turn that had one
        self.children: dict[str, Any] = {}
        self.agent_runs: dict[str, Any] = {}
        self.agent_tools_running = 0  # this agent's agent-tool children running now (max_concurrent_agent_tools)
        self.turn_stats: dict[str, Any] = {}  # request id -> TurnStats of the turns running their model attempts
        self.runtime: Any = None  # set by the Ray runtime when the agent is hosted in an actor
        self.observers = Observers(type(agent).__name__, agent.name, agent.path)
        self.warned_classifier = False
        self._submissions: SubmissionsPort | None = None
        self._recovery: RecoveryPort | None = None
        self._interactions: InteractionsPort | None = None
        self._start_lock = asyncio.Lock()
        self.journal: Any = None  # the TurnJournal of the turn holding the slot, if it keeps one (``durable``)
        self.principal: Principal | None = None  # who sent the turn holding the slot (``Think.active_principal``)
        self.channel: str | None = None  # where it came from (``Think.active_channel``)
        self.turn_metadata: dict[str, Any] | None = None  # its own facts (``Think.active_turn_metadata``)
        self.action_authorization = ActionAuthorization()  # what authorize_turn allowed the turn's actions

    def attach(self, *, submissions: SubmissionsPort, recovery: RecoveryPort, interactions: InteractionsPort) -> None:
        """Hand the engine the durable features built on it (they run turns through the driver, above this module)."""
        self._submissions = submissions
        self._recovery = recovery
        self._interactions = interactions

    @property
    def submissions(self) -> SubmissionsPort:
        """The submission ledger and its drain (``_turn/submissions.py``)."""
        return self._attached(self._submissions)

    @property
    def recovery(self) -> RecoveryPort:
        """Recovery of turns a crash interrupted (``_turn/recovery.py``)."""
        return self._attached(self._recovery)

    @property
    def interactions(self) -> InteractionsPort:
        """Tool results, approvals and the auto-continuation barrier (``_turn/interactions.py``)."""
        return self._attached(self._interactions)

    @staticmethod
    def _attached(feature: _F | None) -> _F:
        if feature is None:
            raise RuntimeError("the engine has no durable features: build them with _turn.durable.attach_durable")
        return feature

    def resident_reason(self) -> str | None:
        """Why the agent must stay in memory now (a turn, the submission drain, a continuation, a recovery), or
        None when it could hibernate: everything it knows is in its store."""
        if self.queue.busy:
            return "a turn runs or waits"
        if self._submissions is not None and self._submissions.draining():
            return "submissions are draining"
        if self._interactions is not None and not self._interactions.quiet():
            return "an auto-continuation is armed or running"
        if self._recovery is not None and self._recovery.busy():
            return "a turn is being recovered"
        return None

    def stream_ended(self) -> None:
        """A turn's stream ended: an auto-continuation held back by it may fire now."""
        if self._interactions is not None:
            self._interactions.rearm()

    # ------------------------------------------------------------------ store and transcript

    @property
    def store(self) -> Store:
        if self._store is None:
            # The URL chooses the kind of store; data_dir only says where SQLite files go when no URL is set.
            url = self.agent.store_url or os.environ.get(STORE_ENV)
            if url:
                self._store = open_store(url, self.path)
            else:
                data_dir = (
                    self.agent.data_dir or os.environ.get(DATA_DIR_ENV) or os.path.join(os.getcwd(), ".think_actors")
                )
                self._store = SQLiteStore.for_agent(data_dir, self.path)
        return self._store

    async def ensure_started(self) -> None:
        """Start the agent once: load the session and transcript, re-arm, recover interrupted turns.

        Every other caller waits until the whole start-up is done (a call that came while recovery was being
        set up would not find the recovered turn yet); calls made by the start-up itself go through.
        """
        if self.started or id(self) in _starting.get():
            return
        async with self._start_lock:  # concurrent first calls start the agent once
            if not self.started:
                token = _starting.set(_starting.get() | {id(self)})
                try:
                    await self._start()
                finally:
                    _starting.reset(token)

    async def _start(self) -> None:
        session = Session(self.path, self.store)
        configured = await self.agent.configure_session(session)
        self.session = configured if isinstance(configured, Session) else session
        add_context_blocks(self.agent, self.session)
        self._store = self.session.store
        if self.session.compaction is None:  # the shipped compaction: the agent's own model writes the summary
            self.session.on_compaction(create_compact_function(self.summarize))
        self.session.set_default_token_counter(self.count_tokens)
        await self.session.load()
        self.session.attach_history(lambda: self.messages, self.replace)  # an unload rewrites the transcript too
        self.messages = await self.store.load_messages()
        await self._restore_turn_context()
        await self.interactions.restore()
        # Interrupted turns first: a submission whose turn is being recovered stays running.
        interrupted = {record.request_id for record in await self.store.list_turns()}
        await self.submissions.recover(interrupted)
        await self.recovery.start()  # queued before the drain, so recovered turns go first
        await self.submissions.wake_if_pending()
        self.started = True  # last: a caller let in now finds every recovered turn queued

    async def remember_turn_context(self, body: dict[str, Any] | None, client_tools: list[Tool]) -> None:
        """The custom body and client tools later continuations reuse; stored, so a restart keeps them.

        Client tools with an in-process executor (``chat(on_client_tool_call=...)``) live for their turn only.
        """
        schemas = [
            {"name": t.name, "description": t.description, "parameters": t.input_schema}
            for t in client_tools
            if t.executor is None
        ]
        changed = body != self.last_body or [t.name for t in client_tools] != [t.name for t in self.last_client_tools]
        self.last_body = body
        self.last_client_tools = client_tools
        if changed:
            await self.store.set_kv(
                _TURN_CONTEXT_KEY, {"body": body, "client_tools": schemas} if body or schemas else None
            )

    async def _restore_turn_context(self) -> None:
        stored = await self.store.get_kv(_TURN_CONTEXT_KEY)
        if isinstance(stored, dict):
            self.last_body = stored.get("body") or None
            self.last_client_tools = [
                client_tool(ClientToolSchema.model_validate(s)) for s in stored.get("client_tools") or ()
            ]

    async def summarize(self, prompt: str) -> str:
        """Ask the agent's model for a summary (the shipped compaction's ``summarize``)."""
        client, model_id = self.model_client()
        request = ModelRequest(model=model_id, messages=[{"role": "user", "content": prompt}])
        stream = client.stream(request)
        parts: list[str] = []
        try:
            async for event in stream:
                if isinstance(event, TextDelta):
                    parts.append(event.text)
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        return "".join(parts)

    async def count_tokens(self, messages: list[UIMessage], system_prompt: str = "") -> int:
        """Tokens of ``messages`` and a system prompt by the model's own tokenizer (litellm's counter, through the
        model client), or the session's cheap estimate when the model has none."""
        try:
            client, model_id = self.model_client()
        except Exception:
            return estimate_tokens(messages, system_prompt)
        model_messages = to_model_messages(messages)
        if system_prompt:
            model_messages = [{"role": "system", "content": system_prompt}, *model_messages]
        counted = await count_tokens(client, model_id, model_messages) if model_messages else 0
        return counted if counted is not None else estimate_tokens(messages, system_prompt)

    async def append(self, message: UIMessage) -> None:
        if await self.store.append_message(message):
            self.messages.append(message)

    async def upsert(self, message: UIMessage) -> None:
        await self.store.upsert_message(message)
        self.remember(message)

    def remember(self, message: UIMessage) -> None:
        """Put a message the store now holds into the transcript: in place if its id is there, else last."""
        for i in range(len(self.messages) - 1, -1, -1):
            if self.messages[i].id == message.id:
                self.messages[i] = message
                return
        self.messages.append(message)

    async def replace(self, message: UIMessage) -> None:
        await self.store.update_message(message)
        for i, existing in enumerate(self.messages):
            if existing.id == message.id:
                self.messages[i] = message

    async def apply_tool_update(self, update: ToolUpdate) -> None:
        """Apply a tool result to the earlier message holding its call (first write wins)."""
        for message in reversed(self.messages):
            updated = update.apply(message)
            if updated is not None:
                await self.replace(updated)
                return

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()

    async def reload(self) -> None:
        self.messages = await self.store.load_messages()

    # ------------------------------------------------------------------ hooks

    def overrides(self, hook: str) -> bool:
        """Whether the agent's class replaces the default of ``hook`` (cached: checked per turn)."""
        known = self._overridden.get(hook)
        if known is None:
            known = self._overridden[hook] = getattr(type(self.agent), hook) is not getattr(self._hook_defaults, hook)
        return known

    def check_owner(self) -> None:
        """At a hook boundary: raise the ``StoreFencedError`` of this agent's store once a write was refused (a
        newer process owns the agent and finishes its turns), so a superseded process runs no more user hooks."""
        fenced = superseded(self.store)
        if fenced is not None:
            raise fenced

    def superseded_quietly(self, hook: str, request_id: str | None) -> bool:
        """Whether the store was superseded, so ``hook`` is not run for the turn (logged once per turn and hook)."""
        if superseded(self.store) is None:
            return False
        log.info(
            "turn %s of %s ends without %s: a newer process owns the agent and finishes the turn",
            request_id,
            self.path,
            hook,
        )
        return True

    async def report_error(self, error: BaseException, ctx: ChatErrorContext) -> tuple[str, BaseException]:
        """Ask ``on_chat_error`` what to report for a failed turn; publish ``chat:request:failed``.

        Returns the text every caller sees and the error to raise where a caller gets an exception.
        """
        try:
            if self.superseded_quietly("on_chat_error", ctx.request_id):
                reported: Any = error
            else:
                reported = await self.agent.on_chat_error(error, ctx)
        except Exception:
            log.exception("on_chat_error raised; reporting the original error")
            reported = error
        if superseded(self.store) is None:
            await chain_of(self.agent).on_chat_error(self.agent, error, ctx)
        if reported is None:
            reported = error
        text = _error_text(reported)
        if reported is error:
            raised: BaseException = error
        elif isinstance(reported, BaseException):
            raised = reported
        else:
            raised = TurnError(
                text, request_id=ctx.request_id, stage=ctx.stage, messages_persisted=ctx.messages_persisted
            )
        self.publish(
            "chat:request:failed",
            {
                "requestId": ctx.request_id,
                "stage": ctx.stage,
                "messagesPersisted": ctx.messages_persisted,
                "error": text,
                **({"classification": ctx.classification} if ctx.classification else {}),
            },
        )
        return text, raised

    async def classify(self, error: Any, request_id: str) -> str | None:
        """``classify_chat_error`` for a provider error; a raising classifier means no opinion."""
        classifier = self.agent.classify_chat_error
        if not self.overrides("classify_chat_error"):
            if not self.warned_classifier:
                self.warned_classifier = True
                log.warning(
                    "%s: context_overflow.reactive is on but classify_chat_error is not set, so no error is treated "
                    "as a context overflow; define `async def classify_chat_error(self, error, ctx)` returning "
                    "ta.default_context_overflow_classifier(error, ctx)",
                    type(self.agent).__name__,
                )
            return None
        try:
            verdict = classifier(error, ChatErrorContext(request_id=request_id, stage="stream"))
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception:
            log.exception("classify_chat_error raised; treating the error as unclassified")
            return None
        return verdict if isinstance(verdict, str) else None

    async def durable(self) -> None:
        """Write what the running turn's log still buffers: every chunk the turn has streamed is then in the store.

        The actor boundary calls this before a batch of chunks leaves the process, so a caller there never holds
        a chunk that recovery would not know of after a crash (reference §3.7 flushes in batches and accepts the
        gap; a caller of ours that re-attaches at its position gets every chunk once).
        """
        journal = self.journal
        if journal is not None and journal.pending:
            await journal.flush()

    async def fire_response(self, result: ChatResponseResult) -> None:
        """Run ``on_chat_response`` unless this context is already inside this agent's response hook."""
        inside = _in_response_hook.get()
        if id(self) in inside:  # a turn started from the hook does not fire the hook again
            return
        if self.superseded_quietly("on_chat_response", result.request_id):
            return
        token = _in_response_hook.set(inside | {id(self)})
        try:
            try:
                await self.agent.on_chat_response(result)
            except Exception:
                log.exception("on_chat_response raised (ignored)")
            await chain_of(self.agent).on_chat_response(self.agent, result)  # extensions: after the class's
        finally:
            _in_response_hook.reset(token)

    # ------------------------------------------------------------------ the ordered stream

    def emit(self, chunk: Any) -> None:
        """Put a chunk into the running turn's stream, in order; dropped when no turn runs."""
        if isinstance(chunk, dict):
            chunk = parse_chunk(chunk)
        elif not isinstance(chunk, WireModel) or not isinstance(getattr(chunk, "type", None), str):
            raise ConfigurationError(
                f"emit needs a UI chunk (e.g. ta.DataChunk(type='data-progress', data=...)) or its dict form, "
                f"got {type(chunk).__name__}"
            )
        sink = _tool_sink.get()
        if sink is not None and sink[0] is self:
            sink[1](chunk)
        elif self.queue.active_request_id is not None:
            self.emitted.append(chunk)

    def add_child_usage(self, request_id: str, usage: Any) -> None:
        """Count what a child agent (and its own children) used in the tree of turn ``request_id``."""
        stats = self.turn_stats.get(request_id)
        if stats is not None:
            stats.children = stats.children + usage

    def take_emitted(self) -> list[Any]:
        emitted, self.emitted = self.emitted, []
        return emitted

    @staticmethod
    def enter_tool_sink(engine: Engine, sink: Callable[[Any], None]) -> contextvars.Token[Any]:
        return _tool_sink.set((engine, sink))

    @staticmethod
    def leave_tool_sink(token: contextvars.Token[Any]) -> None:
        # An abandoned call's coroutine closed by the garbage collector runs this in whatever context is current then:
        # the context that holds the sink went with the call, and the current one has nothing to undo.
        with contextlib.suppress(ValueError):
            _tool_sink.reset(token)

    def publish(self, event_type: str, payload: dict[str, Any]) -> None:
        self.observers.publish(event_type, payload)

    # ------------------------------------------------------------------ tools

    def collect_tools(self) -> dict[str, Tool]:
        """The turn's tools by name: the class's ``@tool`` methods, ``tools``, ``get_tools()``, session tools."""
        agent = self.agent
        tools = {name: t.bind(agent) for name, t in class_tools(type(agent)).items()}
        extra = [
            *agent.tools,
            *agent.get_tools(),
            *(getattr(self.session, "tools", list)() if self.session is not None else ()),
        ]
        for t in extra:
            tools[t.name] = t.bind(agent)
        extension_tools(agent, tools)
        return tools

    def start_tool(self, tool: Tool, value: Any, context: ToolContext) -> Any:
        """Start one tool execution: its own executor, a Ray task when it asks for resources, else in-process."""
        if tool.executor is not None:
            return tool.executor(value, context)
        if tool.remote is not None and self.runtime is not None:
            return self.runtime.run_task_tool(tool, value, context)
        return tool.call(value, context)

    def model_client(self, model: Any = None) -> tuple[Any, str]:
        model = model if model is not None else self.agent.model
        if model is None:
            raise ConfigurationError(f"{type(self.agent).__name__} has no model: set the class attribute `model`")
        return resolve_model(model)


def _error_text(reported: Any) -> str:
    if isinstance(reported, ThinkError):
        return reported.message or type(reported).__name__
    if isinstance(reported, BaseException):
        return str(reported) or type(reported).__name__
    return str(reported)
