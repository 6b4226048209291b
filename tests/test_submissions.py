"""Durable submissions (reference §1.7; the submissions.test.ts cases): acceptance, idempotency, FIFO drain,
cancellation, reset, restart reconciliation, listing and deletion. Crash tests through actors: tests/ray/."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import RecordingAgent

import think_actors as ta
from think_actors.store import SubmissionRecord
from think_actors.store.postgres import close_pools
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

WAIT_S = 5


class Submitter(RecordingAgent):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.statuses: list[tuple[str, str]] = []

    async def on_submission_status(self, submission: ta.Submission) -> None:
        self.statuses.append((submission.submission_id, submission.status))


def make(model: ScriptedModel, store: ta.Store | None = None, cls: type[Submitter] = Submitter) -> Submitter:
    return cls("sub", model=model, store=store or ta.MemoryStore())


def texts(agent: ta.Think) -> list[str]:
    return [m.text for m in agent.get_messages()]


async def test_a_submission_is_accepted_then_runs_through_the_normal_turn_path() -> None:
    model = ScriptedModel([text("done")])
    agent = make(model)

    accepted = await agent.submit_messages("nightly report", idempotency_key="2026-11-30", metadata={"k": 1})

    assert (accepted.accepted, accepted.status, accepted.idempotency_key) == (True, "pending", "2026-11-30")
    assert accepted.request_id == accepted.submission_id
    final = await agent.wait_for_submission(accepted.submission_id, timeout_s=WAIT_S)
    assert (final.status, final.error, final.metadata) == ("completed", None, {"k": 1})
    assert final.started_at is not None and final.completed_at is not None
    assert texts(agent) == ["nightly report", "done"]
    [turn] = agent.contexts("before_turn")
    assert (turn.trigger, turn.request_id) == ("submission", accepted.request_id)
    assert [r.status for r in agent.contexts("on_chat_response")] == ["completed"]
    assert agent.statuses == [(accepted.submission_id, s) for s in ("pending", "running", "completed")]


async def test_a_completed_submission_carries_its_reply_while_the_transcript_holds_it() -> None:
    agent = make(ScriptedModel([text("report ready"), text("second"), text("chat reply")]))
    first = await agent.submit_messages("nightly report")
    second = await agent.submit_messages("another")
    await agent.wait_for_submission(second.submission_id, timeout_s=WAIT_S)
    await agent.save_messages("and now?")  # later turns do not change an earlier submission's reply

    done = await agent.inspect_submission(first.submission_id)
    assert done is not None and done.text == "report ready"
    assert done.message == agent.get_messages()[1]
    assert (await agent.wait_for_submission(second.submission_id)).text == "second"
    assert first.message is None and first.text == ""  # accepted, not yet answered
    assert all(s.message is None for s in await agent.list_submissions())  # listings leave it out
    await agent.clear()
    assert (await agent.inspect_submission(first.submission_id)).message is None  # type: ignore[union-attr]


async def test_the_final_status_is_written_after_the_response_hook_outside_the_turn_slot() -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    class SlowResponse(Submitter):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.hook_finished: list[str] = []

        async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
            await super().on_chat_response(result)
            if result.request_id == "s1":
                entered.set()
                await release.wait()
            self.hook_finished.append(result.request_id)

    agent = make(ScriptedModel([text("done"), text("meanwhile too")]), cls=SlowResponse)
    await agent.submit_messages("nightly", submission_id="s1")
    waiting = asyncio.create_task(agent.wait_for_submission("s1", timeout_s=WAIT_S))
    await asyncio.wait_for(entered.wait(), WAIT_S)

    # The turn is over and its slot released (another turn runs meanwhile); the submission is not final yet.
    meanwhile = await asyncio.wait_for(agent.save_messages("meanwhile"), WAIT_S)
    assert meanwhile.status == "completed"
    assert (await agent.inspect_submission("s1")).status == "running"  # type: ignore[union-attr]
    assert agent.statuses == [("s1", "pending"), ("s1", "running")]
    release.set()
    final = await waiting
    assert final.status == "completed"
    assert agent.hook_finished == [meanwhile.request_id, "s1"]  # the submission's hook had finished
    assert agent.statuses == [("s1", "pending"), ("s1", "running"), ("s1", "completed")]


async def test_status_hooks_are_awaited_before_acceptance_returns() -> None:
    gate = asyncio.Event()

    class Slow(Submitter):
        async def on_submission_status(self, submission: ta.Submission) -> None:
            await super().on_submission_status(submission)
            if submission.status == "pending":
                await gate.wait()

    agent = make(ScriptedModel([text("ok")]), cls=Slow)
    task = asyncio.create_task(agent.submit_messages("x"))
    await asyncio.sleep(0.01)
    assert not task.done()
    gate.set()
    assert (await asyncio.wait_for(task, WAIT_S)).accepted


async def test_retries_by_idempotency_key_or_id_return_the_existing_row_and_append_nothing() -> None:
    model = ScriptedModel([text("once")])
    agent = make(model)
    first = await agent.submit_messages("hello", idempotency_key="k1")
    by_key = await agent.submit_messages("a different payload", idempotency_key="k1")
    by_id = await agent.submit_messages("yet another", submission_id=first.submission_id)
    await agent.wait_for_submission(first.submission_id, timeout_s=WAIT_S)
    again = await agent.submit_messages("after it ran", idempotency_key="k1")

    assert [s.accepted for s in (first, by_key, by_id, again)] == [True, False, False, False]
    assert {s.submission_id for s in (first, by_key, by_id, again)} == {first.submission_id}
    assert again.status == "completed"
    assert texts(agent) == ["hello", "once"]
    model.assert_complete()


async def test_concurrent_first_submissions_with_one_key_accept_exactly_one() -> None:
    model = ScriptedModel([text("one turn")])
    agent = make(model)
    results = await asyncio.gather(*(agent.submit_messages(f"try {i}", idempotency_key="same") for i in range(50)))
    assert sum(r.accepted for r in results) == 1
    await agent.wait_for_submission(results[0].submission_id, timeout_s=WAIT_S)
    assert len(agent.get_messages()) == 2
    model.assert_complete()


async def test_bad_submissions_are_refused_before_anything_is_stored() -> None:
    agent = make(ScriptedModel())
    with pytest.raises(ta.ConfigurationError, match="at least one message"):
        await agent.submit_messages([])
    with pytest.raises(ta.ConfigurationError, match="not a function"):
        await agent.submit_messages(lambda messages: "x")
    with pytest.raises(ta.ConfigurationError, match="metadata must be a dict"):
        await agent.submit_messages("x", metadata="nope")  # type: ignore[arg-type]
    assert await agent.list_submissions() == []


async def test_a_conflicting_id_and_key_pair_is_an_error() -> None:
    agent = make(ScriptedModel([text("a"), text("b")]))
    a = await agent.submit_messages("a", idempotency_key="ka")
    await agent.submit_messages("b", submission_id="sb", idempotency_key="kb")
    with pytest.raises(ta.ConfigurationError, match="refer to different submissions"):
        await agent.submit_messages("c", submission_id=a.submission_id, idempotency_key="kb")
    await agent.wait_for_submission("sb", timeout_s=WAIT_S)


async def test_submissions_complete_in_fifo_order_behind_other_turns() -> None:
    model = ScriptedModel([step(delay(0.02), text("chat reply")), text("r1"), text("r2"), text("r3")])
    agent = make(model)
    chat = asyncio.create_task(agent.save_messages("chatting"))
    await asyncio.sleep(0)
    ids = [(await agent.submit_messages(f"s{i}")).submission_id for i in (1, 2, 3)]
    await chat
    for sid in ids:
        await agent.wait_for_submission(sid, timeout_s=WAIT_S)
    assert texts(agent) == ["chatting", "chat reply", "s1", "r1", "s2", "r2", "s3", "r3"]


async def test_submit_works_from_inside_a_tool_and_from_on_chat_response() -> None:
    @ta.tool
    async def schedule(note: str, context: ta.ToolContext) -> str:
        """Schedule a follow-up."""
        submission = await context.agent.submit_messages(f"from the tool: {note}")
        return submission.status

    class Chaining(Submitter):
        async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
            await super().on_chat_response(result)
            if result.message.text == "first":
                await self.submit_messages("from the response hook", submission_id="hook")

    model = ScriptedModel([tool_call("schedule", {"note": "n"}), text("first"), text("tool's"), text("hook's")])
    agent = make(model, cls=Chaining)
    agent.tools = (schedule,)
    await agent.save_messages("go")
    await agent.wait_for_submission("hook", timeout_s=WAIT_S)
    await agent._engine.submissions.idle()
    assert texts(agent) == ["go", "first", "from the tool: n", "tool's", "from the response hook", "hook's"]


async def test_cancelling_a_pending_submission_never_runs_it() -> None:
    model = ScriptedModel([step(delay(0.05), text("busy")), text("second")])
    agent = make(model)
    busy = await agent.submit_messages("first")
    waiting = await agent.submit_messages("second")
    assert await agent.cancel_submission(waiting.submission_id, "not needed") is True
    assert await agent.cancel_submission(waiting.submission_id) is False  # already final
    await agent.wait_for_submission(busy.submission_id, timeout_s=WAIT_S)
    final = await agent.inspect_submission(waiting.submission_id)
    assert final is not None and (final.status, final.error) == ("aborted", "not needed")
    assert texts(agent) == ["first", "busy"]


async def test_a_running_submission_cancelled_before_its_slot_appends_nothing() -> None:
    release = asyncio.Event()

    class Holding(Submitter):
        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            await super().before_turn(ctx)
            if ctx.trigger == "programmatic":
                await release.wait()
            return None

    model = ScriptedModel([text("chat")])
    agent = make(model, cls=Holding)
    chat = asyncio.create_task(agent.save_messages("holding the slot"))
    await asyncio.sleep(0.01)
    sub = await agent.submit_messages(["part one", "part two"])
    for _ in range(100):  # claimed (running) while the chat turn holds the slot
        if (await agent.inspect_submission(sub.submission_id)).status == "running":  # type: ignore[union-attr]
            break
        await asyncio.sleep(0.001)
    assert await agent.cancel_submission(sub.submission_id)
    release.set()
    await chat
    await agent._engine.submissions.idle()
    assert texts(agent) == ["holding the slot", "chat"]  # neither part of the cancelled submission
    final = await agent.inspect_submission(sub.submission_id)
    assert final is not None and final.status == "aborted"


async def test_a_running_submission_aborted_mid_turn_keeps_the_aborted_status() -> None:
    model = ScriptedModel([step(text("partial"), delay(5), text("never"))])
    agent = make(model)
    sub = await agent.submit_messages("long job")
    for _ in range(200):
        if agent._engine.queue.active_request_id == sub.request_id:
            break
        await asyncio.sleep(0.005)
    assert await agent.cancel_submission(sub.submission_id, "stop")
    await agent._engine.submissions.idle()
    final = await agent.inspect_submission(sub.submission_id)
    assert final is not None and (final.status, final.error) == ("aborted", "stop")
    assert texts(agent) == ["long job", "partial"]  # the partial reply is kept, as for any abort


async def test_clear_skips_pending_submissions_and_later_ones_drain() -> None:
    model = ScriptedModel([step(delay(0.05), text("first")), text("after reset")])
    agent = make(model)
    first = await agent.submit_messages("one")
    pending = await agent.submit_messages("two")
    await asyncio.sleep(0.01)
    await agent.clear()
    skipped = await agent.inspect_submission(pending.submission_id)
    assert skipped is not None and (skipped.status, skipped.error) == (
        "skipped",
        "Submission was skipped by turn reset.",
    )
    await agent._engine.submissions.idle()
    after = await agent.submit_messages("three")
    final = await agent.wait_for_submission(after.submission_id, timeout_s=WAIT_S)
    assert final.status == "completed"
    assert (await agent.inspect_submission(first.submission_id)).status in ("aborted", "skipped")  # type: ignore[union-attr]
    assert texts(agent) == ["three", "after reset"]


async def test_setup_and_stream_errors_are_stored_on_the_submission() -> None:
    class NoModel(Submitter):
        model = None

    agent = make(ScriptedModel(), cls=NoModel)
    agent.model = None
    setup = await agent.wait_for_submission((await agent.submit_messages("x")).submission_id, timeout_s=WAIT_S)
    assert setup.status == "error" and "has no model" in (setup.error or "")

    streaming = make(ScriptedModel([error(ta.ProviderError("upstream broke"))]))
    failed = await streaming.wait_for_submission((await streaming.submit_messages("y")).submission_id, timeout_s=WAIT_S)
    assert (failed.status, failed.error) == ("error", "upstream broke")


async def test_listing_and_deleting_submissions() -> None:
    model = ScriptedModel([text("a"), error(ta.ProviderError("bad")), text("c")])
    agent = make(model)
    ids = []
    for name in ("a", "b", "c"):
        ids.append((await agent.submit_messages(name, submission_id=name)).submission_id)
        await agent.wait_for_submission(name, timeout_s=WAIT_S)
    # Newest first, as Think lists them, the limit keeping the newest.
    assert [s.submission_id for s in await agent.list_submissions()] == ["c", "b", "a"]
    assert [s.submission_id for s in await agent.list_submissions("completed")] == ["c", "a"]
    assert [s.submission_id for s in await agent.list_submissions(["error", "completed"], limit=2)] == ["c", "b"]
    assert await agent.delete_submission("missing") is False
    assert await agent.delete_submissions("completed", limit=1) == 1  # the oldest
    assert [s.submission_id for s in await agent.list_submissions()] == ["c", "b"]
    assert await agent.delete_submissions(completed_before=time.time() + 60) == 2
    assert await agent.list_submissions() == []


async def test_the_newest_submissions_are_listed_past_the_default_limit(durable_location: str) -> None:
    # 120 rows, more than a listing's default 50 and its most, 100 (Think's): the newest are listed.
    store = ta.open_store(durable_location, "submitter/many")
    for i in range(120):
        record = SubmissionRecord(
            submission_id=f"s{i:03}",
            request_id=f"s{i:03}",
            status="completed",
            messages=[ta.user_message(f"job {i}")],
            created_at=1_000.0 + i,
        )
        await store.insert_submission(record)
    agent = make(ScriptedModel(), store)
    listed = [s.submission_id for s in await agent.list_submissions()]
    assert listed == [f"s{i:03}" for i in range(119, 69, -1)]
    assert len(await agent.list_submissions(limit=500)) == 100
    assert [s.submission_id for s in await agent.list_submissions("completed", limit=1)] == ["s119"]
    await agent.close()
    await close_pools()


async def test_the_earliest_finished_submissions_are_deleted_first(durable_location: str) -> None:
    # Accepted a, b, c; finished b, c, a (Think deletes by completion time, then acceptance time).
    store = ta.open_store(durable_location, "submitter/finished")
    for name, created, completed in (("a", 1.0, 30.0), ("b", 2.0, 10.0), ("c", 3.0, 20.0), ("d", 4.0, 20.0)):
        record = SubmissionRecord(
            submission_id=name,
            request_id=name,
            status="completed",
            messages=[ta.user_message(name)],
            created_at=1_000.0 + created,
            completed_at=1_000.0 + completed,
        )
        await store.insert_submission(record)
    agent = make(ScriptedModel(), store)
    assert await agent.delete_submissions(limit=1) == 1
    assert sorted(s.submission_id for s in await agent.list_submissions()) == ["a", "c", "d"]
    assert await agent.delete_submissions(completed_before=1_025.0, limit=1) == 1  # c and d tie: c was first
    assert sorted(s.submission_id for s in await agent.list_submissions()) == ["a", "d"]
    assert await agent.delete_submissions(completed_before=1_025.0) == 1  # a finished after the cutoff
    assert [s.submission_id for s in await agent.list_submissions()] == ["a"]
    await agent.close()
    await close_pools()


async def test_active_submissions_are_never_deleted() -> None:
    model = ScriptedModel([step(delay(0.05), text("slow")), text("next")])
    agent = make(model)
    await agent.submit_messages("one", submission_id="one")
    await agent.submit_messages("two", submission_id="two")
    assert await agent.delete_submission("two") is False
    assert await agent.delete_submissions(["pending", "running"]) == 0
    await agent.wait_for_submission("two", timeout_s=WAIT_S)


async def test_submission_events_on_agents_message() -> None:
    agent = make(ScriptedModel([text("ok")]))
    events: list[ta.Event] = []
    agent.observe("agents:message", events.append)
    sub = await agent.submit_messages("x", idempotency_key="k")
    await agent.wait_for_submission(sub.submission_id, timeout_s=WAIT_S)
    assert [(e.type, e.payload.get("status")) for e in events] == [
        ("submission:create", None),
        ("submission:status", "pending"),
        ("submission:status", "running"),
        ("submission:status", "completed"),
    ]
    assert events[0].payload == {"submissionId": sub.submission_id, "requestId": sub.request_id, "idempotencyKey": "k"}


# ---------------------------------------------------------------------- restart reconciliation


async def crashed_row(store: ta.Store, sid: str, text_: str, *, applied: bool, append: bool) -> None:
    """A row a crash left ``running``: its messages applied or not, and present in the history or not."""
    message = ta.user_message(text_, id=f"msg-{sid}")
    now = time.time()
    record = SubmissionRecord(
        submission_id=sid,
        request_id=sid,
        status="running",
        messages=[message],
        created_at=now,
        started_at=now,
        messages_applied_at=now if applied else None,
    )
    await store.insert_submission(record)
    await store.update_submission(sid, status="running", started_at=now, messages_applied_at=record.messages_applied_at)
    if append:
        await store.append_message(message)


@pytest.fixture(params=["sqlite", "postgres"])
def durable_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL that outlives its store objects (a restart opens it again)."""
    yield request.getfixturevalue("postgres_url") if request.param == "postgres" else f"sqlite://{tmp_path}"


