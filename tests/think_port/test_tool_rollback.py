"""Port of ``packages/think/src/e2e-tests/tool-rollback.test.ts``: a long tool loop killed again and again while it
runs still finishes every step, and each kill re-runs at most the one step that was in flight (settled tool results
are durable; recovery never rolls back past them).

The reference SIGKILLs ``wrangler dev`` every 2.5 s while its agent runs 30 ``recordStep`` steps, and counts the
executions in a ledger. Here the process dies exactly inside chosen steps (``killed_at``), and the model is one that
answers from the prompt: it calls ``recordStep`` with the next index until every index has a result, as the
reference's model does. ``recordStep`` declares itself idempotent (the fix the reference's verdict points to), so a
step in flight at a kill is run again rather than given up.
"""

from __future__ import annotations

import gc
from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

from .conftest import Freezer, Recorder, killed_at, settle_recovery

SRC = "packages/think/src/e2e-tests/tool-rollback.test.ts"
TOTAL_STEPS = 12


class NextStep:
    """A model that calls ``recordStep`` with the number of tool results so far, then answers ``done``."""

    def __init__(self) -> None:
        self.requests: list[ta.ModelRequest] = []

    def stream(self, request: ta.ModelRequest) -> Any:
        self.requests.append(request)
        done = sum(1 for m in request.messages if m["role"] == "tool")
        answer = text("all steps recorded") if done >= TOTAL_STEPS else tool_call("recordStep", {"index": done})
        return ScriptedModel([answer]).stream(request)


class Loop(Recorder):
    def __init__(self, *args: Any, ledger: list[int], freezer: Freezer | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.ledger = ledger
        self.freezer = freezer or Freezer(None)
        self.recoveries = 0

    @ta.tool(idempotent=True)
    async def recordStep(self, index: int) -> str:
        """Record one step of the loop."""
        self.ledger.append(index)
        await self.freezer.point(f"step:{index}")
        return f"recorded {index}"

    async def on_chat_recovery(self, ctx: ta.ChatRecoveryContext) -> None:
        self.recoveries += 1


# A killed turn's tool call is an abandoned coroutine the garbage collector closes later, in another context: its
# clean-up must not raise there (it did, "Token ... was created in a different Context", CI of stop 26).
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
async def test_a_long_tool_loop_survives_repeated_kills_without_deep_rollback() -> None:
    """tool-rollback.test.ts:282 "recovers a long tool loop across repeated evictions without deep rollback"."""
    ledger: list[int] = []
    recoveries = 0
    store = ta.MemoryStore()
    freezer = Freezer("step:2")
    agent = Loop(model=NextStep(), store=store, ledger=ledger, freezer=freezer, max_steps=50)
    store = await killed_at(lambda: agent.chat("seed everything in order").collect(), freezer, store)
    for kill in (5, 9):
        freezer = Freezer(f"step:{kill}")
        restarted = Loop(model=NextStep(), store=store, ledger=ledger, freezer=freezer, max_steps=50)
        store = await killed_at(restarted.load_messages, freezer, store)
        recoveries += restarted.recoveries
    final = Loop(model=NextStep(), store=store, ledger=ledger, max_steps=50)
    await final.load_messages()
    await settle_recovery(final)
    await final.wait_idle()
    recoveries += final.recoveries

    assert sorted(set(ledger)) == list(range(TOTAL_STEPS))
    assert ledger == [0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 8, 9, 9, 10, 11]  # only the step in flight at a kill re-ran
    assert recoveries == 3
    assert len(ledger) - len(set(ledger)) <= recoveries
    assert final.get_messages()[-1].text == "all steps recorded"
    assert await final.store.list_turns() == []
    gc.collect()  # the killed turns' abandoned calls are closed here, inside the test, not at some later test
