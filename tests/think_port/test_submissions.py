"""Port of ``packages/think/src/tests/submissions.test.ts``: durable submissions — acceptance, idempotency, the FIFO
drain, cancellation and reset, restart reconciliation, errors, listing and deletion.

The reference inserts ledger rows by hand (``insertSubmissionForTest``) and calls its recovery directly; here every
state is reached through the public API: a submission waiting behind a running turn stays ``pending`` (or
``running``, claimed and waiting for the slot), and a crash is an agent frozen at a hook whose store is copied and
opened by a second agent (``killed_at``). Left out (README.md): workflow notifications, detached agent-tool
notifications, and ledger states no public call can produce.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

from .conftest import WAIT_S, Freezer, Recorder, killed_at, settle_recovery, texts

SRC = "packages/think/src/tests/submissions.test.ts"
TERMINAL = ("completed", "aborted", "skipped", "error")


class Ledger(Recorder):
    """Logs every submission status change, as the reference's ``getSubmissionLog``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.statuses: list[tuple[str, str]] = []
        self.changed = asyncio.Condition()

    async def on_submission_status(self, submission: ta.Submission) -> None:
        self.statuses.append((submission.submission_id, submission.status))
        async with self.changed:
            self.changed.notify_all()

    async def reached(self, submission_id: str, status: str) -> None:
        async def seen() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: (submission_id, status) in self.statuses)

        await asyncio.wait_for(seen(), WAIT_S)

    def of(self, submission_id: str) -> list[str]:
        return [status for sid, status in self.statuses if sid == submission_id]


# A step whose text and settled tool result are durable before on_step_finish (settled results flush at once).
READ = ta.Tool("read", "Read", {"type": "object", "properties": {}}, executor=lambda v, c: "read ok", idempotent=True)


PARTIAL = step(text("partial"), tool_call("read", {}, id="r1"))


def ledger(*steps: Any, **options: Any) -> Ledger:
    return Ledger(model=ScriptedModel(list(steps)), store=options.pop("store", None) or ta.MemoryStore(), **options)


async def busy(agent: Ledger, *, until: asyncio.Event) -> asyncio.Future[Any]:
    """Start a chat turn that holds the queue until ``until`` is set; returns once it runs."""
    running = asyncio.Event()

    async def hold(value: Any, context: ta.ToolContext) -> str:
        running.set()
        await until.wait()
        return "released"

    agent.tools = (*agent.tools, ta.Tool("hold", "Hold the turn", {"type": "object", "properties": {}}, executor=hold))
    turn = asyncio.ensure_future(agent.chat("active turn").collect())
    await asyncio.wait_for(running.wait(), WAIT_S)
    return turn


def hold_steps(answer: str = "active done") -> list[Any]:
    return [tool_call("hold", {}, id="hold-1"), text(answer)]


async def test_a_submission_is_accepted_before_its_turn_runs() -> None:
    """submissions.test.ts:269 "runs accepted submissions only from the scheduled alarm invocation": acceptance
    never runs the turn inline (think_actors' drain is a background task where Think's is an alarm)."""
    agent = ledger(text("done"))
    sub = await agent.submit_messages("queued work", submission_id="sub-1")
    assert (sub.accepted, sub.status) == (True, "pending")
    assert agent.get_messages() == [] and agent.seen("before_turn") == []
    assert (await agent.wait_for_submission("sub-1", timeout_s=WAIT_S)).status == "completed"


async def test_a_submission_is_accepted_then_completed_through_the_normal_turn() -> None:
    """submissions.test.ts:287 "accepts a submission quickly and completes it through the normal turn path"."""
    agent = ledger(step(text("slow "), delay(0.05), text("response")))
    sub = await agent.submit_messages(
        "queued work", submission_id="sub-basic", idempotency_key="job-basic", metadata={"source": "test"}
    )
    assert (sub.accepted, sub.submission_id, sub.request_id, sub.status, sub.metadata) == (
        True,
        "sub-basic",
        "sub-basic",
        "pending",
        {"source": "test"},
    )
    done = await agent.wait_for_submission("sub-basic", timeout_s=WAIT_S)
    assert (done.status, done.request_id) == ("completed", "sub-basic")
    assert done.started_at is not None and done.completed_at is not None
    assert texts(agent) == [("user", "queued work"), ("assistant", "slow response")]
    assert [(r.request_id, r.status) for r in agent.seen("on_chat_response")] == [("sub-basic", "completed")]
    assert agent.of("sub-basic") == ["pending", "running", "completed"]


