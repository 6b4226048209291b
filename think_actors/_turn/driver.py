"""One admitted turn, start to end: input, assembly, ``before_turn``, the step loop, persistence, response hook.

Every entry point (``chat``, ``save_messages``, ``continue_last_turn``, and later submissions and agent-tool
runs) builds a ``TurnSpec`` and iterates ``turn_stream``. Blocking entry points just drain it.

Two rules of the seed shape this module. Every failed turn, whatever the stage, goes through ``on_chat_error``
exactly once, and what it returns is what every caller sees. ``on_chat_response`` runs after the turn slot is
released (so it may start turns), and only for turns that persisted an assistant message; the entry point that
ran the turn still returns after the hook.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from .. import logs
from ..chunks import (
    AbortChunk,
    DataChunk,
    ErrorChunk,
    MessageAccumulator,
    ReasoningDeltaChunk,
    StartChunk,
    TextDeltaChunk,
)
from ..errors import (
    ConfigurationError,
    ModelError,
    ModelServerUnavailableError,
    NoMessagesError,
    StreamStalledError,
    TurnError,
)
from ..hooks import ChatErrorContext, ChatErrorStage, ChatResponseResult, TurnConfig, TurnContext
from ..messages import ToolPart, UIMessage, new_id, user_message
from ..models import Usage
from .abort import AbortSignal
from .assembly import assemble_history, system_prompt
from .convert import ensure_continue_checkpoint
from .engine import Engine
from .journal import TurnJournal
from .loop import run_steps
from .overflow import compact
from .pending import approved_calls, run_pending
from .relay import relayed
from .run import TurnRun, TurnStats

log = logging.getLogger("think_actors")

_DELTA_CLASSES: frozenset[Any] = frozenset({TextDeltaChunk, ReasoningDeltaChunk})


@dataclass(slots=True)
class TurnOutcome:
    status: str = "completed"
    message: UIMessage | None = None
    error: str | None = None
    output: Any = None
    classification: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None


@dataclass(slots=True)
class TurnSpec:
    request_id: str
    trigger: str
    signal: AbortSignal
    generation: int
    input: Any = None  # None: no new input (continuation); list of messages; or a function of the transcript
    continuation: bool = False
    body: dict[str, Any] | None = None
    client_tools: list[Any] = field(default_factory=list)
    raise_setup_errors: bool = False  # blocking callers get the exception; streams get an error chunk
    output: Any = None  # structured output type, unless before_turn sets one
    submission_id: str | None = None
    branch_from: str | None = None  # a regeneration: the id of the message the new reply answers
    # Tool calls recovery runs before the model's turn: the transcript repair leaves them waiting, so a crash
    # before they ran does not leave them stored as "interrupted" (the next recovery runs them again).
    reruns: frozenset[str] = frozenset()
    recover: Any = None  # the TurnRecord of an interrupted turn this turn recovers
    recover_body: Callable[[Engine, TurnSpec], AsyncGenerator[Any, None]] | None = None  # runs it, in the slot
    should_apply: Callable[[], Awaitable[bool]] | None = None  # checked before the input is appended (submissions)
    on_applied: Callable[[], Awaitable[None]] | None = None  # after the input was appended
    # A submission's status: written after the response hook, while the record (marked finished) still exists.
    on_finished: Callable[[TurnOutcome], Awaitable[None]] | None = None
    finalize: Callable[[], Awaitable[None]] | None = None  # what ``finish`` left for after the response hook
    resumed: bool = False  # handed to recovery (a stalled stream, a dead model server), which finishes it
    outcome: TurnOutcome = field(default_factory=TurnOutcome)
    response: ChatResponseResult | None = None  # what on_chat_response gets once the slot is released
    stats: TurnStats = field(default_factory=TurnStats)  # steps, tokens, tool calls: for chat:turn:finish


class _Aborted(Exception):
    pass


class _SetupFailed(Exception):
    """A setup failure already reported through on_chat_error; ``raised`` is what a blocking caller gets."""

    def __init__(self, raised: BaseException):
        self.raised = raised


def normalize_input(value: Any) -> list[UIMessage]:
    """Messages from a str, a UIMessage, a dict in wire form, or a list of those."""
    if value is None:
        return []
    if isinstance(value, str):
        return [user_message(value)]
    if isinstance(value, UIMessage):
        return [value]
    if isinstance(value, dict):
        try:
            return [UIMessage.model_validate(value)]
        except ValidationError as err:
            raise ConfigurationError(
                f"invalid message: {err.error_count()} problem(s): {err.errors()[0]['msg']} "
                f"at {'.'.join(str(p) for p in err.errors()[0]['loc'])}"
            ) from None
    if isinstance(value, list | tuple):
        return [m for item in value for m in normalize_input(item)]
    raise ConfigurationError(f"cannot make messages of {type(value).__name__}: pass str, UIMessage or a list")


async def _resolve_input(engine: Engine, value: Any) -> list[UIMessage]:
    if callable(value):
        value = value(list(engine.messages))
        if inspect.isawaitable(value):
            value = await value
    return normalize_input(value)


def _output_format(output: Any) -> dict[str, Any] | None:
    if output is None:
        return None
    if isinstance(output, type) and issubclass(output, BaseModel):
        return {
            "type": "json_schema",
            "json_schema": {"name": output.__name__, "schema": output.model_json_schema(), "strict": False},
        }
    if isinstance(output, dict):
        return output
    raise ConfigurationError("TurnConfig.output must be a pydantic model class or a response_format dict")


async def prepare(engine: Engine, spec: TurnSpec) -> TurnRun:
    """Assemble the turn and apply ``before_turn``; raises on setup failures (stage ``turn``)."""
    agent = engine.agent
    try:
        repaired, model_messages = await assemble_history(engine, spec.request_id, spec.branch_from, spec.reruns)
    except Exception as err:
        raise _StageError("transcript", err) from err
    if not model_messages:
        raise NoMessagesError(
            "No messages to send to the model: the transcript is empty",
            stage="turn",
            messages_persisted=True,
            request_id=spec.request_id,
        )
    tools = engine.collect_tools()
    if spec.continuation:
        # A continuation (after a client tool's result, an approval, a recovery) sees the custom body of the turn
        # it continues and offers the stored client tools (set_client_tools), so the model can call them again
        # (reference: lastBody, lastClientTools). A new turn sets the body to what it brought; the client tools
        # it brought are for it only (reference: chat() forwards them per turn), so the stored ones stay.
        spec.body = spec.body or (dict(engine.last_body) if engine.last_body else None)
        spec.client_tools = spec.client_tools or list(engine.last_client_tools)
    else:
        await engine.remember_turn_context(dict(spec.body) if spec.body else None, list(engine.last_client_tools))
    for client_tool in spec.client_tools:  # client tools merge last: they override same-named server tools
        tools[client_tool.name] = client_tool
    model = agent.model
    system = await system_prompt(engine, agent.get_system_prompt(tools))
    ctx = TurnContext(
        request_id=spec.request_id,
        system=system,
        messages=model_messages,
        tools=dict(tools),
        model=model,
        continuation=spec.continuation,
        body=spec.body,
        trigger=spec.trigger,
    )
    cfg = await agent.before_turn(ctx) or TurnConfig()
    if not isinstance(cfg, TurnConfig):
        raise ConfigurationError(
            f"before_turn must return a TurnConfig or None, not {type(cfg).__name__}", request_id=spec.request_id
        )
    if cfg.model is None and model is None:
        raise ConfigurationError(
            f"{type(agent).__name__} has no model: set the class attribute `model` or return one from before_turn",
            request_id=spec.request_id,
        )
    if cfg.transform is not None and not callable(cfg.transform):
        raise ConfigurationError(
            "TurnConfig.transform must be a function of the model's stream (an async generator function), "
            f"not {type(cfg.transform).__name__}",
            request_id=spec.request_id,
        )
    if cfg.tools:
        for extra in cfg.tools:
            tools[extra.name] = extra.bind(agent)
    if cfg.instructions is not None or cfg.system is not None:
        system = cfg.instructions if cfg.instructions is not None else cfg.system  # type: ignore[assignment]
    elif cfg.tools or cfg.active_tools is not None:
        offered = {n: t for n, t in tools.items() if cfg.active_tools is None or n in cfg.active_tools}
        system = await system_prompt(engine, agent.get_system_prompt(offered))
    params = {
        k: v
        for k, v in (
            ("temperature", cfg.temperature),
            ("top_p", cfg.top_p),
            ("top_k", cfg.top_k),
            ("presence_penalty", cfg.presence_penalty),
            ("frequency_penalty", cfg.frequency_penalty),
            ("stop", list(cfg.stop_sequences) if cfg.stop_sequences else None),
            ("seed", cfg.seed),
            ("max_tokens", cfg.max_output_tokens),
        )
        if v is not None
    }
    messages = ensure_continue_checkpoint(cfg.messages if cfg.messages is not None else model_messages)
    return TurnRun(
        engine=engine,
        request_id=spec.request_id,
        signal=spec.signal,
        model=cfg.model or model,
        system=system,
        messages=messages,
        tools=tools,
        active_tools=cfg.active_tools,
        tool_choice=cfg.tool_choice,
        max_steps=cfg.max_steps if cfg.max_steps is not None else agent.max_steps,
        stop_when=tuple(cfg.stop_when or ()),
        send_reasoning=cfg.send_reasoning if cfg.send_reasoning is not None else agent.send_reasoning,
        params=params,
        response_format=_output_format(cfg.output or spec.output),
        output_type=cfg.output or spec.output,
        headers=cfg.headers,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        provider_options=dict(cfg.provider_options or {}),
        repair_tool_call=cfg.repair_tool_call,
        continuation=spec.continuation,
        on_chunk=agent.on_chunk if engine.overrides("on_chunk") else None,
        tool_call_ids={p.tool_call_id for m in repaired for p in m.parts if isinstance(p, ToolPart)},
        context_overflow=cfg.context_overflow if cfg.context_overflow is not None else agent.context_overflow,
        baseline=len(messages),
        stall_timeout_s=(
            cfg.chat_stream_stall_timeout_s
            if cfg.chat_stream_stall_timeout_s is not None
            else agent.chat_stream_stall_timeout_s
        ),
        stats=spec.stats,
        transform=cfg.transform,
    )


class _StageError(Exception):
    """A setup failure at a stage other than ``turn``."""

    def __init__(self, stage: ChatErrorStage, error: BaseException):
        super().__init__(str(error))
        self.stage: ChatErrorStage = stage
        self.error = error


def _parse_output(run: TurnRun) -> Any:
    text = run.steps[-1].text if run.steps else ""
    output_type = run.output_type
    if isinstance(output_type, type) and issubclass(output_type, BaseModel):
        return output_type.model_validate_json(text)
    return json.loads(text)


async def turn_stream(engine: Engine, spec: TurnSpec) -> AsyncIterator[Any]:
    """The chunks of one turn, from the moment it holds the agent's turn slot to its response hook."""
    outcome = spec.outcome
    started = time.monotonic()
    admitted = False
    log_context = logs.bind(engine.path, spec.request_id)  # every record logged during the turn names it
    try:
        try:
            async with engine.queue.slot(engine, spec.request_id):
                admitted = True
                # Chunks emitted after an earlier turn's stream ended belong to no stream.
                engine.take_emitted()
                await engine.ensure_started()  # chat() streams come here without a blocking entry point's start
                engine.publish(
                    "chat:turn:start",
                    {
                        "requestId": spec.request_id,
                        "trigger": spec.trigger,
                        "admission": "queue",
                        "continuation": spec.continuation,
                        "generation": spec.generation,
                    },
                )
                # Closing here (not at garbage collection) finalizes the turn inside its slot.
                async with aclosing(relayed(engine, spec, _turn_body(engine, spec))) as body:
                    async for chunk in body:
                        yield chunk
                if outcome.message is not None:
                    await _compact_between_turns(engine, spec.request_id)
        finally:
            engine.aborts.remove(spec.request_id, spec.signal)
    except _SetupFailed as failed:
        raise failed.raised from None
    finally:
        engine.stream_ended()
        # The slot is released: the next queued turn may start while the response hook runs.
        try:
            if spec.response is not None:
                await engine.fire_response(spec.response)
        finally:
            if spec.finalize is not None:
                await spec.finalize()
        if admitted:
            engine.publish(
                "chat:turn:finish",
                {
                    "requestId": spec.request_id,
                    "trigger": spec.trigger,
                    "admission": "queue",
                    "continuation": spec.continuation,
                    "generation": spec.generation,
                    "status": outcome.status,
                    "durationMs": round((time.monotonic() - started) * 1000, 3),
                    **({"error": outcome.error} if outcome.error else {}),
                    **spec.stats.payload(started),
                },
            )
        logs.restore(log_context)


