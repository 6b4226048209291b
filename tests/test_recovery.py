"""Recovery of interrupted turns, in process (reference §2.8 and the recovery parts of think-session.test.ts).

A crash is simulated exactly: the first agent is frozen inside a hook at the crash point, its store is copied
byte for byte (what a dead process leaves on disk), and a second agent starts on the copy. Real process kills
through Ray actors are in tests/ray/test_crash_recovery.py.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

import think_actors as ta
from think_actors._turn.recovery import UNKNOWN_OUTCOME
from think_actors.messages import ReasoningPart, TextPart
from think_actors.testing import ScriptedModel, error, reasoning, step, text, tool_call

WAIT_S = 5
# A step whose text and tool result reach the chunk log before on_step_finish (settled results flush at once).
PARTIAL = step(text("partial"), tool_call("read", {}, id="r1"))


class Effects:
    """Counts tool runs by tool call id (it outlives the "crash")."""

    def __init__(self) -> None:
        self.runs: dict[str, int] = {}


class Crashable(ta.Think):
    """Freezes forever at ``freeze_at`` (a hook point); records recovery hooks and events."""

    def __init__(self, *args: Any, freeze_at: str | None = None, effects: Effects, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.freeze_at = freeze_at
        self.frozen = asyncio.Event()
        self.effects = effects
        self.recoveries: list[ta.ChatRecoveryContext] = []
        self.exhausted: list[ta.ChatRecoveryContext] = []
        self.reconciled: list[ta.ToolReconcileContext] = []
        self.errors: list[ta.ChatErrorContext] = []
        self.decision: Any = None
        self.reconcile_with: Any = None
        self.events: list[ta.Event] = []
        self.observe("agents:chat", self.events.append)
        agent = self

        def make(name: str, idempotent: bool) -> ta.Tool:
            async def run(value: Any, context: ta.ToolContext) -> str:
                await agent.point(f"tool:{name}")
                agent.effects.runs[context.tool_call_id] = agent.effects.runs.get(context.tool_call_id, 0) + 1
                await agent.point(f"tool:{name}:after-effect")
                return f"{name} ok"

            return ta.Tool(name, name, {"type": "object", "properties": {}}, executor=run, idempotent=idempotent)

        self.tools = (make("pay", False), make("read", True))

    async def point(self, name: str) -> None:
        if name == self.freeze_at:
            self.frozen.set()
            await asyncio.Event().wait()  # the process is gone: nothing after this point ever runs

    async def before_step(self, ctx: ta.StepContext) -> None:
        await self.point(f"before_step:{ctx.step_number}")

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        await self.point(f"on_step_finish:{ctx.step_number}")

    async def on_chat_recovery(self, ctx: ta.ChatRecoveryContext) -> Any:
        self.recoveries.append(ctx)
        return self.decision

    async def on_chat_recovery_exhausted(self, ctx: ta.ChatRecoveryContext) -> None:
        self.exhausted.append(ctx)

    async def reconcile_tool_call(self, ctx: ta.ToolReconcileContext) -> Any:
        self.reconciled.append(ctx)
        return self.reconcile_with

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self.errors.append(ctx)
        return error


async def crash(model: ScriptedModel, freeze_at: str, effects: Effects, message: str = "go") -> ta.MemoryStore:
    """Run a turn until it freezes at ``freeze_at``; return a copy of the store as the crash left it."""
    store = ta.MemoryStore()
    agent = Crashable(model=model, store=store, freeze_at=freeze_at, effects=effects)
    task = asyncio.create_task(agent.save_messages(message))
    await asyncio.wait_for(agent.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    task.cancel()
    return snapshot


async def restart(store: ta.MemoryStore, model: ScriptedModel, effects: Effects, **options: Any) -> Crashable:
    agent = Crashable(model=model, store=store, effects=effects)
    for name, value in options.items():
        setattr(agent, name, value)
    await agent.load_messages()  # starting finds the interrupted turn and queues its recovery
    await asyncio.wait_for(agent._engine.recovery.idle(), WAIT_S)
    return agent


def texts(agent: ta.Think) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in agent.get_messages()]


def tools_of(agent: ta.Think) -> dict[str, tuple[str, Any]]:
    return {
        p.tool_call_id: (p.state, p.output if p.state == "output-available" else p.error_text)
        for m in agent.get_messages()
        for p in m.parts
        if isinstance(p, ta.ToolPart)
    }


def recovery_events(agent: Crashable) -> list[str]:
    return [e.type for e in agent.events if e.type.startswith("chat:recovery:")]


async def test_a_partial_reply_is_continued_after_the_crash() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)

    model = ScriptedModel([text("the rest.")])
    agent = await restart(store, model, effects)

    assert texts(agent) == [("user", "go"), ("assistant", "partial"), ("assistant", "the rest.")]
    [ctx] = agent.recoveries
    assert (ctx.kind, ctx.attempt, ctx.trigger) == ("continue", 1, "programmatic")
    assert ctx.partial is not None and ctx.partial.text == "partial"
    assert tools_of(agent) == {"r1": ("output-available", "read ok")}
    assert effects.runs == {"r1": 1}
    # The continuation saw the partial reply and its tool result, and goes on from the result.
    assert [m["role"] for m in model.requests[0].messages] == ["system", "user", "assistant", "tool"]
    assert recovery_events(agent) == ["chat:recovery:detected", "chat:recovery:attempt", "chat:recovery:completed"]
    assert await agent.store.list_turns() == []


async def test_an_unanswered_user_turn_is_retried_without_a_second_user_message() -> None:
    effects = Effects()
    store = await crash(ScriptedModel(), "before_step:0", effects, message="what is 2+2?")

    model = ScriptedModel([text("4")])
    agent = await restart(store, model, effects)

    assert texts(agent) == [("user", "what is 2+2?"), ("assistant", "4")]
    assert agent.recoveries[0].kind == "retry"
    assert [m["role"] for m in model.requests[0].messages] == ["system", "user"]


async def test_recorded_tool_results_are_replayed_and_calls_that_never_started_run_once() -> None:
    effects = Effects()
    plan = step(tool_call("read", {}, id="r1"), tool_call("pay", {}, id="p1"))
    store = await crash(ScriptedModel([plan]), "on_step_finish:0", effects)
    assert effects.runs == {"r1": 1, "p1": 1}

    agent = await restart(store, ScriptedModel([text("paid and read")]), effects)

    assert effects.runs == {"r1": 1, "p1": 1}  # both results were recorded: neither ran again
    assert tools_of(agent) == {"r1": ("output-available", "read ok"), "p1": ("output-available", "pay ok")}
    assert agent.reconciled == []
    assert texts(agent)[-1] == ("assistant", "paid and read")


@pytest.mark.parametrize(
    ("tool", "expected"),
    [("pay", ("output-error", UNKNOWN_OUTCOME)), ("read", ("output-available", "read ok"))],
    ids=["not-idempotent-fails", "idempotent-reruns"],
)
async def test_a_call_in_doubt_is_reconciled_by_the_default_policy(tool: str, expected: tuple[str, Any]) -> None:
    effects = Effects()
    store = await crash(ScriptedModel([tool_call(tool, {}, id="c1")]), f"tool:{tool}:after-effect", effects)
    assert effects.runs == {"c1": 1}  # the effect happened; its end was never recorded

    agent = await restart(store, ScriptedModel([text("done")]), effects)

    [ctx] = agent.reconciled
    assert (ctx.tool_call_id, ctx.tool_name, ctx.idempotent) == ("c1", tool, tool == "read")
    assert tools_of(agent) == {"c1": expected}
    assert effects.runs == {"c1": 2 if tool == "read" else 1}  # a payment is never made twice


async def test_reconcile_tool_call_can_answer_for_the_call() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([tool_call("pay", {}, id="c1")]), "tool:pay:after-effect", effects)
    agent = await restart(
        store, ScriptedModel([text("ok")]), effects, reconcile_with=ta.Substitute({"paid": True, "checked": "bank"})
    )
    assert tools_of(agent) == {"c1": ("output-available", {"paid": True, "checked": "bank"})}
    assert effects.runs == {"c1": 1}


async def test_persist_false_drops_the_partial_but_keeps_settled_tool_results() -> None:
    effects = Effects()
    plan = step(text("Reading first."), tool_call("read", {}, id="r1"))
    store = await crash(ScriptedModel([plan]), "on_step_finish:0", effects)
    agent = await restart(store, ScriptedModel([text("answer")]), effects, decision={"persist": False})
    assert tools_of(agent) == {"r1": ("output-available", "read ok")}
    assert "Reading first." not in [t for _, t in texts(agent)]
    assert texts(agent)[-1] == ("assistant", "answer")


async def test_resume_false_ends_the_turn_without_a_continuation() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    model = ScriptedModel()
    agent = await restart(store, model, effects, decision=ta.RecoveryDecision(resume=False))
    assert texts(agent) == [("user", "go"), ("assistant", "partial")]
    assert model.requests == []
    assert recovery_events(agent)[-1] == "chat:recovery:skipped"


async def test_recovery_gives_up_after_max_attempts_without_progress() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    [record] = await store.list_turns()
    record.attempts = 3
    record.progress = 10**6  # no progress since the last attempt
    await store.put_turn(record)

    agent = await restart(store, ScriptedModel(), effects)

    [ctx] = agent.exhausted
    assert ctx.reason == "max_attempts"
    [error] = agent.errors
    assert (error.stage, error.messages_persisted) == ("recovery", True)
    assert "chat:recovery:exhausted" in recovery_events(agent)
    assert texts(agent) == [("user", "go"), ("assistant", "partial")]  # what was said is kept
    assert await agent.store.list_turns() == []


async def test_attempts_reset_when_an_attempt_made_progress() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    [record] = await store.list_turns()
    record.attempts = 3
    record.progress = 1  # the log has grown since: that attempt got further
    await store.put_turn(record)

    agent = await restart(store, ScriptedModel([text(" rest")]), effects)
    assert agent.exhausted == []
    assert agent.recoveries[0].attempt == 1


async def test_recovery_disabled_ends_interrupted_turns() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    agent = await restart(store, ScriptedModel(), effects, chat_recovery=ta.ChatRecoveryConfig(enabled=False))
    assert agent.exhausted[0].reason == "disabled"


async def test_a_caller_can_attach_to_the_recovered_turn() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    [record] = await store.list_turns()
    model = ScriptedModel([text("more")])
    agent = Crashable(model=model, store=store, effects=effects)
    await agent.load_messages()
    chunks = [c async for c in agent.attach(record.request_id)]
    assert [c.type for c in chunks][-1] == "finish"
    assert "".join(c.delta for c in chunks if c.type == "text-delta") == "more"
    with pytest.raises(ta.TurnError, match="no recovered turn"):
        async for _ in agent.attach("never-interrupted"):
            pass


async def test_a_running_submission_is_completed_by_its_recovered_turn() -> None:
    effects = Effects()
    store = ta.MemoryStore()
    agent = Crashable(model=ScriptedModel([PARTIAL]), store=store, freeze_at="on_step_finish:0", effects=effects)
    sub = await agent.submit_messages("nightly job", submission_id="s1")
    await asyncio.wait_for(agent.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    assert (await agent.inspect_submission("s1")).status == "running"  # type: ignore[union-attr]

    restarted = await restart(snapshot, ScriptedModel([text(" done")]), effects)
    final = await restarted.wait_for_submission(sub.submission_id, timeout_s=WAIT_S)
    assert final.status == "completed"
    assert texts(restarted) == [("user", "nightly job"), ("assistant", "partial"), ("assistant", " done")]
    # Stored as two messages, the partial reply and the continuation; the submission's reply is what the user saw.
    [partial, continuation] = restarted.get_messages()[1:]
    assert final.message is not None and final.text == "partial done"
    assert final.message.id == partial.id
    assert final.message.parts == partial.parts + continuation.parts
    assert (await restarted.inspect_submission("s1")).text == "partial done"  # type: ignore[union-attr]


async def test_a_turn_without_progress_for_too_long_is_not_resumed() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    [record] = await store.list_turns()
    record.started_at -= 7200  # its last progress was two hours ago
    record.progress = 10**6
    await store.put_turn(record)
    agent = await restart(store, ScriptedModel(), effects)
    assert agent.exhausted[0].reason == "no_progress_timeout"


async def test_the_work_budget_bounds_recovery_even_when_attempts_make_progress() -> None:
    effects = Effects()
    store = await crash(ScriptedModel([PARTIAL]), "on_step_finish:0", effects)
    [record] = await store.list_turns()
    record.data["total_attempts"] = 10  # ten attempts already, each of which got further
    await store.put_turn(record)
    agent = await restart(store, ScriptedModel(), effects)
    assert agent.exhausted[0].reason == "work_budget"


async def test_a_rerun_call_in_doubt_keeps_only_the_fields_of_its_final_state() -> None:
    # The recovery turn's transcript repair marks the call in doubt as interrupted (an error) before it runs again;
    # its result then settles it: the stored part is a plain result, no stale error beside the output.
    effects = Effects()
    store = await crash(ScriptedModel([tool_call("read", {}, id="c1")]), "tool:read:after-effect", effects)

    agent = await restart(store, ScriptedModel([text("done")]), effects)

    [part] = [p for m in await agent.store.load_messages() for p in m.parts if isinstance(p, ta.ToolPart)]
    assert part.to_wire() == {
        "type": "tool-read",
        "toolCallId": "c1",
        "state": "output-available",
        "toolName": "read",
        "input": {},
        "output": "read ok",
        "preliminary": False,
    }
    assert effects.runs == {"c1": 2}


class FreezesMidPart(Crashable):
    """Freezes at the 150th delta of a long part: the first batch of the log (128 chunks) holds its start and the
    deltas before it, never its end."""

    deltas = 0

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type in ("text-delta", "reasoning-delta"):
            self.deltas += 1
            await self.point(f"delta:{self.deltas}")


@pytest.mark.parametrize("resume", [True, False], ids=["continued", "given-up"])
@pytest.mark.parametrize("kind", ["text", "reasoning"])
async def test_the_partial_reply_of_a_recovered_turn_is_stored_finished(kind: str, resume: bool) -> None:
    effects = Effects()
    store = ta.MemoryStore()
    long_part = (text if kind == "text" else reasoning)("x" * 200, chunk_size=1)
    crashed = FreezesMidPart(model=ScriptedModel([long_part]), store=store, freeze_at="delta:150", effects=effects)
    task = asyncio.create_task(crashed.save_messages("go"))
    await asyncio.wait_for(crashed.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    task.cancel()

    model = ScriptedModel([text("the rest.")] if resume else [])
    agent = await restart(snapshot, model, effects, decision=ta.RecoveryDecision(resume=resume))

    stored = await agent.store.load_messages()
    assert [m.role for m in stored] == ["user", "assistant", "assistant"][: 3 if resume else 2]
    [part] = [p for p in stored[1].parts if isinstance(p, TextPart | ReasoningPart)]
    assert (part.type, part.state) == (kind, "done")
    assert 0 < len(part.text) < 150  # what the log held when the process died
    if resume:
        assert [(p.type, p.state) for p in stored[2].parts if isinstance(p, TextPart)] == [("text", "done")]


class FreezesInResponseHook(Crashable):
    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        await self.point("on_chat_response")


@pytest.mark.parametrize(
    ("reply", "status", "error_text"),
    [
        (text("answered"), "completed", None),
        (error(ta.ProviderError("upstream broke"), after=text("answered")), "error", "upstream broke"),
    ],
    ids=["completed", "error"],
)
async def test_a_crash_in_the_response_hook_of_a_submission_settles_it_without_running_it_again(
    reply: Any, status: str, error_text: str | None
) -> None:
    # The turn had ended (its reply stored, the slot released); only its submission's status was still to write.
    effects = Effects()
    store = ta.MemoryStore()
    crashed = FreezesInResponseHook(
        model=ScriptedModel([reply]), store=store, freeze_at="on_chat_response", effects=effects
    )
    await crashed.submit_messages("nightly job", submission_id="s1")
    await asyncio.wait_for(crashed.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)
    assert (await crashed.inspect_submission("s1")).status == "running"  # type: ignore[union-attr]

    model = ScriptedModel()
    restarted = await restart(snapshot, model, effects)
    final = await restarted.wait_for_submission("s1", timeout_s=WAIT_S)

    assert (final.status, final.error) == (status, error_text)
    assert texts(restarted) == [("user", "nightly job"), ("assistant", "answered")]
    assert model.requests == [] and restarted.recoveries == [] and recovery_events(restarted) == []
    assert await restarted.store.list_turns() == []