async def test_a_retry_with_the_same_idempotency_key_appends_nothing() -> None:
    """submissions.test.ts:475 "deduplicates retries by idempotency key without appending duplicate messages"."""
    agent = ledger(text("abc"))
    first = await agent.submit_messages("same job", idempotency_key="external-job-1")
    retry = await agent.submit_messages("same job", idempotency_key="external-job-1")
    assert (first.accepted, retry.accepted) == (True, False)
    assert (retry.submission_id, retry.request_id) == (first.submission_id, first.request_id)
    await agent.wait_for_submission(first.submission_id, timeout_s=WAIT_S)
    assert texts(agent) == [("user", "same job"), ("assistant", "abc")]


async def test_concurrent_first_submissions_with_one_key_are_accepted_once() -> None:
    """submissions.test.ts:501 "deduplicates concurrent first submissions with the same idempotency key"."""
    agent = ledger(text("slow"))
    results = await asyncio.gather(
        agent.submit_messages("concurrent one", idempotency_key="external-job-concurrent"),
        agent.submit_messages("concurrent two", idempotency_key="external-job-concurrent"),
    )
    assert sorted(r.accepted for r in results) == [False, True]
    assert results[0].submission_id == results[1].submission_id
    await agent.wait_for_submission(results[0].submission_id, timeout_s=WAIT_S)
    assert [role for role, _ in texts(agent)] == ["user", "assistant"]


async def test_acceptance_waits_for_the_status_hook() -> None:
    """submissions.test.ts:529 "awaits submission status hooks before returning acceptance"."""

    class SlowHook(Ledger):
        async def on_submission_status(self, submission: ta.Submission) -> None:
            later: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_later(0.02, later.set_result, None)
            await later
            await super().on_submission_status(submission)

    agent = SlowHook(model=ScriptedModel([text("slow")]), store=ta.MemoryStore())
    sub = await agent.submit_messages("hook wait", submission_id="sub-hook-wait")
    assert sub.accepted and agent.of("sub-hook-wait")[:1] == ["pending"]
    await agent.wait_for_submission("sub-hook-wait", timeout_s=WAIT_S)


async def test_a_retry_with_the_same_submission_id_returns_the_first() -> None:
    """submissions.test.ts:544 "deduplicates by submission id" (the retry's payload is ignored)."""
    agent = ledger(text("ok"))
    first = await agent.submit_messages("stable id", submission_id="sub-idempotent", idempotency_key="key-a")
    retry = await agent.submit_messages(
        "different payload ignored", submission_id="sub-idempotent", idempotency_key="key-a"
    )
    assert (retry.accepted, retry.submission_id) == (False, first.submission_id)
    await agent.wait_for_submission("sub-idempotent", timeout_s=WAIT_S)
    assert texts(agent)[0] == ("user", "stable id")


async def test_an_empty_submission_is_refused_before_anything_is_stored() -> None:
    """submissions.test.ts:560 "rejects empty submissions before persistence"."""
    agent = ledger()
    with pytest.raises(ta.ConfigurationError):
        await agent.submit_messages([])
    assert await agent.list_submissions() == []


async def test_an_id_and_a_key_naming_two_submissions_are_refused() -> None:
    """submissions.test.ts:569 "rejects conflicting submission id and idempotency key pairs"."""
    agent = ledger(text("ok"))
    await agent.submit_messages("original", submission_id="sub-conflict-original", idempotency_key="conflict-key")
    with pytest.raises(ta.ConfigurationError, match="different submissions"):
        await agent.submit_messages("conflict", submission_id="sub-conflict-other", idempotency_key="conflict-key")
    await agent.wait_for_submission("sub-conflict-original", timeout_s=WAIT_S)


async def test_a_running_submission_cancelled_stays_aborted() -> None:
    """submissions.test.ts:662 "aborts a running submission without letting late completion overwrite it"."""
    agent = ledger(step(text("a "), delay(0.05), text("b "), delay(0.05), text("c ")))
    started = asyncio.Event()
    agent.observe("agents:chat", lambda e: started.set() if e.type == "chat:turn:start" else None)
    await agent.submit_messages("cancel me", submission_id="sub-cancel")
    await asyncio.wait_for(started.wait(), WAIT_S)
    assert await agent.cancel_submission("sub-cancel", "stop")
    final = await agent.wait_for_submission("sub-cancel", timeout_s=WAIT_S)
    await agent.wait_idle()
    assert (final.status, final.error) == ("aborted", "stop")
    assert (await agent.inspect_submission("sub-cancel")).status == "aborted"  # type: ignore[union-attr]
    assert agent.of("sub-cancel") == ["pending", "running", "aborted"]


