"""Structured output through a final-answer tool (Think's ``think_final_answer``), for workflow prompts.

A JSON-mode answer cannot follow tool calls on every provider, so a prompt run as a workflow step asks for its
structured output the way Think does: the turn offers one more tool, ``final_answer``, whose parameters are the
output model's schema; the model must call a tool every step (``tool_choice="required"``) and must call this one on
the last step it is allowed; the turn ends at that call, and the call's input, validated, is the turn's output.
The call never runs and is never stored: its parts are removed from the reply before it is persisted (and from a
reply recovery rebuilds), so the conversation holds only what the model said and did on the way.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..messages import StepStartPart, ToolPart, UIMessage
from ..tools import Tool

__all__ = [
    "FINAL_ANSWER",
    "final_answer_name",
    "final_answer_tool",
    "final_output",
    "has_content",
    "without_final_answer",
]

FINAL_ANSWER = "final_answer"


def final_answer_name(tools: dict[str, Any]) -> str:
    """``final_answer``, or ``final_answer_2``, ... when the agent has a tool of that name."""
    name, n = FINAL_ANSWER, 1
    while name in tools:
        n += 1
        name = f"{FINAL_ANSWER}_{n}"
    return name


def final_answer_tool(name: str, output: type[BaseModel]) -> Tool:
    """The execute-less tool whose input is the turn's output."""
    return Tool(
        name,
        f"Give your final answer, as {output.__name__}, once you have everything you need. Call this last; its "
        "input is your answer.",
        output.model_json_schema(),
    )


def final_output(run: Any) -> Any:
    """The validated input of the turn's final-answer call; ValueError when the model made none."""
    for step in reversed(run.steps):
        for call in reversed(step.tool_calls):
            if call.tool_name == run.final_answer:
                output_type: type[BaseModel] = run.output_type
                return output_type.model_validate(call.input)
    raise ValueError(f"the model gave no final answer: it never called {run.final_answer}")


def without_final_answer(message: UIMessage, name: str) -> UIMessage:
    """``message`` without the parts of the final-answer call (what is stored of the reply)."""
    parts = tuple(p for p in message.parts if not (isinstance(p, ToolPart) and p.name == name))
    return message if len(parts) == len(message.parts) else message.model_copy(update={"parts": parts})


def has_content(message: UIMessage) -> bool:
    """Whether a reply holds anything but step boundaries (one that does not is not stored)."""
    return any(not isinstance(p, StepStartPart) for p in message.parts)
