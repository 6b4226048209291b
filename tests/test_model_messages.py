"""What the model is sent: transcript repair, truncation of older messages, OpenAI conversion, continue checkpoint."""

from __future__ import annotations

import json
from typing import Any

import pytest

import think_actors as ta
from think_actors._turn.convert import (
    CONTINUE_TEXT,
    INTERRUPTED_TOOL_TEXT,
    default_repair,
    ensure_continue_checkpoint,
    repair_transcript,
    to_model_messages,
    truncate_older,
)
from think_actors.messages import (
    FilePart,
    MessagePart,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    UIMessage,
    user_message,
)
from think_actors.testing import ScriptedModel, text

INTERRUPTED = "The tool call was interrupted before a result was recorded."
CONTINUE = "Continue your previous response from exactly where it left off. Do not repeat any of it."


def tool(call_id: str, state: Any, *, name: str = "search", **fields: Any) -> ToolPart:
    return ToolPart(type=f"tool-{name}", tool_call_id=call_id, state=state, **fields)


def assistant(*parts: MessagePart, id: str = "a1") -> UIMessage:
    return UIMessage(id=id, role="assistant", parts=parts, created_at=1.0)


def test_reference_texts() -> None:
    assert INTERRUPTED_TOOL_TEXT == INTERRUPTED
    assert CONTINUE_TEXT == CONTINUE


# ---------------------------------------------------------------------------------------------- repair


def test_repair_turns_unsettled_tool_parts_into_errors() -> None:
    approval = ToolApproval(id="ap4", approved=True)
    message = assistant(
        StepStartPart(),
        TextPart(text="working"),
        tool("c1", "input-streaming"),
        tool("c2", "input-available", input={"q": "ray"}),
        tool("c3", "approval-requested", input={"q": "rm"}, approval=ToolApproval(id="ap3")),
        tool("c4", "approval-responded", input={"q": "ok"}, approval=approval),
        tool("c5", "output-available", input={"q": "done"}, output="result"),
        tool("c6", "output-denied", input={}),
    )
    user = user_message("hi", id="u1")
    repaired, changed, ids = repair_transcript([user, message], default_repair)

    expected = assistant(
        StepStartPart(),
        TextPart(text="working"),
        tool("c1", "output-error", input={}, error_text=INTERRUPTED),
        tool("c2", "output-error", input={"q": "ray"}, error_text=INTERRUPTED),
        # An approval requested and never given is no part of a settled call (the AI SDK's output-error has only
        # an approval that was granted).
        tool("c3", "output-error", input={"q": "rm"}, error_text=INTERRUPTED),
        tool("c4", "approval-responded", input={"q": "ok"}, approval=approval),
        tool("c5", "output-available", input={"q": "done"}, output="result"),
        tool("c6", "output-denied", input={}),
    )
    assert repaired == [user, expected]
    assert repaired[0] is user
    assert changed == [expected]
    assert ids == ["c1", "c2", "c3"]


def test_repair_leaves_a_clean_transcript_alone() -> None:
    messages = [
        user_message("hi", id="u1"),
        assistant(tool("c1", "output-available", input={"q": 1}, output=2), TextPart(text="two")),
        assistant(tool("c2", "approval-responded", input={}, approval=ToolApproval(id="a", approved=False)), id="a2"),
    ]
    repaired, changed, ids = repair_transcript(messages, default_repair)
    assert repaired == messages
    assert all(a is b for a, b in zip(repaired, messages, strict=True))
    assert (changed, ids) == ([], [])


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ('{"q": "ray", "n": 2}', {"q": "ray", "n": 2}),
        (None, {}),
        ("", {}),
        ("not json", {}),
        ("[1, 2]", {}),
        ('"text"', {}),
        ([1, 2], {}),
        (42, {}),
        (3.5, {}),
        (True, {}),
    ],
)
def test_repair_normalizes_malformed_inputs(raw: Any, normalized: dict[str, Any]) -> None:
    message = assistant(tool("c1", "output-available", input=raw, output="ok"))
    repaired, changed, ids = repair_transcript([message], default_repair)
    expected = assistant(tool("c1", "output-available", input=normalized, output="ok"))
    assert repaired == [expected]
    assert changed == [expected]
    assert ids == []  # normalised, not repaired


def test_repair_keeps_a_plain_object_input() -> None:
    message = assistant(tool("c1", "output-error", input={"a": [1]}, error_text="x"))
    assert repair_transcript([message], default_repair) == ([message], [], [])