async def _compact_between_turns(engine: Engine, request_id: str) -> None:
    """``compact_after``: after a turn appended its reply, compact when the history passed the threshold.

    Still inside the slot, so the next turn already sees the summary. Failures are the session's to report.
    """
    session = engine.session
    if session is None or session.compact_threshold is None:
        return
    system = await system_prompt(engine, engine.agent.get_system_prompt(engine.collect_tools()))
    if await session.maybe_compact(engine.messages, system) is not None:
        engine.publish("chat:context:compacted", {"reason": "threshold", "shortened": True, "requestId": request_id})


async def _fail_setup(
    engine: Engine, spec: TurnSpec, err: BaseException, stage: ChatErrorStage, persisted: bool
) -> AsyncGenerator[Any, None]:
    """Report a failure before the model ran: an error chunk for streams, the reported error for blocking callers."""
    outcome = spec.outcome
    outcome.status = "error"
    text, raised = await engine.report_error(
        err, ChatErrorContext(request_id=spec.request_id, stage=stage, messages_persisted=persisted)
    )
    outcome.error = text
    if spec.raise_setup_errors:
        raise _SetupFailed(raised)
    yield ErrorChunk(error_text=text)


async def _turn_body(engine: Engine, spec: TurnSpec) -> AsyncGenerator[Any, None]:
    outcome = spec.outcome
    if engine.queue.generation != spec.generation:
        outcome.status = "skipped"
        return
    if spec.recover is not None:
        # Recovery builds on this module, so it hands over the body of its turns rather than being imported here.
        if spec.recover_body is None:
            raise TypeError("a recovery turn's TurnSpec needs recover_body (recovery.recover_turn)")
        async with aclosing(spec.recover_body(engine, spec)) as recovering:
            async for chunk in recovering:
                yield chunk
        return
    messages: list[UIMessage] = []
    if spec.input is not None:
        try:
            messages = await _resolve_input(engine, spec.input)
        except Exception as err:
            async for chunk in _fail_setup(engine, spec, err, "persist", False):
                yield chunk
            return
        if engine.queue.generation != spec.generation:
            outcome.status = "skipped"
            return
        if spec.should_apply is not None and not await spec.should_apply():
            outcome.status = "aborted"  # e.g. a submission cancelled while it waited for the slot: nothing appended
            return
    journal = TurnJournal.new(
        engine,
        request_id=spec.request_id,
        trigger=spec.trigger,
        continuation=spec.continuation,
        input_ids=[m.id for m in messages],
        message_id=new_id(),
        submission_id=spec.submission_id,
        data={"body": spec.body} if spec.body else {},
    )
    engine.journal = journal
    try:
        try:
            # The record goes in with the input: a crash after this point leaves a turn recovery can finish.
            await journal.begin(messages)
        except Exception as err:
            async for chunk in _fail_setup(engine, spec, err, "persist", False):
                yield chunk
            return
        if messages and spec.on_applied is not None:
            await spec.on_applied()
        if spec.signal.aborted:  # a pre-aborted turn keeps its input but runs no model
            outcome.status = "aborted"
            return
        # Closed at once when the consumer stops: the attempt is finalized now and still persists its partial.
        async with aclosing(attempts(engine, spec, journal)) as inner:
            async for chunk in inner:
                yield chunk
    finally:
        # The turn ended, whatever its status: only a crash leaves its record for recovery.
        await finish(spec, journal)


