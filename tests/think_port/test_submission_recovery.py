"""Port of ``packages/think/src/e2e-tests/submission-recovery.test.ts``: what a restart does with a submission a
crash left ``running``. Messages never applied: it goes back to ``pending`` and runs. Messages applied and no turn
to recover: ``error``, never replayed. Its turn interrupted mid-stream: it stays ``running`` while recovery continues
the turn, then ``completed``.

The reference seeds the first two states with a test helper and restarts ``wrangler dev``; here they are written
to the store the same way (a ``running`` row, its messages applied or not), and a second agent opens it. The third
is a real kill mid-stream (``killed_at``).
"""

from __future__ import annotations

import time
from typing import Any

import think_actors as ta
from think_actors.store import SubmissionRecord
from think_actors.testing import ScriptedModel, delay, step, text

from .conftest import Freezer, killed_at, settle_recovery, texts
from .test_submissions import Ledger

SRC = "packages/think/src/e2e-tests/submission-recovery.test.ts"


async def seeded_running(submission_id: str, request_id: str, *, applied: bool) -> ta.MemoryStore:
    """A store holding a ``running`` submission, as a process killed while it ran leaves it (no turn record)."""
    store = ta.MemoryStore()
    message = ta.user_message("seeded submission", id=f"{submission_id}-message")
    now = time.time()
    record = SubmissionRecord(
        submission_id=submission_id,
        request_id=request_id,
        status="running",
        messages=[message],
        created_at=now,
        started_at=now,
        messages_applied_at=now if applied else None,
    )
    await store.insert_submission(record)
    if applied:
        await store.append_message(message)
    return store


async def test_a_submission_whose_messages_were_never_applied_is_pending_again_and_runs() -> None:
    """submission-recovery.test.ts:265 "re-enqueues a submission whose messages were never applied as pending"."""
    store = await seeded_running("sub-not-applied", "req-not-applied", applied=False)
    agent = Ledger(model=ScriptedModel([text("ran after the restart")]), store=store)
    await agent.load_messages()
    await settle_recovery(agent)
    final = await agent.wait_for_submission("sub-not-applied", timeout_s=5)
    assert final.status == "completed"
    assert agent.of("sub-not-applied") == ["pending", "running", "completed"]
    assert texts(agent) == [("user", "seeded submission"), ("assistant", "ran after the restart")]


async def test_a_submission_applied_without_a_turn_to_recover_is_an_error() -> None:
    """submission-recovery.test.ts:294 "marks an applied-but-unrecoverable submission as error"."""
    store = await seeded_running("sub-applied-error", "req-applied-error", applied=True)
    agent = Ledger(model=ScriptedModel([]), store=store)
    await agent.load_messages()
    await settle_recovery(agent)
    final = await agent.inspect_submission("sub-applied-error")
    assert final is not None and final.status == "error"
    assert final.error is not None and "interrupted after its messages were applied" in final.error
    assert agent.of("sub-applied-error") == ["error"]
    assert texts(agent) == [("user", "seeded submission")]


class Streaming(Ledger):
    def __init__(self, *args: Any, freezer: Freezer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.freezer = freezer or Freezer(None)

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        await super().on_chunk(ctx)
        await self.freezer.point(f"chunk:{ctx.text}")


async def test_a_submission_killed_mid_stream_stays_running_and_recovery_completes_it() -> None:
    """submission-recovery.test.ts:329 "leaves a recoverable in-flight submission running and continues it to
    completion"."""
    store = ta.MemoryStore()
    freezer = Freezer("chunk:submission ")
    story = step(text("A long "), delay(0.08), text("submission "), text("story"))
    agent = Streaming(model=ScriptedModel([story]), store=store, freezer=freezer)
    snapshot = await killed_at(
        lambda: agent.submit_messages("Tell me a long submission story", submission_id="sub-recoverable"),
        freezer,
        store,
    )
    assert (await snapshot.get_submission("sub-recoverable")).status == "running"  # type: ignore[union-attr]

    restarted = Ledger(model=ScriptedModel([text("and it ended.")]), store=snapshot)
    await restarted.load_messages()
    await settle_recovery(restarted)
    final = await restarted.wait_for_submission("sub-recoverable", timeout_s=5)
    assert final.status == "completed"
    assert restarted.of("sub-recoverable") == ["completed"]
    assert texts(restarted)[0] == ("user", "Tell me a long submission story")
    assert texts(restarted)[-1] == ("assistant", "and it ended.")