def test_custom_repair_hook_can_turn_a_call_into_text() -> None:
    def as_text(part: ToolPart) -> MessagePart:
        return TextPart(text=f"(I asked: {part.input['question']})")

    message = assistant(
        TextPart(text="One question."),
        tool("c1", "input-available", name="ask_user", input={"question": "Which city?"}),
    )
    repaired, changed, ids = repair_transcript([message], as_text)
    expected = assistant(TextPart(text="One question."), TextPart(text="(I asked: Which city?)"))
    assert repaired == changed == [expected]
    assert ids == ["c1"]


def test_custom_repair_hook_returning_none_drops_the_part() -> None:
    message = assistant(TextPart(text="hi"), tool("c1", "input-available", input={}))
    repaired, changed, ids = repair_transcript([message], lambda part: None)
    assert repaired == changed == [assistant(TextPart(text="hi"))]
    assert ids == ["c1"]


# ---------------------------------------------------------------------------------------------- truncation


def test_truncate_older_cuts_big_outputs_and_texts_outside_the_last_four() -> None:
    big_dict = {"rows": ["x" * 100] * 10}
    old_user = user_message("u" * 10_050, id="u1")
    old_assistant = assistant(
        TextPart(text="t" * 10_000),  # at the limit: kept
        tool("c1", "output-available", input={}, output="o" * 600),
        tool("c2", "output-available", input={}, output="p" * 500),  # at the limit: kept
        tool("c3", "output-available", input={}, output=big_dict),
        tool("c4", "output-error", input={}, error_text="e" * 600),  # only outputs are truncated
        id="a1",
    )
    recent = [
        user_message("v" * 20_000, id="u2"),
        assistant(tool("c5", "output-available", input={}, output="q" * 5_000), id="a2"),
        user_message("w" * 10_001, id="u3"),
        assistant(TextPart(text="z" * 10_001), id="a3"),
    ]
    out = truncate_older([old_user, old_assistant, *recent])

    dumped = json.dumps(big_dict)
    assert out[0] == user_message("u" * 10_000 + "... [truncated 50 chars]", id="u1").model_copy(
        update={"created_at": old_user.created_at}
    )
    assert out[1] == assistant(
        TextPart(text="t" * 10_000),
        tool("c1", "output-available", input={}, output="o" * 500 + "... [truncated 100 chars]"),
        tool("c2", "output-available", input={}, output="p" * 500),
        tool("c3", "output-available", input={}, output=dumped[:500] + f"... [truncated {len(dumped) - 500} chars]"),
        tool("c4", "output-error", input={}, error_text="e" * 600),
        id="a1",
    )
    assert all(a is b for a, b in zip(out[2:], recent, strict=True))


def test_truncate_older_keeps_four_or_fewer_messages_whole() -> None:
    messages = [user_message("x" * 20_000, id=f"u{i}") for i in range(4)]
    assert truncate_older(messages) is messages


def test_truncate_older_returns_unchanged_old_messages_as_is() -> None:
    messages = [user_message(f"m{i}", id=f"u{i}") for i in range(6)]
    out = truncate_older(messages)
    assert all(a is b for a, b in zip(out, messages, strict=True))


# ---------------------------------------------------------------------------------------------- conversion


