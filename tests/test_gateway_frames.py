"""Every frame the gateway reads is answered and none wedges a socket or an agent: bad chat requests are refused
before anything is stored, unknown tool calls and bare cancels get an error frame, a repeated resume request
leaves the socket following the stream (reference §1.1, §1.9, §3.5, §3.7)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory, protocol
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

WAIT_S = 5


class Helper(ta.Think):
    pass


def chat(request_id: str, messages: list[Any], **body: Any) -> str:
    payload = {"messages": messages, "trigger": "submit-message", **body}
    init = {"method": "POST", "body": json.dumps(payload)}
    return json.dumps({"type": "cf_agent_use_chat_request", "id": request_id, "init": init})


def user(text_: str = "hi", id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text_}]}


async def receive(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
    return frame


async def until(ws: Any, predicate: Any) -> list[dict[str, Any]]:
    """Frames up to and including the first one ``predicate`` accepts."""
    seen = []
    while True:
        seen.append(await receive(ws))
        if predicate(seen[-1]):
            return seen


def done(request_id: str) -> Any:
    return lambda f: f["type"] == "cf_agent_use_chat_response" and f["id"] == request_id and f["done"]


async def idle(ws: Any, probe: str) -> list[dict[str, Any]]:
    """Frames up to the answer to a resume request, which must say the agent is idle."""
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": probe}))
    seen = await until(ws, lambda f: f.get("probeId") == probe)
    assert seen[-1] == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": probe}
    return seen[:-1]


@pytest.fixture
async def gateway() -> AsyncIterator[Any]:
    clients: list[TestClient[Any, Any]] = []

    async def make(model: ScriptedModel | None = None, **options: Any) -> TestClient[Any, Any]:
        directory = LocalDirectory([Helper], model=model or ScriptedModel(), store=ta.MemoryStore())
        client: TestClient[Any, Any] = TestClient(TestServer(Gateway(directory, **options).app()))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


BAD_CLIENT_TOOLS: list[Any] = ["x", 1, [1], [{}], [{"name": 1}], {"name": "a"}, [{"name": ""}], [{"name": "a"}, 2]]
BAD_CLIENT_TOOLS += [[{"name": "a", "parameters": "x"}], [{"name": "a", "description": 1}]]


@pytest.mark.parametrize("client_tools", BAD_CLIENT_TOOLS, ids=[json.dumps(v) for v in BAD_CLIENT_TOOLS])
async def test_a_request_with_malformed_client_tools_is_refused_before_anything_is_stored(
    gateway: Any, client_tools: Any
) -> None:
    client = await gateway(model=ScriptedModel([text("fine")]))
    ws = await client.ws_connect("/agents/helper/tools")
    await greeting(ws)
    await ws.send_str(chat("r", [user()], clientTools=client_tools))
    answer = await receive(ws)
    # As the reference answers a request its turn cannot run: an error response frame for the request's id.
    assert answer == {
        "type": "cf_agent_use_chat_response",
        "id": "r",
        "body": answer["body"],
        "done": True,
        "error": True,
    }
    assert answer["body"].startswith("clientTools must be a list of {name, description?, parameters?}")
    assert await idle(ws, "p") == []  # no turn runs or waits
    assert await (await client.get("/agents/helper/tools/get-messages")).json() == []
    await ws.send_str(chat("ok", [user("again", "u2")]))  # the socket and the agent are fine
    frames = await until(ws, done("ok"))
    assert frames[-1]["outcome"] == "completed"


LONE = "\ud800"  # json.dumps writes it as the escape \ud800: valid JSON text, yet no UTF-8 can encode it

SURROGATE_FRAMES = {
    "request id": chat(f"r{LONE}", [user()]),
    "message text": chat("r", [user(f"a{LONE}b")]),
    "metadata key": chat("r", [{**user(), "metadata": {LONE: 1}}]),
    "custom body": chat("r", [user()], selectedFile=LONE),
    "tool output": json.dumps({"type": "cf_agent_tool_result", "toolCallId": "c1", "output": LONE}),
    "probe id": json.dumps({"type": "cf_agent_stream_resume_request", "probeId": f"\udfff{LONE}"}),
}


@pytest.mark.parametrize("where", sorted(SURROGATE_FRAMES))
async def test_a_lone_surrogate_anywhere_in_a_frame_is_refused_at_parse_time(gateway: Any, where: str) -> None:
    client = await gateway(model=ScriptedModel([text("fine")]))
    ws = await client.ws_connect("/agents/helper/surrogate")
    await greeting(ws)
    await ws.send_str(SURROGATE_FRAMES[where])
    answer = await receive(ws)
    if answer["type"] == "cf_agent_use_chat_response":  # the request's id is fine: its request is refused
        assert (answer["id"], answer["done"], answer["error"]) == ("r", True, True)
        reason = answer["body"]
    else:
        assert answer["type"] == "think_actors_error"
        reason = answer["error"]
    assert "lone surrogate" in reason
    assert await idle(ws, "p") == []
    assert await (await client.get("/agents/helper/surrogate/get-messages")).json() == []
    await ws.send_str(chat("ok", [user("again", "u2")]))
    assert (await until(ws, done("ok")))[-1]["outcome"] == "completed"


async def test_an_escaped_surrogate_pair_is_a_character_and_goes_through(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([text("nice")]))
    ws = await client.ws_connect("/agents/helper/pair")
    await greeting(ws)
    frame = chat("r", [user("smile \U0001f600")])
    assert "\\\\ud83d\\\\ude00" in frame  # the body's JSON text escapes it as a pair
    await ws.send_str(frame)
    assert (await until(ws, done("r")))[-1]["outcome"] == "completed"
    stored = await (await client.get("/agents/helper/pair/get-messages")).json()
    assert stored[0]["parts"][0]["text"] == "smile \U0001f600"


def tool_result(call: str, **extra: Any) -> str:
    return json.dumps({"type": "cf_agent_tool_result", "toolCallId": call, "toolName": "ask", "output": "x", **extra})


def approval(call: str, approved: bool = True, **extra: Any) -> str:
    return json.dumps({"type": "cf_agent_tool_approval", "toolCallId": call, "approved": approved, **extra})


UNKNOWN_ANSWERS = {
    "result, auto-continue": tool_result("nope", autoContinue=True),
    "result": tool_result("nope"),
    "error result, auto-continue": tool_result("nope", state="output-error", errorText="x", autoContinue=True),
    "approval, auto-continue": approval("nope", autoContinue=True),
    "denial": approval("nope", False),
}


@pytest.mark.parametrize("answer", sorted(UNKNOWN_ANSWERS))
async def test_an_answer_for_an_unknown_tool_call_is_refused_and_arms_nothing(gateway: Any, answer: str) -> None:
    client = await gateway(model=ScriptedModel([text("one"), text("two")]))
    ws = await client.ws_connect("/agents/helper/unknown")
    other = await client.ws_connect("/agents/helper/unknown")
    await greeting(ws)
    await greeting(other)
    await ws.send_str(chat("r", [user()]))
    await until(ws, done("r"))
    await until(other, done("r"))
    await ws.send_str(UNKNOWN_ANSWERS[answer])
    refused = await receive(ws)
    assert refused == {"type": "think_actors_error", "error": refused["error"]}
    assert refused["error"].startswith("no tool call 'nope' waits for an answer")
    # Nothing was armed: every socket's resume request hears that the agent is idle, now and later.
    assert await idle(ws, "p1") == []
    assert await idle(other, "p2") == []
    await ws.send_str(chat("r2", [user("next", "u2")]))
    assert (await until(ws, done("r2")))[-1]["outcome"] == "completed"
    await until(other, done("r2"))
    assert await idle(other, "p3") == []


class GatedModel:
    """Streams ``before``, waits until ``gate`` is set, then streams ``after``."""

    model_id = "gated"

    def __init__(self, before: list[str], after: list[str]) -> None:
        self.before, self.after = before, after
        self.gate = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        for delta in self.before:
            yield TextDelta(delta)
        await self.gate.wait()
        for delta in self.after:
            yield TextDelta(delta)
        yield FinishEvent("stop", Usage())


def deltas(frames: list[dict[str, Any]]) -> list[str]:
    bodies = [json.loads(f["body"]) for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
    return [b["delta"] for b in bodies if b["type"] == "text-delta"]


def resume_ack(request_id: str) -> str:
    return json.dumps({"type": "cf_agent_stream_resume_ack", "id": request_id})


@pytest.mark.parametrize("acks_again", [False, True], ids=["no second ack", "second ack"])
async def test_a_second_resume_request_leaves_a_socket_that_follows_the_stream_following_it(
    gateway: Any, acks_again: bool
) -> None:
    model = GatedModel(["s00", "s01", "s02"], ["s03", "s04"])
    client = await gateway(model=model)
    sender = await client.ws_connect("/agents/helper/twice")
    await greeting(sender)
    await sender.send_str(chat("r", [user()]))
    await until(sender, lambda f: f.get("body") and '"s02"' in f["body"])
    tab = await client.ws_connect("/agents/helper/twice")
    assert await greeting(tab) == {"type": "cf_agent_stream_resuming", "id": "r"}
    await tab.send_str(resume_ack("r"))
    caught_up = await until(tab, lambda f: f.get("replayComplete") is True)
    assert deltas(caught_up) == ["s00", "s01", "s02"]

    await tab.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p2"}))
    assert await receive(tab) == {"type": "cf_agent_stream_resuming", "id": "r", "probeId": "p2"}
    if acks_again:  # it has every frame so far: nothing is sent twice
        await tab.send_str(resume_ack("r"))
        marker = {"type": "cf_agent_use_chat_response", "id": "r", "body": "", "done": False, "replay": True}
        assert await receive(tab) == {**marker, "replayComplete": True}
    model.gate.set()
    rest = await until(tab, done("r"))
    assert deltas(rest) == ["s03", "s04"]  # still live, each once
    assert not any(f.get("replay") for f in rest)
    assert deltas(await until(sender, done("r"))) == ["s03", "s04"]


CANCELS = {
    "no id": {},
    "null id": {"id": None},
    "number id": {"id": 7},
    "empty id": {"id": ""},
    "list id": {"id": ["r"]},
}


@pytest.mark.parametrize("cancel", sorted(CANCELS))
async def test_a_cancel_without_a_request_id_gets_an_error_frame(gateway: Any, cancel: str) -> None:
    client = await gateway()
    ws = await client.ws_connect("/agents/helper/cancel")
    await greeting(ws)
    await ws.send_str(json.dumps({"type": "cf_agent_chat_request_cancel", **CANCELS[cancel]}))
    assert await receive(ws) == {
        "type": "think_actors_error",
        "error": 'cf_agent_chat_request_cancel needs the id of the request to cancel: {"id": "<request id>"}',
    }
    assert await idle(ws, "p") == []


async def test_a_frame_over_twice_the_limit_gets_an_error_frame_then_the_socket_closes_with_1009(gateway: Any) -> None:
    from aiohttp import WSMsgType

    client = await gateway(max_frame_bytes=1000)
    ws = await client.ws_connect("/agents/helper/big")
    await greeting(ws)
    await ws.send_str("x" * 1500)  # over the limit, under twice it: refused, the socket goes on
    answer = await receive(ws)
    assert answer == {"type": "think_actors_error", "error": "frame of 1500 bytes is over the limit of 1000 bytes"}
    await ws.send_str("x" * 5000)  # too big to read at all: said, then closed
    answer = await receive(ws)
    assert answer == {
        "type": "think_actors_error",
        "error": "a frame over 3024 bytes (twice the limit of 1000 bytes, and 1 KiB) is not read: "
        "the socket closes (1009, message too big)",
    }
    closing = await asyncio.wait_for(ws.receive(), WAIT_S)
    assert (closing.type, closing.data, closing.extra) == (WSMsgType.CLOSE, 1009, "frame too big")
    again = await client.ws_connect("/agents/helper/big")  # the agent is fine
    assert (await greeting(again))["type"] == "cf_agent_chat_messages"


# The AI SDK's UIMessage schema (ai 7, uiMessagesSchema): id a string, parts an array, at least one part unless
# the message is the assistant's. The reference (Think 0.23) stores such messages unchecked, then fails mid-turn.
REFUSED_MESSAGES = {
    "no id": {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
    "empty id": {"id": "", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
    "id not a string": {"id": 7, "role": "user", "parts": [{"type": "text", "text": "hi"}]},
    "no parts": {"id": "u1", "role": "user"},
    "parts null": {"id": "u1", "role": "user", "parts": None},
    "no part": {"id": "u1", "role": "user", "parts": []},
}


@pytest.mark.parametrize("message", sorted(REFUSED_MESSAGES))
async def test_a_message_without_an_id_or_parts_is_refused_and_nothing_is_stored(gateway: Any, message: str) -> None:
    client = await gateway(model=ScriptedModel([text("fine")]))
    ws = await client.ws_connect("/agents/helper/intake")
    await greeting(ws)
    await ws.send_str(chat("r", [user("first", "u0"), REFUSED_MESSAGES[message]]))
    answer = await receive(ws)
    assert (answer["type"], answer["id"], answer["done"], answer["error"]) == (
        "cf_agent_use_chat_response",
        "r",
        True,
        True,
    )
    assert answer["body"].startswith("messages[1] ")
    assert await idle(ws, "p") == []
    assert await (await client.get("/agents/helper/intake/get-messages")).json() == []


async def test_an_assistant_message_may_have_no_parts_and_parts_may_carry_provider_metadata(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([text("fine")]))
    ws = await client.ws_connect("/agents/helper/metadata")
    await greeting(ws)
    with_metadata = {
        "id": "u1",
        "role": "user",
        "parts": [
            {"type": "text", "text": "hi", "providerMetadata": {"openai": {"itemId": "x"}}},
            {"type": "file", "url": "data:,a", "mediaType": "text/plain", "providerMetadata": {"a": {"b": 1}}},
        ],
    }
    await ws.send_str(chat("r", [{"id": "a0", "role": "assistant", "parts": []}, with_metadata]))
    assert (await until(ws, done("r")))[-1]["outcome"] == "completed"
    stored = await (await client.get("/agents/helper/metadata/get-messages")).json()
    assert [m["id"] for m in stored[:2]] == ["a0", "u1"]
    assert stored[1]["parts"] == with_metadata["parts"]  # kept as sent, providerMetadata included


async def test_a_request_with_no_messages_runs_a_turn_over_the_stored_history_as_the_reference_does(
    gateway: Any,
) -> None:
    # Recorded from the reference (Think 0.23): `messages: []` after a reply runs another turn, and its reply is
    # stored after the first one. Not a bug to fix: the reference is server-authoritative about the history.
    client = await gateway(model=ScriptedModel([text("one"), text("two")]))
    ws = await client.ws_connect("/agents/helper/empty")
    await greeting(ws)
    await ws.send_str(chat("r1", [user()]))
    await until(ws, done("r1"))
    await ws.send_str(chat("r2", []))
    frames = await until(ws, done("r2"))
    assert frames[-1] == {
        "type": "cf_agent_use_chat_response",
        "id": "r2",
        "body": "",
        "done": True,
        "outcome": "completed",
    }
    stored = await (await client.get("/agents/helper/empty/get-messages")).json()
    assert [(m["role"], m["parts"][-1]["text"]) for m in stored] == [
        ("user", "hi"),
        ("assistant", "one"),
        ("assistant", "two"),
    ]


async def test_the_pending_continuation_id_is_the_id_the_continuation_runs_under() -> None:
    ask = {"name": "ask", "description": "Ask the user", "parameters": {"type": "object", "properties": {}}}
    agent = Helper(model=ScriptedModel([tool_call("ask", {}, id="c1"), text("thanks")]), store=ta.MemoryStore())
    await agent.chat("go", client_tools=[ask]).collect()
    assert await agent.pending_continuation_id() is None  # the call waits for its answer: nothing is armed
    started: list[str] = []
    agent.observe(
        "agents:chat", lambda e: started.append(e.payload["requestId"]) if e.type == "chat:turn:start" else None
    )
    assert await agent.add_tool_result("c1", "Oslo", auto_continue=True)
    upcoming = await agent.pending_continuation_id()
    assert upcoming is not None and await agent.pending_continuation_id() == upcoming  # fixed once told
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert started == [upcoming]
    assert await agent.pending_continuation_id() is None


async def test_an_answer_taken_mid_stream_that_matches_no_call_leaves_no_socket_waiting(gateway: Any) -> None:
    # While a turn streams, an answer may be for a call of the reply not stored yet: the agent takes it, and
    # applies it once the turn has stored the reply. One that then matches no call arms nothing, and a resume
    # request after the turn hears the agent is idle, not that a continuation is on its way.
    model = GatedModel(["s00"], ["s01"])
    client = await gateway(model=model)
    ws = await client.ws_connect("/agents/helper/ghost")
    await greeting(ws)
    await ws.send_str(chat("r", [user()]))
    await until(ws, lambda f: f.get("body") and '"s00"' in f["body"])
    await ws.send_str(tool_result("ghost", autoContinue=True))
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "during"}))
    assert (await until(ws, lambda f: f.get("probeId") == "during"))[-1]["type"] == "cf_agent_stream_resuming"
    model.gate.set()
    await until(ws, done("r"))
    assert await idle(ws, "after") == []


def strict(text_: str) -> Any:
    """JSON text as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text_, parse_constant=refuse)