async def test_restart_requeues_unapplied_rows_and_errors_applied_ones(durable_location: str) -> None:
    store = ta.open_store(durable_location, "submitter/sub")
    await crashed_row(store, "unapplied", "never got in", applied=False, append=False)
    await crashed_row(store, "partial", "got in unmarked", applied=False, append=True)
    await crashed_row(store, "applied", "got in marked", applied=True, append=True)
    await store.close()

    model = ScriptedModel([text("answered after restart")])
    agent = make(model, ta.open_store(durable_location, "submitter/sub"))
    await agent.load_messages()  # the agent starts: reconciliation, then the drain
    requeued = await agent.wait_for_submission("unapplied", timeout_s=WAIT_S)

    assert requeued.status == "completed"
    partial = await agent.inspect_submission("partial")
    applied = await agent.inspect_submission("applied")
    assert partial is not None and applied is not None
    assert (partial.status, applied.status) == ("error", "error")
    assert "not replayed" in (partial.error or "") and "not replayed" in (applied.error or "")
    assert texts(agent) == ["got in unmarked", "got in marked", "never got in", "answered after restart"]
    model.assert_complete()
    await agent.close()
    await close_pools()


async def test_the_streams_kept_for_attaching_are_bounded() -> None:
    from think_actors._turn.recovery import MAX_KEPT_RESULTS

    model = ScriptedModel([text(str(i)) for i in range(MAX_KEPT_RESULTS + 20)])
    agent = make(model)
    for i in range(MAX_KEPT_RESULTS + 20):
        await agent.submit_messages(f"job {i}")
    await agent._engine.submissions.idle()
    assert len(agent._engine.recovery.live) <= MAX_KEPT_RESULTS + 1
