"""Prompts as workflow steps (Think's ``ThinkWorkflow.step.prompt``): ``agent.prompt(step, ...)`` runs a prompt once
per step name, durably (a submission ``step:<name>``), returns the stored result to a caller that asks again, and
gets structured output through a final-answer tool the model must call by its last step, never stored.

The reference's cases (``submissions.test.ts``: workflow structured output captured, the internal final-answer
tool not persisted nor kept in a recovered message; ``workflows.test.ts``: the step's result delivered) in Python."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, text, tool_call


class Verdict(BaseModel):
    """A workflow step's structured answer (top level: a submission stores it by import path)."""

    approved: bool
    reason: str


class Reviewer(ta.Think):
    """Looks an order up, then gives its verdict."""

    max_steps = 3

    @ta.tool
    async def lookup(self, order: str) -> str:
        """Look an order up."""
        return f"order {order}: 3 items, paid"


def reviewer(*steps: Any) -> tuple[Reviewer, ScriptedModel]:
    model = ScriptedModel(list(steps))
    return Reviewer("r", model=model, store=ta.MemoryStore()), model


async def test_a_step_gives_its_output_through_the_final_answer_tool_and_stores_no_trace_of_it() -> None:
    agent, model = reviewer(
        tool_call("lookup", {"order": "7"}, id="c1"),
        tool_call("final_answer", {"approved": True, "reason": "paid in full"}, id="f1"),
    )

    done = await agent.prompt("review-7", "Review order 7.", output=Verdict)

    assert (done.status, done.output) == ("completed", Verdict(approved=True, reason="paid in full"))
    assert done.submission_id == "step:review-7"
    first, _ = model.requests
    assert [t["function"]["name"] for t in first.tools] == ["lookup", "final_answer"]
    assert first.tool_choice == "required" and first.response_format is None
    assert first.tools[1]["function"]["parameters"]["required"] == ["approved", "reason"]
    stored = agent.get_messages()
    tool_names = [p.name for m in stored for p in m.parts if isinstance(p, ta.ToolPart)]
    assert tool_names == ["lookup"]  # the final-answer call is never stored


async def test_the_last_permitted_step_must_call_the_final_answer() -> None:
    agent, model = reviewer(
        tool_call("lookup", {"order": "1"}, id="c1"),
        tool_call("lookup", {"order": "2"}, id="c2"),
        tool_call("final_answer", {"approved": False, "reason": "unpaid"}, id="f1"),
    )

    done = await agent.prompt("review-1-2", "Review orders 1 and 2.", output=Verdict)

    assert done.output == Verdict(approved=False, reason="unpaid")
    assert [r.tool_choice for r in model.requests] == [
        "required",
        "required",
        {"type": "function", "function": {"name": "final_answer"}},  # max_steps = 3: the third must answer
    ]


async def test_asking_again_for_a_step_returns_its_result_without_a_new_turn() -> None:
    agent, model = reviewer(tool_call("final_answer", {"approved": True, "reason": "ok"}, id="f1"))

    first = await agent.prompt("once", "Review it.", output=Verdict)
    again = await agent.prompt("once", "Review it.", output=Verdict)

    assert again == first and len(model.requests) == 1
    assert [m.text for m in agent.get_messages() if m.role == "user"] == ["Review it."]


async def test_a_step_without_output_returns_the_reply_text() -> None:
    agent, _ = reviewer(text("All good."))

    done = await agent.prompt("plain", "Say it.")

    assert (done.status, done.text, done.output) == ("completed", "All good.", None)


async def test_a_model_that_never_gives_a_final_answer_fails_the_step() -> None:
    agent, _ = reviewer(text("I think it is fine."))

    done = await agent.prompt("no-answer", "Review it.", output=Verdict)

    assert done.status == "error"
    assert "the model gave no final answer: it never called final_answer" in (done.error or "")


async def test_a_step_that_outlasts_its_timeout_goes_on_and_is_waited_for_again() -> None:
    agent, _ = reviewer(delay(0.3) + tool_call("final_answer", {"approved": True, "reason": "slow"}, id="f1"))

    slow = r"the workflow step 'slow' did not finish in 0\.05 s; it goes on.*inspect_submission\('step:slow'\)"
    with pytest.raises(TimeoutError, match=slow):
        await agent.prompt("slow", "Review it.", output=Verdict, timeout_s=0.05)
    done = await agent.prompt("slow", "Review it.", output=Verdict, timeout_s=30)

    assert done.output == Verdict(approved=True, reason="slow")


async def test_a_tool_named_final_answer_gets_the_internal_one_a_suffix() -> None:
    class Clash(Reviewer):
        @ta.tool
        async def final_answer(self, text_: str) -> str:
            """The agent's own tool of that name."""
            return text_

    model = ScriptedModel([tool_call("final_answer_2", {"approved": True, "reason": "x"}, id="f1")])
    agent = Clash("c", model=model, store=ta.MemoryStore())

    done = await agent.prompt("clash", "Go.", output=Verdict)

    assert done.output == Verdict(approved=True, reason="x")
    assert "final_answer_2" in [t["function"]["name"] for t in model.requests[0].tools]


async def test_bad_step_names_are_refused() -> None:
    agent, _ = reviewer()
    for bad in ("", "   ", "x" * 201, 7):
        with pytest.raises(ta.ConfigurationError, match="a workflow step is named by a non-empty str"):
            await agent.prompt(bad, "hi")  # type: ignore[arg-type]


async def test_a_failed_step_runs_again_when_asked_again() -> None:
    agent, model = reviewer(
        text("I think it is fine."), tool_call("final_answer", {"approved": True, "reason": "ok"}, id="f1")
    )

    failed = await agent.prompt("flaky", "Review it.", output=Verdict)
    retried = await agent.prompt("flaky", "Review it.", output=Verdict)

    assert failed.status == "error" and retried.status == "completed"
    assert retried.output == Verdict(approved=True, reason="ok") and len(model.requests) == 2


async def test_a_step_name_stands_for_one_prompt() -> None:
    agent, _ = reviewer(tool_call("final_answer", {"approved": True, "reason": "ok"}, id="f1"))
    await agent.prompt("review", "Review order 1.", output=Verdict)

    with pytest.raises(ta.ConfigurationError, match="the workflow step 'review' ran with another prompt"):
        await agent.prompt("review", "Review order 2.", output=Verdict)
