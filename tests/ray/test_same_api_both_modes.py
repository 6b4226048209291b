"""One API in both modes: the same user function, given an agent in process, its ``LocalAgentHandle`` or an
``AgentHandle`` on Ray, sees the same things: a chat stream's ``request_id``, ``status`` and ``outcome`` before,
during and after its turn (completed, failed, aborted), ``collect()``, the errors for reading it wrongly, and
structured output through ``save_messages(output=...)`` and ``submit_messages(output=...)``."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import ray
from pydantic import BaseModel
from ray_agents import Counter

import think_actors as ta
from think_actors.testing import ScriptedModel, delay, error, text, tool_call


class City(BaseModel):
    """Structured output; at the top of a module, so the agent's actor imports it again."""

    name: str
    population: int


PARIS = City(name="Paris", population=2102650)
LYON = City(name="Lyon", population=522250)


def script() -> list[Any]:
    return [
        text("Hello there."),
        text("Again."),
        error(RuntimeError("provider down")),
        text(PARIS.model_dump_json()),
        text(LYON.model_dump_json()),
        delay(5.0) + text("never read"),
    ]


class Plain(ta.Think):
    """The agent of the test: its model comes from the constructor (a ``ScriptedModel`` travels to the actor)."""


async def what_a_user_sees(agent: Any, unique: str) -> dict[str, Any]:
    """The same calls on whatever it is given; what each call showed."""
    seen: dict[str, Any] = {}

    stream = agent.chat("hello")
    seen["before"] = (stream.status, stream.outcome, bool(re.fullmatch(r"[\w-]{8,}", stream.request_id)))
    for misuse in (lambda: list(stream), lambda: stream.__await__()):
        with pytest.raises(TypeError) as raised:
            misuse()
        seen.setdefault("misuse", []).append(str(raised.value))
    types, during = [], set()
    async for chunk in stream:
        types.append(chunk.type)
        during.add((stream.status, stream.outcome.status))
    outcome = stream.outcome
    seen["during"] = during
    seen["after"] = (stream.status, type(outcome), outcome.status, outcome.message.text, outcome.error, types)

    stream = agent.chat("again", request_id=f"{unique}-again")
    collected = await stream.collect()
    seen["collected"] = (stream.request_id, stream.status, [c.type for c in collected][-1], stream.outcome.status)

    stream = agent.chat("fail")
    failed = await stream.collect()
    seen["failed"] = (stream.status, stream.outcome.status, stream.outcome.error, failed[-1].type)

    result = await agent.save_messages("a city as JSON", output=City)
    seen["saved"] = (type(result), result.status, result.output, result.message.text)

    submitted = await agent.submit_messages("another city", output=City, submission_id=f"{unique}-sub")
    done = await agent.wait_for_submission(f"{unique}-sub", timeout_s=60)
    seen["submitted"] = (type(submitted), submitted.accepted, submitted.status, submitted.output)
    seen["submission"] = (type(done), done.status, done.output, done.text)

    stream = agent.chat("slow")
    async for chunk in stream:
        assert chunk.type == "start"
        break
    await stream.aclose()
    seen["aborted"] = (stream.status, stream.outcome.status)

    unread = agent.chat("never")
    await unread.aclose()
    seen["closed unread"] = (unread.status, unread.outcome.status)
    return seen


NOT_SYNC = (
    "a chat stream is asynchronous: read it with `async for chunk in stream`, or `await stream.collect()` for the "
    "list of chunks"
)
NOT_AWAITABLE = (
    "a chat stream is not awaitable: read it with `async for chunk in stream`, or `await stream.collect()` for the "
    "list of chunks (`await agent.save_messages(...)` runs a turn and returns its TurnResult)"
)


