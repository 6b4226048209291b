"""Durable turns under real crashes: the agent actor dies (``os._exit``) at every hook boundary of a submission's
turn — two steps, two parallel tool calls, a text step — and comes back from its store alone.

After each crash the restarted actor finishes what it had accepted without being asked. Asserted for every crash
point: the user's message exists once; every tool call has exactly one settled result; no call whose result was
recorded ran twice (side effects are counted in a separate actor); calls in doubt went through
``reconcile_tool_call``; the transcript is the uncrashed run's but for the model's continuation text and the
in-doubt results; the submission is completed. SQLite is the store (the in-memory store does not outlive a crash).

Every test here runs beside a CPU-burning process (one core's worth): restarts race with start-up on a busy machine
(stack-notes, "The actor is restarting"), so the crashes are tested where they break most.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cpu_load import burning_cpus
from ray_agents import CrashAgent, CrashControl

import think_actors as ta
from think_actors._turn.recovery import UNKNOWN_OUTCOME

CRASH_POINTS = [
    "submission:running",
    "before_turn:submission",
    "before_step:0",
    "before_tool_call:charge",
    "before_tool_call:note",
    "tool:charge:before-effect",
    "tool:charge:after-effect",
    "tool:note:before-effect",
    "tool:note:after-effect",
    "after_tool_call:charge",
    "after_tool_call:note",
    "on_step_finish:0",
    "before_step:1",
    "before_tool_call:lookup",
    "tool:lookup",
    "after_tool_call:lookup",
    "on_step_finish:1",
    "before_step:2",
    "on_chunk:text",
    "on_step_finish:2",
    "on_chat_response",
    "submission:completed",
]
# One event loop for the module, so the matrix's runs outlive the test that started them.
pytestmark = pytest.mark.asyncio(loop_scope="module")
CALLS = {"call-charge": "charge", "call-note": "note", "call-lookup": "lookup"}


@pytest.fixture(scope="module", autouse=True)
def busy_machine() -> Iterator[None]:
    """A process spinning on one core for the whole module."""
    with burning_cpus(1):
        yield


async def through_restarts(call: Any, timeout_s: float = 60) -> Any:
    """``await call()``, again while the actor is dead or restarting (the crash may come just after a reply)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            return await call()
        except (ta.AgentUnavailableError, TimeoutError):
            await asyncio.sleep(0.2)
    raise AssertionError(f"no answer through the restarts within {timeout_s} s")


async def final_submission(agent: ta.AgentHandle, submission_id: str) -> ta.Submission:
    """Wait for the submission's final status through the crash and the restart."""
    result: ta.Submission = await through_restarts(lambda: agent.wait_for_submission(submission_id, timeout_s=5))
    return result


def tool_parts(messages: list[ta.UIMessage]) -> list[ta.ToolPart]:
    return [p for m in messages if m.role == "assistant" for p in m.parts if isinstance(p, ta.ToolPart)]


async def run(
    ray_runtime: Any, name: str, point: str | list[str] | None
) -> tuple[ta.Submission, list[ta.UIMessage], dict[str, Any]]:
    control_name = f"crash-control/{name}"
    control = CrashControl.options(name=control_name, namespace=ray_runtime.namespace, lifetime="detached").remote(
        point
    )
    agent = await ta.spawn(CrashAgent, name, control=control_name, namespace=ray_runtime.namespace)
    # The crash may cut the reply (the drain can reach its crash point before the answer leaves): a client sends
    # an idempotent submission again, and gets the one already accepted.
    await through_restarts(lambda: agent.submit_messages("pay 42 and note it", submission_id="s1"))
    final = await final_submission(agent, "s1")
    messages = await through_restarts(agent.get_messages)
    report = await control.report.remote()
    return final, messages, report


# Three crashes in one turn (restart churn), run with the matrix.
REPEATED = ("after_tool_call:charge", "on_step_finish:1", "on_chunk:text")
# The matrix's runs go on side by side, a few at a time (most of a run is waiting for Ray to restart the actor):
# the first test of the matrix starts them all on the module's event loop, and each test awaits its own. The
# tests after the matrix (one agent each) are queued behind it, so they run beside its last runs and each other,
# not one after another once it is done.
PARALLEL_RUNS = 4
Point = str | tuple[str, ...] | None
Outcome = tuple[ta.Submission, list[ta.UIMessage], dict[str, Any]]
_RUNS: dict[Point, asyncio.Task[Outcome]] = {}
_CHECKS: dict[str, asyncio.Task[None]] = {}


