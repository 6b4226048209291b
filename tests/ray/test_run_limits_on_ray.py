"""Run limits on Ray, with the same user code as in process: the tree of ``tests/tree_agents.py`` with every agent an
actor of its own, so the run's account moves to the cluster's accounts actor and every level charges it there."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import tree_agents
from tree_agents import (
    METER,
    STEP_TOKENS,
    ChainLead,
    CrashLead,
    Lead,
    Meter,
    SharedCrowd,
    SlowLead,
    Stamper,
    WideLead,
)

import think_actors as ta
from think_actors.runtime import accounts

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(240)]

WHOLE_RUN = ta.RunUsage(requests=10, tool_calls=6, input_tokens=1000, output_tokens=100, cost_usd=0.01, agents=6)


@pytest.fixture
def meter(ray_runtime: Any) -> Iterator[Any]:
    """The children's meter: a named actor the tree's agents find (``tree_agents._meter``)."""
    actor = ray.remote(Meter).options(name=METER, namespace=ray_runtime.namespace).remote()
    ray.get(actor.report.remote())
    yield actor
    ray.kill(actor)


def rounded(usage: ta.RunUsage | None) -> ta.RunUsage | None:
    return None if usage is None else dataclasses.replace(usage, cost_usd=round(usage.cost_usd, 9))


async def what_the_tree_did(agent: Any, limits: ta.RunLimits | None) -> tuple[str, str | None, ta.RunUsage | None]:
    """The same user code for an agent in process and a handle on Ray."""
    result = await agent.save_messages("research it", limits=limits)
    return result.status, result.limit, rounded(result.tree_usage)


async def test_a_tree_on_ray_reports_and_stops_as_it_does_in_process(unique: str, meter: Any) -> None:
    in_process = await what_the_tree_did(Lead(f"{unique}-p", store=ta.MemoryStore()), None)
    on_ray = await what_the_tree_did(await ta.spawn(Lead, f"{unique}-r"), None)
    assert in_process == on_ray == ("completed", None, WHOLE_RUN)

    limits = ta.RunLimits(max_total_tokens=600)
    stopped = await what_the_tree_did(await ta.spawn(Lead, f"{unique}-s"), limits)
    assert stopped[:2] == ("error", "max_total_tokens")
    usage = stopped[2]
    assert usage is not None and usage.total_tokens == usage.requests * STEP_TOKENS
    assert usage.total_tokens - 600 < 4 * STEP_TOKENS  # at most the fetchers in flight when it was crossed


async def test_at_most_four_children_run_at_once_across_actors(unique: str, meter: Any) -> None:
    lead = await ta.spawn(WideLead, unique)
    chunks = await lead.chat("probe everything", limits=ta.RunLimits(max_concurrent_agent_tools=4)).collect()
    refused = [c for c in chunks if c.type == "agent-tool-event" and c.kind == "error"]
    assert len(refused) == 16 and all(c.error == "maxConcurrentAgentTools (4) exceeded" for c in refused)
    report = await meter.report.remote()
    assert report["most"] <= 4 and report["running"] == 0


async def test_a_deadline_stops_the_tree_on_every_actor(unique: str, meter: Any) -> None:
    lead = await ta.spawn(SlowLead, unique)
    started = time.monotonic()
    result = await lead.save_messages("research it", limits=ta.RunLimits(timeout_s=8.0))
    elapsed = time.monotonic() - started
    assert (result.status, result.limit) == ("error", "timeout_s")
    assert elapsed < 20  # the fetchers' models would take 30 s
    fetchers = [s for path, s, _ in (await meter.report.remote())["ended"] if "slow-fetcher/" in path]
    assert fetchers == ["error"] * 4, fetchers


async def test_cancelling_the_root_stops_grandchildren_on_their_actors(unique: str, meter: Any) -> None:
    lead = await ta.spawn(SlowLead, unique)
    stream = lead.chat("research it")
    await tree_agents.until_grandchildren_started(stream, 4)
    await asyncio.sleep(0.5)  # the fetchers' models are running, or about to
    assert await lead.cancel_chat(stream.request_id), "the lead's turn was no longer running"
    await asyncio.wait_for(stream.collect(), 30)
    # Every fetcher stops, long before its model's 30 s: one cancelled before its run reached it never starts
    # (how fast they stop: scripts/bench_limits.py, not a timed test).
    deadline = time.monotonic() + 20
    report = await meter.report.remote()
    while report["running"] and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        report = await meter.report.remote()
    assert report["running"] == 0, report
    ended = [status for path, status, _ in report["ended"] if "slow-fetcher/" in path]
    while not ended and time.monotonic() < deadline:  # a fetcher's turn ends just after its model stops
        await asyncio.sleep(0.1)
        ended = [status for path, status, _ in (await meter.report.remote())["ended"] if "slow-fetcher/" in path]
    assert ended and set(ended) == {"aborted"}, ended


async def test_fifty_children_in_other_processes_charging_one_account(unique: str, meter: Any) -> None:
    limit = 40 * STEP_TOKENS
    crowd = await ta.spawn(SharedCrowd, unique)
    result = await crowd.save_messages("go", limits=ta.RunLimits(max_total_tokens=limit))
    assert (result.status, result.limit) == ("error", "max_total_tokens")
    usage = result.tree_usage
    assert usage is not None and usage.total_tokens == usage.requests * STEP_TOKENS
    assert usage.total_tokens - limit <= 50 * STEP_TOKENS


async def test_a_middle_agent_that_crashes_goes_on_with_what_its_run_had_used(unique: str, meter: Any) -> None:
    # Three requests allowed: the lead's first, the researcher's first (then its process dies), and the recovered
    # researcher's answer. The lead's second request is the run's fourth: refused. A recovered turn that forgot its
    # run would have made its request uncounted, and the lead would have finished.
    lead = await ta.spawn(CrashLead, unique)
    result = await lead.save_messages("research it", limits=ta.RunLimits(max_requests=3))
    assert (result.status, result.limit) == ("error", "max_requests")
    ended = [(path.rsplit("/", 2)[-2], status) for path, status, _ in (await meter.report.remote())["ended"]]
    assert ("crashing-researcher", "completed") in ended  # the researcher's recovered turn finished
    # The lead's agent tool waited for the restarted researcher and got its run's result (no second run).
    [tool] = [p for m in await lead.get_messages() for p in m.parts if isinstance(p, ta.ToolPart)]
    assert (tool.state, tool.output) == ("output-available", "done.")
    assert result.tree_usage.agents == 1


async def test_a_task_tool_with_run_context_gets_the_run_in_its_task(unique: str, meter: Any) -> None:
    agent = await ta.spawn(Stamper, unique)
    result = await agent.save_messages("stamp it", limits=ta.RunLimits(timeout_s=30))
    [part] = [p for m in await agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart)]
    assert (part.output["run"]["runId"], part.output["run"]["depth"]) == (result.request_id, 0)
    assert 0 < part.output["run"]["remainingS"] <= 30


async def test_a_turn_asks_the_accounts_actor_once_per_step_and_once_to_share(
    unique: str, meter: Any, ray_runtime: Any
) -> None:
    # Lead -> researcher -> fetcher: 5 model steps. The calls: the account's move (with the researcher's admission
    # and first request), the researcher's charge of its first step (with its next request), the fetcher's
    # admission (with its first request), each of the 3 other steps' charge, and the run's end. No admission of a
    # request of its own, no child's end (the run caps no running children).
    actor = accounts._accounts(ray_runtime)
    lead = await ta.spawn(ChainLead, unique)
    await lead.save_messages("warm up")  # the actors exist before the count starts
    before = await actor.counted.remote()
    result = await lead.save_messages("research it", limits=ta.RunLimits(max_total_tokens=100_000))
    assert result.status == "completed" and result.tree_usage is not None and result.tree_usage.requests == 5
    deadline = time.monotonic() + 10
    counted = await actor.counted.remote() - before
    while counted < 7 and time.monotonic() < deadline:  # the run's end is a call the lead does not wait for
        await asyncio.sleep(0.05)
        counted = await actor.counted.remote() - before
    assert counted == 7


async def test_the_accounts_actor_gives_back_a_prepaid_request(ray_runtime: Any) -> None:
    actor = accounts._accounts(ray_runtime)
    state = {"runId": "prepaid-run", "limits": {"max_total_tokens": 1000}, "startedAt": time.time(), "usage": {}}
    await actor.open.remote(state, 0, {})
    assert await actor.settle.remote("prepaid-run", 100, 10, 0.0, 1, True) == (None, True, False)
    assert (await actor.usage.remote("prepaid-run")).requests == 1
    await actor.release.remote("prepaid-run")
    assert (await actor.usage.remote("prepaid-run")).requests == 0
    assert await actor.settle.remote("prepaid-run", 1000, 0, 0.0, 0, True) == (None, False, True)  # over now
    refused, prepaid, over = await actor.settle.remote("prepaid-run", 0, 0, 0.0, 1, True)
    assert (refused.limit, prepaid, over) == ("max_total_tokens", False, True)
    await actor.close.remote("prepaid-run")