def test_a_frame_never_holds_nan_or_infinity_as_json_stringify_writes_them_null() -> None:
    # The agent writes NaN in tool input and output as null already; the encoder is the last guard.
    frame = {"type": "x", "v": [float("nan"), float("inf"), -float("inf"), 1.5], "o": {"k": float("nan")}}
    assert strict(protocol.dumps(frame)) == {"type": "x", "v": [None, None, None, 1.5], "o": {"k": None}}


async def test_a_chat_request_holding_nan_is_refused_before_anything_is_stored(gateway: Any) -> None:
    client = await gateway()
    ws = await client.ws_connect("/agents/helper/nan")
    await greeting(ws)
    body = json.dumps({"messages": [user()], "score": 1}).replace('"score": 1', '"score": NaN')
    frame = {"type": "cf_agent_use_chat_request", "id": "r", "init": {"method": "POST", "body": body}}
    await ws.send_str(json.dumps(frame))
    assert await receive(ws) == {
        "type": "cf_agent_use_chat_response",
        "id": "r",
        "body": "cf_agent_use_chat_request init.body is not JSON: NaN is not a JSON number (JSON has no NaN or "
        "Infinity)",
        "done": True,
        "error": True,
    }
    assert await idle(ws, "after") == []
    assert strict(await (await client.get("/agents/helper/nan/get-messages")).text()) == []


