"""ScriptedModel: plays scripted steps in order, records requests, and fails loudly on a mismatch."""

from __future__ import annotations

import asyncio
import json
import pickle
import time
from typing import Any

import pytest

from think_actors.errors import RateLimitError, ScriptError
from think_actors.models import (
    FileEvent,
    FinishEvent,
    ModelClient,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    count_tokens,
    model_info,
    resolve_model,
)
from think_actors.testing import (
    ScriptedModel,
    Step,
    delay,
    error,
    file,
    reasoning,
    source,
    step,
    text,
    tool_call,
)

USAGE = Usage(input_tokens=1, output_tokens=2, total_tokens=3)


def request(content: str = "hi") -> ModelRequest:
    return ModelRequest(model="scripted", messages=[{"role": "user", "content": content}])


def without_metadata(events: list[Any], model: ScriptedModel) -> list[Any]:
    """``events`` after their leading ResponseMetadata, which must name this model and its latest request."""
    metadata = events[0]
    assert metadata == ResponseMetadata(f"scripted-{len(model.requests)}", model.model_id, metadata.timestamp)
    assert not any(isinstance(event, ResponseMetadata) for event in events[1:])
    return events[1:]


async def play(model: ScriptedModel, req: ModelRequest | None = None) -> list[Any]:
    """One request's events, without the leading ResponseMetadata."""
    return without_metadata([event async for event in model.stream(req or request())], model)


async def events_of(scripted: Step) -> list[Any]:
    """The events of one step, without the finish event."""
    events = await play(ScriptedModel([scripted]))
    assert isinstance(events[-1], FinishEvent)
    return events[:-1]


def test_scripted_model_is_a_model_client() -> None:
    model = ScriptedModel(model_id="gpt-fake")
    assert isinstance(model, ModelClient)
    assert resolve_model(model) == (model, "gpt-fake")
    assert ScriptedModel().model_id == "scripted"


async def test_plays_steps_in_order_and_records_requests() -> None:
    model = ScriptedModel([text("first"), text("second")])
    first, second = request("one"), request("two")

    assert await play(model, first) == [TextDelta("first"), FinishEvent("stop", Usage(1, 2, 3))]
    assert model.remaining == 1
    assert await play(model, second) == [TextDelta("second"), FinishEvent("stop", Usage(1, 2, 3))]

    assert model.requests == [first, second]
    assert model.remaining == 0
    model.assert_complete()


async def test_raises_script_error_when_out_of_steps() -> None:
    model = ScriptedModel([text("only")])
    await play(model)
    extra = request("again")
    with pytest.raises(ScriptError, match="ran out of steps: request 2 arrived after all 1 scripted steps"):
        model.stream(extra)
    assert model.requests[-1] is extra  # the unexpected request is still recorded

    with pytest.raises(ScriptError, match="request 1 arrived after all 0"):
        ScriptedModel().stream(request())


async def test_assert_complete_raises_when_steps_are_left() -> None:
    model = ScriptedModel([text("a"), text("b"), text("c")])
    await play(model)
    with pytest.raises(ScriptError, match="2 of 3 steps were never requested"):
        model.assert_complete()


async def test_extend_and_add_append_steps(scripted: ScriptedModel) -> None:
    scripted.extend([text("a")])
    scripted.add(text("b"), text("c"))
    assert [(await play(scripted))[0] for _ in range(3)] == [TextDelta("a"), TextDelta("b"), TextDelta("c")]
    scripted.assert_complete()


@pytest.mark.parametrize(
    ("value", "kwargs", "pieces"),
    [
        ("hello world", {}, ["hello world"]),
        ("hello world", {"chunk_size": 4}, ["hell", "o wo", "rld"]),
        ("hello", {"chunk_size": 1}, ["h", "e", "l", "l", "o"]),
        ("hello", {"chunk_size": 5}, ["hello"]),
        ("hello", {"chunk_size": 50}, ["hello"]),
        ("abcdefg", {"chunks": 3}, ["abc", "def", "g"]),
        ("abcdef", {"chunks": 2}, ["abc", "def"]),
        ("ab", {"chunks": 5}, ["a", "b"]),
        ("", {}, []),
    ],
)
async def test_text_is_streamed_in_pieces(value: str, kwargs: dict[str, Any], pieces: list[str]) -> None:
    assert await events_of(text(value, **kwargs)) == [TextDelta(p) for p in pieces]


