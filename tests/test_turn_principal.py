"""Who sent a turn: ``chat(..., principal=...)`` stamps the user messages it stores, every hook sees it
(``ctx.principal``, ``active_principal``, ``ToolContext.principal``, ``ChatResponseResult.principal``), a
continuation and a submission act for whoever sent their input, and ``authorize_turn`` decides what its actions
may do."""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

ALICE = ta.Principal(id="alice", roles=frozenset({"reader"}), claims={"email": "alice@example.com"})
STAMP = {"turnMetadata": {"principal": {"id": "alice", "roles": ["reader"]}}}


class Watched(ta.Think):
    """Records the principal each hook saw."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, str | None]] = []

    def _saw(self, hook: str, principal: ta.Principal | None) -> None:
        self.seen.append((hook, principal.id if principal is not None else None))

    async def before_turn(self, ctx: ta.TurnContext) -> None:
        self._saw("before_turn", ctx.principal)

    async def authorize_turn(self, ctx: ta.TurnContext) -> bool | str | None:
        self._saw("authorize_turn", ctx.principal)
        if ctx.principal is not None and "banned" in ctx.principal.roles:
            return "banned users may not chat"
        return None

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> None:
        self._saw("before_tool_call", self.active_principal)

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self._saw("on_chat_response", result.principal)

    @ta.tool
    async def whoami(self, context: ta.ToolContext) -> str:
        """Who is asking."""
        return context.principal.id if context.principal is not None else "nobody"


def agent(*steps: Any) -> Watched:
    return Watched("w", model=ScriptedModel(list(steps)), store=ta.MemoryStore())


async def test_every_hook_and_tool_sees_who_sent_the_turn() -> None:
    watched = agent(tool_call("whoami", {}), text("you are alice"))

    result = await watched.save_messages("who am I?", principal=ALICE)

    assert result.status == "completed"
    assert watched.seen == [
        ("before_turn", "alice"),
        ("authorize_turn", "alice"),
        ("before_tool_call", "alice"),
        ("on_chat_response", "alice"),
    ]
    messages = watched.get_messages()
    assert messages[0].metadata == STAMP
    tool_part = next(p for p in messages[1].parts if isinstance(p, ta.ToolPart))
    assert tool_part.output == "alice"
    assert watched.active_principal is None  # only while a turn runs


async def test_a_callers_turn_metadata_is_replaced_by_the_principal_given() -> None:
    watched = agent(text("ok"))
    forged = ta.user_message("hi", metadata={"turnMetadata": {"principal": {"id": "admin"}}, "mine": 1})

    await watched.save_messages(forged, principal=ALICE)

    assert watched.get_messages()[0].metadata == {"mine": 1, **STAMP}


async def test_a_turn_without_a_principal_has_none_and_stores_no_stamp() -> None:
    watched = agent(text("ok"))

    await watched.save_messages("hi")

    assert watched.seen[0] == ("before_turn", None)
    assert watched.get_messages()[0].metadata is None


async def test_a_continuation_acts_for_the_sender_of_the_latest_user_message() -> None:
    watched = agent(text("first"), text("more"))
    await watched.save_messages("start", principal=ALICE)
    watched.seen.clear()

    await watched.continue_last_turn()

    assert watched.seen[0] == ("before_turn", "alice")


async def test_authorize_turn_sees_the_principal_and_decides_what_the_turns_actions_may_do() -> None:
    class Acting(Watched):
        @ta.action(permissions=["doors:open"])
        async def open_door(self) -> str:
            """Open the door."""
            return "opened"

    model = ScriptedModel([tool_call("open_door", {}, id="o1"), text("no")])
    watched = Acting("w", model=model, store=ta.MemoryStore())
    banned = ta.Principal(id="mallory", roles=frozenset({"banned"}))

    result = await watched.save_messages("let me in", principal=banned)

    assert result.status == "completed"  # the turn runs; its actions are refused
    part = next(p for p in watched.get_messages()[1].parts if isinstance(p, ta.ToolPart))
    assert part.output == {
        "error": {
            "name": "ActionAuthorizationError",
            "message": "banned users may not chat",
            "permissions": ["doors:open"],
        }
    }
    assert ("authorize_turn", "mallory") in watched.seen


async def test_a_submission_keeps_who_submitted_and_its_turn_acts_for_them() -> None:
    watched = agent(text("done"))

    submitted = await watched.submit_messages("later", submission_id="s1", principal=ALICE)
    done = await watched.wait_for_submission("s1", timeout_s=30)

    assert submitted.principal == ta.Principal(id="alice", roles=frozenset({"reader"}))
    assert done.principal is not None and done.principal.id == "alice"
    assert ("before_turn", "alice") in watched.seen
    assert watched.get_messages()[0].metadata == STAMP


async def test_a_principal_of_the_wrong_type_is_refused_before_anything_is_stored() -> None:
    watched = agent(text("never"))

    for call in (
        lambda: watched.save_messages("hi", principal="alice"),
        lambda: watched.submit_messages("hi", principal={"id": "alice"}),
    ):
        with pytest.raises(ta.ConfigurationError, match=r"principal must be a ta.Principal or None, not (str|dict)"):
            await call()
    with pytest.raises(ta.ConfigurationError, match=r"principal must be a ta\.Principal"):
        watched.chat("hi", principal=42)
    assert watched.get_messages() == []


def test_a_principal_id_must_be_printable_and_short() -> None:
    for bad in ("", "a\nb", "x" * 257):
        with pytest.raises(ValueError):
            ta.Principal(id=bad)
    assert ta.Principal.from_stamp({"id": "bob", "roles": ["a", 3]}) == ta.Principal(id="bob", roles=frozenset({"a"}))
    assert ta.Principal.from_stamp({"roles": []}) is None
    assert ta.Principal.from_stamp("bob") is None
