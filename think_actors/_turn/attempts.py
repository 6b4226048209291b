"""A turn's model attempts: one, plus a compact-and-retry per classified context overflow; each streams one reply.

The stream watchdog, aborts and the classifier of errors act here; what an attempt leaves is persisted by ``finish``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

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
    ModelError,
    ModelServerUnavailableError,
    RunLimitError,
    StreamStalledError,
    TurnError,
)
from ..hooks import ChatErrorContext, ChatErrorStage, ChatResponseResult
from ..messages import new_id
from .budget import deadline_timer
from .engine import Engine
from .final_answer import has_content, without_final_answer
from .journal import TurnJournal
from .loop import run_steps
from .overflow import compact
from .pending import approved_calls, run_pending
from .prepare import _parse_output, _StageError, prepare
from .run import TurnRun
from .spec import TurnSpec, _Aborted, _SetupFailed

__all__ = ["attempts"]

log = logging.getLogger("think_actors")

_DELTA_CLASSES: frozenset[Any] = frozenset({TextDeltaChunk, ReasoningDeltaChunk})


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


async def attempts(engine: Engine, spec: TurnSpec, journal: TurnJournal) -> AsyncGenerator[Any, None]:
    """The turn's model attempts: one, plus a compact-and-retry per classified context overflow; the run's deadline
    (``RunLimits.timeout_s``) stops them wherever they are."""
    timer = deadline_timer(spec)
    engine.turn_stats[spec.request_id] = spec.stats
    try:
        async with aclosing(_attempts(engine, spec, journal)) as inner:
            async for chunk in inner:
                yield chunk
    finally:
        if timer is not None:
            timer.cancel()
        engine.turn_stats.pop(spec.request_id, None)
        spec.outcome.tree_usage = spec.stats.tree_usage()
        ticket = spec.run
        if ticket is not None and ticket.run_id == spec.request_id and not journal.resume:
            try:  # the run's first turn ended: so did the run
                await ticket.account.close()
            except Exception:
                log.warning("could not close the account of run %s", ticket.run_id, exc_info=True)


async def _attempts(engine: Engine, spec: TurnSpec, journal: TurnJournal) -> AsyncGenerator[Any, None]:
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
        if run.ticket is not None:
            run.ticket.account.release()  # a request the loop prepaid and did not make (a stop, a pause, an abort)
    if status == "aborted" and signal.failure is not None and not external_cancel:
        status, failure = "error", signal.failure  # the run's deadline: an error of the run, not a cancel

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
    if run.final_answer is not None:  # the final-answer call is the output, not part of the stored reply
        message = without_final_answer(message, run.final_answer)
        persisted = persisted and has_content(message)
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
        if isinstance(failure, RunLimitError):
            outcome.limit = failure.limit  # type: ignore[attr-defined]
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
            tree_usage=spec.stats.tree_usage(),
            limit=outcome.limit,
            principal=spec.principal,
        )
    if external_cancel:
        raise asyncio.CancelledError
