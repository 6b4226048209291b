"""Extensions (Think's extension hooks, made composable): the order their hooks run in, how their answers merge with
the agent's, their timeout and failure policy, their tools and context blocks, and skipping hooks not overridden.

The shipped extensions (AuditLog, RedactPII) are tested in test_extensions_shipped.py.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import chunk_types, drain

import think_actors as ta
from think_actors.extensions.chain import chain_of
from think_actors.models import TextDelta
from think_actors.testing import ScriptedModel, text, tool_call

CALLS: list[str] = []


@ta.tool
async def lookup(order_id: str) -> str:
    """Look an order up."""
    CALLS.append(f"lookup:{order_id}")
    return f"order {order_id}: shipped"


class Recorder(ta.Extension):
    """Records every hook call as ``<name>.<hook>``."""

    def __init__(self, name: str, log: list[str], **options: Any) -> None:
        super().__init__(name=name, **options)
        self.log = log

    async def before_turn(self, agent: Any, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.log.append(f"{self.name}.before_turn")
        return None

    async def before_step(self, agent: Any, ctx: ta.StepContext) -> ta.StepConfig | None:
        self.log.append(f"{self.name}.before_step")
        return None

    async def before_tool_call(self, agent: Any, ctx: ta.ToolCallContext) -> Any:
        self.log.append(f"{self.name}.before_tool_call")
        return None

    async def after_tool_call(self, agent: Any, ctx: ta.ToolCallResultContext) -> None:
        self.log.append(f"{self.name}.after_tool_call")

    async def on_step_finish(self, agent: Any, ctx: ta.StepResult) -> None:
        self.log.append(f"{self.name}.on_step_finish")

    async def on_chat_response(self, agent: Any, ctx: ta.ChatResponseResult) -> None:
        self.log.append(f"{self.name}.on_chat_response")


class OrderedAgent(ta.Think):
    """The agent's own hooks record into the same log as its extensions."""

    log: list[str] = []

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.log.append("agent.before_turn")
        return None

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        self.log.append("agent.before_step")
        return None

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        self.log.append("agent.before_tool_call")
        return None

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self.log.append("agent.after_tool_call")

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self.log.append("agent.on_step_finish")

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.log.append("agent.on_chat_response")


# ------------------------------------------------------------------ order


async def test_extension_hooks_run_after_the_agents_own_in_list_order(scripted: ScriptedModel) -> None:
    log: list[str] = []

    class Agent(OrderedAgent):
        extensions = [Recorder("first", log), Recorder("second", log)]

    Agent.log = log
    scripted.extend([tool_call("lookup", {"order_id": "A-17"}), text("It shipped.")])
    agent = Agent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    result = await agent.save_messages("where is A-17?")

    assert result.status == "completed"
    per_step = ["agent.before_step", "first.before_step", "second.before_step"]
    finish = ["agent.on_step_finish", "first.on_step_finish", "second.on_step_finish"]
    assert log == [
        "agent.before_turn", "first.before_turn", "second.before_turn",
        *per_step,
        "agent.before_tool_call", "first.before_tool_call", "second.before_tool_call",
        "agent.after_tool_call", "first.after_tool_call", "second.after_tool_call",
        *finish,
        *per_step,
        *finish,
        "agent.on_chat_response", "first.on_chat_response", "second.on_chat_response",
    ]  # fmt: skip
    scripted.assert_complete()


def test_only_the_hooks_an_extension_overrides_are_called() -> None:
    class Quiet(ta.Extension):
        async def after_tool_call(self, agent: Any, ctx: ta.ToolCallResultContext) -> None:
            return None

    class Agent(ta.Think):
        extensions = [Quiet()]

    chain = chain_of(Agent())
    assert chain.hooked("after_tool_call") == (Agent.extensions[0],)
    assert chain.hooked("on_chunk") == ()
    assert chain.hooked("before_turn") == ()


async def test_no_chunk_hook_runs_unless_one_is_overridden(scripted: ScriptedModel) -> None:
    from think_actors.extensions.chain import chunk_hook

    class Plain(ta.Think):
        extensions = [Recorder("r", [])]

    assert chunk_hook(Plain(), False) is None

    seen: list[str] = []

    class Watcher(ta.Extension):
        async def on_chunk(self, agent: Any, ctx: ta.ChunkContext) -> None:
            seen.append(f"{ctx.type}:{ctx.text}")

    class Watched(ta.Think):
        extensions = [Watcher()]

    scripted.add(text("one two", chunk_size=4))
    await Watched(model=scripted, store=ta.MemoryStore()).save_messages("hi")
    assert seen == ["text-delta:one ", "text-delta:two"]


# ------------------------------------------------------------------ before_turn merge


