"""One admitted turn, start to end: input, assembly, ``before_turn``, the step loop, persistence, response hook.

Every entry point (``chat``, ``save_messages``, ``continue_last_turn``, and later submissions and agent-tool
runs) builds a ``TurnSpec`` and iterates ``turn_stream``. Blocking entry points just drain it. The phases live
beside this module: ``spec`` (what a turn is asked), ``prepare`` (its set-up), ``attempts`` (its model attempts)
and ``finish`` (persisting it).

Two rules of the seed shape this module. Every failed turn, whatever the stage, goes through ``on_chat_error``
exactly once, and what it returns is what every caller sees. ``on_chat_response`` runs after the turn slot is
released (so it may start turns), and only for turns that persisted an assistant message; the entry point that
ran the turn still returns after the hook.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from .. import logs, tracing
from ..errors import StoreFencedError
from ..messages import UIMessage, new_id
from ..turn_metadata import latest_channel, stamp
from .assembly import system_prompt
from .attempts import _fail_setup, attempts
from .budget import open_run
from .engine import Engine
from .finish import finish
from .journal import TurnJournal
from .prepare import prepare
from .relay import relayed
from .spec import TurnOutcome, TurnSpec, _SetupFailed, normalize_input, resolve_turn_facts

__all__ = ["TurnOutcome", "TurnSpec", "attempts", "finish", "normalize_input", "prepare", "turn_stream"]

log = logging.getLogger("think_actors")


async def _resolve_input(engine: Engine, value: Any) -> list[UIMessage]:
    if callable(value):
        value = value(list(engine.messages))
        if inspect.isawaitable(value):
            value = await value
    return normalize_input(value)


async def turn_stream(engine: Engine, spec: TurnSpec) -> AsyncIterator[Any]:
    """The chunks of one turn, from the moment it holds the agent's turn slot to its response hook."""
    outcome = spec.outcome
    started = time.monotonic()
    admitted = False
    log_context = logs.bind(engine.path, spec.request_id)  # every record logged during the turn names it
    span = tracing.start_turn(
        agent=type(engine.agent).__name__,
        agent_path=engine.path,
        request_id=spec.request_id,
        trigger=spec.trigger,
        model=engine.agent.model,
        links=recovered_trace(spec.recover),
    )
    try:
        try:
            async with engine.queue.slot(engine, spec.request_id):
                admitted = True
                # A recovery's, from its record; a new turn's are set with its input.
                engine.principal, engine.channel, engine.turn_metadata = spec.principal, spec.channel, spec.metadata
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
            if admitted:
                engine.principal, engine.channel, engine.turn_metadata = None, None, None
    except _SetupFailed as failed:
        raise failed.raised from None
    except StoreFencedError:
        engine.superseded_quietly("its remaining hooks", spec.request_id)  # the log line of a quiet end
        raise
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
        tracing.end_turn(
            span,
            status=outcome.status,
            error=outcome.error,
            classification=outcome.classification,
            stats=spec.stats,
            limit=outcome.limit,
            principal=spec.principal,
            channel=spec.channel,
        )
        logs.restore(log_context)


def recovered_trace(record: Any) -> tuple[str, ...]:
    """The interrupted turn's ``traceparent`` (its record keeps it), for a recovery's span to link to."""
    value = record.data.get("traceparent") if record is not None else None
    return (value,) if isinstance(value, str) else ()


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
    # A new message without a channel stays where the conversation is (Think: the latest user message's channel).
    channel = spec.channel or latest_channel(messages) or latest_channel(engine.messages)
    messages = [stamp(m, channel=channel, metadata=spec.metadata, principal=spec.principal) for m in messages]
    resolve_turn_facts(spec, messages or engine.messages)
    data: dict[str, Any] = {"body": spec.body} if spec.body else {}
    # A recovered turn goes on for the same principal, on the same channel, with the same facts.
    if spec.principal is not None:
        data["principal"] = spec.principal.stamp()
    data["channel"] = spec.channel
    if spec.metadata is not None:
        data["metadata"] = spec.metadata
    if spec.final_answer:
        data["final_answer"] = True
    engine.principal, engine.channel, engine.turn_metadata = spec.principal, spec.channel, spec.metadata
    ticket = open_run(engine, spec)
    if ticket is not None:  # a recovered turn goes on in the same run, with what it has used
        data["run"] = ticket.record()
    journal = TurnJournal.new(
        engine,
        request_id=spec.request_id,
        trigger=spec.trigger,
        continuation=spec.continuation,
        input_ids=[m.id for m in messages],
        message_id=new_id(),
        submission_id=spec.submission_id,
        data=data,
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