async def finish(spec: TurnSpec, journal: TurnJournal) -> None:
    """End a turn durably, inside its slot: its reply stored, its record removed.

    A turn stopped to be resumed keeps its record and goes to recovery, which finishes it (and its submission).
    A turn with ``on_finished`` (a submission's) keeps its record, marked finished with the outcome, until
    ``on_finished`` has run after the response hook (Think writes a submission's final status after it): a crash
    in between leaves a finished turn for the restart to settle (``Recovery.start``), never one to run again.
    """
    engine = journal.engine
    if engine.journal is journal:
        engine.journal = None
    if journal.reply is not None:
        if engine.queue.generation != spec.generation:
            journal.reply = None  # the conversation was cleared under the turn: it writes nothing
        elif engine.steered or journal.resume or spec.on_finished is not None:
            await journal.persist_reply()  # what follows depends on the reply being stored
    if engine.steered:
        # Steered in after this turn's last step: they run as the next turn instead of being lost.
        leftover, engine.steered = engine.steered, []
        try:
            await engine.agent.submit_messages(leftover)
        except Exception:
            log.exception("could not queue the messages steered into turn %s", spec.request_id)
    if journal.resume:
        spec.resumed = True
        engine.recovery.schedule(journal.record)
        return
    on_finished = spec.on_finished
    if on_finished is None:
        await journal.end()
        return
    record = journal.record
    record.status = "finished"
    record.data["outcome"] = {"status": spec.outcome.status, "error": spec.outcome.error}
    record.updated_at = time.time()
    await engine.store.put_turn(record)

    async def finalize() -> None:
        try:
            await on_finished(spec.outcome)
        except Exception:
            log.exception("recording the end of turn %s failed", spec.request_id)
        await journal.end()

    spec.finalize = finalize