def matrix(ray_runtime: Any) -> dict[Point, asyncio.Task[Outcome]]:
    """The runs of the uncrashed baseline (key None), of the repeated crashes (key REPEATED) and of every crash
    point, and then the checks of the tests after the matrix (``queued``), started once per module."""
    if not _RUNS:
        gate = asyncio.Semaphore(PARALLEL_RUNS)

        async def one(point: Point) -> Outcome:
            async with gate:
                crash = list(point) if isinstance(point, tuple) else point
                return await run(ray_runtime, f"crash-{uuid.uuid4().hex[:10]}", crash)

        async def check(body: Any) -> None:
            async with gate:
                await body(ray_runtime, f"crash-{uuid.uuid4().hex[:10]}")

        for point in [None, REPEATED, *CRASH_POINTS]:
            _RUNS[point] = asyncio.create_task(one(point))
        for body in QUEUED:
            _CHECKS[body.__name__] = asyncio.create_task(check(body))
    return _RUNS


async def queued(ray_runtime: Any, body: Any) -> None:
    """Await ``body``'s run, started with the matrix (or now, alone, when no test of the matrix ran: a test picked
    with -k does not wait for the whole matrix); its assertions fail here."""
    if body.__name__ not in _CHECKS:
        _CHECKS[body.__name__] = asyncio.create_task(body(ray_runtime, f"crash-{uuid.uuid4().hex[:10]}"))
    await asyncio.shield(_CHECKS[body.__name__])


async def baseline(ray_runtime: Any) -> list[ta.UIMessage]:
    """The uncrashed run's transcript."""
    final, messages, report = await asyncio.shield(matrix(ray_runtime)[None])
    assert final.status == "completed"
    assert report["effects"] == {"call-charge": 1, "call-note": 1, "call-lookup": 1}
    return messages


@pytest.mark.timeout(120)
@pytest.mark.parametrize("point", CRASH_POINTS)
async def test_a_crash_at_every_hook_boundary_is_recovered(ray_runtime: Any, point: str) -> None:
    uncrashed = await baseline(ray_runtime)
    final, messages, report = await asyncio.shield(matrix(ray_runtime)[point])

    assert report["pending"] is None, f"the crash point {point} was never reached"
    assert final.status == "completed", final.error
    assert [m.text for m in messages if m.role == "user"] == ["pay 42 and note it"]
    parts = tool_parts(messages)
    assert sorted(p.tool_call_id for p in parts) == sorted(CALLS)  # each call once ...
    assert all(p.state in ("output-available", "output-error") for p in parts)  # ... and settled
    # In doubt: started and not finished when the process died. The tool's own crash points always are; with
    # two parallel calls, the other call may be too, depending on where it was — the ledger knew, and every
    # such call went to reconcile_tool_call.
    in_doubt = set(report["reconciled"])
    assert {c for c in CALLS if point.startswith(f"tool:{CALLS[c]}:")} <= in_doubt <= set(CALLS)
    for call in CALLS:
        count = report["effects"].get(call, 0)
        if call not in in_doubt:
            assert count == 1, (call, count)  # recorded results are replayed; calls that never started ran once
        elif CALLS[call] == "charge":
            assert count <= 1, (call, count)  # not idempotent: never run again, so never charged twice
        else:
            assert count in (1, 2), (call, count)  # idempotent: run again
    expected = {p.tool_call_id: (p.state, p.output) for p in tool_parts(uncrashed)}
    for p in parts:
        if p.tool_call_id in in_doubt and CALLS[p.tool_call_id] == "charge":
            assert (p.state, p.error_text) == ("output-error", UNKNOWN_OUTCOME)
        else:
            assert (p.state, p.output) == expected[p.tool_call_id]
    assistant_text = "".join(m.text for m in messages if m.role == "assistant")
    assert assistant_text.endswith("All done: charged 42.")
    # The submission's reply is what the user saw: the partial reply and a continuation joined.
    assert final.text == assistant_text


async def interrupted_chat(ray_runtime: Any, unique: str) -> None:
    control_name = f"crash-control/{unique}"
    CrashControl.options(name=control_name, namespace=ray_runtime.namespace, lifetime="detached").remote(
        "before_step:1"
    )
    agent = await ta.spawn(CrashAgent, unique, control=control_name, namespace=ray_runtime.namespace)
    stream = agent.chat("pay 42 and note it")
    seen: list[Any] = []
    with pytest.raises(ta.AgentUnavailableError) as info:
        async for chunk in stream:
            seen.append(chunk)
    assert info.value.request_id == stream.request_id
    assert info.value.retryable is True
    assert f"stream.resume(), which is handle.attach({stream.request_id!r}, position=" in info.value.message

    resumed: list[Any] = []
    deadline = time.monotonic() + 60
    while not resumed and time.monotonic() < deadline:
        try:
            resumed = await agent.attach(stream.request_id).collect()
        except (ta.AgentUnavailableError, ta.TurnError):
            await asyncio.sleep(0.2)  # the actor is still restarting, or its recovery has not started yet
    types = [c.type for c in resumed]
    assert types[-1] == "finish"
    assert "".join(c.delta for c in resumed if c.type == "text-delta") == "All done: charged 42."
    messages = await through_restarts(agent.get_messages)
    assert [m.text for m in messages if m.role == "user"] == ["pay 42 and note it"]
    assert sorted(p.tool_call_id for p in tool_parts(messages)) == sorted(CALLS)