async def test_a_socket_told_of_an_old_error_that_sends_a_request_gets_the_requests_stream(gateway: Any) -> None:
    # Told RESUMING for the failed turn, it sends a new request instead of the ACK: the request supersedes the
    # error's replay, and its own stream goes to it live, every chunk (not only the transcript and done).
    client = await gateway(model=ScriptedModel([error(ta.ProviderError("broke"), after=text("half")), text("ok")]))
    first = await client.ws_connect("/agents/helper/told")
    await greeting(first)
    await first.send_str(chat("r1", [user("one", "u1")]))
    await until(first, done("r1"))
    await first.close()
    ws = await client.ws_connect("/agents/helper/told")
    await greeting(ws)
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
    assert await receive(ws) == {"type": "cf_agent_stream_resuming", "id": "r1", "probeId": "p"}
    await ws.send_str(chat("r2", [user("one", "u1"), user("two", "u2")]))
    frames = await until(ws, done("r2"))
    assert deltas(frames) == ["ok"]
    assert [f["type"] for f in frames[-2:]] == ["cf_agent_chat_messages", "cf_agent_use_chat_response"]


class Debounced(ta.Think):
    message_concurrency = {"strategy": "debounce", "debounce_ms": 1000}


async def test_pending_for_a_waiting_request_carries_its_id_as_the_reference_sends_it() -> None:
    # Reference PreStreamTurns.park: {type, id: the newest accepted request's id, probeId?}.
    model = ScriptedModel([step(text("first"), delay(0.2)), text("the debounced answer")])
    directory = LocalDirectory([Debounced], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/debounced/d")
        await greeting(ws)
        await ws.send_str(chat("r1", [user("one", "u1")]))
        await ws.send_str(chat("r2", [user("one", "u1"), user("two", "u2")]))  # waits for its trailing edge
        await until(ws, done("r1"))
        tab = await client.ws_connect("/agents/debounced/d")
        await greeting(tab)
        assert await receive(tab) == {"type": "cf_agent_stream_pending", "id": "r2"}  # on connect
        await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
        assert await until(ws, lambda f: f.get("probeId") == "p") == [
            {"type": "cf_agent_stream_pending", "id": "r2", "probeId": "p"}
        ]
        assert (await until(tab, lambda f: f["type"] == "cf_agent_stream_resuming"))[-1]["id"] == "r2"
        await until(ws, done("r2"))
