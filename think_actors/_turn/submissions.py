"""Durable submissions (reference §1.7): accept into the ledger, drain FIFO through the turn queue, reconcile.

Acceptance is a committed row before ``submit_messages`` returns; it never waits on the turn queue, so it works
from inside a turn and from ``on_chat_response``. One drain task per agent takes the oldest ``pending`` row,
claims it (``running``), and runs its turn like any other entry point: the messages are appended only when that
turn holds the slot, and only while the row is still ``running``. The final status is written after the turn's
response hook (the slot already released, as the seed wants the hook), and only over ``running``, so a late
completion never overwrites a cancellation or a reset. A drain whose store a newer writer of the agent has opened
(``holds_lease``: the agent's restarted actor, or its actor woken while a burst runner runs its turn) claims no
more rows and writes no final status: the newer owner's start recovered them and settles them.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import importlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from .. import tracing
from ..errors import ConfigurationError
from ..identity import Principal
from ..limits import RunLimits
from ..messages import new_id
from ..store import holds_lease
from ..store.records import TERMINAL_SUBMISSION_STATUSES, SubmissionRecord
from ..submissions import Submission
from ..tools import _jsonable
from ..turn_metadata import stamp
from .convert import reply_after
from .driver import TurnSpec, normalize_input, turn_stream
from .engine import Engine

log = logging.getLogger("think_actors")

APPLIED_THEN_INTERRUPTED = "Submission was interrupted after its messages were applied; it is not replayed."
PARTLY_APPLIED = "Submission was interrupted after its messages were (partially) applied; it is not replayed."
SKIPPED_BY_RESET = "Submission was skipped by turn reset."


class Submissions:
    """The submission ledger of one agent and its drain."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._drain: asyncio.Task[None] | None = None
        self._again = False
        self._changed = asyncio.Condition()
        self._output_types: dict[str, Any] = {}  # submission id -> the output= it was given, in this process

    # ------------------------------------------------------------------ acceptance

    async def submit(
        self,
        messages: Any,
        *,
        submission_id: str | None,
        idempotency_key: str | None,
        metadata: dict[str, Any] | None,
        output: Any = None,
        limits: RunLimits | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
        final_answer: bool = False,
    ) -> Submission:
        if callable(messages):
            raise ConfigurationError("submit_messages needs messages, not a function: its input is stored as given")
        items = normalize_input(messages)
        # Who submitted them, and from where: the turn that runs them acts for them, on that channel.
        items = [stamp(m, channel=channel, principal=principal) for m in items]
        if not items:
            raise ConfigurationError("submit_messages needs at least one message; nothing was stored")
        for name, value in (("submission_id", submission_id), ("idempotency_key", idempotency_key)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(f"{name} must be a non-empty str, got {value!r}")
        if metadata is not None and not isinstance(metadata, dict):
            raise ConfigurationError(f"metadata must be a dict, got {type(metadata).__name__}")
        wanted = _output_spec(output)
        if wanted is not None and final_answer and "class" in wanted:
            wanted["finalAnswer"] = True  # a workflow prompt: its output comes through a final-answer tool
        engine = self.engine
        await engine.ensure_started()
        sid = submission_id or new_id()
        if wanted is not None:
            # Before the row: a drain running now may claim it at once. A retry keeps what the first call stored.
            self._output_types[sid] = output
            if await engine.store.get_kv(_OUTPUT_KEY + sid) is None:
                await engine.store.set_kv(_OUTPUT_KEY + sid, wanted)
        if limits is not None and await engine.store.get_kv(_LIMITS_KEY + sid) is None:
            await engine.store.set_kv(_LIMITS_KEY + sid, limits.model_dump(exclude_none=True))
        record = SubmissionRecord(
            submission_id=sid,
            request_id=sid,
            status="pending",
            messages=items,
            created_at=time.time(),
            idempotency_key=idempotency_key,
            metadata=metadata,
            traceparent=tracing.traceparent(),  # the submitter's span: the drain that runs it links to it
        )
        stored, created = await engine.store.insert_submission(record, id_given=submission_id is not None)
        if stored.submission_id != sid:  # the key's earlier submission: nothing new runs
            if wanted is not None:
                self._output_types.pop(sid, None)
                await engine.store.set_kv(_OUTPUT_KEY + sid, None)
            if limits is not None:
                await engine.store.set_kv(_LIMITS_KEY + sid, None)
        if created:
            engine.publish(
                "submission:create",
                {"submissionId": sid, "requestId": sid, "idempotencyKey": idempotency_key},
            )
            await self._status(stored)
        if stored.status == "pending":
            self.wake()  # a retry of a pending row re-wakes the drain
        return Submission.of(stored, accepted=created)

    # ------------------------------------------------------------------ reading and ending

    async def inspect(self, submission_id: str) -> Submission | None:
        record = await self.engine.store.get_submission(submission_id)
        return None if record is None else await self._with_output(self._with_reply(Submission.of(record)))

    async def list_some(self, status: str | Sequence[str] | None, limit: int) -> list[Submission]:
        statuses = [status] if isinstance(status, str) else list(status) if status is not None else None
        # Newest first, as Think lists them: the limit keeps the newest, so the newest is always listed.
        records = await self.engine.store.list_submissions(
            statuses=statuses, limit=_clamp(limit, LIST_LIMIT_MAX), newest_first=True
        )
        return [Submission.of(r) for r in records]

    async def cancel(self, submission_id: str, reason: str | None) -> bool:
        """Abort a pending or running submission; False when it is unknown or already final."""
        store = self.engine.store
        text = reason or "Submission was cancelled."
        record = await store.get_submission(submission_id)
        if record is None or record.status in TERMINAL_SUBMISSION_STATUSES:
            return False
        if not await store.update_submission(
            submission_id, expect_status=("pending", "running"), status="aborted", error=text, completed_at=time.time()
        ):
            return False
        self.engine.aborts.cancel(record.request_id, text)
        await self._status(await store.get_submission(submission_id))
        return True

    async def delete(self, submission_id: str) -> bool:
        """Delete a final submission; False for an unknown or still active one."""
        store = self.engine.store
        record = await store.get_submission(submission_id)
        if record is None or record.status not in TERMINAL_SUBMISSION_STATUSES:
            return False
        self._output_types.pop(submission_id, None)
        await store.set_kv(_OUTPUT_KEY + submission_id, None)
        return await store.delete_submission(submission_id)

    async def delete_many(self, status: str | Sequence[str] | None, completed_before: float | None, limit: int) -> int:
        """Delete final submissions (of ``status``, completed before a unix time); active ones are never deleted."""
        wanted = [status] if isinstance(status, str) else list(status) if status is not None else None
        statuses = [s for s in (wanted or TERMINAL_SUBMISSION_STATUSES) if s in TERMINAL_SUBMISSION_STATUSES]
        records = await self.engine.store.list_submissions(statuses=sorted(statuses))
        if completed_before is not None:
            records = [r for r in records if r.completed_at is not None and r.completed_at < completed_before]
        # The earliest finished first, as Think deletes them (a final row without a completion time by its
        # acceptance time); the store's order (by acceptance) breaks ties.
        records.sort(key=lambda r: (r.completed_at if r.completed_at is not None else r.created_at, r.created_at))
        deleted = 0
        for record in records:
            if deleted >= _clamp(limit, DELETE_LIMIT_MAX):
                break
            deleted += await self.delete(record.submission_id)
        return deleted

    async def wait(self, submission_id: str, timeout_s: float | None) -> Submission:
        """Wait until the submission is final."""

        async def final() -> Submission:
            async with self._changed:
                while True:
                    found = await self.inspect(submission_id)
                    if found is None:
                        raise ConfigurationError(f"no submission {submission_id!r}")
                    if found.done:
                        return found
                    await self._changed.wait()

        return await asyncio.wait_for(final(), timeout_s)

    async def skip_pending(self) -> None:
        """``clear()``: every pending row is skipped; running ones are aborted by the reset itself."""
        store = self.engine.store
        for record in await store.list_submissions(statuses=["pending"]):
            if await store.update_submission(
                record.submission_id,
                expect_status=("pending",),
                status="skipped",
                error=SKIPPED_BY_RESET,
                completed_at=time.time(),
            ):
                await self._status(await store.get_submission(record.submission_id))

    # ------------------------------------------------------------------ restart

    async def recover(self, interrupted: set[str]) -> None:
        """Reconcile the rows a crash left ``running`` (reference §1.7).

        ``interrupted`` are the request ids of turns recovery will resume: their submissions stay ``running``
        and end with the recovered turn.
        """
        store = self.engine.store
        running = await store.list_submissions(statuses=["running"])
        if not running:  # the common start: nothing to reconcile, so no reading of the whole tree
            return
        known = {m.id for m in await store.list_messages()}
        for record in running:
            ids = [m.id for m in record.messages]
            if record.request_id in interrupted and any(i in known for i in ids):
                continue
            if record.messages_applied_at is None and not any(i in known for i in ids):
                fields: dict[str, Any] = {"status": "pending", "started_at": None}
            elif record.messages_applied_at is None:
                fields = {"status": "error", "error": PARTLY_APPLIED, "completed_at": time.time()}
            else:
                fields = {"status": "error", "error": APPLIED_THEN_INTERRUPTED, "completed_at": time.time()}
            if await store.update_submission(record.submission_id, expect_status=("running",), **fields):
                await self._status(await store.get_submission(record.submission_id))

    async def wake_if_pending(self) -> None:
        if await self.engine.store.list_submissions(statuses=["pending"], limit=1):
            self.wake()

    def finisher(self, submission_id: str) -> Any:
        """The ``on_finished`` of a submission's turn: its final status, written after the turn's response hook
        (as Think does: whoever waits for the submission finds the hook done) and before the turn record goes, so
        no crash can leave a finished turn's submission ``running`` (``TurnSpec.on_finished``)."""

        async def finished(outcome: Any) -> None:
            status, error = outcome.status, outcome.error
            store = self.engine.store
            if not await holds_lease(store):
                # Its turn failed on the fence (or ran under it): the newer owner resumed the row or reset it.
                log.info("submission %s left to the agent's newer owner (this store is fenced)", submission_id)
                return
            if status == "completed" and outcome.output is not None:  # kept before the status: a waiter reads it
                wanted = await store.get_kv(_OUTPUT_KEY + submission_id)
                if isinstance(wanted, dict):
                    await store.set_kv(_OUTPUT_KEY + submission_id, {**wanted, "value": _jsonable(outcome.output)})
            if await store.update_submission(
                submission_id, expect_status=("running",), status=status, error=error, completed_at=time.time()
            ):
                final = await store.get_submission(submission_id)
                if final is not None and final.status == "error":
                    self.engine.publish(
                        "submission:error",
                        {"submissionId": submission_id, "requestId": final.request_id, "error": error},
                    )
                await self._status(final)

        return finished

    # ------------------------------------------------------------------ the drain

    def draining(self) -> bool:
        """Whether the drain is running."""
        return self._drain is not None and not self._drain.done()

    def wake(self) -> None:
        """Make sure the drain runs (it is one task per agent; a wake while it runs makes it look again)."""
        if self._drain is not None and not self._drain.done():
            self._again = True
            return
        # A clean context: the drain's turns are nobody's nested turn, and their response hooks fire.
        self._drain = asyncio.get_running_loop().create_task(self._run_drain(), context=contextvars.Context())

    async def idle(self) -> None:
        """Wait until the drain has nothing left to do."""
        while self._drain is not None and not self._drain.done():
            await asyncio.shield(self._drain)

    async def _run_drain(self) -> None:
        engine = self.engine
        with tracing.operation(
            f"drain_submissions {type(engine.agent).__name__}", {tracing.names.AGENT_PATH: engine.path}
        ):
            await self._drain_pending()

    async def _drain_pending(self) -> None:
        store = self.engine.store
        while True:
            self._again = False
            pending = await store.list_submissions(statuses=["pending"], limit=1)
            if not pending:
                if self._again:
                    continue
                return
            record = pending[0]
            if not await holds_lease(store):
                return  # a newer owner of the agent drains its rows now
            if not await store.update_submission(
                record.submission_id, expect_status=("pending",), status="running", started_at=time.time()
            ):
                continue
            claimed = await store.get_submission(record.submission_id)
            assert claimed is not None
            submitted = {tracing.names.SUBMISSION_ID: claimed.submission_id}
            tracing.link(claimed.traceparent, reason="drains", attributes=submitted)  # the submitter's span
            await self._status(claimed)
            try:
                await self._run_one(claimed)
            except Exception:
                log.exception("submission %s failed outside its turn", record.submission_id)

    async def _run_one(self, record: SubmissionRecord) -> None:
        engine = self.engine
        store = engine.store
        sid = record.submission_id

        async def still_running() -> bool:
            current = await store.get_submission(sid)
            return current is not None and current.status == "running"

        async def applied() -> None:
            await store.update_submission(sid, expect_status=("running",), messages_applied_at=time.time())

        finished = self.finisher(sid)
        try:
            output = await self._output_type(sid)
        except ConfigurationError as err:  # its output type cannot be loaded here: it fails before its turn
            if await store.update_submission(
                sid, expect_status=("running",), status="error", error=str(err), completed_at=time.time()
            ):
                await self._status(await store.get_submission(sid))
            return

        async def on_finished(outcome: Any) -> None:
            if spec.signal.aborted and outcome.status == "completed":
                outcome.status = "aborted"
            await finished(outcome)

        kept_limits = await store.get_kv(_LIMITS_KEY + sid)
        wanted = await store.get_kv(_OUTPUT_KEY + sid)
        spec = TurnSpec(
            final_answer=isinstance(wanted, dict) and bool(wanted.get("finalAnswer")),
            limits=RunLimits.model_validate(kept_limits) if isinstance(kept_limits, dict) else None,
            request_id=record.request_id,
            trigger="submission",
            signal=engine.aborts.signal(record.request_id),
            generation=engine.queue.generation,
            input=list(record.messages),
            output=output,
            submission_id=sid,
            raise_setup_errors=True,
            should_apply=still_running,
            on_applied=applied,
            on_finished=on_finished,
        )
        live = engine.recovery.follow(record.request_id)  # so a socket can follow the submission's stream
        try:
            async for chunk in turn_stream(engine, spec):
                live.chunks.append(chunk)
                live.changed.set()
        except Exception:  # a setup failure: already reported through on_chat_error and recorded by on_finished
            pass
        finally:
            live.end(spec.outcome.status)
        # A turn that ended before its record began (skipped by a reset, or nothing to apply) wrote no status:
        # write it now (a no-op when on_finished already did, as the row is no longer running). A turn handed to
        # recovery (a stalled stream) is not over: its recovered turn writes the status.
        if not spec.resumed:
            await on_finished(spec.outcome)

    # ------------------------------------------------------------------ structured output

    async def _output_type(self, submission_id: str) -> Any:
        """The ``output=`` the submission was made with (None: plain text); ConfigurationError when its class
        cannot be imported in this process."""
        if submission_id in self._output_types:
            return self._output_types[submission_id]
        wanted = await self.engine.store.get_kv(_OUTPUT_KEY + submission_id)
        if not isinstance(wanted, dict):
            return None
        output = wanted["format"] if "format" in wanted else _import_class(wanted["class"])
        self._output_types[submission_id] = output
        return output

    def _with_reply(self, submission: Submission) -> Submission:
        """``submission`` with its reply, when it completed and the transcript still holds its input."""
        if submission.status != "completed" or not submission.message_ids:
            return submission
        reply = reply_after(self.engine.messages, submission.message_ids[-1])
        return submission if reply is None else dataclasses.replace(submission, message=reply)

    async def _with_output(self, submission: Submission) -> Submission:
        """``submission`` with its structured output, when it completed with one."""
        if submission.status != "completed":
            return submission
        kept = await self.engine.store.get_kv(_OUTPUT_KEY + submission.submission_id)
        if not isinstance(kept, dict) or "value" not in kept:
            return submission
        value = kept["value"]
        try:
            output = await self._output_type(submission.submission_id)
        except ConfigurationError:
            output = None  # its class is not importable here: the JSON as stored
        if isinstance(output, type) and issubclass(output, BaseModel):
            value = output.model_validate(value)
        return dataclasses.replace(submission, output=value)

    # ------------------------------------------------------------------ status

    async def _status(self, record: SubmissionRecord | None) -> None:
        if record is None:
            return
        submission = Submission.of(record)
        self.engine.publish(
            "submission:status",
            {"submissionId": record.submission_id, "requestId": record.request_id, "status": record.status},
        )
        try:
            await self.engine.agent.on_submission_status(submission)
        except Exception:
            log.exception("on_submission_status raised (ignored)")
        async with self._changed:
            self._changed.notify_all()


_LIMITS_KEY = "submission-limits:"  # kv: the RunLimits a submission was made with (only when it was)
_OUTPUT_KEY = "submission-output:"  # kv: {"class": "module:Name"} or {"format": {...}}, then its "value"


def _output_spec(output: Any) -> dict[str, Any] | None:
    """How a submission's ``output=`` is stored: a pydantic class by its import path, a response_format as is."""
    if output is None:
        return None
    if isinstance(output, type) and issubclass(output, BaseModel):
        return {"class": f"{output.__module__}:{output.__qualname__}"}
    if isinstance(output, dict):
        return {"format": output}
    raise ConfigurationError(
        f"submit_messages(output=...) takes a pydantic model class or a response_format dict, not {output!r}"
    )


def _import_class(path: str) -> Any:
    module_name, _, qualname = path.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        raise ConfigurationError(
            f"the submission's output class {path!r} cannot be imported in this process: define it at the top level "
            "of a module the agent's process can import"
        ) from None
    return found


LIST_LIMIT_MAX = 100  # Think's clamps: a listing keeps at most 100, a bulk delete removes at most 500
DELETE_LIMIT_MAX = 500


def _clamp(limit: int, most: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ConfigurationError(f"limit must be an int, got {limit!r}")
    return max(1, min(most, limit))