@pytest.mark.timeout(120)
async def test_the_same_function_sees_the_same_agent_in_process_and_on_ray(ray_runtime: Any, unique: str) -> None:
    in_process = Plain(unique, model=ScriptedModel(script()), store=ta.MemoryStore())
    local_handle = ta.LocalAgentHandle(Plain(unique, model=ScriptedModel(script()), store=ta.MemoryStore()))
    on_ray = await ta.spawn(Plain, unique, model=ScriptedModel(script()))

    seen = [await what_a_user_sees(agent, unique) for agent in (in_process, local_handle, on_ray)]

    assert seen[0] == seen[1] == seen[2]
    assert seen[0] == {
        "before": ("pending", ta.TurnOutcome(status="pending"), True),
        "misuse": [NOT_SYNC, NOT_AWAITABLE],
        "during": {("running", "running")},
        "after": (
            "completed",
            ta.TurnOutcome,
            "completed",
            "Hello there.",
            None,
            ["start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish"],
        ),
        "collected": (f"{unique}-again", "completed", "finish", "completed"),
        "failed": ("error", "error", seen[0]["failed"][2], "error"),
        "saved": (ta.TurnResult, "completed", PARIS, PARIS.model_dump_json()),
        "submitted": (ta.Submission, True, "pending", None),
        "submission": (ta.Submission, "completed", LYON, LYON.model_dump_json()),
        "aborted": ("aborted", "aborted"),
        "closed unread": ("aborted", "aborted"),
    }
    assert "provider down" in seen[0]["failed"][2]
    assert isinstance(seen[2]["saved"][2], City) and isinstance(seen[2]["submission"][2], City)


async def test_a_submission_with_a_response_format_dict_gives_the_parsed_json(ray_runtime: Any, unique: str) -> None:
    answer = {"answer": 42}
    response_format = {"type": "json_object"}
    in_process = Plain(unique, model=ScriptedModel([text(json.dumps(answer))]), store=ta.MemoryStore())
    on_ray = await ta.spawn(Plain, unique, model=ScriptedModel([text(json.dumps(answer))]))

    for agent in (in_process, on_ray):
        await agent.submit_messages("the answer", output=response_format, submission_id="s1")
        done = await agent.wait_for_submission("s1", timeout_s=60)
        assert (done.status, done.output) == ("completed", answer)
        inspected = await agent.inspect_submission("s1")
        assert inspected is not None and inspected.output == answer


async def test_a_handle_stream_read_wrongly_says_how_to_read_it(ray_runtime: Any, unique: str) -> None:
    handle = await ta.spawn(Plain, unique, model=ScriptedModel([text("hi")]))
    stream = handle.chat("hi")

    with pytest.raises(TypeError, match=r"^a chat stream is asynchronous: read it with `async for chunk in stream`"):
        for _ in stream:
            pass
    with pytest.raises(TypeError, match=r"^a chat stream is not awaitable"):
        await stream

    assert [c.type for c in await stream.collect()][-1] == "finish"


class MissingActorUser(ta.Think):
    """Calls an actor tool whose actor nobody started."""

    def __init__(self, *args: Any, actor_name: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tools = (ta.actor_tool(actor_name, "add", actor_class=Counter),)


async def test_an_actor_tool_whose_actor_is_missing_names_the_namespace_and_how_to_start_it(
    ray_runtime: Any, unique: str
) -> None:
    name = f"adder/{unique}"
    model = ScriptedModel([tool_call("add", {"a": 1, "b": 2}, id="c1"), text("no adder")])
    agent = await ta.spawn(MissingActorUser, unique, model=model, actor_name=name)

    chunks = await agent.chat("add").collect()

    [failed] = [c for c in chunks if c.type == "tool-output-error"]
    namespace = ray_runtime.namespace
    assert failed.error_text.endswith(
        f"no actor named {name!r} in Ray namespace {namespace!r}: start it there before the tool is called, e.g. "
        f"MyActor.options(name={name!r}, namespace={namespace!r}, lifetime='detached').remote() (with "
        "`think-actors serve`, in the app module's setup()), or give actor_tool(..., namespace=...) the namespace "
        "it runs in"
    )

    counter = Counter.options(name=name, namespace=namespace, lifetime="detached").remote()  # type: ignore[attr-defined]
    try:
        model_two = ScriptedModel([tool_call("add", {"a": 1, "b": 2}, id="c2"), text("3")])
        fixed = await ta.spawn(MissingActorUser, f"{unique}-2", model=model_two, actor_name=name)
        outputs = [c.output for c in await fixed.chat("add").collect() if c.type == "tool-output-available"]
        assert outputs == [3]
    finally:
        ray.kill(counter)
