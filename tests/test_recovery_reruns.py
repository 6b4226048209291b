"""A call recovery re-runs is never stored as "interrupted" on the way (a second crash there would leave it so).

Recovery settles a crashed turn's calls in doubt before the model's turn: an idempotent one runs again. The
transcript repair of the recovery turn's set-up leaves those calls waiting, so a crash after the set-up and
before the re-run leaves them as the first crash did, and the next start runs them. Crashes are simulated as
in test_recovery.py.
"""

from __future__ import annotations

import asyncio
import copy

from test_recovery import WAIT_S, Crashable, Effects, crash, restart, tools_of

import think_actors as ta
from think_actors.messages import ToolPart
from think_actors.testing import ScriptedModel, step, text, tool_call


class HeldAtTurnStart(Crashable):
    """Can also freeze in ``before_turn``: the recovery turn's set-up (and its transcript repair) is done."""

    async def before_turn(self, ctx: ta.TurnContext) -> None:
        await self.point("before_turn")


def stored_calls(messages: list[ta.UIMessage]) -> dict[str, tuple[str, str | None]]:
    return {p.tool_call_id: (p.state, p.error_text) for m in messages for p in m.parts if isinstance(p, ToolPart)}


async def test_a_crash_before_the_re_run_leaves_the_calls_to_run_again() -> None:
    effects = Effects()
    batch = step(tool_call("read", {}, id="c1"), tool_call("read", {}, id="c2"))
    store = await crash(ScriptedModel([batch]), "tool:read:after-effect", effects)
    assert effects.runs == {"c1": 1, "c2": 1}  # both ran; neither's end was recorded

    second = HeldAtTurnStart(
        model=ScriptedModel([text("never")]), store=store, freeze_at="before_turn", effects=effects
    )
    starting = asyncio.create_task(second.load_messages())
    await asyncio.wait_for(second.frozen.wait(), WAIT_S)
    snapshot = copy.deepcopy(store)  # the second crash: set up to re-run them, and dead before it did
    starting.cancel()
    assert stored_calls(await snapshot.load_messages()) == {
        "c1": ("input-available", None),
        "c2": ("input-available", None),
    }
    assert [e for e in second.events if e.type == "chat:transcript:repaired"] == []

    third = await restart(snapshot, ScriptedModel([text("done")]), effects)
    assert tools_of(third) == {"c1": ("output-available", "read ok"), "c2": ("output-available", "read ok")}
    assert effects.runs == {"c1": 2, "c2": 2}
