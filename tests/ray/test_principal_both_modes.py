"""Who sent a turn, the same in process, through a ``LocalAgentHandle`` and through a Ray handle: the same user
function passes ``principal=`` to ``chat``, ``save_messages`` and ``submit_messages`` and sees the same stamps,
the same answers of a tool that reads ``ToolContext.principal``, and the same refusal by ``authorize_turn``."""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

ALICE = ta.Principal(id="alice", roles=frozenset({"reader"}))
MALLORY = ta.Principal(id="mallory", roles=frozenset({"banned"}))


class Guarded(ta.Think):
    """Answers with who asked (an action), whose calls banned principals may not make (authorize_turn); answers by
    e-mail too."""

    channels = [ta.Channel(name="email", instructions="Write an e-mail.")]

    async def authorize_turn(self, ctx: ta.TurnContext) -> bool | str | None:
        if ctx.principal is not None and "banned" in ctx.principal.roles:
            return "banned users may not chat"
        return None

    @ta.action
    async def whoami(self, context: ta.ToolContext) -> str:
        """Who is asking."""
        return context.principal.id if context.principal is not None else "nobody"


def script() -> list[Any]:
    return [
        tool_call("whoami", {}, id="w1"),
        text("streamed"),
        tool_call("whoami", {}, id="w2"),
        text("saved"),
        tool_call("whoami", {}, id="w3"),
        text("refused"),
        text("submitted"),
        text("Dear Alice"),
    ]


async def what_a_user_sees(agent: Any, unique: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    stream = agent.chat("who am I?", principal=ALICE)
    await stream.collect()
    seen["chat"] = stream.outcome.status
    result = await agent.save_messages("and now?", principal=ALICE)
    seen["saved"] = result.status
    refused = agent.chat("let me in", principal=MALLORY)
    await refused.collect()
    seen["refused"] = refused.outcome.status  # the turn runs; its action calls are refused
    submitted = await agent.submit_messages("later", submission_id=f"{unique}-s", principal=ALICE)
    seen["submitted"] = submitted.principal
    done = await agent.wait_for_submission(f"{unique}-s", timeout_s=60)
    seen["submission"] = (done.status, done.principal)
    with pytest.raises(ta.ConfigurationError, match=r"principal must be a ta\.Principal"):
        await agent.save_messages("typo", principal="alice")
    emailed = await agent.save_messages("by mail", principal=ALICE, channel="email", metadata={"thread": "t1"})
    seen["emailed"] = emailed.status
    with pytest.raises(ta.ConfigurationError, match="answers on no channel 'fax'"):
        await agent.save_messages("typo", channel="fax")
    messages = await agent.load_messages()  # the one way to read that every kind of agent awaits
    seen["stamps"] = [
        (m.text, ((m.metadata or {}).get("turnMetadata") or {}).get("principal")) for m in messages if m.role == "user"
    ]
    seen["metadata"] = [m.metadata for m in messages if m.role == "user" and m.text == "by mail"]
    seen["whoami"] = [p.output for m in messages for p in m.parts if isinstance(p, ta.ToolPart)]
    return seen


@pytest.mark.timeout(120)
async def test_the_same_function_sees_the_same_principal_in_process_and_on_ray(ray_runtime: Any, unique: str) -> None:
    in_process = Guarded(unique, model=ScriptedModel(script()), store=ta.MemoryStore())
    local_handle = ta.LocalAgentHandle(
        Guarded(unique, model=ScriptedModel(script()), store=ta.MemoryStore())
    )
    on_ray = await ta.spawn(Guarded, unique, model=ScriptedModel(script()))

    seen = [await what_a_user_sees(agent, unique) for agent in (in_process, local_handle, on_ray)]

    assert seen[0] == seen[1] == seen[2]
    stamp = {"id": "alice", "roles": ["reader"]}
    assert seen[0] == {
        "chat": "completed",
        "saved": "completed",
        "refused": "completed",
        "submitted": ALICE,
        "submission": ("completed", ALICE),
        "stamps": [
            ("who am I?", stamp),
            ("and now?", stamp),
            ("let me in", {"id": "mallory", "roles": ["banned"]}),
            ("later", stamp),
            ("by mail", stamp),
        ],
        "emailed": "completed",
        "metadata": [{"channel": "email", "turnMetadata": {"thread": "t1", "principal": stamp}}],
        "whoami": [
            "alice",
            "alice",
            {"error": {"name": "ActionAuthorizationError", "message": "banned users may not chat", "permissions": []}},
        ],
    }
