"""Channels and turn metadata (Think's channel policy and ``turnMetadata``): a turn's channel is the one its caller
names, else the conversation's, else ``web``; the channel's instructions go before the system prompt, its tool
policy narrows what the turn offers, its ``max_steps`` bounds the turn; the channel and the turn's metadata are
stamped on the user messages it stores, seen by every hook and read back by continuations and recoveries.

Ported from the reference's channel-policy, channel-threading and turn-metadata tests (Think's
``packages/think/src/tests``), in Python."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from test_gateway import frames_until_done, request, user

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, text, tool_call


class Desk(ta.Think):
    """Answers on the web, by e-mail (formal, no tools but lookup, one step) and in Slack (short)."""

    instructions = "You are the help desk."
    channels = [
        ta.Channel(name="email", instructions="Write a formal e-mail.", tools=["lookup"], max_steps=1),
        ta.Channel(name="slack", instructions="Be brief.", tools=lambda names: names - {"refund"}),
    ]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, str, dict[str, Any] | None]] = []

    async def before_turn(self, ctx: ta.TurnContext) -> None:
        self.seen.append(("before_turn", ctx.channel, ctx.metadata))

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self.seen.append(("on_chat_response", str(self.active_channel), self.active_turn_metadata))

    @ta.tool
    async def lookup(self, order: str) -> str:
        """Look an order up."""
        return f"order {order}: shipped ({self.active_channel})"

    @ta.tool
    async def refund(self, order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"


def desk(*steps: Any) -> tuple[Desk, ScriptedModel]:
    model = ScriptedModel(list(steps))
    return Desk("desk", model=model, store=ta.MemoryStore()), model


def offered(request: Any) -> list[str]:
    return sorted(t["function"]["name"] for t in request.tools)


async def test_a_channels_instructions_tools_and_steps_shape_its_turns() -> None:
    agent, model = desk(text("Dear customer, ..."), text("web answer"), text("short"))

    await agent.save_messages("where is my order?", channel="email")
    await agent.save_messages("and now?", channel="web")
    await agent.save_messages("quick?", channel="slack")

    email, web, slack = model.requests
    assert email.messages[0]["content"].startswith("Write a formal e-mail.\n\nYou are the help desk.")
    assert offered(email) == ["lookup"]
    assert web.messages[0]["content"].startswith("You are the help desk.")
    assert offered(web) == ["lookup", "refund"]
    assert slack.messages[0]["content"].startswith("Be brief.\n\nYou are the help desk.")
    assert offered(slack) == ["lookup"]


async def test_a_channels_max_steps_bounds_the_turn() -> None:
    agent, model = desk(tool_call("lookup", {"order": "7"}), text("never asked"))

    result = await agent.save_messages("where is order 7?", channel="email")

    assert result.status == "completed"
    assert len(model.requests) == 1  # max_steps=1: the tool ran, no second step
    assert model.remaining == 1


async def test_the_channel_and_metadata_are_stamped_seen_by_hooks_and_read_back_by_a_continuation() -> None:
    agent, _ = desk(tool_call("lookup", {"order": "9"}), text("shipped"), text("anything else?"))

    await agent.save_messages("order 9?", channel="slack", metadata={"thread": "T1"})
    await agent.continue_last_turn()

    first = agent.get_messages()[0]
    assert first.metadata == {"channel": "slack", "turnMetadata": {"thread": "T1"}}
    tool_part = next(p for m in agent.get_messages() for p in m.parts if isinstance(p, ta.ToolPart))
    assert tool_part.output == "order 9: shipped (slack)"
    assert agent.seen == [
        ("before_turn", "slack", {"thread": "T1"}),
        ("on_chat_response", "None", None),  # the response hook runs after the turn released the agent
        ("before_turn", "slack", {"thread": "T1"}),  # the continuation: the conversation's channel and facts
        ("on_chat_response", "None", None),
    ]


async def test_a_turn_without_a_channel_is_on_the_web_and_stamps_nothing() -> None:
    agent, model = desk(text("hi"))

    await agent.save_messages("hello")

    assert agent.seen[0] == ("before_turn", "web", None)
    assert agent.get_messages()[0].metadata is None
    assert offered(model.requests[0]) == ["lookup", "refund"]


async def test_the_principal_and_the_metadata_share_turn_metadata() -> None:
    agent, _ = desk(text("ok"))
    alice = ta.Principal(id="alice")

    await agent.save_messages("hi", metadata={"ticket": 12}, principal=alice)

    assert agent.get_messages()[0].metadata == {
        "turnMetadata": {"ticket": 12, "principal": {"id": "alice", "roles": []}}
    }
    assert agent.seen[0] == ("before_turn", "web", {"ticket": 12})  # the principal is ctx.principal, not metadata


async def test_a_submission_keeps_its_channel() -> None:
    agent, _ = desk(text("Dear customer"))

    submitted = await agent.submit_messages("by mail", submission_id="s1", channel="email")
    done = await agent.wait_for_submission("s1", timeout_s=30)

    assert (submitted.channel, done.channel, done.status) == ("email", "email", "completed")
    assert agent.seen[0] == ("before_turn", "email", None)


async def test_bad_channels_and_metadata_are_refused_before_anything_is_stored() -> None:
    agent, _ = desk(text("never"))

    with pytest.raises(
        ta.ConfigurationError, match=r"Desk answers on no channel 'sms': its channels are email, slack, web"
    ):
        await agent.save_messages("hi", channel="sms")
    with pytest.raises(ta.ConfigurationError, match=r"metadata\['principal'\] is the server's"):
        agent.chat("hi", metadata={"principal": "admin"})
    with pytest.raises(ta.ConfigurationError, match="metadata must hold JSON values"):
        await agent.save_messages("hi", metadata={"when": object()})
    with pytest.raises(ta.ConfigurationError, match="answers on no channel 'fax'"):
        await agent.submit_messages("hi", channel="fax")
    assert agent.get_messages() == []


def test_channel_declarations_are_checked_where_the_class_is_used() -> None:
    with pytest.raises(ta.ConfigurationError, match="channel name 'E-Mail'"):
        ta.Channel(name="E-Mail")
    with pytest.raises(ta.ConfigurationError, match=r"max_steps=\.\.\.\) must be a whole number"):
        ta.Channel(name="email", max_steps=0)

    class Twice(ta.Think):
        channels = [ta.Channel(name="email"), ta.Channel(name="email")]

    with pytest.raises(ta.ConfigurationError, match="names the channel 'email' twice"):
        Twice("t", store=ta.MemoryStore())


async def test_the_gateway_stamps_web_and_the_applications_turn_metadata_on_what_a_socket_sends() -> None:
    def facts(principal: ta.Principal, agent_path: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"agent": agent_path, "file": body.get("selectedFile")}

    seen: list[Any] = []

    class Watching(ta.Think):
        async def before_turn(self, ctx: ta.TurnContext) -> None:
            seen.append((ctx.channel, ctx.metadata))

    directory = LocalDirectory([Watching], model=ScriptedModel([text("ok")]), store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory, turn_metadata=facts).app())) as client:
        ws = await client.ws_connect("/agents/watching/w1")
        await greeting(ws)
        forged = {**user("hi", "u1"), "metadata": {"channel": "admin", "turnMetadata": {"root": True}, "mine": 1}}
        await ws.send_str(request("r1", forged, selectedFile="a.py"))
        await frames_until_done(ws, "r1")
        stored = json.loads(await (await client.get("/agents/watching/w1/get-messages")).text())
    assert stored[0]["metadata"] == {
        "mine": 1,
        "channel": "web",
        "turnMetadata": {"agent": "watching/w1", "file": "a.py"},  # no principal: this gateway knows nobody
    }
    assert seen == [("web", {"agent": "watching/w1", "file": "a.py"})]


async def test_a_new_message_without_a_channel_stays_on_the_conversations_channel() -> None:
    agent, _ = desk(text("short"), text("still short"))

    await agent.save_messages("quick?", channel="slack")
    await agent.save_messages("and now?")  # no channel: the conversation is on slack (Think: the latest user message's)

    assert [m.metadata for m in agent.get_messages() if m.role == "user"] == [
        {"channel": "slack"},
        {"channel": "slack"},
    ]
    assert [seen[1] for seen in agent.seen if seen[0] == "before_turn"] == ["slack", "slack"]
