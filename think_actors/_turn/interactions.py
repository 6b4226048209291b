"""Client tool results, tool approvals, and the auto-continuation barrier (reference §1.9).

A result or an approval is applied to the stored assistant message holding the call (first write wins), in
arrival order. With ``auto_continue`` it arms the continuation: after 50 ms of quiet (so the results of one batch
coalesce), and only once the newest assistant message is not mid-batch (the barrier: it holds while one of that
message's calls has its answer and another still waits), a continuation turn runs — it executes approved calls
through the hooks, then asks the model to go on. A continuation already running defers the next one until it
ends. A result without ``auto_continue`` only re-arms an armed continuation, never creates one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from typing import Any

from ..errors import ConfigurationError
from ..messages import ToolApproval, ToolPart, ToolState, UIMessage, new_id
from ..tools import _jsonable
from .driver import TurnSpec, turn_stream
from .engine import Engine

log = logging.getLogger("think_actors")

COALESCE_S = 0.05
ARMED_KEY = "interactions:continuation-armed"  # in the store: an armed continuation survives a restart
WAITING = ("input-available", "approval-requested")
ANSWERED = ("output-available", "output-error", "output-denied", "approval-responded")
DENIED = "Tool execution denied by user"


class Interactions:
    """One agent's tool results, approvals and pending continuation."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = asyncio.Lock()  # the apply chain: one read-modify-write at a time, in arrival order
        self._armed = False
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None
        self._running_id: str | None = None
        self._next_id: str | None = None  # the request id the armed (or deferred) continuation will run under
        self._deferred = False
        self._changed = asyncio.Event()  # set at every apply, arm, fire and continuation end
        self._early: list[tuple[str, Any, bool]] = []  # answers that arrived before their call was stored
        self._tasks: set[asyncio.Task[None]] = set()
        self._armed_stored = False

    async def restore(self) -> None:
        """At start: a continuation armed before a restart is armed again, so the rest of its batch (even an
        errored result that does not ask to continue) still fires it (the reference drops it: its known gap)."""
        if await self.engine.store.get_kv(ARMED_KEY):
            self._armed = self._armed_stored = True
            self._arm()

    async def _store_armed(self, armed: bool) -> None:
        if armed != self._armed_stored:
            await self.engine.store.set_kv(ARMED_KEY, armed or None)
            self._armed_stored = armed

    async def reset(self) -> None:
        """Forget the barrier (the history was cleared): no continuation is armed, deferred or waiting."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed = self._deferred = False
        self._next_id = None
        self._early = []
        await self._store_armed(False)
        self._changed.set()

    # ------------------------------------------------------------------ applying answers

    async def add_tool_result(
        self, tool_call_id: str, *, output: Any = None, error: str | None = None, auto_continue: bool = False
    ) -> bool:
        """Settle a waiting call with ``output`` (or ``error``); False when no call waits under that id."""

        def settle(part: ToolPart) -> ToolPart | None:
            if part.state not in (*WAITING, "approval-responded"):
                return None  # already settled: the first answer wins
            if error is not None:
                return part.with_state("output-error", error_text=error)
            return part.with_state("output-available", output=_jsonable(output), preliminary=False)

        return await self._apply(tool_call_id, settle, auto_continue)

    async def add_tool_approval(
        self, tool_call_id: str, approved: bool, *, reason: str | None = None, auto_continue: bool = False
    ) -> bool:
        """Approve (the continuation runs the call) or deny (the model sees the denial) a call that waits."""

        def answer(part: ToolPart) -> ToolPart | None:
            if part.state not in WAITING:
                return None
            approval = ToolApproval(
                id=part.approval.id if part.approval else tool_call_id, approved=approved, reason=reason
            )
            state: ToolState = "approval-responded" if approved else "output-denied"
            return part.with_state(state, approval=approval)

        return await self._apply(tool_call_id, answer, auto_continue)

    async def _apply(self, tool_call_id: str, change: Any, auto_continue: bool) -> bool:
        if not isinstance(tool_call_id, str) or not tool_call_id:
            raise ConfigurationError("a tool result or approval needs the tool call id it answers")
        engine = self.engine
        await engine.ensure_started()
        async with self._lock:
            if not _holds(engine.messages, tool_call_id) and engine.queue.busy:
                # The answer came before the reply holding the call was stored (a fast client, mid-stream):
                # it is applied as soon as the turn has stored it.
                self._early.append((tool_call_id, change, auto_continue))
                return True
            applied = await self._change(tool_call_id, change)
            if not applied and not _holds(engine.messages, tool_call_id):
                return False  # no such call: a stray answer continues nothing
        # An answer for a call already settled (say, by the repair of a continuation that started before it came)
        # still schedules the continuation it asks for, as the reference's tool-result handler does.
        if auto_continue:
            self._armed = True
            await self._store_armed(True)
        if self._armed:
            self._arm()
        return applied

    async def resolve_paused(self, tool_call_id: str, change: Any, auto_continue: bool) -> bool:
        """Replace a settled call's output (a durable-pause action's, once a person answered), then continue the
        conversation as an auto-continuation, with or without anyone connected; False when no part took it."""
        await self.engine.ensure_started()
        async with self._lock:
            applied = await self._change(tool_call_id, change)
        if applied and auto_continue:
            await self.continue_now()
        return applied

    async def continue_now(self) -> None:
        """Arm the continuation (durably: a restart arms it again) as an answer with ``autoContinue`` does."""
        self._armed = True
        await self._store_armed(True)
        self._arm()

    async def _change(self, tool_call_id: str, change: Any) -> bool:
        engine = self.engine
        for message in reversed(engine.messages):
            for index, part in enumerate(message.parts):
                if isinstance(part, ToolPart) and part.tool_call_id == tool_call_id:
                    updated = change(part)
                    if updated is None:
                        return False
                    parts = (*message.parts[:index], updated, *message.parts[index + 1 :])
                    changed = message.model_copy(update={"parts": parts})
                    await engine.replace(changed)
                    engine.publish("message:updated", {"message": changed.to_wire()})
                    self._changed.set()
                    return True
        return False

    # ------------------------------------------------------------------ the barrier

    def pending(self) -> bool:
        """Whether a call waits for an answer that can still come: an approval, or the result of a call of one
        of the stored client tools (``set_client_tools``: a client can send it, even after a restart).

        Any assistant message counts (reference: ``hasPendingInteraction``). A server tool's waiting call and a
        call of a client tool offered to one ``chat()`` only are not pending: nothing will ever answer them (the
        function, or the in-process caller, died with the process), so recovery and the next turn repair them
        and ``wait_until_stable`` does not wait for them.
        """
        client = {t.name for t in self.engine.last_client_tools}
        return any(
            isinstance(p, ToolPart)
            and (p.state == "approval-requested" or (p.state == "input-available" and p.name in client))
            for m in self.engine.messages
            if m.role == "assistant"
            for p in m.parts
        )

    def upcoming(self) -> str | None:
        """The request id of the continuation running now, or else of the one armed or deferred (it is fixed when
        first asked, so a client told it before the continuation starts sees the same id stream); None when no
        continuation runs or is armed."""
        if self._running is not None and not self._running.done():
            return self._running_id
        if not (self._armed or self._deferred):
            return None
        if self._next_id is None:
            self._next_id = new_id()
        return self._next_id

    def _arm(self) -> None:
        self._changed.set()
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(COALESCE_S, self._fire)

    def rearm(self) -> None:
        """After a stream ends: early answers are applied now, and an armed continuation gets its chance."""
        if self._early:
            early, self._early = self._early, []
            task = asyncio.get_running_loop().create_task(self._apply_early(early), context=contextvars.Context())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif self._armed:
            self._arm()

    async def _apply_early(self, early: list[tuple[str, Any, bool]]) -> None:
        for tool_call_id, change, auto_continue in early:
            if not await self._apply(tool_call_id, change, auto_continue):
                log.warning("an answer for tool call %s matched no waiting call (ignored)", tool_call_id)
        if self._armed:
            self._arm()

    def _fire(self) -> None:
        self._timer = None
        if self._running is not None and not self._running.done():
            self._deferred = True  # runs after the current continuation
            return
        if self.engine.queue.busy:
            return  # a stream is active: the batch may still grow; its end re-arms
        if incomplete_batch(self.engine.messages):
            return  # a sibling's answer is still missing: its arrival re-runs the check
        self._armed = False
        request_id, self._next_id = self._next_id or new_id(), None
        self._running_id = request_id
        task = self._continue(request_id)
        self._running = asyncio.get_running_loop().create_task(task, context=contextvars.Context())

    async def _continue(self, request_id: str) -> None:
        engine = self.engine
        await self._store_armed(self._armed)  # fired: from here the continuation's own turn record keeps it
        spec = TurnSpec(
            request_id=request_id,
            trigger="auto-continuation",
            signal=engine.aborts.signal(request_id),
            generation=engine.queue.generation,
            continuation=True,
        )
        live = engine.recovery.follow(request_id)
        try:
            async for chunk in turn_stream(engine, spec):
                live.chunks.append(chunk)
                live.changed.set()
        except Exception:
            log.exception("auto-continuation %s failed", request_id)
        finally:
            live.end(spec.outcome.status)
        if self._deferred:
            self._deferred = False
            self._armed = True
            await self._store_armed(True)
            self._arm()
        self._changed.set()

    def quiet(self) -> bool:
        """No continuation is about to fire or running, and no early answer waits to be applied. A call that waits
        for a person or a client does not count (it may wait for days), nor does a continuation armed for it: both
        are in the store, and a restarted agent re-arms it."""
        running = self._running is not None and not self._running.done()
        return not (running or self._timer is not None or self._early or self._tasks)

    def stable(self) -> bool:
        running = self._running is not None and not self._running.done()
        busy = self.engine.queue.busy or self._armed or running or self._timer is not None
        return not (busy or self._early or self._tasks or self.pending())

    async def wait_until_stable(self, timeout_s: float | None) -> None:
        """Until no turn runs or waits, no call waits for an answer, and no continuation is armed or running."""

        async def stable() -> None:
            while True:
                await self.engine.queue.wait_idle()
                if self.stable():
                    return
                self._changed.clear()
                if self.stable():
                    return
                with contextlib.suppress(TimeoutError):  # queue changes are not signalled here: look again soon
                    await asyncio.wait_for(self._changed.wait(), 0.05)

        await asyncio.wait_for(stable(), timeout_s)


def _holds(messages: list[UIMessage], tool_call_id: str) -> bool:
    return any(isinstance(p, ToolPart) and p.tool_call_id == tool_call_id for m in messages for p in m.parts)


def incomplete_batch(messages: list[UIMessage]) -> bool:
    """Whether the newest assistant message is mid-batch: one of its calls has its answer and another still waits
    (reference: ``hasIncompleteToolBatch``). Only the newest holds the barrier, so a call left dangling in an
    earlier message does not block a continuation; a message with no answer yet does not hold it either."""
    newest = next((m for m in reversed(messages) if m.role == "assistant"), None)
    if newest is None:
        return False
    waiting = answered = False
    for part in newest.parts:
        if isinstance(part, ToolPart):
            if part.state in WAITING:
                waiting = True
            elif part.state in ANSWERED:
                answered = True
            if waiting and answered:
                return True
    return False
