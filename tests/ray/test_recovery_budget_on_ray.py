"""With ``ta.init``'s defaults, the recovery budget ends a crash loop on Ray, and the agent lives on.

The agent's model kills its process (``os._exit``) on every attempt at one turn, before it says anything, so no
attempt makes progress: Ray must restart the actor once more than ``ChatRecoveryConfig.max_attempts`` for the
budget to run out. Nobody calls the agent during the loop (a call would start the restarted agent itself); it
reports to a RecoveryWatch actor instead.
"""

from __future__ import annotations

from typing import Any

import pytest
from ray_agents import CrashLoop

import think_actors as ta


@pytest.mark.timeout(240)
async def test_a_crash_loop_ends_at_the_recovery_budget_and_the_agent_takes_the_next_turn(
    ray_runtime: Any, unique: str, watch: tuple[Any, str]
) -> None:
    recorder, watch_name = watch
    budget = CrashLoop.chat_recovery.max_attempts
    agent = await ta.spawn(CrashLoop, unique, watch=watch_name, namespace=ray_runtime.namespace)
    try:
        stream = agent.chat("crash")
        with pytest.raises(ta.AgentUnavailableError):
            await stream.collect()

        # The turn, then `budget` recoveries, each killed; the restart after them gives the turn up.
        exhausted = await recorder.wait_exhausted.remote(120.0)
        assert exhausted == [
            {"request_id": stream.request_id, "reason": "max_attempts", "attempt": budget + 1, "kind": "retry"}
        ]
        assert await recorder.wait_finished.remote(stream.request_id, 60.0) == ["error (recovery)"]
        resumed = await agent.attach(stream.request_id).collect()
        assert [c.type for c in resumed if c.type == "error"] == ["error"]
        [error] = [c.error_text for c in resumed if c.type == "error"]
        assert error == f"The turn {stream.request_id} was interrupted and could not be recovered (max_attempts)."

        result = await agent.save_messages("hello")
        assert (result.status, result.message.text if result.message else None) == (
            "completed",
            "about hello: first half, second half.",
        )
        answer = await agent.chat("hello again").collect()
        assert "".join(c.delta for c in answer if c.type == "text-delta") == (
            "about hello again: first half, second half."
        )
        assert [(m.role, m.text) for m in await agent.get_messages()] == [
            ("user", "crash"),
            ("user", "hello"),
            ("assistant", "about hello: first half, second half."),
            ("user", "hello again"),
            ("assistant", "about hello again: first half, second half."),
        ]
        assert await recorder.wait_exhausted.remote(0.0) == exhausted  # once
    finally:
        await agent.kill(restart=False)
