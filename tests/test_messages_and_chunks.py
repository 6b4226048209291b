"""UI chunks and UIMessage parts on the wire (AI SDK JSON), and how the accumulator folds chunks into a message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from think_actors.chunks import (
    AbortChunk,
    AgentToolEventChunk,
    DataChunk,
    ErrorChunk,
    FileChunk,
    FinishChunk,
    FinishStepChunk,
    MessageAccumulator,
    MessageMetadataChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceDocumentChunk,
    SourceUrlChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
    ToolUpdate,
    parse_chunk,
)
from think_actors.messages import (
    DataPart,
    FilePart,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    UIMessage,
)

# Every chunk class with the exact AI SDK wire dict it must produce (and parse back from).
WIRE_CHUNKS: list[tuple[Any, dict[str, Any]]] = [
    (
        StartChunk(message_id="m1", message_metadata={"k": 1}),
        {"type": "start", "messageId": "m1", "messageMetadata": {"k": 1}},
    ),
    (StartStepChunk(), {"type": "start-step"}),
    (TextStartChunk(id="t1"), {"type": "text-start", "id": "t1"}),
    (TextDeltaChunk(id="t1", delta="hi"), {"type": "text-delta", "id": "t1", "delta": "hi"}),
    (TextEndChunk(id="t1"), {"type": "text-end", "id": "t1"}),
    (
        ReasoningStartChunk(id="r1", provider_metadata={"p": {"sig": "x"}}),
        {"type": "reasoning-start", "id": "r1", "providerMetadata": {"p": {"sig": "x"}}},
    ),
    (ReasoningDeltaChunk(id="r1", delta="hm"), {"type": "reasoning-delta", "id": "r1", "delta": "hm"}),
    (ReasoningEndChunk(id="r1"), {"type": "reasoning-end", "id": "r1"}),
    (
        ToolInputStartChunk(tool_call_id="c1", tool_name="search", dynamic=True, provider_executed=False),
        {
            "type": "tool-input-start",
            "toolCallId": "c1",
            "toolName": "search",
            "dynamic": True,
            "providerExecuted": False,
        },
    ),
    (
        ToolInputDeltaChunk(tool_call_id="c1", input_text_delta='{"q"'),
        {"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": '{"q"'},
    ),
    (
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="search", input={"q": "ray"}),
        {"type": "tool-input-available", "toolCallId": "c1", "toolName": "search", "input": {"q": "ray"}},
    ),
    (
        ToolInputErrorChunk(tool_call_id="c1", tool_name="search", input="{bad", error_text="bad json"),
        {
            "type": "tool-input-error",
            "toolCallId": "c1",
            "toolName": "search",
            "input": "{bad",
            "errorText": "bad json",
        },
    ),
    (
        ToolApprovalRequestChunk(approval_id="a1", tool_call_id="c1"),
        {"type": "tool-approval-request", "approvalId": "a1", "toolCallId": "c1"},
    ),
    (
        ToolOutputAvailableChunk(tool_call_id="c1", output={"hits": 3}, preliminary=True),
        {"type": "tool-output-available", "toolCallId": "c1", "output": {"hits": 3}, "preliminary": True},
    ),
    (
        ToolOutputErrorChunk(tool_call_id="c1", error_text="boom"),
        {"type": "tool-output-error", "toolCallId": "c1", "errorText": "boom"},
    ),
    (ToolOutputDeniedChunk(tool_call_id="c1"), {"type": "tool-output-denied", "toolCallId": "c1"}),
    (
        SourceUrlChunk(source_id="s1", url="https://ray.io", title="Ray"),
        {"type": "source-url", "sourceId": "s1", "url": "https://ray.io", "title": "Ray"},
    ),
    (
        SourceDocumentChunk(source_id="s2", media_type="application/pdf", title="Paper", filename="p.pdf"),
        {
            "type": "source-document",
            "sourceId": "s2",
            "mediaType": "application/pdf",
            "title": "Paper",
            "filename": "p.pdf",
        },
    ),
    (
        FileChunk(url="data:image/png;base64,AA==", media_type="image/png"),
        {"type": "file", "url": "data:image/png;base64,AA==", "mediaType": "image/png"},
    ),
    (
        DataChunk(type="data-weather", id="w1", data={"temp": 21}, transient=True),
        {"type": "data-weather", "id": "w1", "data": {"temp": 21}, "transient": True},
    ),
    (
        MessageMetadataChunk(message_metadata={"tokens": 5}),
        {"type": "message-metadata", "messageMetadata": {"tokens": 5}},
    ),
    (FinishStepChunk(), {"type": "finish-step"}),
    (
        FinishChunk(finish_reason="stop", message_metadata={"done": True}),
        {"type": "finish", "finishReason": "stop", "messageMetadata": {"done": True}},
    ),
    (ErrorChunk(error_text="rate limited"), {"type": "error", "errorText": "rate limited"}),
    (AbortChunk(reason="user"), {"type": "abort", "reason": "user"}),
    (
        AgentToolEventChunk(
            agent="research/child",
            parent_tool_call_id="c1",
            run_id="run1",
            kind="chunk",
            sequence=3,
            chunk=TextDeltaChunk(id="t", delta="x"),
        ),
        {
            "type": "agent-tool-event",
            "agent": "research/child",
            "parentToolCallId": "c1",
            "runId": "run1",
            "kind": "chunk",
            "sequence": 3,
            "chunk": {"type": "text-delta", "id": "t", "delta": "x"},
        },
    ),
]


def _wire_id(case: tuple[Any, dict[str, Any]]) -> str:
    return str(case[1]["type"])


@pytest.mark.parametrize("case", WIRE_CHUNKS, ids=_wire_id)
def test_chunk_wire_form_uses_ai_sdk_names(case: tuple[Any, dict[str, Any]]) -> None:
    chunk, wire = case
    assert chunk.to_wire() == wire
    assert json.loads(chunk.model_dump_json(exclude_none=True)) == wire


@pytest.mark.parametrize("case", WIRE_CHUNKS, ids=_wire_id)
def test_parse_chunk_round_trips_wire_dict_and_json_text(case: tuple[Any, dict[str, Any]]) -> None:
    chunk, wire = case
    assert parse_chunk(wire) == chunk
    assert type(parse_chunk(wire)) is type(chunk)
    assert parse_chunk(json.dumps(wire)) == chunk
    assert parse_chunk(json.dumps(wire).encode()) == chunk


def test_every_chunk_class_has_a_wire_case() -> None:
    from think_actors import chunks

    classes = {getattr(chunks, name) for name in chunks.__all__ if name.endswith("Chunk") and name != "UIChunk"}
    assert {type(chunk) for chunk, _ in WIRE_CHUNKS} == classes


def test_wire_form_omits_unset_optional_fields() -> None:
    assert StartChunk().to_wire() == {"type": "start"}
    assert FinishChunk().to_wire() == {"type": "finish"}
    assert ToolOutputAvailableChunk(tool_call_id="c1").to_wire() == {
        "type": "tool-output-available",
        "toolCallId": "c1",
    }
    assert AbortChunk().to_wire() == {"type": "abort"}


def test_python_side_accepts_snake_case_names_too() -> None:
    chunk = parse_chunk({"type": "tool-output-error", "tool_call_id": "c1", "error_text": "x"})
    assert chunk == ToolOutputErrorChunk(tool_call_id="c1", error_text="x")


@pytest.mark.parametrize("frame", [{"type": "step-start"}, '{"type": "step-start"}', b'{"type":"step-start"}'])
def test_step_start_alias_parses_as_start_step(frame: Any) -> None:
    chunk = parse_chunk(frame)
    assert chunk == StartStepChunk()
    assert chunk.to_wire() == {"type": "start-step"}


def test_step_start_alias_inside_a_forwarded_child_chunk() -> None:
    frame = {"type": "agent-tool-event", "agent": "child", "kind": "chunk", "chunk": {"type": "step-start"}}
    assert parse_chunk(frame).chunk == StartStepChunk()
    assert parse_chunk(json.dumps(frame)).chunk == StartStepChunk()


def test_data_chunks_of_any_name_parse_as_data_chunks() -> None:
    chunk = parse_chunk('{"type": "data-progress", "id": "p", "data": [1, 2]}')
    assert chunk == DataChunk(type="data-progress", id="p", data=[1, 2])
    assert parse_chunk({"type": "data-x"}) == DataChunk(type="data-x")


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "bogus"},
        {},
        {"type": 5},
        {"type": None},
        {"type": ["text-delta"]},
        {"type": "text-delta", "id": "t"},  # missing delta
        {"type": "text-delta", "id": 1, "delta": "x"},  # wrong field type
        {"type": "text-delta", "id": "t", "delta": "x", "extra": 1},  # unknown field
        {"type": "tool-output-available"},  # missing toolCallId
        {"type": "agent-tool-event", "agent": "c", "kind": "exploded"},
        {"type": "agent-tool-event", "agent": "c", "kind": "chunk", "chunk": {"type": "bogus"}},
        "not json",
        "[1, 2]",
        "null",
        '{"type": null}',
        b"\xff\xfe",
    ],
)
def test_bad_frames_raise_validation_error(frame: Any) -> None:
    with pytest.raises(ValidationError):
        parse_chunk(frame)


def test_chunks_are_frozen() -> None:
    chunk = TextDeltaChunk(id="t", delta="x")
    with pytest.raises(ValidationError):
        chunk.delta = "y"  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------- UIMessage parts


def test_uimessage_wire_form() -> None:
    message = UIMessage(
        id="m1",
        role="assistant",
        created_at=12.5,
        metadata={"k": "v"},
        parts=(
            TextPart(text="hi", state="done"),
            ToolPart(type="tool-search", tool_call_id="c1", state="output-error", input={"q": 1}, error_text="boom"),
        ),
    )
    assert message.to_wire() == {
        "id": "m1",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "hi", "state": "done"},
            {
                "type": "tool-search",
                "toolCallId": "c1",
                "state": "output-error",
                "input": {"q": 1},
                "errorText": "boom",
            },
        ],
        "metadata": {"k": "v"},
        "createdAt": 12.5,
    }
    assert UIMessage.model_validate(message.to_wire()) == message
    assert UIMessage.model_validate_json(message.model_dump_json()) == message


def test_part_discriminator_picks_the_class_by_type() -> None:
    message = UIMessage.model_validate(
        {
            "id": "m1",
            "role": "assistant",
            "parts": [
                {"type": "step-start"},
                {"type": "reasoning", "text": "hm", "providerMetadata": {"a": {"b": 1}}},
                {"type": "text", "text": "hi"},
                {"type": "tool-search", "toolCallId": "c1", "state": "input-available", "input": {"q": "ray"}},
                {
                    "type": "dynamic-tool",
                    "toolName": "mcp_fetch",
                    "toolCallId": "c2",
                    "state": "output-available",
                    "output": "ok",
                },
                {"type": "tool-ask", "toolCallId": "c3", "state": "approval-requested", "approval": {"id": "a1"}},
                {"type": "data-weather", "id": "w1", "data": {"temp": 21}},
                {"type": "source-url", "sourceId": "s1", "url": "https://ray.io"},
                {"type": "source-document", "sourceId": "s2", "mediaType": "text/plain", "title": "T"},
                {"type": "file", "url": "https://x/y.png", "mediaType": "image/png"},
            ],
        }
    )
    assert [type(p) for p in message.parts] == [
        StepStartPart,
        ReasoningPart,
        TextPart,
        ToolPart,
        ToolPart,
        ToolPart,
        DataPart,
        SourceUrlPart,
        SourceDocumentPart,
        FilePart,
    ]
    search, fetch, ask = message.tool_parts
    assert (search.name, search.settled) == ("search", False)
    assert (fetch.name, fetch.settled) == ("mcp_fetch", True)
    assert ask.approval == ToolApproval(id="a1")
    assert message.parts[6] == DataPart(type="data-weather", id="w1", data={"temp": 21})
    assert message.text == "hi"


@pytest.mark.parametrize(
    "part",
    [
        {"type": "bogus"},
        {"type": 7},
        {"type": None},
        {},
        {"type": "tool-search", "state": "output-available"},  # no toolCallId
        {"type": "tool-search", "toolCallId": "c1", "state": "finished"},  # unknown state
        {"type": "text"},  # no text
    ],
)
def test_invalid_parts_raise_validation_error(part: Any) -> None:
    with pytest.raises(ValidationError):
        UIMessage.model_validate({"role": "user", "parts": [part]})


# ---------------------------------------------------------------------------------------------- accumulator


def fold(*chunks: Any, message_id: str = "m1", **kwargs: Any) -> MessageAccumulator:
    acc = MessageAccumulator(message_id, **kwargs)
    for chunk in chunks:
        assert acc.apply(chunk) is None
    return acc


def parts_wire(acc: MessageAccumulator) -> list[dict[str, Any]]:
    return [p.to_wire() for p in acc.message().parts]


def test_text_and_reasoning_parts_stream_then_finish() -> None:
    acc = fold(
        StartStepChunk(),
        ReasoningStartChunk(id="r"),
        ReasoningDeltaChunk(id="r", delta="let me "),
        ReasoningDeltaChunk(id="r", delta="think"),
        TextStartChunk(id="t"),
        TextDeltaChunk(id="t", delta="hel"),
        TextDeltaChunk(id="t", delta="lo"),
    )
    assert parts_wire(acc) == [
        {"type": "step-start"},
        {"type": "reasoning", "text": "let me think", "state": "streaming"},
        {"type": "text", "text": "hello", "state": "streaming"},
    ]
    acc.apply(ReasoningEndChunk(id="r", provider_metadata={"anthropic": {"signature": "s"}}))
    acc.apply(TextEndChunk(id="t"))
    assert parts_wire(acc) == [
        {"type": "step-start"},
        {
            "type": "reasoning",
            "text": "let me think",
            "state": "done",
            "providerMetadata": {"anthropic": {"signature": "s"}},
        },
        {"type": "text", "text": "hello", "state": "done"},
    ]
    assert acc.text == "hello"
    assert acc.message().role == "assistant"
    assert acc.message().id == "m1"


def test_empty_reasoning_is_dropped() -> None:
    acc = fold(
        ReasoningStartChunk(id="r"),
        ReasoningEndChunk(id="r"),
        TextStartChunk(id="t"),
        TextDeltaChunk(id="t", delta="x"),
        TextEndChunk(id="t"),
    )
    assert parts_wire(acc) == [{"type": "text", "text": "x", "state": "done"}]


def test_two_text_blocks_are_two_parts() -> None:
    acc = fold(
        TextStartChunk(id="a"),
        TextDeltaChunk(id="a", delta="one"),
        TextEndChunk(id="a"),
        StartStepChunk(),
        TextStartChunk(id="b"),
        TextDeltaChunk(id="b", delta="two"),
        TextEndChunk(id="b"),
    )
    assert parts_wire(acc) == [
        {"type": "text", "text": "one", "state": "done"},
        {"type": "step-start"},
        {"type": "text", "text": "two", "state": "done"},
    ]
    assert acc.text == "onetwo"


def test_tool_part_moves_input_streaming_to_input_available_to_output_available() -> None:
    acc = fold(
        ToolInputStartChunk(tool_call_id="c1", tool_name="search"),
        ToolInputDeltaChunk(tool_call_id="c1", input_text_delta='{"q": '),
    )
    assert parts_wire(acc) == [
        {"type": "tool-search", "toolCallId": "c1", "toolName": "search", "state": "input-streaming"}
    ]
    acc.apply(ToolInputDeltaChunk(tool_call_id="c1", input_text_delta='"ray"}'))
    acc.apply(ToolInputAvailableChunk(tool_call_id="c1", tool_name="search", input={"q": "ray"}))
    assert parts_wire(acc) == [
        {
            "type": "tool-search",
            "toolCallId": "c1",
            "toolName": "search",
            "state": "input-available",
            "input": {"q": "ray"},
        }
    ]
    acc.apply(ToolOutputAvailableChunk(tool_call_id="c1", output={"hits": 2}))
    assert parts_wire(acc) == [
        {
            "type": "tool-search",
            "toolCallId": "c1",
            "toolName": "search",
            "state": "output-available",
            "input": {"q": "ray"},
            "output": {"hits": 2},
        }
    ]
    part = acc.tool_part("c1")
    assert part is not None and part.settled


def test_dynamic_tool_part_keeps_its_tool_name() -> None:
    acc = fold(
        ToolInputStartChunk(tool_call_id="c1", tool_name="mcp_fetch", dynamic=True, provider_executed=True),
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="mcp_fetch", input={}, dynamic=True),
    )
    assert parts_wire(acc) == [
        {
            "type": "dynamic-tool",
            "toolCallId": "c1",
            "state": "input-available",
            "toolName": "mcp_fetch",
            "input": {},
            "providerExecuted": True,
        }
    ]
    part = acc.tool_part("c1")
    assert part is not None and part.name == "mcp_fetch"


def test_tool_input_available_without_a_start_creates_the_part() -> None:
    acc = fold(ToolInputAvailableChunk(tool_call_id="c1", tool_name="add", input={"a": 1}))
    assert parts_wire(acc) == [
        {"type": "tool-add", "toolCallId": "c1", "toolName": "add", "state": "input-available", "input": {"a": 1}}
    ]


def test_tool_input_error_becomes_output_error() -> None:
    acc = fold(
        ToolInputStartChunk(tool_call_id="c1", tool_name="add"),
        ToolInputErrorChunk(tool_call_id="c1", tool_name="add", input="{oops", error_text="Invalid JSON"),
    )
    assert parts_wire(acc) == [
        {
            "type": "tool-add",
            "toolCallId": "c1",
            "toolName": "add",
            "state": "output-error",
            "input": "{oops",
            "errorText": "Invalid JSON",
        }
    ]
    # Terminal: a later input error or output does not change it.
    acc.apply(ToolInputErrorChunk(tool_call_id="c1", tool_name="add", error_text="again"))
    acc.apply(ToolOutputAvailableChunk(tool_call_id="c1", output="late"))
    assert parts_wire(acc)[0]["errorText"] == "Invalid JSON"
    assert "output" not in parts_wire(acc)[0]


def test_tool_input_error_without_a_start_creates_an_error_part() -> None:
    acc = fold(ToolInputErrorChunk(tool_call_id="c9", tool_name="nope", input={}, error_text="No such tool"))
    assert parts_wire(acc) == [
        {
            "type": "tool-nope",
            "toolCallId": "c9",
            "toolName": "nope",
            "state": "output-error",
            "input": {},
            "errorText": "No such tool",
        }
    ]


def test_replayed_tool_input_start_is_ignored() -> None:
    acc = fold(
        ToolInputStartChunk(tool_call_id="c1", tool_name="search"),
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="search", input={"q": "x"}),
        StartStepChunk(),
        ToolInputStartChunk(tool_call_id="c1", tool_name="search"),
    )
    assert parts_wire(acc) == [
        {
            "type": "tool-search",
            "toolCallId": "c1",
            "toolName": "search",
            "state": "input-available",
            "input": {"q": "x"},
        },
        {"type": "step-start"},
    ]


def test_tool_input_delta_only_counts_while_streaming() -> None:
    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="s", input={"q": 1}),
        ToolInputDeltaChunk(tool_call_id="c1", input_text_delta="junk"),
        ToolInputDeltaChunk(tool_call_id="unknown", input_text_delta="junk"),
    )
    assert parts_wire(acc) == [
        {"type": "tool-s", "toolCallId": "c1", "toolName": "s", "state": "input-available", "input": {"q": 1}}
    ]


def test_first_tool_result_wins() -> None:
    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="s", input={}),
        ToolOutputAvailableChunk(tool_call_id="c1", output="first"),
        ToolOutputAvailableChunk(tool_call_id="c1", output="second"),
        ToolOutputErrorChunk(tool_call_id="c1", error_text="late error"),
        ToolOutputDeniedChunk(tool_call_id="c1"),
    )
    assert parts_wire(acc) == [
        {
            "type": "tool-s",
            "toolCallId": "c1",
            "toolName": "s",
            "state": "output-available",
            "input": {},
            "output": "first",
        }
    ]

    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c2", tool_name="s", input={}),
        ToolOutputErrorChunk(tool_call_id="c2", error_text="boom"),
        ToolOutputAvailableChunk(tool_call_id="c2", output="late"),
    )
    assert parts_wire(acc) == [
        {
            "type": "tool-s",
            "toolCallId": "c2",
            "toolName": "s",
            "state": "output-error",
            "input": {},
            "errorText": "boom",
        }
    ]


def test_preliminary_output_is_replaced_by_the_final_one() -> None:
    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="s", input={}),
        ToolOutputAvailableChunk(tool_call_id="c1", output={"progress": 1}, preliminary=True),
    )
    assert parts_wire(acc) == [
        {
            "type": "tool-s",
            "toolCallId": "c1",
            "toolName": "s",
            "state": "output-available",
            "input": {},
            "output": {"progress": 1},
            "preliminary": True,
        }
    ]
    acc.apply(ToolOutputAvailableChunk(tool_call_id="c1", output={"progress": 2}, preliminary=True))
    acc.apply(ToolOutputAvailableChunk(tool_call_id="c1", output="final"))
    acc.apply(ToolOutputAvailableChunk(tool_call_id="c1", output="after final"))
    assert parts_wire(acc) == [
        {
            "type": "tool-s",
            "toolCallId": "c1",
            "toolName": "s",
            "state": "output-available",
            "input": {},
            "output": "final",
        }
    ]


def test_preliminary_output_can_end_in_an_error() -> None:
    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="s", input={}),
        ToolOutputAvailableChunk(tool_call_id="c1", output="partial", preliminary=True),
        ToolOutputErrorChunk(tool_call_id="c1", error_text="crashed"),
    )
    part = acc.tool_part("c1")
    assert part is not None
    assert (part.state, part.error_text, part.preliminary) == ("output-error", "crashed", None)
    acc.apply(ToolOutputAvailableChunk(tool_call_id="c1", output="too late"))
    assert acc.tool_part("c1") == part


def test_tool_approval_request_then_denial() -> None:
    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="rm", input={"path": "/"}),
        ToolApprovalRequestChunk(approval_id="a1", tool_call_id="c1"),
    )
    assert parts_wire(acc) == [
        {
            "type": "tool-rm",
            "toolCallId": "c1",
            "toolName": "rm",
            "state": "approval-requested",
            "input": {"path": "/"},
            "approval": {"id": "a1"},
        }
    ]
    acc.apply(ToolOutputDeniedChunk(tool_call_id="c1"))
    assert parts_wire(acc) == [
        {
            "type": "tool-rm",
            "toolCallId": "c1",
            "toolName": "rm",
            "state": "output-denied",
            "input": {"path": "/"},
            "approval": {"id": "a1"},
        }
    ]


def test_approval_request_for_a_settled_or_unknown_call_is_ignored() -> None:
    acc = fold(
        ToolInputAvailableChunk(tool_call_id="c1", tool_name="s", input={}),
        ToolOutputAvailableChunk(tool_call_id="c1", output=1),
        ToolApprovalRequestChunk(approval_id="a1", tool_call_id="c1"),
        ToolApprovalRequestChunk(approval_id="a2", tool_call_id="unknown"),
    )
    assert parts_wire(acc) == [
        {"type": "tool-s", "toolCallId": "c1", "toolName": "s", "state": "output-available", "input": {}, "output": 1}
    ]


def approved_message(approved: bool) -> UIMessage:
    return UIMessage(
        id="old",
        role="assistant",
        parts=(
            ToolPart(
                type="tool-rm",
                tool_call_id="c1",
                state="approval-responded",
                input={},
                approval=ToolApproval(id="a1", approved=approved),
            ),
        ),
    )


def test_tool_output_denied_is_ignored_once_approved() -> None:
    assert ToolUpdate("c1", ToolOutputDeniedChunk(tool_call_id="c1")).apply(approved_message(True)) is None
    denied = ToolUpdate("c1", ToolOutputDeniedChunk(tool_call_id="c1")).apply(approved_message(False))
    assert denied is not None and denied.tool_parts[0].state == "output-denied"


def test_data_parts_persist_and_update_in_place_by_type_and_id() -> None:
    acc = fold(
        DataChunk(type="data-status", id="s", data="working"),
        TextStartChunk(id="t"),
        TextDeltaChunk(id="t", delta="hi"),
        DataChunk(type="data-other", id="s", data="different type, same id"),
        DataChunk(type="data-status", id="s", data="done"),
        DataChunk(type="data-log", data="no id 1"),
        DataChunk(type="data-log", data="no id 2"),
        DataChunk(type="data-progress", id="p", data=50, transient=True),
    )
    assert parts_wire(acc) == [
        {"type": "data-status", "id": "s", "data": "done"},
        {"type": "text", "text": "hi", "state": "streaming"},
        {"type": "data-other", "id": "s", "data": "different type, same id"},
        {"type": "data-log", "data": "no id 1"},
        {"type": "data-log", "data": "no id 2"},
    ]


def test_transient_data_alone_is_no_content() -> None:
    acc = fold(StartStepChunk(), DataChunk(type="data-progress", id="p", data=1, transient=True))
    assert acc.has_content is False
    assert parts_wire(acc) == [{"type": "step-start"}]


def test_sources_and_files_are_appended() -> None:
    acc = fold(
        SourceUrlChunk(source_id="s1", url="https://ray.io", title="Ray"),
        SourceDocumentChunk(source_id="s2", media_type="text/plain", title="Notes"),
        FileChunk(url="https://x/y.png", media_type="image/png"),
    )
    assert parts_wire(acc) == [
        {"type": "source-url", "sourceId": "s1", "url": "https://ray.io", "title": "Ray"},
        {"type": "source-document", "sourceId": "s2", "mediaType": "text/plain", "title": "Notes"},
        {"type": "file", "url": "https://x/y.png", "mediaType": "image/png"},
    ]


def test_start_adopts_message_id_and_merges_metadata() -> None:
    acc = fold(StartChunk(message_id="server-id", message_metadata={"b": 2, "a": 9}), metadata={"a": 1})
    message = acc.message()
    assert message.id == "server-id"
    assert message.metadata == {"a": 9, "b": 2}


def test_continuation_keeps_its_message_id() -> None:
    acc = fold(StartChunk(message_id="other", message_metadata={"x": 1}), message_id="existing", continuation=True)
    assert acc.message().id == "existing"
    assert acc.message().metadata == {"x": 1}


def test_start_without_message_id_keeps_the_allocated_one() -> None:
    assert fold(StartChunk()).message().id == "m1"
    assert fold(StartChunk()).message().metadata is None


def test_finish_and_message_metadata_merge_metadata() -> None:
    acc = fold(
        StartChunk(message_metadata={"model": "m", "n": 1}),
        MessageMetadataChunk(message_metadata={"n": 2, "usage": {"in": 3}}),
        FinishStepChunk(),
        FinishChunk(finish_reason="stop", message_metadata={"finished": True}),
    )
    assert acc.message().metadata == {"model": "m", "n": 2, "usage": {"in": 3}, "finished": True}
    assert parts_wire(acc) == []


def test_error_abort_and_agent_events_add_no_parts() -> None:
    acc = fold(
        ErrorChunk(error_text="boom"),
        AbortChunk(),
        AgentToolEventChunk(agent="child", kind="chunk", chunk=TextDeltaChunk(id="t", delta="x")),
    )
    assert parts_wire(acc) == []
    assert acc.has_content is False


def test_tool_result_for_an_unknown_call_returns_a_tool_update() -> None:
    acc = MessageAccumulator("m2")
    chunk = ToolOutputAvailableChunk(tool_call_id="c-old", output={"answer": 42})
    update = acc.apply(chunk)
    assert isinstance(update, ToolUpdate)
    assert (update.tool_call_id, update.chunk) == ("c-old", chunk)
    assert acc.has_content is False  # nothing lands in the current message

    earlier = UIMessage(
        id="old",
        role="assistant",
        created_at=1.0,
        parts=(
            TextPart(text="asking the browser"),
            ToolPart(type="tool-locate", tool_call_id="c-old", state="input-available", input={}),
        ),
    )
    applied = update.apply(earlier)
    assert applied is not None
    assert applied.to_wire() == {
        "id": "old",
        "role": "assistant",
        "parts": [
            {"type": "text", "text": "asking the browser"},
            {
                "type": "tool-locate",
                "toolCallId": "c-old",
                "state": "output-available",
                "input": {},
                "output": {"answer": 42},
            },
        ],
        "createdAt": 1.0,
    }
    # First write wins: the settled call is not updated again, and an unrelated message is left alone.
    assert update.apply(applied) is None
    assert ToolUpdate("c-old", ToolOutputErrorChunk(tool_call_id="c-old", error_text="late")).apply(applied) is None
    assert update.apply(UIMessage(id="u", role="user", parts=(TextPart(text="hi"),))) is None


def test_tool_error_and_denial_for_unknown_calls_are_tool_updates() -> None:
    acc = MessageAccumulator("m2")
    error_update = acc.apply(ToolOutputErrorChunk(tool_call_id="x", error_text="browser failed"))
    denied_update = acc.apply(ToolOutputDeniedChunk(tool_call_id="y"))
    assert isinstance(error_update, ToolUpdate) and isinstance(denied_update, ToolUpdate)
    earlier = UIMessage(
        id="old",
        role="assistant",
        parts=(
            ToolPart(type="tool-a", tool_call_id="x", state="input-available", input={}),
            ToolPart(
                type="tool-b", tool_call_id="y", state="approval-requested", input={}, approval=ToolApproval(id="a1")
            ),
        ),
    )
    after_error = error_update.apply(earlier)
    assert after_error is not None
    after_both = denied_update.apply(after_error)
    assert after_both is not None
    assert [(p.state, p.error_text) for p in after_both.tool_parts] == [
        ("output-error", "browser failed"),
        ("output-denied", None),
    ]


def test_has_content_is_false_with_only_step_starts() -> None:
    acc = fold(StartChunk(), StartStepChunk(), FinishStepChunk(), StartStepChunk())
    assert acc.has_content is False
    acc.apply(TextStartChunk(id="t"))
    assert acc.has_content is True


def test_delta_without_a_start_still_lands_in_a_part() -> None:
    acc = fold(TextDeltaChunk(id="t", delta="orphan"), ReasoningDeltaChunk(id="r", delta="why"))
    assert parts_wire(acc) == [
        {"type": "text", "text": "orphan", "state": "streaming"},
        {"type": "reasoning", "text": "why", "state": "streaming"},
    ]