class SetsConfig(ta.Extension):
    def __init__(self, name: str, config: ta.TurnConfig, seen: list[ta.TurnContext]) -> None:
        super().__init__(name=name)
        self.config, self.seen = config, seen

    async def before_turn(self, agent: Any, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self.seen.append(ctx)
        return self.config


@ta.tool
async def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@ta.tool
async def clock() -> str:
    """The time."""
    return "noon"


def suffix(tag: str) -> Any:
    async def transform(events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for event in events:
            yield TextDelta(event.text + tag) if isinstance(event, TextDelta) else event

    return transform


async def test_before_turn_configs_merge_on_top_of_the_agents_by_the_documented_rules(scripted: ScriptedModel) -> None:
    seen: list[ta.TurnContext] = []

    class Agent(ta.Think):
        instructions = "Base."
        extensions = [
            SetsConfig(
                "a",
                ta.TurnConfig(
                    instructions="From a.",
                    temperature=0.5,
                    headers={"x-a": "1", "x-both": "a"},
                    active_tools=["lookup", "weather"],
                    tools=[clock],
                    transform=suffix("[a]"),
                ),
                seen,
            ),
            SetsConfig(
                "b",
                ta.TurnConfig(
                    seed=7,
                    headers={"x-both": "b"},
                    active_tools=["weather", "clock"],
                    transform=suffix("[b]"),
                ),
                seen,
            ),
        ]

        async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig:
            return ta.TurnConfig(temperature=0.1, max_output_tokens=50, transform=suffix("[agent]"))

    scripted.add(text("hi"))
    agent = Agent(model=scripted, tools=[lookup, weather], store=ta.MemoryStore())
    result = await agent.save_messages("hello")

    [request] = scripted.requests
    assert request.messages[0] == {"role": "system", "content": "From a."}
    assert request.params == {"temperature": 0.5, "seed": 7, "max_tokens": 50}
    assert request.headers == {"x-a": "1", "x-both": "b"}
    assert [t["function"]["name"] for t in request.tools] == ["weather"]  # each narrows
    # The agent's transform reads the model's stream; each extension's reads the one before.
    assert result.message is not None and result.message.text == "hi[agent][a][b]"
    # Each extension sees the turn as the hooks before it left it.
    assert seen[0].system.startswith("Base.")
    assert seen[1].system == "From a."
    assert sorted(seen[1].tools) == ["clock", "lookup", "weather"]


async def test_an_extension_may_replace_the_messages_the_next_one_sees(scripted: ScriptedModel) -> None:
    seen: list[ta.TurnContext] = []
    rewritten = [{"role": "user", "content": "rewritten"}]

    class Agent(ta.Think):
        extensions = [
            SetsConfig("rewrite", ta.TurnConfig(messages=rewritten), seen),
            SetsConfig("watch", ta.TurnConfig(), seen),
        ]

    scripted.add(text("ok"))
    await Agent(model=scripted, store=ta.MemoryStore()).save_messages("original")
    assert seen[1].messages == rewritten
    assert scripted.requests[0].messages[1:] == rewritten


# ------------------------------------------------------------------ before_tool_call


class Decides(ta.Extension):
    def __init__(self, name: str, decision: Any, seen: list[Any] | None = None) -> None:
        super().__init__(name=name)
        self.decision, self.seen = decision, seen if seen is not None else []

    async def before_tool_call(self, agent: Any, ctx: ta.ToolCallContext) -> Any:
        self.seen.append(ctx.input)
        return self.decision


async def run_lookup(scripted: ScriptedModel, *extensions: ta.Extension, agent_decision: Any = None) -> Any:
    class Agent(ta.Think):
        async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
            return agent_decision

    Agent.extensions = list(extensions)
    CALLS.clear()
    scripted.extend([tool_call("lookup", {"order_id": "A-17"}), text("done")])
    agent = Agent(model=scripted, tools=[lookup], store=ta.MemoryStore())
    await agent.save_messages("where is A-17?")
    [part] = [p for m in agent.get_messages() for p in m.tool_parts]
    return part


async def test_a_block_from_any_extension_wins_over_an_allow(scripted: ScriptedModel) -> None:
    later = Decides("later", ta.Allow())
    part = await run_lookup(
        scripted, Decides("allow", ta.Allow()), Decides("deny", ta.Block("orders are read-only today")), later
    )
    assert part.output == "orders are read-only today"
    assert CALLS == []
    assert later.seen == []  # the chain ends at the first Block


async def test_the_agents_substitute_decides_before_any_extension(scripted: ScriptedModel) -> None:
    ext = Decides("ext", ta.Block("no"))
    part = await run_lookup(scripted, ext, agent_decision=ta.Substitute({"cached": True}))
    assert part.output == {"cached": True}
    assert ext.seen == []


async def test_allow_with_input_changes_what_later_hooks_see_and_the_tool_gets(scripted: ScriptedModel) -> None:
    watcher = Decides("watch", None)
    part = await run_lookup(
        scripted,
        Decides("normalise", ta.Allow(input={"order_id": "a-17"})),
        watcher,
        agent_decision=ta.Allow(input={"order_id": "A-17 "}),
    )
    assert watcher.seen == [{"order_id": "a-17"}]
    assert CALLS == ["lookup:a-17"]
    assert part.output == "order a-17: shipped"


# ------------------------------------------------------------------ timeout and failure policy


class Slow(ta.Extension):
    timeout_s = 0.05

    async def before_tool_call(self, agent: Any, ctx: ta.ToolCallContext) -> Any:
        await asyncio.Event().wait()


class Broken(ta.Extension):
    async def before_turn(self, agent: Any, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        raise RuntimeError("policy service unreachable")

    async def after_tool_call(self, agent: Any, ctx: ta.ToolCallResultContext) -> None:
        raise RuntimeError("cannot record")

    async def on_chat_response(self, agent: Any, ctx: ta.ChatResponseResult) -> None:
        raise RuntimeError("cannot notify")


async def test_a_hook_that_times_out_and_fails_open_is_logged_and_ignored(
    scripted: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="think_actors"):
        part = await run_lookup(scripted, Slow(name="slow-policy"))
    assert part.output == "order A-17: shipped"
    assert "extension 'slow-policy' before_tool_call timed out after 0.05 s; ignored (it fails open)" in caplog.text


async def test_a_tool_hook_that_fails_closed_fails_the_call_with_an_error_the_model_sees(
    scripted: ScriptedModel,
) -> None:
    part = await run_lookup(scripted, Slow(name="slow-policy", failure="closed"))
    assert CALLS == []
    assert part.state == "output-error"
    assert part.error_text == ("extension 'slow-policy' before_tool_call timed out after 0.05 s (it fails closed)")
    tool_message = scripted.requests[1].messages[-1]
    assert tool_message["content"] == f"Error: {part.error_text}"


async def test_hooks_that_raise_and_fail_open_leave_the_turn_completed(
    scripted: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="think_actors"):
        part = await run_lookup(scripted, Broken(name="flaky"))
    assert part.output == "order A-17: shipped"
    assert "extension 'flaky' before_turn raised RuntimeError: policy service unreachable" in caplog.text
    assert "extension 'flaky' after_tool_call raised RuntimeError: cannot record" in caplog.text
    assert "extension 'flaky' on_chat_response raised RuntimeError: cannot notify" in caplog.text


async def test_before_turn_failing_closed_fails_the_turn_through_on_chat_error(scripted: ScriptedModel) -> None:
    errors: list[tuple[BaseException, str]] = []

    class Agent(ta.Think):
        extensions = [Broken(name="policy", failure="closed")]

        async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
            errors.append((error, ctx.stage))
            return error

    agent = Agent(model=scripted, store=ta.MemoryStore())
    with pytest.raises(ta.ExtensionError) as raised:
        await agent.save_messages("hi")
    assert str(raised.value) == (
        "extension 'policy' before_turn raised RuntimeError: policy service unreachable (it fails closed)"
    )
    facts = raised.value.facts()
    assert (facts["extension"], facts["hook"], facts["stage"]) == ("policy", "before_turn", "turn")
    assert [(type(e).__name__, stage) for e, stage in errors] == [("ExtensionError", "turn")]
    assert scripted.requests == []  # no model request


async def test_an_observer_failing_closed_ends_the_turn_with_an_error_chunk(scripted: ScriptedModel) -> None:
    class Strict(ta.Extension):
        failure = "closed"

        async def on_step_finish(self, agent: Any, ctx: ta.StepResult) -> None:
            raise RuntimeError("quota ledger down")

    class Agent(ta.Think):
        extensions = [Strict()]

    scripted.add(text("partial answer"))
    chunks = await drain(Agent(model=scripted, store=ta.MemoryStore()).chat("hi"))
    assert chunk_types(chunks)[-1] == "error"
    assert (
        chunks[-1].error_text
        == "extension 'Strict' on_step_finish raised RuntimeError: quota ledger down (it fails closed)"
    )


async def test_after_the_turn_a_closed_failure_is_only_logged(
    scripted: ScriptedModel, caplog: pytest.LogCaptureFixture
) -> None:
    class Agent(ta.Think):
        extensions = [Broken(name="notify", failure="closed")]

        async def before_turn(self, ctx: ta.TurnContext) -> None:
            return None

    class Fine(Broken):
        async def before_turn(self, agent: Any, ctx: ta.TurnContext) -> None:
            return None

        async def after_tool_call(self, agent: Any, ctx: ta.ToolCallResultContext) -> None:
            return None

    Agent.extensions = [Fine(name="notify", failure="closed")]
    scripted.add(text("done"))
    with caplog.at_level(logging.WARNING, logger="think_actors"):
        result = await Agent(model=scripted, store=ta.MemoryStore()).save_messages("hi")
    assert result.status == "completed"
    assert (
        "extension 'notify' on_chat_response raised RuntimeError: cannot notify; ignored (the turn is over)"
        in caplog.text
    )


# ------------------------------------------------------------------ decisions


async def test_on_decision_hears_every_decision_and_failure_before_it_takes_effect(scripted: ScriptedModel) -> None:
    heard: list[tuple[str, str, Any, str | None]] = []

    class Listener(ta.Extension):
        async def on_decision(self, agent: Any, ctx: ta.HookDecision) -> None:
            heard.append((ctx.hook, ctx.source, ctx.decision, ctx.error))

    part = await run_lookup(
        scripted, Slow(name="slow"), Decides("deny", ta.Block("no")), Listener(),
        agent_decision=ta.Allow(input={"order_id": "B-2"}),
    )  # fmt: skip
    assert part.output == "no"
    assert heard == [
        ("before_tool_call", "agent", ta.Allow(input={"order_id": "B-2"}), None),
        ("before_tool_call", "slow", None, "timed out after 0.05 s"),
        ("before_tool_call", "deny", ta.Block("no"), None),
    ]


# ------------------------------------------------------------------ tools, context blocks, configuration


class Notes(ta.Extension):
    """An extension with a tool method and a context block."""

    context_providers = {"house-rules": "Answer in one sentence."}

    def __init__(self) -> None:
        super().__init__(name="notes")
        self.written: list[tuple[str, str]] = []

    @ta.tool
    async def take_note(self, note: str, ctx: ta.ToolContext) -> str:
        """Write a note down."""
        self.written.append((ctx.agent.name, note))
        return "noted"


async def test_extension_tools_and_context_blocks_join_the_agents(scripted: ScriptedModel) -> None:
    class Agent(ta.Think):
        extensions = [Notes()]

    scripted.extend([tool_call("take_note", {"note": "call back Tuesday"}), text("Noted.")])
    agent = Agent("desk-1", model=scripted, tools=[lookup], store=ta.MemoryStore())
    await agent.save_messages("remember to call back on Tuesday")

    [first, _] = scripted.requests
    assert [t["function"]["name"] for t in first.tools] == ["lookup", "take_note"]
    assert "Answer in one sentence." in first.messages[0]["content"]
    [notes] = Agent.extensions
    assert isinstance(notes, Notes)
    assert notes.written == [("desk-1", "call back Tuesday")]


def test_a_tool_name_an_extension_shares_with_the_agent_is_refused_naming_both() -> None:
    @ta.tool(name="take_note")
    async def other(note: str) -> str:
        """Another note tool."""
        return note

    class Agent(ta.Think):
        extensions = [Notes()]

    with pytest.raises(ta.ConfigurationError) as raised:
        Agent(tools=[other])
    assert str(raised.value) == (
        "extension 'notes' offers a tool named 'take_note', and Agent itself has one of that name: rename one "
        "(@ta.tool(name=...)) or drop one"
    )

    class Twice(ta.Think):
        extensions = [Notes(), Notes()]

    with pytest.raises(ta.ConfigurationError, match="two extensions named 'notes'"):
        Twice()


@pytest.mark.parametrize(
    ("extensions", "message"),
    [
        ([Notes], "holds <class 'test_extensions.Notes'>, not an Extension instance (did you mean Notes()?)"),
        ([object()], "not an Extension instance"),
        (Notes(), "must be a list of Extension instances"),
    ],
)
def test_bad_extension_lists_are_refused_when_the_agent_is_built(extensions: Any, message: str) -> None:
    class Agent(ta.Think):
        pass

    Agent.extensions = extensions
    with pytest.raises(ta.ConfigurationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Agent()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout_s": 0}, "timeout_s must be a positive number, got 0"),
        ({"failure": "sometimes"}, "failure must be 'open' or 'closed', got 'sometimes'"),
    ],
)
def test_bad_extension_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ta.ConfigurationError, match=message):
        ta.Extension(name="x", **options)


def test_extension_error_pickles_with_its_facts() -> None:
    error = ta.ExtensionError("x failed", request_id="r", stage="stream", extension="audit", hook="after_tool_call")
    clone = pickle.loads(pickle.dumps(error))
    assert clone.facts() == error.facts()
    assert (clone.extension, clone.hook) == ("audit", "after_tool_call")
