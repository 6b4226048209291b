"""Run limits in process: one budget, deadline and set of caps for a three-level tree of agents
(``tests/tree_agents.py``; the same tree on Ray is tests/ray/test_run_limits_on_ray.py)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import time
from typing import Any

import pytest
import tree_agents
from tree_agents import STEP_COST, STEP_TOKENS, CappedWideLead, Crowd, Lead, SlowLead, WideLead

import think_actors as ta
from think_actors import delegation
from think_actors._turn.abort import AbortRegistry
from think_actors.run_account import AccountBook, LocalAccount
from think_actors.testing import ScriptedModel, step, text, tool_call

WHOLE_RUN = ta.RunUsage(requests=10, tool_calls=6, input_tokens=1000, output_tokens=100, cost_usd=0.01, agents=6)


@pytest.fixture(autouse=True)
def meter() -> tree_agents.Meter:
    tree_agents.LOCAL_METER = tree_agents.Meter()
    return tree_agents.LOCAL_METER


def approx(usage: ta.RunUsage | None) -> ta.RunUsage | None:
    return None if usage is None else dataclasses.replace(usage, cost_usd=round(usage.cost_usd, 9))


def tool_errors(agent: ta.Think) -> list[str]:
    return [
        str(p.output.get("error")) if isinstance(p.output, dict) else str(p.error_text)
        for m in agent.get_messages()
        for p in m.parts
        if isinstance(p, ta.ToolPart) and (p.state == "output-error" or isinstance(p.output, dict))
    ]


class Responses(Lead):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.responses: list[ta.ChatResponseResult] = []

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.responses.append(result)


async def test_the_root_reports_what_the_whole_tree_used() -> None:
    lead = Responses("r1", store=ta.MemoryStore())
    result = await lead.save_messages("research it")
    assert result.status == "completed"
    assert approx(result.tree_usage) == WHOLE_RUN
    assert result.usage is not None and result.usage.input_tokens == 200  # its own two steps
    [response] = lead.responses
    assert approx(response.tree_usage) == WHOLE_RUN and response.limit is None


async def test_a_token_limit_reached_below_stops_every_level_with_its_error() -> None:
    lead = Lead("t1", store=ta.MemoryStore())
    result = await lead.save_messages("research it", limits=ta.RunLimits(max_total_tokens=600))
    # The lead's step and both researchers' first steps (330), then the fetchers until the run reaches 600: the
    # researchers' second steps are refused, so is the lead's.
    assert (result.status, result.limit) == ("error", "max_total_tokens")
    assert "max_total_tokens limit (600)" in (result.error or "")
    usage = result.tree_usage
    assert usage is not None and usage.total_tokens == usage.requests * STEP_TOKENS
    # Each researcher ended with the run's error, which its parent's model saw as the tool's error.
    errors = tool_errors(lead)
    assert len(errors) == 2 and all("max_total_tokens" in e for e in errors)
    # Over the limit by what was in flight when it was crossed: at most one step per agent then running.
    assert usage.total_tokens - 600 < 4 * STEP_TOKENS


async def test_a_cost_limit_stops_the_tree() -> None:
    result = await Lead("c1", store=ta.MemoryStore()).save_messages(
        "research it", limits={"max_cost_usd": 2.5 * STEP_COST}
    )
    assert (result.status, result.limit) == ("error", "max_cost_usd")
    assert result.tree_usage is not None and result.tree_usage.requests == 3


async def test_request_and_tool_call_limits_are_never_passed() -> None:
    requests = await Lead("q1", store=ta.MemoryStore()).save_messages("go", limits=ta.RunLimits(max_requests=4))
    assert (requests.status, requests.limit) == ("error", "max_requests")
    assert requests.tree_usage is not None and requests.tree_usage.requests <= 4
    calls = await Lead("q2", store=ta.MemoryStore()).save_messages("go", limits=ta.RunLimits(max_tool_calls=3))
    assert (calls.status, calls.limit) == ("error", "max_tool_calls")
    assert calls.tree_usage is not None and calls.tree_usage.agents == 2  # the fetchers' calls were refused


async def test_a_deadline_stops_every_turn_of_the_tree_at_once() -> None:
    lead = SlowLead("d1", store=ta.MemoryStore())
    started = time.monotonic()
    result = await lead.save_messages("research it", limits=ta.RunLimits(timeout_s=0.5))
    assert time.monotonic() - started < 15  # the fetchers' models would take 30 s
    assert (result.status, result.limit) == ("error", "timeout_s")
    fetchers = [status for path, status, _ in tree_agents.LOCAL_METER.ended if "slow-fetcher/" in path]
    assert fetchers == ["error"] * 4  # each fetcher's turn ended by the deadline


async def test_a_depth_limit_refuses_grandchildren_as_a_tool_error_and_the_run_goes_on() -> None:
    lead = Lead("p1", store=ta.MemoryStore())
    result = await lead.save_messages("research it", limits=ta.RunLimits(max_depth=1))
    assert result.status == "completed"  # the researchers answered without their fetchers
    assert result.tree_usage is not None and result.tree_usage.agents == 2
    researcher = next(iter(lead._engine.children.values()))
    assert all("max_depth (1)" in e for e in tool_errors(researcher.agent)) and tool_errors(researcher.agent)


@pytest.mark.parametrize("how", ["class attribute", "run limit"])
async def test_at_most_four_children_run_at_once_as_the_children_see_it(how: str) -> None:
    if how == "class attribute":
        lead: ta.Think = CappedWideLead(how.replace(" ", "-"), store=ta.MemoryStore())
        limits = None
    else:
        lead, limits = (
            WideLead(how.replace(" ", "-"), store=ta.MemoryStore()),
            ta.RunLimits(max_concurrent_agent_tools=4),
        )
    chunks = [c async for c in lead.chat("probe everything", limits=limits)]
    assert tree_agents.LOCAL_METER.most == 4
    refused = [c for c in chunks if c.type == "agent-tool-event" and c.kind == "error"]
    assert len(refused) == 16 and all(c.error == "maxConcurrentAgentTools (4) exceeded" for c in refused)
    started = [c for c in chunks if c.type == "agent-tool-event" and c.kind == "started"]
    assert len(started) == 20  # Think's frames: started, then error, for a refused run too


async def test_fifty_children_charging_one_account_stop_at_the_limit() -> None:
    limit = 40 * STEP_TOKENS
    result = await Crowd("x1", store=ta.MemoryStore()).save_messages("go", limits=ta.RunLimits(max_total_tokens=limit))
    assert (result.status, result.limit) == ("error", "max_total_tokens")
    usage = result.tree_usage
    assert usage is not None
    assert usage.total_tokens == usage.requests * STEP_TOKENS  # every admitted step was charged
    # Past the limit by at most what was in flight when it was crossed: one step of each worker.
    assert usage.total_tokens - limit <= 50 * STEP_TOKENS


async def test_cancelling_the_root_stops_the_grandchildren_keeping_their_partials() -> None:
    lead = SlowLead("k1", store=ta.MemoryStore())
    stream = lead.chat("research it")
    await tree_agents.until_grandchildren_started(stream, 1)
    await asyncio.sleep(0.1)  # the fetchers' models are running
    cancelled = time.time()
    assert lead.cancel_chat(stream.request_id)
    await asyncio.wait_for(stream.collect(), 5)
    assert stream.outcome.status == "aborted"
    fetchers = [(s, at) for path, s, at in tree_agents.LOCAL_METER.ended if "slow-fetcher/" in path]
    assert fetchers and all(s == "aborted" and at - cancelled < 5 for s, at in fetchers), fetchers


async def test_a_recovered_turn_goes_on_with_what_its_run_had_used() -> None:
    # One request allowed: the turn used it before the crash, so its recovery may not make another.
    frozen = asyncio.Event()

    class Freezes(ta.Think):
        async def on_step_finish(self, ctx: ta.StepResult) -> None:
            frozen.set()
            await asyncio.Event().wait()  # the process is gone

    store = ta.MemoryStore()
    agent = Freezes("f1", model=ScriptedModel([step(text("partial"), tool_call("nothing", {}))]), store=store)
    task = asyncio.create_task(agent.save_messages("go", limits=ta.RunLimits(max_requests=1)))
    await asyncio.wait_for(frozen.wait(), 5)
    snapshot = copy.deepcopy(store)
    task.cancel()

    class Restarted(ta.Think):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.errors: list[BaseException] = []

        async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
            self.errors.append(error)
            return error

    restarted = Restarted("f1", model=ScriptedModel([text("the rest")]), store=snapshot)
    await restarted.load_messages()
    await asyncio.wait_for(restarted._engine.recovery.idle(), 5)
    [err] = restarted.errors
    assert isinstance(err, ta.RunLimitError) and (err.limit, err.used, err.allowed) == ("max_requests", 1, 1)


def test_limits_are_validated_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="max_total_tokens"):
        ta.RunLimits(max_total_tokens=0)
    with pytest.raises(ValueError, match="extra"):
        ta.RunLimits.model_validate({"max_tokens": 5})
    with pytest.raises(ta.ConfigurationError, match=r"max_tokens: Extra inputs.*The fields are max_input_tokens"):
        ta.RunLimits.of({"max_tokens": 5})  # what limits={...} does: the message names the fields
    with pytest.raises(ta.ConfigurationError, match="RunLimits"):
        ta.RunLimits.of(5)


def test_the_book_admits_one_at_a_time_and_keeps_the_first_limit_reached() -> None:
    book = AccountBook(run_id="r", limits=ta.RunLimits(max_requests=2, max_output_tokens=15))
    book.admit_request()
    book.charge(100, 10, 0.0)
    book.admit_request()
    book.charge(100, 10, 0.0)  # passes max_output_tokens: recorded, not raised (the step has run)
    with pytest.raises(ta.RunLimitError) as first:
        book.admit_request()
    assert first.value.limit == "max_output_tokens"
    with pytest.raises(ta.RunLimitError) as again:
        book.admit_tool_calls(1)
    assert again.value.limit == "max_output_tokens"


async def test_each_childs_total_is_on_its_last_event() -> None:
    chunks = [c async for c in Lead("e1", store=ta.MemoryStore()).chat("research it")]
    finished = [c for c in chunks if c.type == "agent-tool-event" and c.kind == "finished"]
    assert len(finished) == 2
    for event in finished:  # a researcher: its two steps and its two fetchers' one each
        assert event.usage is not None
        assert {k: round(v, 9) for k, v in event.usage.items()} == {
            "requests": 4,
            "toolCalls": 2,
            "inputTokens": 400,
            "outputTokens": 40,
            "costUsd": 0.004,
            "agents": 2,
        }


class HastyFetcher(tree_agents.SlowFetcher):
    run_limits = ta.RunLimits(timeout_s=0.3)  # its own deadline: sooner than the run's


class HastyResearcher(tree_agents.Metered):
    model = tree_agents.TreeModel("hasty_fetcher", 1)
    tools = (ta.agent_tool(HastyFetcher, description="Fetch, quickly."),)


async def test_a_childs_deadline_is_the_sooner_of_its_own_and_its_runs() -> None:
    researcher = HastyResearcher("h1", store=ta.MemoryStore())
    started = time.monotonic()
    result = await researcher.save_messages("go", limits=ta.RunLimits(timeout_s=60))
    assert time.monotonic() - started < 15  # the fetcher's own 0.3 s, not the run's 60 s
    assert result.status == "completed"  # the researcher answered without its fetcher
    fetchers = [status for path, status, _ in tree_agents.LOCAL_METER.ended if "hasty-fetcher/" in path]
    assert fetchers == ["error"]


class Ledger:
    def record(self, entry: str, run_context: dict[str, Any] | None = None) -> str:
        """Record an entry."""
        return entry


async def test_an_actor_tools_method_with_run_context_gets_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    async def call(target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
        calls.append(kwargs)
        return "recorded"

    monkeypatch.setattr(delegation, "_actor_calls", call)
    tool = ta.actor_tool("ledger", "record", actor_class=Ledger)
    assert tool.input_schema["properties"] == {"entry": {"type": "string"}}  # the model never sees it
    model = ScriptedModel([tool_call("record", {"entry": "a"}), text("done"), tool_call("record", {"entry": "b"})])
    model.extend([text("done")])
    agent = ta.Think("l1", model=model, tools=[tool], store=ta.MemoryStore())
    result = await agent.save_messages("record a", limits=ta.RunLimits(timeout_s=30))
    context = calls[0]["run_context"]
    assert (context["runId"], context["depth"]) == (result.request_id, 0) and 0 < context["remainingS"] <= 30
    await agent.save_messages("record b")  # no limits: an empty context
    assert calls[1] == {"entry": "b", "run_context": {}}


async def test_a_tool_with_run_context_gets_the_run_in_process() -> None:
    agent = tree_agents.Stamper("s1", store=ta.MemoryStore())
    result = await agent.save_messages("stamp it", limits=ta.RunLimits(timeout_s=30))
    [part] = [p for m in agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart)]
    assert part.input == {"input": "look it up"}  # run_context is not in the schema: the model never sees it
    assert (part.output["run"]["runId"], part.output["run"]["depth"]) == (result.request_id, 0)
    assert 0 < part.output["run"]["remainingS"] <= 30


async def test_run_context_needs_no_annotation() -> None:
    @ta.tool
    def label(input: str, run_context=None) -> str:  # type: ignore[no-untyped-def]
        """Label it."""
        return f"{input} in {run_context}"

    assert label.input_schema["properties"] == {"input": {"type": "string"}}


def test_a_run_cancelled_before_it_arrives_starts_aborted() -> None:
    # A parent may cancel its agent tool's run before the run's call has reached the child: no orphan run.
    aborts = AbortRegistry()
    assert aborts.cancel("agent-tool:call-1", "parent turn cancelled") is False  # nothing to abort yet
    signal = aborts.signal("agent-tool:call-1")
    assert (signal.aborted, signal.reason) == (True, "parent turn cancelled")
    assert aborts.cancel("chat-7") is False and not aborts.signal("chat-7").aborted  # other ids: a no-op, as Think's


async def test_a_prepaid_request_is_used_without_asking_and_given_back_when_unused() -> None:
    saved: list[dict[str, Any] | None] = []

    async def save(state: dict[str, Any] | None) -> None:
        saved.append(state)

    book = AccountBook(run_id="r", limits=ta.RunLimits(max_total_tokens=1000))
    account = LocalAccount(book, save)
    await account.admit_request()
    await account.settle(100, 10, 0.0, 1, prepay=True)  # its tool call admitted, and the next request with it
    assert (account.prepaid, book.usage.requests, book.usage.tool_calls) == (True, 2, 1)
    assert saved[-1] is not None and saved[-1]["usage"]["requests"] == 1  # a recovered turn finds what was made
    await account.admit_request()  # the prepaid one: nothing counted again
    assert (account.prepaid, book.usage.requests) == (False, 2)
    await account.settle(100, 10, 0.0, 1, prepay=True)
    account.release()  # the turn stopped after its tool calls: the request it did not make is uncounted
    assert (account.prepaid, book.usage.requests) == (False, 2)
    account.release()  # nothing held: a no-op
    assert book.usage.requests == 2


async def test_a_run_with_max_requests_never_prepays() -> None:
    book = AccountBook(run_id="r", limits=ta.RunLimits(max_requests=5))
    account = LocalAccount(book)
    await account.admit_request()
    await account.settle(100, 10, 0.0, 2, prepay=True)
    assert (account.prepaid, book.usage.requests) == (False, 1)
    assert await account.start_child("lead", 1, prepay=True) is None
    assert book.usage.requests == 1


async def test_a_prepaid_request_still_meets_the_deadline_and_the_budgets() -> None:
    late = AccountBook(run_id="late", limits=ta.RunLimits(timeout_s=5), started_at=time.time() - 10)
    account = LocalAccount(late)
    account.prepaid = True
    late._counts.requests = 1  # as settle(prepay=True) left it
    with pytest.raises(ta.RunLimitError) as refused:
        await account.admit_request()
    assert refused.value.limit == "timeout_s" and late.usage.requests == 0 and account.over
    spent = AccountBook(run_id="spent", limits=ta.RunLimits(max_total_tokens=100))
    account = LocalAccount(spent)
    await account.admit_request()
    await account.settle(100, 10, 0.0, 0)  # passes the budget, no tool calls: recorded
    account.prepaid = True
    with pytest.raises(ta.RunLimitError) as over:
        await account.admit_request()
    assert over.value.limit == "max_total_tokens"


def test_a_child_admission_can_prepay_its_first_request() -> None:
    book = AccountBook(run_id="r", limits=ta.RunLimits(max_depth=2))
    assert book.start_child("lead", 1, prepay=True) is None
    assert (book.usage.requests, book.usage.agents) == (1, 1)
    assert (book.in_flight, book.by_parent) == (0, {})  # no cap on running children: nothing to count
    capped = AccountBook(run_id="c", limits=ta.RunLimits(max_agents_in_flight=2))
    assert capped.start_child("lead", 1) is None
    assert (capped.in_flight, capped.by_parent) == (1, {"lead": 1})