@pytest.mark.parametrize(
    ("texts_in", "line", "name"),
    [
        (["queued then cancelled"], 690, "does not append a running submission cancelled before its queued turn slot"),
        (
            ["queued cancelled first", "queued cancelled second", "queued cancelled third"],
            714,
            "does not partially append multi-message submissions cancelled before their queued turn slot",
        ),
    ],
)
async def test_a_submission_cancelled_before_its_turn_slot_appends_nothing(
    texts_in: list[str], line: int, name: str
) -> None:
    """submissions.test.ts:690 and :714: a submission claimed (``running``) while another turn holds the queue,
    then cancelled, never appends its messages and never fires a response hook."""
    agent = ledger(*hold_steps())
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages([ta.user_message(t) for t in texts_in], submission_id="sub-queued-cancel")
    await agent.reached("sub-queued-cancel", "running")
    assert await agent.cancel_submission("sub-queued-cancel", "cancelled before queue slot")
    release.set()
    await active
    final = await agent.wait_for_submission("sub-queued-cancel", timeout_s=WAIT_S)
    await agent.wait_idle()

    assert (final.status, final.error) == ("aborted", "cancelled before queue slot")
    assert [t for role, t in texts(agent) if role == "user"] == ["active turn"]
    assert "sub-queued-cancel" not in [r.request_id for r in agent.seen("on_chat_response")]
    assert agent.of("sub-queued-cancel") == ["pending", "running", "aborted"]


async def test_a_pending_submission_cancelled_never_runs() -> None:
    """submissions.test.ts:780 "aborts a pending submission without running it"."""
    agent = ledger(*hold_steps(), text("first done"))
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("first", submission_id="sub-first")
    await agent.reached("sub-first", "running")
    await agent.submit_messages("not needed", submission_id="sub-pending-cancel")
    assert (await agent.inspect_submission("sub-pending-cancel")).status == "pending"  # type: ignore[union-attr]
    assert await agent.cancel_submission("sub-pending-cancel", "not needed")
    release.set()
    await active
    await agent.wait_for_submission("sub-first", timeout_s=WAIT_S)
    cancelled = await agent.inspect_submission("sub-pending-cancel")
    assert cancelled is not None and (cancelled.status, cancelled.error) == ("aborted", "not needed")
    assert "not needed" not in [t for _, t in texts(agent)]
    assert agent.of("sub-pending-cancel") == ["pending", "aborted"]


async def test_an_idempotent_retry_of_a_pending_submission_leaves_it_to_complete() -> None:
    """submissions.test.ts:1093 "rewakes an existing pending submission on idempotent retry"."""
    agent = ledger(*hold_steps(), text("woken"))
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("retry wakeup", submission_id="sub-retry-wakeup")
    retry = await agent.submit_messages("retry wakeup", submission_id="sub-retry-wakeup")
    assert retry.accepted is False
    release.set()
    await active
    assert (await agent.wait_for_submission("sub-retry-wakeup", timeout_s=WAIT_S)).status == "completed"


async def test_submissions_complete_in_fifo_order() -> None:
    """submissions.test.ts:1113 "completes multiple submissions in FIFO order"."""
    agent = ledger(text("done one"), text("done two"))
    await agent.submit_messages("first", submission_id="sub-fifo-1")
    await agent.submit_messages("second", submission_id="sub-fifo-2")
    await agent.wait_for_submission("sub-fifo-2", timeout_s=WAIT_S)
    await agent.wait_for_submission("sub-fifo-1", timeout_s=WAIT_S)
    assert [r.request_id for r in agent.seen("on_chat_response")] == ["sub-fifo-1", "sub-fifo-2"]
    assert texts(agent) == [("user", "first"), ("assistant", "done one"), ("user", "second"), ("assistant", "done two")]


async def test_a_reset_marks_pending_submissions_skipped() -> None:
    """submissions.test.ts:1138 "marks pending submissions as skipped on turn reset" (``clear`` is the reset)."""
    agent = ledger(*hold_steps(), text("first done"))
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("first", submission_id="sub-first")
    await agent.reached("sub-first", "running")
    await agent.submit_messages("never", submission_id="sub-reset-skip")
    await agent.clear()
    release.set()
    await active
    await agent.wait_idle()
    skipped = await agent.wait_for_submission("sub-reset-skip", timeout_s=WAIT_S)
    assert skipped.status == "skipped"
    assert "never" not in [t for _, t in texts(agent)]