def test_to_model_messages_splits_assistant_steps_at_step_start() -> None:
    messages = [
        UIMessage(id="s", role="system", parts=(TextPart(text="Be brief."),)),
        user_message("find ray docs", id="u1"),
        assistant(
            StepStartPart(),
            ReasoningPart(text="I should search"),
            TextPart(text="Searching."),
            tool("c1", "output-available", input={"q": "ray"}, output={"hits": 1}),
            tool("c2", "output-error", name="add", input={"a": 1}, error_text="boom"),
            ToolPart(
                type="dynamic-tool",
                tool_name="mcp_fetch",
                tool_call_id="c3",
                state="output-available",
                input={"url": "u"},
                output="page",
            ),
            StepStartPart(),
            tool("c4", "output-denied", name="rm", input={}),
            tool(
                "c5",
                "output-denied",
                name="rm",
                input={},
                approval=ToolApproval(id="a", approved=False, reason="too risky"),
            ),
            StepStartPart(),
            ReasoningPart(text="done now"),
            TextPart(text="Found "),
            TextPart(text="it."),
        ),
    ]
    assert to_model_messages(messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "find ray docs"},
        {
            "role": "assistant",
            "content": "Searching.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "ray"}'}},
                {"id": "c2", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
                {"id": "c3", "type": "function", "function": {"name": "mcp_fetch", "arguments": '{"url": "u"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"hits": 1}'},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: boom"},
        {"role": "tool", "tool_call_id": "c3", "content": "page"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c4", "type": "function", "function": {"name": "rm", "arguments": "{}"}},
                {"id": "c5", "type": "function", "function": {"name": "rm", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c4", "content": "The tool call was denied by the user."},
        {"role": "tool", "tool_call_id": "c5", "content": "The tool call was denied: too risky."},
        {"role": "assistant", "content": "Found it."},
    ]


def test_to_model_messages_drops_incomplete_calls_and_reasoning_only_steps() -> None:
    messages = [
        user_message("hi", id="u1"),
        assistant(
            StepStartPart(),
            ReasoningPart(text="hmm"),
            tool("c1", "input-available", input={}),
            StepStartPart(),
            TextPart(text="Hello"),
            tool("c2", "approval-requested", input={}),
        ),
    ]
    assert to_model_messages(messages) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello"},
    ]


def test_to_model_messages_sends_files_as_content_parts() -> None:
    message = UIMessage(
        id="u1",
        role="user",
        parts=(
            TextPart(text="what is this?"),
            FilePart(url="data:image/png;base64,AA==", media_type="image/png"),
            FilePart(url="data:application/pdf;base64,BB==", media_type="application/pdf", filename="doc.pdf"),
            FilePart(url="https://x/y.csv", media_type="text/csv"),
        ),
    )
    assert to_model_messages([message]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,BB==", "filename": "doc.pdf"}},
                {"type": "file", "file": {"file_data": "https://x/y.csv", "filename": "file"}},
            ],
        }
    ]


def test_to_model_messages_joins_several_user_texts_and_skips_empty_messages() -> None:
    messages = [
        UIMessage(id="u1", role="user", parts=(TextPart(text="one"), TextPart(text="two"))),
        UIMessage(id="u2", role="user", parts=()),
        UIMessage(id="s1", role="system", parts=()),
    ]
    assert to_model_messages(messages) == [{"role": "user", "content": "one\ntwo"}]


def test_continue_checkpoint_only_after_an_assistant_message() -> None:
    ends_with_assistant = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]
    assert ensure_continue_checkpoint(ends_with_assistant) == [
        *ends_with_assistant,
        {"role": "user", "content": CONTINUE},
    ]
    assert ends_with_assistant == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]

    ends_with_tool = [
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "tool_call_id": "c", "content": "x"},
    ]
    ends_with_user = [{"role": "user", "content": "hi"}]
    for messages in (ends_with_tool, ends_with_user, []):
        assert ensure_continue_checkpoint(messages) == messages


# ---------------------------------------------------------------------------------------------- through an agent


def dangling_transcript() -> list[UIMessage]:
    return [
        user_message("find the ray docs", id="u1"),
        UIMessage(
            id="a1",
            role="assistant",
            parts=(
                StepStartPart(),
                TextPart(text="Searching."),
                tool("c1", "input-available", input={"q": "ray"}),
            ),
        ),
    ]


async def test_agent_repairs_a_dangling_tool_call_before_the_next_request(
    scripted: ScriptedModel, memory_store: ta.MemoryStore
) -> None:
    agent = ta.Think(model=scripted, store=memory_store)
    await agent.add_messages(dangling_transcript())
    scripted.add(text("That search was cut off; try again?"))

    result = await agent.save_messages("any luck?")

    assert result.status == "completed"
    assert scripted.requests[0].messages[1:] == [
        {"role": "user", "content": "find the ray docs"},
        {
            "role": "assistant",
            "content": "Searching.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "ray"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": f"Error: {INTERRUPTED}"},
        {"role": "user", "content": "any luck?"},
    ]
    repaired_part = tool("c1", "output-error", input={"q": "ray"}, error_text=INTERRUPTED)
    stored = await memory_store.get_message("a1")
    assert stored is not None
    assert stored.parts == (StepStartPart(), TextPart(text="Searching."), repaired_part)
    assert agent.get_messages()[1].parts == stored.parts
    assert [m.id for m in await memory_store.load_messages()][:2] == ["u1", "a1"]
    scripted.assert_complete()


async def test_agent_repair_hook_is_honoured(scripted: ScriptedModel, memory_store: ta.MemoryStore) -> None:
    class AskingAgent(ta.Think):
        def repair_interrupted_tool_part(self, part: ToolPart) -> ToolPart | MessagePart | None:
            return TextPart(text=f"[{part.name} got no answer]")

    agent = AskingAgent(model=scripted, store=memory_store)
    await agent.add_messages(dangling_transcript())
    scripted.add(text("ok"))

    await agent.save_messages("next")

    assert scripted.requests[0].messages[1:] == [
        {"role": "user", "content": "find the ray docs"},
        {"role": "assistant", "content": "Searching.[search got no answer]"},
        {"role": "user", "content": "next"},
    ]
    stored = await memory_store.get_message("a1")
    assert stored is not None
    assert stored.parts == (StepStartPart(), TextPart(text="Searching."), TextPart(text="[search got no answer]"))
    scripted.assert_complete()
