"""Submissions through actor handles: one idempotency key from many actors at once."""

from __future__ import annotations

import asyncio
from typing import Any

from ray_agents import SubmittingClient, Survivor

import think_actors as ta


async def test_fifty_concurrent_submissions_with_one_key_from_different_actors_accept_one(
    ray_runtime: Any, unique: str
) -> None:
    agent = await ta.spawn(Survivor, unique)
    clients = [SubmittingClient.remote() for _ in range(10)]

    answers = await asyncio.gather(*(c.submit.remote(agent, "nightly-2026-12-01", 5) for c in clients))

    accepted = [a for batch in answers for a in batch]
    assert (len(accepted), sum(accepted)) == (50, 1)
    [submission] = await agent.list_submissions()
    final = await agent.wait_for_submission(submission.submission_id, timeout_s=30)
    assert final.status == "completed"
    messages = await agent.get_messages()
    assert [m.role for m in messages] == ["user", "assistant"]  # one turn ran
    assert messages[1].text == f"echo: {messages[0].text}"


async def test_a_handle_lists_submissions_newest_first_the_limit_keeping_the_newest(
    ray_runtime: Any, unique: str
) -> None:
    agent = await ta.spawn(Survivor, unique)
    for sid in ("s1", "s2", "s3"):
        await agent.submit_messages(f"job {sid}", submission_id=sid)
        await agent.wait_for_submission(sid, timeout_s=30)  # one after the other: accepted in this order

    assert [s.submission_id for s in await agent.list_submissions()] == ["s3", "s2", "s1"]
    assert [s.submission_id for s in await agent.list_submissions("completed", limit=2)] == ["s3", "s2"]