async def test_submissions_drain_after_an_earlier_reset() -> None:
    """submissions.test.ts:1171 "drains pending submissions after a previous turn reset"."""
    agent = ledger(text("after reset"))
    await agent.clear()
    await agent.submit_messages("later", submission_id="sub-after-reset")
    assert (await agent.wait_for_submission("sub-after-reset", timeout_s=WAIT_S)).status == "completed"


async def test_a_running_submission_whose_messages_were_not_applied_is_requeued_after_a_crash() -> None:
    """submissions.test.ts:1154 "requeues stale running submissions when messages were not applied": the process
    dies while the submission is claimed but waiting behind another turn; after the restart it runs."""
    store = ta.MemoryStore()
    freezer = Freezer("tool:hold")
    agent = ledger(*hold_steps(), store=store)

    async def frozen_hold(value: Any, context: ta.ToolContext) -> str:
        await freezer.point("tool:hold")
        return "never"

    agent.tools = (ta.Tool("hold", "Hold", {"type": "object", "properties": {}}, executor=frozen_hold),)

    async def start() -> None:
        turn = asyncio.ensure_future(agent.chat("active turn").collect())
        await asyncio.wait_for(freezer.frozen.wait(), WAIT_S)
        await agent.submit_messages("requeue me", submission_id="sub-requeue")
        await agent.reached("sub-requeue", "running")
        await turn

    crashed = asyncio.ensure_future(start())
    await asyncio.wait_for(freezer.frozen.wait(), WAIT_S)
    await agent.reached("sub-requeue", "running")
    snapshot = copy.deepcopy(store)
    crashed.cancel()

    hold = ta.Tool("hold", "Hold", {"type": "object", "properties": {}}, executor=lambda v, c: "held", idempotent=True)
    restarted = Ledger(model=ScriptedModel([text("active done"), text("requeued done")]), tools=[hold], store=snapshot)
    await restarted.load_messages()
    await settle_recovery(restarted)
    final = await restarted.wait_for_submission("sub-requeue", timeout_s=WAIT_S)
    assert final.status == "completed"
    assert restarted.of("sub-requeue") == ["pending", "running", "completed"]
    assert [t for role, t in texts(restarted) if role == "user"] == ["active turn", "requeue me"]


async def test_a_submission_interrupted_mid_turn_is_finished_by_recovery() -> None:
    """submissions.test.ts:1236 "completes recovered chat fiber submissions through scheduled continuation" and
    :1257 "does not error running submissions while recovered continuation is scheduled": the submission whose own
    turn the crash interrupted stays ``running`` until the recovered turn finishes it."""
    store = ta.MemoryStore()
    freezer = Freezer("on_step_finish")

    class Dies(Ledger):
        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            await freezer.point("on_step_finish")

    agent = Dies(model=ScriptedModel([PARTIAL]), tools=[READ], store=store)
    snapshot = await killed_at(lambda: agent.submit_messages("go", submission_id="sub-recover"), freezer, store)

    restarted = Ledger(model=ScriptedModel([text("the rest")]), tools=[READ], store=snapshot)
    await restarted.load_messages()
    await settle_recovery(restarted)
    final = await restarted.wait_for_submission("sub-recover", timeout_s=WAIT_S)
    assert final.status == "completed"
    assert restarted.of("sub-recover") == ["completed"]
    assert texts(restarted) == [("user", "go"), ("assistant", "partial"), ("assistant", "the rest")]


async def test_a_cancelled_interrupted_submission_is_not_overwritten_by_recovery() -> None:
    """submissions.test.ts:1278 "does not let recovered continuation overwrite a cancelled submission" and :1441
    "aborts an active recovered continuation without a late overwrite"."""
    store = ta.MemoryStore()
    freezer = Freezer("on_step_finish")

    class Dies(Ledger):
        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            await freezer.point("on_step_finish")

    agent = Dies(model=ScriptedModel([text("partial")]), store=store)
    snapshot = await killed_at(lambda: agent.submit_messages("go", submission_id="sub-recover"), freezer, store)

    restarted = Ledger(model=ScriptedModel([step(text("the "), delay(5), text("rest"))]), store=snapshot)
    started = asyncio.Event()
    restarted.observe("agents:chat", lambda e: started.set() if e.type == "chat:turn:start" else None)
    await restarted.load_messages()
    await asyncio.wait_for(started.wait(), WAIT_S)
    assert await restarted.cancel_submission("sub-recover", "stop")
    await settle_recovery(restarted)
    await restarted.wait_idle()
    final = await restarted.inspect_submission("sub-recover")
    assert final is not None and (final.status, final.error) == ("aborted", "stop")