async def cut_off_mid_reply(ray_runtime: Any, unique: str) -> None:
    # The actor dies in the middle of the last step's text: what the caller had received is in the log (nothing
    # leaves the actor before), so the recovery continues from it, and resume() brings exactly the rest.
    control_name = f"crash-control/{unique}"
    control = CrashControl.options(name=control_name, namespace=ray_runtime.namespace, lifetime="detached").remote(
        "on_chunk:text", held=True
    )
    agent = await ta.spawn(CrashAgent, unique, control=control_name, namespace=ray_runtime.namespace)
    stream = agent.chat("pay 42 and note it")
    received: list[Any] = []
    with pytest.raises(ta.AgentUnavailableError):
        async for chunk in stream:
            received.append(chunk)
            if chunk.type == "text-delta" and chunk.delta == "done: ":
                await control.release.remote()  # the caller holds "All done: ": now the actor dies
    assert "".join(c.delta for c in received if c.type == "text-delta") == "All done: "

    follow = stream
    deadline = time.monotonic() + 60
    while True:
        resumed = follow.resume()
        try:
            async for chunk in resumed:
                received.append(chunk)
            break
        except (ta.AgentUnavailableError, ta.TurnError):
            assert time.monotonic() < deadline, "the turn was not resumed within 60 s"
            follow = resumed  # its position counts what it delivered before it failed
            await asyncio.sleep(0.2)  # the actor is still restarting

    assert received[-1].type == "finish"
    messages = await through_restarts(agent.get_messages)
    reply = "".join(m.text for m in messages if m.role == "assistant")
    assert "".join(c.delta for c in received if c.type == "text-delta") == reply
    assert reply.endswith("All done: charged 42.")
    results = [c.tool_call_id for c in received if c.type in ("tool-output-available", "tool-output-error")]
    assert sorted(results) == sorted(CALLS)  # each call's result once


async def restarted_parent(ray_runtime: Any, unique: str) -> None:
    from ray_agents import ReattachLead, SlowHelper, handle_at

    lead = await ta.spawn(ReattachLead, unique)
    await lead.submit_messages("ask the helper", submission_id="s1")
    child = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the child's run has begun (its user message is stored)
        try:
            child = child or handle_at(f"{lead.path}/slow-helper/run-call-helper", SlowHelper)
            if await child.get_messages():
                break
        except ValueError:  # not created yet
            pass
        await asyncio.sleep(0.05)
    assert child is not None
    await lead.kill(restart=True)  # the parent dies while its agent tool waits for the child

    final = await final_submission(lead, "s1")
    assert final.status == "completed", final.error
    child_messages = await child.get_messages()
    assert [(m.role, m.text) for m in child_messages] == [("user", "help"), ("assistant", "helper answer")]  # once
    messages = await through_restarts(lead.get_messages)
    [call] = tool_parts(messages)
    assert (call.tool_call_id, call.state, call.output) == ("call-helper", "output-available", "helper answer")
    assert messages[-1].text == "lead done: helper answer"


QUEUED = (interrupted_chat, cut_off_mid_reply, restarted_parent)


@pytest.mark.timeout(120)
async def test_an_interrupted_chat_names_its_turn_and_the_caller_reattaches(ray_runtime: Any) -> None:
    await queued(ray_runtime, interrupted_chat)


@pytest.mark.timeout(120)
async def test_a_caller_cut_off_mid_reply_resumes_and_gets_every_chunk_once(ray_runtime: Any) -> None:
    await queued(ray_runtime, cut_off_mid_reply)


@pytest.mark.timeout(120)
async def test_a_restarted_parent_reattaches_to_its_running_child_instead_of_running_it_twice(ray_runtime: Any) -> None:
    await queued(ray_runtime, restarted_parent)


@pytest.mark.timeout(120)
async def test_repeated_crashes_in_one_turn_never_roll_back_settled_work(ray_runtime: Any) -> None:
    # Three crashes in one turn (restart churn): each restart goes on from what the last one settled.
    final, messages, report = await asyncio.shield(matrix(ray_runtime)[REPEATED])
    assert report["pending"] is None
    assert final.status == "completed", final.error
    # charge and note run in parallel: when charge's after_tool_call crashes, note has usually recorded its result
    # (nothing runs twice). Under load it may still be running: then it is in doubt, goes to reconcile_tool_call,
    # and the default reruns it because it is idempotent. The non-idempotent charge never runs twice.
    reruns = report["reconciled"].count("call-note")
    assert report["reconciled"] == ["call-note"] * reruns and reruns <= 1
    assert report["effects"] == {"call-charge": 1, "call-note": 1 + reruns, "call-lookup": 1}
    assert [m.text for m in messages if m.role == "user"] == ["pay 42 and note it"]
    assert sorted(p.tool_call_id for p in tool_parts(messages)) == sorted(CALLS)