async def test_reasoning_is_streamed_in_pieces() -> None:
    assert await events_of(reasoning("thinking", chunk_size=3)) == [
        ReasoningDelta("thi"),
        ReasoningDelta("nki"),
        ReasoningDelta("ng"),
    ]


async def test_tool_call_arrives_as_fragments_that_concatenate_to_its_json() -> None:
    arguments = {"q": "ray docs", "limit": 3}
    events = await events_of(tool_call("search", arguments, id="call_1"))
    raw = json.dumps(arguments)
    half = len(raw) // 2
    assert events == [ToolCallDelta(0, "call_1", "search", raw[:half]), ToolCallDelta(0, None, None, raw[half:])]
    assert json.loads("".join(e.arguments for e in events)) == arguments


async def test_tool_call_string_arguments_are_sent_verbatim() -> None:
    events = await events_of(tool_call("search", '{"q": broken', id="c"))
    assert "".join(e.arguments for e in events) == '{"q": broken'
    assert await events_of(tool_call("ping", "", id="c")) == [ToolCallDelta(0, "c", "ping", "")]


def test_tool_call_ids_are_unique_by_default() -> None:
    first, second = tool_call("a", {}), tool_call("a", {})
    assert first.items[0].id.startswith("call_")
    assert first.items[0].id != second.items[0].id


async def test_step_combines_text_and_parallel_calls_with_indexes() -> None:
    model = ScriptedModel(
        [step(text("Checking both."), tool_call("a", {"x": 1}, id="c1"), tool_call("b", {}, id="c2"), usage=USAGE)]
    )
    assert await play(model) == [
        TextDelta("Checking both."),
        ToolCallDelta(0, "c1", "a", '{"x"'),
        ToolCallDelta(0, None, None, ": 1}"),
        ToolCallDelta(1, "c2", "b", "{"),
        ToolCallDelta(1, None, None, "}"),
        FinishEvent("tool_calls", USAGE),
    ]


async def test_finish_reason_is_tool_calls_with_calls_and_stop_without() -> None:
    assert (await play(ScriptedModel([tool_call("a", {})])))[-1].finish_reason == "tool_calls"
    assert (await play(ScriptedModel([text("x")])))[-1].finish_reason == "stop"
    assert (await play(ScriptedModel([Step()])))[-1].finish_reason == "stop"
    assert (await play(ScriptedModel([step(text("cut"), finish_reason="length")])))[-1].finish_reason == "length"


async def test_default_usage_estimates_tokens_from_characters() -> None:
    model = ScriptedModel([text("hello")])
    events = await play(model, request("abcdefgh"))
    assert events[-1] == FinishEvent("stop", Usage(input_tokens=3, output_tokens=2, total_tokens=5))


async def test_step_usage_overrides_the_estimate() -> None:
    assert (await play(ScriptedModel([step(text("x"), usage=USAGE)])))[-1] == FinishEvent("stop", USAGE)


def test_step_addition_keeps_items_in_order() -> None:
    combined = text("a") + tool_call("t", {}, id="c") + step(usage=USAGE, finish_reason="length")
    assert [type(item).__name__ for item in combined.items] == ["TextDelta", "_ToolCall"]
    assert (combined.finish_reason, combined.usage) == ("length", USAGE)


async def test_error_before_any_output() -> None:
    model = ScriptedModel([error(RateLimitError("slow down", status_code=429))])
    stream = model.stream(request())
    with pytest.raises(RateLimitError, match="slow down") as raised:
        await stream.__anext__()
    assert raised.value.status_code == 429


async def test_error_after_partial_output_raises_mid_stream() -> None:
    model = ScriptedModel(
        [error(RateLimitError("cut off"), after=step(text("partial", chunk_size=4), tool_call("a", {}, id="c1")))]
    )
    received: list[Any] = []
    with pytest.raises(RateLimitError, match="cut off"):
        async for event in model.stream(request()):
            received.append(event)
    assert without_metadata(received, model) == [
        TextDelta("part"),
        TextDelta("ial"),
        ToolCallDelta(0, "c1", "a", "{"),
        ToolCallDelta(0, None, None, "}"),
    ]
    model.assert_complete()