async def test_an_in_band_error_of_a_recovered_submission_keeps_its_text() -> None:
    """submissions.test.ts:1411 "preserves stream error text from recovered continuations"."""
    store = ta.MemoryStore()
    freezer = Freezer("on_step_finish")

    class Dies(Ledger):
        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            await freezer.point("on_step_finish")

    agent = Dies(model=ScriptedModel([text("partial")]), store=store)
    snapshot = await killed_at(lambda: agent.submit_messages("go", submission_id="sub-recover"), freezer, store)

    restarted = Ledger(model=ScriptedModel([error(ta.ProviderError("recovered in-band failure"))]), store=snapshot)
    await restarted.load_messages()
    await settle_recovery(restarted)
    final = await restarted.wait_for_submission("sub-recover", timeout_s=WAIT_S)
    assert (final.status, final.error) == ("error", "recovered in-band failure")


async def test_a_submission_whose_setup_fails_stores_the_error() -> None:
    """submissions.test.ts:1520 "stores error status and message when turn setup throws"."""

    class Broken(Ledger):
        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
            raise RuntimeError("boom")

    agent = Broken(model=ScriptedModel(), store=ta.MemoryStore())
    await agent.submit_messages("explode", submission_id="sub-error")
    final = await agent.wait_for_submission("sub-error", timeout_s=WAIT_S)
    assert (final.status, final.error) == ("error", "boom")


async def test_a_submission_whose_stream_fails_in_band_stores_the_error() -> None:
    """submissions.test.ts:1537 "stores error status and message when an in-band stream error occurs"."""
    agent = ledger(error(ta.ProviderError("submission in-band failure"), after=text("partial")))
    await agent.submit_messages("in-band failure", submission_id="sub-inband-error")
    final = await agent.wait_for_submission("sub-inband-error", timeout_s=WAIT_S)
    assert (final.status, final.error) == ("error", "submission in-band failure")


async def test_final_submissions_are_listed_and_deleted() -> None:
    """submissions.test.ts:1580 "lists and deletes terminal submissions"."""
    agent = ledger(text("ok"))
    await agent.submit_messages("cleanup", submission_id="sub-cleanup")
    await agent.wait_for_submission("sub-cleanup", timeout_s=WAIT_S)
    assert [s.submission_id for s in await agent.list_submissions("completed")] == ["sub-cleanup"]
    assert await agent.delete_submission("sub-cleanup") is True
    assert await agent.inspect_submission("sub-cleanup") is None


async def test_final_submissions_are_deleted_in_bulk_by_status() -> None:
    """submissions.test.ts:1607 "bulk deletes terminal submissions by status"."""
    agent = ledger(text("one"), text("two"))
    first = await agent.submit_messages("cleanup one")
    second = await agent.submit_messages("cleanup two")
    await agent.wait_for_submission(second.submission_id, timeout_s=WAIT_S)
    assert await agent.delete_submissions("completed", limit=10) == 2
    assert await agent.inspect_submission(first.submission_id) is None
    assert await agent.inspect_submission(second.submission_id) is None


async def finished_in_order(agent: Ledger, *ids: str) -> list[float]:
    """Submit and finish ``ids`` one after the other; their completion times."""
    times = []
    for sid in ids:
        await agent.submit_messages(sid, submission_id=sid)
        times.append((await agent.wait_for_submission(sid, timeout_s=WAIT_S)).completed_at or 0.0)
    return times


async def test_a_listing_filters_by_status_before_its_limit_newest_first() -> None:
    """submissions.test.ts:1633 "filters list and bulk delete before applying limits and cutoffs" (the listing)."""
    agent = ledger(text("old"), text("new"), *hold_steps())
    await finished_in_order(agent, "sub-old-completed", "sub-new-completed")
    assert [s.submission_id for s in await agent.list_submissions("completed", limit=1)] == ["sub-new-completed"]