async def attempts(engine: Engine, spec: TurnSpec, journal: TurnJournal) -> AsyncGenerator[Any, None]:
    """The turn's model attempts: one, plus a compact-and-retry per classified context overflow."""
    outcome = spec.outcome
    attempt = 0
    started = True
    message_id = journal.message_id or new_id()
    if spec.continuation:
        # Calls a person approved run first, through the hooks; their results settle the earlier message.
        holder, approved = approved_calls(engine.messages)
        if holder is not None and approved:
            try:
                run = await prepare(engine, spec)
            except Exception as err:
                async for chunk in _fail_setup(engine, spec, err, "turn", True):
                    yield chunk
                return
            # The stream starts before the calls' outputs (reference), and the model's attempt does not start it again.
            yield StartChunk(message_id=None)
            started = False
            async with aclosing(run_pending(engine, run, holder, approved)) as running:
                async for chunk in running:
                    if journal.add(chunk):  # the stream's chunks are logged before anyone sees them
                        await journal.flush()
                    yield chunk
    while True:
        try:
            run = await prepare(engine, spec)
        except _StageError as err:
            async for chunk in _fail_setup(engine, spec, err.error, err.stage, True):
                yield chunk
            return
        except Exception as err:
            async for chunk in _fail_setup(engine, spec, err, "turn", True):
                yield chunk
            return
        attempt_result = _Attempt(message_id=message_id)
        inner = _stream(engine, spec, run, attempt_result, journal, first=started)
        started = False
        try:
            async for chunk in inner:
                yield chunk
        finally:
            await inner.aclose()
        if attempt_result.resume:
            journal.resume = True
            return
        overflow = attempt_result.overflow
        if overflow is None:
            return
        # A classified context overflow: the failed attempt's partial reply was discarded, nothing reported yet.
        config = run.context_overflow
        assert config is not None
        shortened = False
        if attempt < config.max_retries and not spec.signal.aborted and engine.session is not None:
            attempt += 1
            compacted = await compact(engine, "reactive", spec.request_id)
            shortened = compacted is not None
            engine.publish(
                "chat:context:compacted",
                {"reason": "reactive", "shortened": shortened, "requestId": spec.request_id, "attempt": attempt},
            )
        if spec.signal.aborted:
            outcome.status = "aborted"
            yield AbortChunk(reason=spec.signal.reason)
            return
        if shortened:
            message_id = new_id()
            await journal.restart(message_id)
            yield DataChunk(
                type="data-context-compacted",
                data={"reason": "reactive", "attempt": attempt, "discarded": attempt_result.message_id},
                transient=True,
            )
            continue
        text, _ = await engine.report_error(
            overflow,
            ChatErrorContext(
                request_id=spec.request_id,
                stage="stream",
                messages_persisted=True,
                classification="context_overflow",
            ),
        )
        outcome.status = "error"
        outcome.error = text
        outcome.classification = "context_overflow"
        yield ErrorChunk(error_text=text)
        return


