"""A submission whose turn a newer writer of the agent took over mid-turn (its restarted actor, or its actor woken
while a burst runner runs the turn): the fenced writer's failed turn settles nothing, the new owner runs it to the
end, once. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import think_actors as ta
from think_actors.store import holds_lease
from think_actors.store.postgres import close_pools
from think_actors.testing import ScriptedModel, delay, step, text


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield request.getfixturevalue("postgres_url") if request.param == "postgres" else f"sqlite://{tmp_path}"


@pytest.fixture(autouse=True)
async def _close_pools() -> Any:
    yield
    await close_pools()


class Slow(ta.Think):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.streaming = asyncio.Event()
        self.statuses: list[str] = []

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta":
            self.streaming.set()

    async def on_submission_status(self, submission: Any) -> None:
        self.statuses.append(submission.status)


async def test_a_fenced_writer_leaves_its_submission_to_the_new_owner_which_runs_it_once(url: str) -> None:
    model = ScriptedModel([step(text("partial "), delay(0.2), text("never"))])
    old = Slow("one", model=model, store=ta.open_store(url, "slow/one"))
    accepted = await old.submit_messages("wake up", idempotency_key="schedule:t@1")
    await old.streaming.wait()
    assert await holds_lease(old.store)
    # The new owner's recovered turn outlasts the old writer's: the old one meets the fence while the row runs.
    recovered = ScriptedModel([step(delay(1.0), text("recovered answer"))])
    new = Slow("one", model=recovered, store=ta.open_store(url, "slow/one"))
    await new.load_messages()  # the new owner's start: fences the old writer, recovers the running submission
    assert not await holds_lease(old.store)
    done = await new.wait_for_submission(accepted.submission_id, timeout_s=20)
    assert done.status == "completed"
    assert (await new.inspect_submission(accepted.submission_id)).status == "completed"  # type: ignore[union-attr]
    assert "error" not in old.statuses  # the fenced writer settled nothing
    assert [m.text for m in await new.store.load_messages()] == ["wake up", "recovered answer"]
    again = await new.submit_messages("wake up", idempotency_key="schedule:t@1")  # the same occurrence: once
    assert again.submission_id == accepted.submission_id and not again.accepted
    await old.close()
    await new.close()


async def test_a_fenced_writer_claims_no_more_pending_rows(url: str) -> None:
    old = Slow("two", model=ScriptedModel([]), store=ta.open_store(url, "slow/two"))
    await old.load_messages()
    new = Slow("two", model=ScriptedModel([text("answer")]), store=ta.open_store(url, "slow/two"))
    await new.load_messages()
    # Accepted through the old writer (the ledger is not fenced), drained by the new owner alone.
    accepted = await old.submit_messages("hello", idempotency_key="k")
    await old._engine.submissions.idle()
    assert (await old.inspect_submission(accepted.submission_id)).status == "pending"  # type: ignore[union-attr]
    await new._engine.submissions.wake_if_pending()
    done = await new.wait_for_submission(accepted.submission_id, timeout_s=20)
    assert done.status == "completed"
    assert [m.text for m in await new.store.load_messages()] == ["hello", "answer"]
    await old.close()
    await new.close()