async def test_a_bulk_delete_filters_by_status_and_cutoff_before_its_limit() -> None:
    """submissions.test.ts:1633 "filters list and bulk delete before applying limits and cutoffs" (the delete)."""
    agent = ledger(text("old"), text("new"), *hold_steps())
    old_done, _ = await finished_in_order(agent, "sub-old-completed", "sub-new-completed")
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("pending one", submission_id="sub-recent-pending")
    cutoff = (old_done + (await agent.inspect_submission("sub-new-completed")).completed_at) / 2  # type: ignore[union-attr]
    assert await agent.delete_submissions("completed", completed_before=cutoff, limit=10) == 1
    assert await agent.inspect_submission("sub-old-completed") is None
    assert (await agent.inspect_submission("sub-new-completed")).status == "completed"  # type: ignore[union-attr]
    release.set()
    await active
    await agent.cancel_submission("sub-recent-pending")


async def test_a_listing_of_several_statuses_sorts_before_its_limit() -> None:
    """submissions.test.ts:1677 "applies list limits across multiple statuses after sorting"."""
    agent = ledger(text("old"), text("mid"), *hold_steps())
    await finished_in_order(agent, "sub-multi-old-completed", "sub-multi-mid-completed")
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("newest", submission_id="sub-multi-new-pending")
    try:
        listed = await agent.list_submissions(["pending", "completed"], limit=2)
        assert [s.submission_id for s in listed] == ["sub-multi-new-pending", "sub-multi-mid-completed"]
    finally:
        await agent.cancel_submission("sub-multi-new-pending")
        release.set()
        await active


async def test_a_bulk_delete_never_deletes_active_submissions() -> None:
    """submissions.test.ts:1709 "bulk delete skips active submissions even when explicitly requested"."""
    agent = ledger(text("done"), *hold_steps(), text("running done"))
    await finished_in_order(agent, "sub-delete-active-completed")
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("running", submission_id="sub-delete-active-running")
    await agent.reached("sub-delete-active-running", "running")
    await agent.submit_messages("pending", submission_id="sub-delete-active-pending")

    assert await agent.delete_submissions(["pending", "running", "completed"], limit=10) == 1
    assert (await agent.inspect_submission("sub-delete-active-pending")).status == "pending"  # type: ignore[union-attr]
    assert (await agent.inspect_submission("sub-delete-active-running")).status == "running"  # type: ignore[union-attr]
    assert await agent.inspect_submission("sub-delete-active-completed") is None
    await agent.cancel_submission("sub-delete-active-pending")
    release.set()
    await active
    await agent.wait_for_submission("sub-delete-active-running", timeout_s=WAIT_S)


async def test_pending_and_missing_submissions_are_not_deleted() -> None:
    """submissions.test.ts:1746 "does not delete pending or missing submissions"."""
    agent = ledger(*hold_steps(), text("first done"))
    release = asyncio.Event()
    active = await busy(agent, until=release)
    await agent.submit_messages("first", submission_id="sub-first")
    await agent.reached("sub-first", "running")
    await agent.submit_messages("pending", submission_id="sub-delete-pending")
    assert await agent.delete_submission("sub-delete-pending") is False
    assert await agent.delete_submission("sub-delete-missing") is False
    await agent.cancel_submission("sub-delete-pending")
    release.set()
    await active
    await agent.wait_for_submission("sub-first", timeout_s=WAIT_S)


async def test_an_interrupted_submission_is_not_replayed_when_recovery_is_off() -> None:
    """submissions.test.ts:1187 "marks stale running submissions with applied messages as error without
    replaying": with recovery off, the submission whose messages were applied is not run again."""
    store = ta.MemoryStore()
    freezer = Freezer("on_step_finish")

    class Dies(Ledger):
        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            await freezer.point("on_step_finish")

    agent = Dies(model=ScriptedModel([text("partial")]), store=store)
    snapshot = await killed_at(lambda: agent.submit_messages("go", submission_id="sub-applied"), freezer, store)

    class NoRecovery(Ledger):
        chat_recovery = ta.ChatRecoveryConfig(enabled=False)

    model = ScriptedModel()
    restarted = NoRecovery(model=model, store=snapshot)
    await restarted.load_messages()
    await settle_recovery(restarted)
    final = await restarted.wait_for_submission("sub-applied", timeout_s=WAIT_S)
    assert final.status == "error" and final.error
    assert [role for role, _ in texts(restarted)].count("user") == 1
    assert model.requests == []
