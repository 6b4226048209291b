"""Recovery after a crash (reference §2.8, plus an effect ledger the reference does not have).

A turn record left in the store means the process died during that turn. When the agent starts again it
queues one recovery turn per record (same request id, so a caller can re-attach). The recovery turn rebuilds the
partial reply from the chunk log, settles every tool call the crash left open — a call the effect ledger says
finished gets its recorded result (never re-run); a call that started and never finished is in doubt and goes to
``reconcile_tool_call``; a call that never started runs now — and then continues the reply (``continue``) or runs
the unanswered user turn again (``retry``), within the budget of ``ChatRecoveryConfig``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from .. import tracing
from ..chunks import ErrorChunk, MessageAccumulator
from ..errors import TurnError
from ..hooks import (
    ChatErrorContext,
    ChatRecoveryConfig,
    ChatRecoveryContext,
    Fail,
    RecoveryDecision,
    Rerun,
    Substitute,
    ToolReconcileContext,
)
from ..identity import Principal
from ..messages import SETTLED_STATES, ReasoningPart, StepStartPart, TextPart, ToolPart, UIMessage, new_id
from ..store.records import TurnRecord
from ..tools import _jsonable
from .agent_runs import RUN_PREFIX, record_recovered
from .budget import reopen_run
from .driver import TurnOutcome, TurnSpec, attempts, finish, prepare, recovered_trace, turn_stream
from .engine import Engine
from .final_answer import final_answer_name, has_content, without_final_answer
from .journal import TurnJournal, delta_from, effect_key, last_segment, parse_log, replay, units
from .pending import run_pending, settle_part, settled
from .ports import LiveTurn
from .spec import resolve_turn_facts

log = logging.getLogger("think_actors")

UNKNOWN_OUTCOME = (
    "The outcome of this tool call is unknown: the agent restarted while it ran, and it was not run again "
    "because the tool is not declared idempotent."
)
MAX_KEPT_RESULTS = 100
_NOT_PROGRESS = frozenset({"start", "start-step", "finish-step", "finish"})


class Recovery:
    """Finds interrupted turns at start, runs their recovery turns, and lets callers re-attach to them."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.live: dict[str, LiveTurn] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def config(self) -> ChatRecoveryConfig:
        config = getattr(self.engine.agent, "chat_recovery", None)
        return config if isinstance(config, ChatRecoveryConfig) else ChatRecoveryConfig()

    async def start(self) -> None:
        """Queue a recovery turn for every turn record a crash left behind (oldest first).

        A record marked finished is a turn that had ended (its reply stored) when the crash came, while its
        response hook ran: only its submission's status is left to write, and nothing runs again (the hook
        included: it had its one chance).
        """
        engine = self.engine
        for record in await engine.store.list_turns():
            if record.status != "finished":
                self.schedule(record)
                continue
            if record.submission_id is not None:
                outcome = record.data.get("outcome") or {}
                finished = TurnOutcome(status=str(outcome.get("status", "completed")), error=outcome.get("error"))
                await engine.submissions.finisher(record.submission_id)(finished)
            await engine.store.delete_turn(record.request_id)

    def follow(self, request_id: str) -> LiveTurn:
        """Keep the chunks of a background turn (an auto-continuation, a submission) so callers can attach."""
        self._prune()
        live = self.live[request_id] = LiveTurn(replay=[])  # followed from its first chunk
        live.attempts = 1
        return live

    def _prune(self) -> None:
        """Keep the chunks of at most ``MAX_KEPT_RESULTS`` finished turns (the oldest go first)."""
        done = [request_id for request_id, turn in self.live.items() if turn.done]
        for request_id in done[: max(0, len(done) - MAX_KEPT_RESULTS)]:
            self.live.pop(request_id, None)

    def schedule(self, record: TurnRecord) -> None:
        """Queue the recovery turn of ``record`` (after a crash, a stalled stream or a dead model server)."""
        live = self.live.get(record.request_id)
        if live is None or live.done:  # a turn resumed again keeps one stream for the callers that follow it
            live = self.live[record.request_id] = LiveTurn()
        live.attempts += 1
        task = asyncio.get_running_loop().create_task(self._drive(record, live), context=contextvars.Context())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def busy(self) -> bool:
        """Whether a recovery turn is scheduled or running."""
        return bool(self._tasks)

    async def idle(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _drive(self, record: TurnRecord, live: LiveTurn) -> None:
        engine = self.engine
        spec = TurnSpec(
            request_id=record.request_id,
            trigger="recovery",
            signal=engine.aborts.signal(record.request_id),
            generation=engine.queue.generation,
            continuation=True,
            body=record.data.get("body"),
            submission_id=record.submission_id,
            recover=record,
            recover_body=recover_turn,
            on_finished=engine.submissions.finisher(record.submission_id) if record.submission_id else None,
            principal=Principal.from_stamp(record.data.get("principal")),
            channel=record.data.get("channel") if isinstance(record.data.get("channel"), str) else None,
            metadata=record.data.get("metadata") if isinstance(record.data.get("metadata"), dict) else None,
            final_answer=bool(record.data.get("final_answer")),
        )
        resolve_turn_facts(spec, engine.messages)  # a record from before it kept them: the conversation's
        try:
            spec.run = await reopen_run(engine, record.data)
            with tracing.operation(
                f"recover {type(engine.agent).__name__}",
                {tracing.names.AGENT_PATH: engine.path, tracing.names.REQUEST_ID: record.request_id},
                links=recovered_trace(record),  # the recovery's own span too, so either one leads to the crash
            ):
                async for chunk in turn_stream(engine, spec):
                    live.chunks.append(chunk)
                    live.changed.set()
        except Exception:
            log.exception("recovery of turn %s failed", record.request_id)
        finally:
            if record.request_id.startswith(RUN_PREFIX) and not spec.resumed:
                try:  # kept before its followers hear of the end: they read it
                    await record_recovered(
                        engine, record.request_id, record, spec.outcome, spec.outcome.output is not None
                    )
                except Exception:
                    log.exception("could not keep the result of agent-tool run %s", record.request_id)
            live.end(spec.outcome.status)
            self._prune()
        if record.submission_id is not None:
            engine.submissions.wake()  # the drain goes on with what was accepted after it

    async def attach(self, request_id: str, position: int | None = None) -> AsyncIterator[Any]:
        """The chunks of a turn this process follows (a recovered turn, a submission, an auto-continuation).

        Without ``position``: what it streamed since this process began to follow it, then the rest as it comes.
        With ``position`` (the units, ``journal.units``, of the turn's stream a caller already holds): everything
        after that, the part of the log written before this process followed it included, so a caller that
        re-attaches with what it counted gets every chunk of the reply once.
        """
        live = self.live.get(request_id)
        if live is None:
            raise TurnError(
                f"no recovered turn {request_id!r} to attach to: it finished long ago or was never interrupted",
                request_id=request_id,
            )
        seen = 0
        if position is not None:
            while live.replay is None and not live.done:  # the recovery turn has not read the log yet
                live.changed.clear()
                await live.changed.wait()
            for chunk in replay(live.replay or (), position):
                yield chunk
            seen = live.base
        sent = 0
        while True:
            while sent < len(live.chunks):
                chunk = live.chunks[sent]
                sent += 1
                if position is not None and seen < position:
                    size = units(chunk)
                    seen += size
                    if seen <= position:
                        continue  # the caller has it
                    if size and seen - size < position:  # a delta the caller holds the beginning of
                        chunk = delta_from(chunk, size - (seen - position))
                yield chunk
            if live.done:
                return
            live.changed.clear()
            if sent < len(live.chunks) or live.done:
                continue
            await live.changed.wait()


async def recover_turn(engine: Engine, spec: Any) -> AsyncGenerator[Any, None]:
    """The body of a recovery turn (inside the turn slot): settle, decide, then continue or retry."""
    record: TurnRecord = spec.recover
    store = engine.store
    agent = engine.agent
    recovery = engine.recovery
    assert isinstance(recovery, Recovery), "recover_turn runs the turns of recovery.Recovery"
    config = recovery.config()
    outcome = spec.outcome
    now = time.time()

    logged = parse_log(await store.load_chunks(record.request_id))
    live = recovery.live.get(record.request_id)
    if live is not None and live.replay is None:  # what callers that re-attach at a position get first
        live.replay = logged
        live.base = sum(units(c) for c in logged)
        live.changed.set()
    # Only the last segment is a reply still to build: an earlier one's message is stored (or was discarded).
    message_id, chunks = last_segment(logged, record.message_id)
    # Progress is content: a stream that opened and went silent again did not get further.
    content = sum(1 for c in chunks if c.type not in _NOT_PROGRESS)
    progressed = content > record.progress
    if progressed:
        record.data["progress_at"] = now
    record.attempts = 1 if progressed else record.attempts + 1
    record.progress = content
    record.data["total_attempts"] = int(record.data.get("total_attempts", 0)) + 1
    record.status = "recovering"
    record.updated_at = now
    await store.put_turn(record)  # counted before any work: a crash loop spends the budget too
    journal = TurnJournal(engine, record)
    journal.message_id = message_id
    engine.journal = journal

    acc = MessageAccumulator(message_id or new_id(), continuation=record.continuation)
    for chunk in chunks:
        try:
            acc.apply(chunk)
        except Exception:  # a chunk that does not fit the message: the rest still rebuilds
            log.warning("recovery of %s skipped a chunk it could not apply", record.request_id)
    # The stream that built it ended with the crash: its text and reasoning are as done as they will ever be.
    partial = _finished_parts(acc.message()) if acc.has_content else None
    if partial is not None and spec.final_answer:  # a workflow prompt's final-answer call is never stored
        partial = without_final_answer(partial, final_answer_name(engine.collect_tools()))
        partial = partial if has_content(partial) else None
    # A continuation that was itself interrupted before saying anything continues the reply stored before it.
    resumes_stored = record.continuation and bool(engine.messages) and engine.messages[-1].role == "assistant"
    kind = "continue" if partial is not None or resumes_stored else "retry"
    # The stream had ended and its reply was stored: the crash came after the turn's work, nothing to resume.
    finished = bool(chunks) and chunks[-1].type == "finish" and any(m.id == acc.message_id for m in engine.messages)
    events = {
        "requestId": record.request_id,
        "attempt": record.attempts,
        "maxAttempts": config.max_attempts,
        "recoveryKind": kind,
    }
    if record.attempts == 1 and record.data["total_attempts"] == 1:
        engine.publish("chat:recovery:detected", events)
    engine.publish("chat:recovery:attempt", events)

    try:
        if finished:
            outcome.status = "completed"
            outcome.message = next(m for m in engine.messages if m.id == acc.message_id)
            engine.publish("chat:recovery:completed", {**events, "reason": "already_finished"})
            return
        transcript_ids = {m.id for m in engine.messages}
        if any(i not in transcript_ids for i in record.input_ids):
            # The input never reached the history (the crash came first): there is nothing to answer.
            engine.publish("chat:recovery:skipped", {**events, "reason": "input_not_applied"})
            outcome.status = "skipped"
            return
        if kind == "retry" and (not engine.messages or engine.messages[-1].role != "user"):
            engine.publish("chat:recovery:skipped", {**events, "reason": "conversation_changed"})
            outcome.status = "skipped"
            return

        reason = _exhausted(record, config, now)
        ctx = ChatRecoveryContext(
            request_id=record.request_id,
            trigger=record.trigger,
            kind=kind,  # type: ignore[arg-type]
            attempt=record.attempts,
            max_attempts=config.max_attempts,
            partial=partial,
            submission_id=record.submission_id,
            reason=reason,
        )
        tools = engine.collect_tools()
        reruns: list[ToolPart] = []
        if partial is not None:
            partial, reruns = await _settle(engine, record, partial, tools)
        decision = RecoveryDecision() if reason else await _decide(agent, ctx)
        if partial is not None:
            kept = partial if decision.persist else _settled_only(partial)
            if kept is not None:
                await engine.upsert(kept)
            partial = kept

        if reason is not None or not decision.resume:
            for part in reruns:  # nothing will run them: settle them so the transcript stays valid
                await _apply(engine, partial, part, None, UNKNOWN_OUTCOME)
            if reason is not None:
                async for chunk in _exhaust(engine, spec, ctx, events, reason):
                    yield chunk
            else:
                engine.publish("chat:recovery:skipped", {**events, "reason": "continue_disabled"})
                outcome.status = "aborted"
            return

        if reruns and partial is not None:
            spec.reruns = frozenset(p.tool_call_id for p in reruns)
            run = await prepare(engine, spec)
            spec.reruns = frozenset()  # settled now or by run_pending: the model's turn repairs anything left
            async with aclosing(run_pending(engine, run, partial, reruns)) as running:
                async for chunk in running:
                    if journal.add(chunk):  # logged before anyone sees it, in the partial's segment
                        await journal.flush()
                    yield chunk

        spec.continuation = kind == "continue"
        # The partial is stored as a message now: the continuation starts a new segment of the log, and any chunk
        # it logs counts as progress for the budget.
        record.progress = 0
        record.continuation = spec.continuation
        await journal.restart(new_id())
        async with aclosing(attempts(engine, spec, journal)) as inner:
            async for chunk in inner:
                yield chunk
        if outcome.status == "completed" and not journal.resume:
            await journal.persist_reply()  # observers of the event find the reply stored
            engine.publish("chat:recovery:completed", events)
    finally:
        await finish(spec, journal)


def _exhausted(record: TurnRecord, config: ChatRecoveryConfig, now: float) -> str | None:
    if not config.enabled:
        return "disabled"
    if record.attempts > config.max_attempts:
        return "max_attempts"
    if int(record.data.get("total_attempts", 0)) > config.max_total_attempts:
        return "work_budget"
    progress_at = float(record.data.get("progress_at", record.started_at))
    if now - progress_at > config.no_progress_timeout_s:
        return "no_progress_timeout"
    return None


async def _decide(agent: Any, ctx: ChatRecoveryContext) -> RecoveryDecision:
    try:
        verdict = await agent.on_chat_recovery(ctx)
    except Exception:
        log.exception("on_chat_recovery raised; recovering with the defaults")
        return RecoveryDecision()
    if isinstance(verdict, RecoveryDecision):
        return verdict
    if isinstance(verdict, dict):
        return RecoveryDecision(
            persist=bool(verdict.get("persist", True)),
            resume=bool(verdict.get("continue", verdict.get("resume", True))),
        )
    return RecoveryDecision()


async def _settle(
    engine: Engine, record: TurnRecord, partial: UIMessage, tools: dict[str, Any]
) -> tuple[UIMessage, list[ToolPart]]:
    """Settle the partial's open tool calls from the effect ledger; return the message and the calls to run."""
    parts: list[Any] = []
    reruns: list[ToolPart] = []
    for part in partial.parts:
        if not isinstance(part, ToolPart) or part.state in SETTLED_STATES or part.state == "approval-responded":
            parts.append(part)
            continue
        if part.state == "input-streaming":
            continue  # its arguments never arrived whole: the model never made this call
        effect = await engine.store.get_effect(effect_key(engine.path, record.request_id, part.tool_call_id))
        if effect is not None and effect.status == "finished":
            parts.append(settled(part, effect.output, effect.error))  # replayed, never re-run
        elif effect is not None:
            tool = tools.get(part.name)
            ctx = ToolReconcileContext(
                request_id=record.request_id,
                tool_call_id=part.tool_call_id,
                tool_name=part.name,
                input=part.input,
                idempotent=bool(tool is not None and tool.idempotent),
                started_at=effect.started_at,
            )
            decision = await _reconcile(engine.agent, ctx)
            engine.publish(
                "tool:reconciled",
                {"requestId": record.request_id, "toolCallId": part.tool_call_id, "decision": type(decision).__name__},
            )
            if isinstance(decision, Rerun):
                parts.append(part)
                reruns.append(part)
            elif isinstance(decision, Substitute):
                result = _jsonable(decision.output)
                await engine.store.finish_effect(effect.key, output=result)
                parts.append(settled(part, result, None))
            else:
                await engine.store.finish_effect(effect.key, error=decision.error)
                parts.append(settled(part, None, decision.error))
        else:
            parts.append(part)  # it never started: running it now has no effect twice
            reruns.append(part)
    return partial.model_copy(update={"parts": tuple(parts)}), reruns


async def _reconcile(agent: Any, ctx: ToolReconcileContext) -> Rerun | Substitute | Fail:
    try:
        decision = await agent.reconcile_tool_call(ctx)
    except Exception as err:
        log.exception("reconcile_tool_call raised; the call gets an error result")
        return Fail(f"{UNKNOWN_OUTCOME} (reconcile_tool_call raised: {err})")
    if isinstance(decision, Rerun | Substitute | Fail):
        return decision
    return Rerun() if ctx.idempotent else Fail(UNKNOWN_OUTCOME)


def _finished_parts(message: UIMessage) -> UIMessage:
    """The message with every text and reasoning part still ``streaming`` marked ``done``."""
    parts = tuple(
        p.model_copy(update={"state": "done"})
        if isinstance(p, TextPart | ReasoningPart) and p.state == "streaming"
        else p
        for p in message.parts
    )
    return message.model_copy(update={"parts": parts})


def _settled_only(message: UIMessage) -> UIMessage | None:
    """``persist=False``: only the settled tool results survive (they are facts, not the model's words)."""
    parts = tuple(p for p in message.parts if isinstance(p, ToolPart) and p.state in SETTLED_STATES)
    if not parts:
        return None
    return message.model_copy(update={"parts": (StepStartPart(), *parts)})


async def _apply(engine: Engine, partial: UIMessage | None, part: ToolPart, output: Any, error: str | None) -> None:
    """Settle one tool part of the persisted partial reply."""
    if partial is not None:
        await settle_part(engine, partial.id, part.tool_call_id, output, error)


async def _exhaust(
    engine: Engine, spec: Any, ctx: ChatRecoveryContext, events: dict[str, Any], reason: str
) -> AsyncGenerator[Any, None]:
    engine.publish("chat:recovery:exhausted", {**events, "reason": reason})
    try:
        await engine.agent.on_chat_recovery_exhausted(ctx)
    except Exception:
        log.exception("on_chat_recovery_exhausted raised (ignored)")
    error = TurnError(
        f"The turn {ctx.request_id} was interrupted and could not be recovered ({reason}).",
        request_id=ctx.request_id,
        stage="recovery",
        messages_persisted=True,
    )
    text, _ = await engine.report_error(
        error, ChatErrorContext(request_id=ctx.request_id, stage="recovery", messages_persisted=True)
    )
    spec.outcome.status = "error"
    spec.outcome.error = text
    yield ErrorChunk(error_text=text)