async def test_delay_pauses_between_events(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[Any] = []
    real_sleep = asyncio.sleep

    async def recording_sleep(seconds: float) -> None:
        log.append(("sleep", seconds))
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", recording_sleep)
    model = ScriptedModel([step(delay(0.5), text("a"), delay(0.25), text("b"))])
    async for event in model.stream(request()):
        log.append(event)
    # The leading pause is the time to the first chunk, which is where the response metadata arrives.
    assert log[0] == ("sleep", 0.5)
    assert without_metadata(log[1:], model) == [
        TextDelta("a"),
        ("sleep", 0.25),
        TextDelta("b"),
        FinishEvent("stop", Usage(1, 1, 2)),
    ]


async def test_delay_is_a_real_pause_that_can_be_cancelled() -> None:
    model = ScriptedModel([step(text("a"), delay(60), text("b"))])
    received: list[Any] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for event in model.stream(request()):
            received.append(event)
            if isinstance(event, TextDelta):
                first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert without_metadata(received, model) == [TextDelta("a")]


# -- response metadata, sources, files, finish details -------------------------------------------------------------


async def test_each_step_starts_with_response_metadata() -> None:
    model = ScriptedModel([text("a"), Step()], model_id="fake-model")
    before = time.time()

    first: list[Any] = [event async for event in model.stream(request())]
    second: list[Any] = [event async for event in model.stream(request())]

    first_at, second_at = first[0].timestamp, second[0].timestamp
    assert isinstance(first_at, float)
    assert isinstance(second_at, float)
    assert before <= first_at <= second_at <= time.time()
    assert first == [
        ResponseMetadata("scripted-1", "fake-model", first_at),
        TextDelta("a"),
        FinishEvent("stop", Usage(1, 1, 2)),
    ]
    # A step with no output still streams its metadata, then its finish.
    assert second == [ResponseMetadata("scripted-2", "fake-model", second_at), FinishEvent("stop", Usage(1, 1, 2))]


async def test_error_before_any_output_yields_no_metadata() -> None:
    model = ScriptedModel([step(delay(0), error(RateLimitError("refused")))])
    received: list[Any] = []
    with pytest.raises(RateLimitError, match="refused"):
        async for event in model.stream(request()):
            received.append(event)
    assert received == []  # as when a provider refuses the request: no chunk ever arrives


async def test_sources_and_files_stream_in_order() -> None:
    model = ScriptedModel(
        [
            step(
                text("See the docs."),
                source("https://docs.ray.io", title="Ray docs", source_id="s1"),
                source("https://ray.io", source_id="s2"),
                file("data:image/png;base64,iVBORw0KGgo=", "image/png"),
            )
        ]
    )
    assert await play(model) == [
        TextDelta("See the docs."),
        SourceEvent("s1", "https://docs.ray.io", "Ray docs"),
        SourceEvent("s2", "https://ray.io", None),
        FileEvent("data:image/png;base64,iVBORw0KGgo=", "image/png"),
        FinishEvent("stop", Usage(1, 4, 5)),  # sources and files are not output text
    ]


def test_source_ids_are_unique_by_default() -> None:
    first, second = source("https://a.example"), source("https://a.example")
    assert first.items[0].source_id.startswith("src_")
    assert first.items[0].source_id != second.items[0].source_id


async def test_step_carries_warnings_metadata_and_cost_to_the_finish() -> None:
    model = ScriptedModel(
        [
            step(
                text("ok"),
                usage=USAGE,
                warnings=("top_k is not supported",),
                provider_metadata={"region": "eu"},
                cost_usd=0.25,
            )
        ]
    )
    assert await play(model) == [
        TextDelta("ok"),
        FinishEvent(
            "stop", USAGE, warnings=("top_k is not supported",), provider_metadata={"region": "eu"}, cost_usd=0.25
        ),
    ]


def test_step_addition_merges_finish_details() -> None:
    combined = step(text("a"), warnings=("w1",), cost_usd=0.5) + step(
        text("b"), warnings=("w2",), provider_metadata={"k": 1}
    )
    assert (combined.warnings, combined.provider_metadata, combined.cost_usd) == (("w1", "w2"), {"k": 1}, 0.5)


async def test_scripted_events_pickle() -> None:
    model = ScriptedModel([step(text("a"), source("https://a.example", source_id="s"), file("data:,x", "text/plain"))])
    events = [event async for event in model.stream(request())]
    assert pickle.loads(pickle.dumps(events)) == events


# -- a list or tuple is one step; anything else is refused ----------------------------------------------------------


async def test_a_list_of_steps_is_one_combined_step() -> None:
    model = ScriptedModel([[tool_call("a", {}, id="c1"), tool_call("b", {}, id="c2")], text("done")])

    assert model.steps[0] == step(tool_call("a", {}, id="c1"), tool_call("b", {}, id="c2"))
    assert await play(model) == [
        ToolCallDelta(0, "c1", "a", "{"),
        ToolCallDelta(0, None, None, "}"),
        ToolCallDelta(1, "c2", "b", "{"),
        ToolCallDelta(1, None, None, "}"),
        FinishEvent("tool_calls", Usage(1, 2, 3)),
    ]
    assert await play(model) == [TextDelta("done"), FinishEvent("stop", Usage(1, 2, 3))]
    model.assert_complete()


async def test_extend_and_add_accept_lists_and_tuples_as_one_step(scripted: ScriptedModel) -> None:
    scripted.extend([(text("a"), text("b"))])
    scripted.add([text("c"), text("d")], text("e"))
    scripted.add(step(text("f")))
    assert len(scripted.steps) == 4
    assert [[e.text for e in (await play(scripted))[:-1]] for _ in range(4)] == [["a", "b"], ["c", "d"], ["e"], ["f"]]


def test_a_single_step_is_a_one_step_script() -> None:
    assert ScriptedModel(text("hi")).steps == [text("hi")]


@pytest.mark.parametrize(
    ("steps", "shown"),
    [
        (["hello"], "got 'hello'; for text, pass text('hello')"),
        ([text("a"), {"role": "assistant"}], "got {'role': 'assistant'}"),
        ([[text("a"), "b"]], "got [Step("),
        ([[[text("a")]]], "got [[Step("),
        ([None], "got None"),
    ],
)
def test_anything_else_is_refused_at_construction(steps: list[Any], shown: str) -> None:
    with pytest.raises(TypeError) as raised:
        ScriptedModel(steps)
    message = str(raised.value)
    assert message.startswith(
        "ScriptedModel takes steps built with text(), tool_call(), step(), ... or a list/tuple of them played as one "
        "step; "
    )
    assert shown in message


def test_a_bare_string_is_refused_with_a_hint(scripted: ScriptedModel) -> None:
    with pytest.raises(TypeError, match=r"for text, pass \[text\('hello'\)\]"):
        ScriptedModel("hello")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got 'x'"):
        scripted.add("x")  # type: ignore[arg-type]
    assert scripted.steps == []


# -- optional capabilities ----------------------------------------------------------------------------------------


async def test_context_window_is_reported_as_model_info() -> None:
    windowed = ScriptedModel(context_window=4096)
    assert await windowed.model_info("scripted") == ModelInfo(max_input_tokens=4096)
    assert await model_info(windowed, "scripted") == ModelInfo(max_input_tokens=4096)
    assert await model_info(ScriptedModel(), "scripted") is None


async def test_scripted_model_cannot_count_tokens() -> None:
    model = ScriptedModel(context_window=4096)
    assert not hasattr(model, "count_tokens")
    assert await count_tokens(model, "scripted", [{"role": "user", "content": "hi"}]) is None


async def test_capability_helpers_answer_none_when_the_client_fails() -> None:
    class Broken(ScriptedModel):
        async def model_info(self, model: str) -> ModelInfo | None:
            raise RuntimeError("down")

        async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
            raise RuntimeError("down")

    class Counting(ScriptedModel):
        async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
            return 7 * len(messages)

    assert await model_info(Broken(), "m") is None
    assert await count_tokens(Broken(), "m", []) is None
    assert await count_tokens(Counting(), "m", [{"role": "user", "content": "hi"}]) == 7
