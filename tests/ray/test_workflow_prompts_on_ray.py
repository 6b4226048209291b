"""A workflow step inside a Ray task that Ray retries: the task's first worker dies while the agent's turn runs,
the retry asks for the same step, and gets the result of the one turn that ran (no second turn, no second copy of
the prompt in the conversation). The same ``prompt`` call on an in-process agent, a ``LocalAgentHandle`` and a
Ray handle returns the same finished submission."""

from __future__ import annotations

from typing import Any

from workflow_steps import SlowReviewer, Verdict, review

import think_actors as ta
from think_actors.testing import ScriptedModel, tool_call


async def test_a_retried_ray_task_gets_the_steps_result_from_the_one_turn_that_ran(
    ray_runtime: Any, unique: str, tmp_path: Any
) -> None:
    reviewer = await ta.spawn(SlowReviewer, unique)

    result = await review.remote(reviewer, "7", str(tmp_path / "crashed"))

    assert result == {"status": "completed", "output": {"approved": True, "reason": "paid"}, "id": "step:review-7"}
    messages = await reviewer.load_messages()
    assert [m.role for m in messages] == ["user"]  # one prompt; the final-answer call is never stored
    again = await reviewer.prompt("review-7", "Review order 7.", output=Verdict)
    assert again.output == Verdict(approved=True, reason="paid")
    assert len(await reviewer.load_messages()) == 1


async def test_the_same_prompt_call_in_process_through_a_local_handle_and_on_ray(ray_runtime: Any, unique: str) -> None:
    def model() -> ScriptedModel:
        return ScriptedModel([tool_call("final_answer", {"approved": False, "reason": "unpaid"}, id="f1")])

    agents = [
        ta.Think(unique, model=model(), store=ta.MemoryStore()),
        ta.LocalAgentHandle(ta.Think(unique, model=model(), store=ta.MemoryStore())),
        await ta.spawn(ta.Think, unique, model=model()),
    ]
    seen = []
    for agent in agents:
        done = await agent.prompt("check", "Check it.", output=Verdict)
        seen.append((done.status, done.output, done.submission_id))
    assert seen == [("completed", Verdict(approved=False, reason="unpaid"), "step:check")] * 3