@dataclass(slots=True)
class _Attempt:
    message_id: str
    overflow: BaseException | None = None
    resume: bool = False  # stopped to be resumed (a stalled stream, a dead model server)
    stopped: str = ""


def _classifier_argument(err: ModelError) -> Any:
    # The seed: a provider error that arrived as an error part of the stream reaches the classifier as its text.
    return (err.message or str(err)) if err.in_stream else err


async def _stream(
    engine: Engine, spec: TurnSpec, run: TurnRun, attempt: _Attempt, journal: TurnJournal, *, first: bool
) -> AsyncGenerator[Any, None]:
    outcome = spec.outcome
    signal = spec.signal
    acc = MessageAccumulator(attempt.message_id or new_id(), continuation=spec.continuation)
    run.journal = journal
    steps = run_steps(run)
    status = "completed"
    failure: BaseException | None = None
    external_cancel = False
    consumer_gone = False
    finished = False
    try:
        start = StartChunk(message_id=None if spec.continuation else acc.message_id)
        acc.apply(start)
        if first:  # a retried attempt continues the stream its caller already reads
            yield start
        stall_s = run.stall_timeout_s
        next_chunk, apply, add, counted = steps.__anext__, acc.apply, journal.add, journal.counted  # per chunk
        # The hot path: a delta of the part the previous chunk was a delta of goes straight into the message's text
        # and the log's open run (what ``apply`` and ``add`` would do, without their dispatch).
        run_class: Any = None
        run_id = ""
        message_text: list[str] = []
        log_text: list[str] | None = None
        while True:
            try:
                if stall_s:
                    # The watchdog, on the gap between chunks (tool time included, as in the reference): the clock
                    # restarts with every chunk, so a slow but steady stream never fires it.
                    async with asyncio.timeout(stall_s):
                        chunk = await next_chunk()
                else:
                    chunk = await next_chunk()
            except StopAsyncIteration:
                break
            except TimeoutError:
                if signal.aborted:
                    raise _Aborted from None
                raise StreamStalledError(
                    f"the chat stream sent nothing for {stall_s} s (chat_stream_stall_timeout_s)",
                    request_id=spec.request_id,
                    retryable=True,
                ) from None
            if (
                chunk.__class__ is run_class
                and chunk.id == run_id
                and journal.run_text is log_text
                and not engine.emitted
            ):
                delta = chunk.delta
                message_text.append(delta)
                log_text.append(delta)  # type: ignore[union-attr]
                if signal.aborted:
                    raise _Aborted
                if counted():
                    await journal.flush()
                yield chunk
                if signal.aborted:
                    raise _Aborted
                continue
            run_class = None
            if engine.emitted:  # chunks a hook put into the stream go out before the next chunk, in order
                for extra in engine.take_emitted():
                    apply(extra)
                    if add(extra):
                        await journal.flush()
                    yield extra
            update = apply(chunk)
            if update is not None:
                await engine.apply_tool_update(update)
            if signal.aborted:
                raise _Aborted
            finished = chunk.type == "finish"
            # Logged before the caller sees it: what was reported survives a crash of this process.
            if add(chunk):
                await journal.flush()
            elif chunk.__class__ in _DELTA_CLASSES:
                log_text = journal.run_of(chunk)
                text = acc.open_text(chunk.id) if log_text is not None else None
                if text is not None:
                    run_class, run_id, message_text = chunk.__class__, chunk.id, text
            yield chunk
            if signal.aborted and not finished:
                raise _Aborted
        if signal.aborted and not finished:  # aborted before the loop could make a request
            raise _Aborted
    except _Aborted:
        status = "aborted"
    except asyncio.CancelledError:
        status = "aborted"
        external_cancel = not signal.absorb_cancel()
    except GeneratorExit:
        consumer_gone = True
        if not finished:
            status = "aborted"
    except Exception as err:  # provider errors, hooks that raised, a consumer's athrow: all are stream failures
        status = "error"
        failure = err
    finally:
        await steps.aclose()

    if isinstance(failure, StreamStalledError | ModelServerUnavailableError) and not signal.aborted:
        # Stopped, not failed: the partial is kept and the same bounded recovery as after a crash resumes it.
        if isinstance(failure, StreamStalledError):
            engine.publish(
                "chat:stream:stalled",
                {"requestId": spec.request_id, "timeoutMs": round((run.stall_timeout_s or 0) * 1000)},
            )
        await journal.flush()
        attempt.resume = True
        attempt.stopped = str(failure)
        status, failure = "aborted", None
        signal.reason = f"{attempt.stopped}; the turn is resumed as {spec.request_id!r} (attach to follow it)"
    if (
        isinstance(failure, ModelError)
        and run.context_overflow is not None
        and run.context_overflow.reactive
        and not spec.continuation
        and await engine.classify(_classifier_argument(failure), spec.request_id) == "context_overflow"
    ):
        if signal.aborted:  # the classifier (or anyone) cancelled the turn: an abort, not a recovery
            status, failure = "aborted", None
        else:
            attempt.overflow = failure  # discarded: never persisted, never reported as this attempt's end
            return
    can_yield = not consumer_gone and not external_cancel
    if status == "aborted" and can_yield:
        yield AbortChunk(reason=signal.reason)

    current = engine.queue.generation == spec.generation
    message = acc.message()
    persisted = current and acc.has_content
    if persisted:
        # Persist before releasing the slot, so the next turn sees this reply, and before on_chat_error (seed).
        if spec.branch_from is not None:
            # A regeneration: the reply is a sibling of the old one, under the message it answers (the old reply
            # stays in the tree); the active path now follows it.
            if not await engine.store.update_message(message):
                await engine.store.append_message(message, spec.branch_from)
            await engine.reload()
        elif status == "completed" and run.output_type is None:
            # Nothing before the turn's end reads the stored reply (no error hook runs for a completed turn), so
            # it is written with the removal of the turn record, in one write (``finish``).
            journal.reply = message
        else:
            await engine.upsert(message)
        outcome.message = message
    error_text: str | None = None
    if status == "completed" and run.output_type is not None:
        try:
            outcome.output = _parse_output(run)
        except (ValidationError, ValueError) as err:
            status = "error"
            failure = TurnError(f"The model's answer does not match the output schema: {err}", stage="stream")
    if failure is not None:
        if not isinstance(failure, ModelError | TurnError):
            log.error("turn %s failed while streaming", spec.request_id, exc_info=failure)
        error_text, _ = await engine.report_error(
            failure, ChatErrorContext(request_id=spec.request_id, stage="stream", messages_persisted=True)
        )
        engine.publish("message:error", {"requestId": spec.request_id, "error": error_text})
        if can_yield:
            yield ErrorChunk(error_text=error_text)
    # A turn whose conversation was cleared under it wrote nothing: for every caller it was skipped.
    outcome.status = "skipped" if not current and status == "completed" else status
    outcome.error = error_text
    outcome.usage = run.usage
    outcome.cost_usd = run.cost_usd
    # The seed: a turn that fails before any part of the reply exists is handled by on_chat_error alone.
    # A turn being resumed fires no response hook now: its continuation does.
    if current and (status != "error" or persisted) and not attempt.resume:
        spec.response = ChatResponseResult(
            request_id=spec.request_id,
            message=message,
            status=status,  # type: ignore[arg-type]
            continuation=spec.continuation,
            error=error_text,
            usage=run.usage,
            cost_usd=run.cost_usd,
        )
    if external_cancel:
        raise asyncio.CancelledError
