"""The WebSocket gateway over real sockets on 127.0.0.1 (aiohttp's test server): the cf_agent_* frames of a chat,
broadcast to every socket of an agent, cancel, clear, bad frames, tokens, and the CLI's refusals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.gateway.cli import agent_classes, check_binding
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

WAIT_S = 5


class Helper(ta.Think):
    instructions = "You help."


class Friendly(ta.Think):
    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        return RuntimeError("Something went wrong. Please try again.")


def request(request_id: str, *messages: dict[str, Any], **extra: Any) -> str:
    body = {"messages": list(messages), "trigger": "submit-message", **extra}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(body)}}
    )


def user(text_: str, id: str) -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text_}]}


async def frames_until_done(ws: Any, request_id: str) -> list[dict[str, Any]]:
    """Frames up to this request's ``done`` frame (the stored transcript is broadcast just before it)."""
    seen: list[dict[str, Any]] = []
    while True:
        frame = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
        seen.append(frame)
        if frame["type"] == "cf_agent_use_chat_response" and frame["id"] == request_id and frame["done"]:
            return seen


def transcript(frames: list[dict[str, Any]]) -> dict[str, Any]:
    """The last transcript broadcast among the frames."""
    return [f for f in frames if f["type"] == "cf_agent_chat_messages"][-1]


def chunks(frames: list[dict[str, Any]]) -> list[str]:
    return [
        json.loads(f["body"])["type"]
        for f in frames
        if f["type"] == "cf_agent_use_chat_response" and f["body"] and not f.get("error")
    ]


@pytest.fixture
async def gateway() -> AsyncIterator[Any]:
    clients: list[TestClient] = []

    async def make(cls: type[ta.Think] = Helper, model: ScriptedModel | None = None, **options: Any) -> TestClient:
        directory = LocalDirectory([Helper, Friendly], model=model or ScriptedModel(), store=ta.MemoryStore())
        gw = Gateway(directory, **options)
        client = TestClient(TestServer(gw.app()))
        await client.start_server()
        client.gateway = gw  # type: ignore[attr-defined]
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def test_a_chat_request_streams_the_reply_as_chunk_frames_then_done_then_the_transcript(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([text("Hello there", chunk_size=5)]))
    ws = await client.ws_connect("/agents/helper/c1")
    hello = await greeting(ws)
    assert hello == {"type": "cf_agent_chat_messages", "messages": [], "connect": True}

    await ws.send_str(request("req-1", user("hi", "u1")))
    frames = await frames_until_done(ws, "req-1")

    assert chunks(frames) == [
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-delta",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert all(f["id"] == "req-1" and f["done"] is False for f in frames[:-2])
    assert [f["seq"] for f in frames[:-2]] == list(range(9))  # the client's replay ledger reads these
    assert frames[-2]["type"] == "cf_agent_chat_messages"  # stored before the terminal frame (reference)
    assert frames[-1] == {
        "type": "cf_agent_use_chat_response",
        "id": "req-1",
        "body": "",
        "done": True,
        "outcome": "completed",
        "messageIds": ["u1"],
    }
    assert [(m["role"], m["parts"][-1]["text"]) for m in transcript(frames)["messages"]] == [
        ("user", "hi"),
        ("assistant", "Hello there"),
    ]
    messages = await (await client.get("/agents/helper/c1/get-messages")).json()
    assert [m["id"] for m in messages] == ["u1", frames[0]["body"] and json.loads(frames[0]["body"])["messageId"]]
    await ws.close()


async def test_every_socket_of_an_agent_sees_the_stream_and_the_stored_messages(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([text("for both")]))
    sender = await client.ws_connect("/agents/helper/shared")
    watcher = await client.ws_connect("/agents/helper/shared")
    await greeting(sender)
    await greeting(watcher)

    await sender.send_str(request("r", user("hi", "u1")))
    stored = json.loads((await asyncio.wait_for(watcher.receive(), WAIT_S)).data)  # the new message, before the turn
    assert stored["type"] == "cf_agent_chat_messages" and [m["id"] for m in stored["messages"]] == ["u1"]
    seen_by_watcher = await frames_until_done(watcher, "r")
    seen_by_sender = await frames_until_done(sender, "r")
    assert chunks(seen_by_watcher) == chunks(seen_by_sender)
    assert "text-delta" in chunks(seen_by_watcher)


async def test_on_chat_error_decides_the_error_frame(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([error(ta.ProviderError("raw 500 from the provider"))]))
    ws = await client.ws_connect("/agents/friendly/e1")
    await greeting(ws)
    await ws.send_str(request("r", user("hi", "u1")))
    frames = await frames_until_done(ws, "r")
    errors = [f for f in frames if f.get("error")]
    assert errors == [
        {
            "type": "cf_agent_use_chat_response",
            "id": "r",
            "body": "Something went wrong. Please try again.",
            "done": False,
            "error": True,
            "messageIds": ["u1"],
        }
    ]
    assert frames[-1]["outcome"] == "error"
    assert "raw 500" not in json.dumps(frames)


async def test_cancel_aborts_the_running_turn(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([step(text("partial"), delay(5), text("never"))]))
    ws = await client.ws_connect("/agents/helper/x")
    await greeting(ws)
    await ws.send_str(request("r", user("long", "u1")))
    while True:
        frame = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
        if (
            frame["type"] == "cf_agent_use_chat_response"
            and frame["body"]
            and json.loads(frame["body"])["type"] == "text-delta"
        ):
            break
    await ws.send_str(json.dumps({"type": "cf_agent_chat_request_cancel", "id": "r"}))
    frames = await frames_until_done(ws, "r")
    # As the reference: the stream just ends (no abort chunk), and the terminal frame says how.
    assert "abort" not in chunks(frames) and frames[-1]["outcome"] == "aborted"
    assert [m["parts"][-1]["text"] for m in transcript(frames)["messages"]] == ["long", "partial"]


async def test_clear_empties_the_history_and_tells_the_other_sockets(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([text("a")]))
    a = await client.ws_connect("/agents/helper/c")
    b = await client.ws_connect("/agents/helper/c")
    await greeting(a)
    await greeting(b)
    await a.send_str(request("r", user("hi", "u1")))
    await frames_until_done(a, "r")
    await frames_until_done(b, "r")
    await a.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    assert json.loads((await asyncio.wait_for(b.receive(), WAIT_S)).data) == {"type": "cf_agent_chat_clear"}
    assert await (await client.get("/agents/helper/c/get-messages")).json() == []


async def test_bad_frames_get_an_error_frame_and_the_socket_goes_on(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([text("still here")]), max_frame_bytes=10_000)
    ws = await client.ws_connect("/agents/helper/b")
    await greeting(ws)
    bad = [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"type": "cf_agent_something_else"}),
        json.dumps({"type": "cf_agent_use_chat_request", "id": "x", "init": {"method": "POST", "body": "{oops"}}),
        json.dumps({"type": "cf_agent_use_chat_request", "id": "x", "init": {"method": "POST", "body": "{}"}}),
        request("x", {"id": "m", "role": "robot", "parts": [{"type": "text", "text": "beep"}]}),
        "x" * 20_000,
    ]
    answers = []
    for frame in bad:
        await ws.send_str(frame)
        answers.append(json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data))
    await ws.send_bytes(b"\x00")
    answers.append(json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data))
    # A chat request with a usable id is refused as the reference ends a request: an error response frame.
    refused = answers[3:6]
    assert [(a["type"], a["id"], a["done"], a["error"]) for a in refused] == [
        ("cf_agent_use_chat_response", "x", True, True)
    ] * 3
    errors = answers[:3] + answers[6:]
    assert {a["type"] for a in errors} == {"think_actors_error"}
    texts = [a["error"] for a in errors]
    assert "must be JSON text" in texts[0]
    assert "JSON object" in texts[1]
    assert "unknown frame type 'cf_agent_something_else'" in texts[2]
    assert "init.body is not JSON" in refused[0]["body"]
    assert "needs a messages array" in refused[1]["body"]
    assert "not a UIMessage" in refused[2]["body"]
    assert "over the limit of 10000 bytes" in texts[3]
    assert "binary frames" in texts[4]
    # The socket and the agent are fine, and nothing was stored by the bad frames.
    await ws.send_str(request("ok", user("hi", "u1")))
    frames = await frames_until_done(ws, "ok")
    assert [m["role"] for m in transcript(frames)["messages"]] == ["user", "assistant"]
    assert transcript(frames)["messages"][0]["id"] == "u1"


async def test_a_token_guards_every_route_but_healthz(gateway: Any) -> None:
    client = await gateway(token="s3cret")
    assert (await client.get("/healthz")).status == 200
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await client.ws_connect("/agents/helper/t")
    ws = await client.ws_connect("/agents/helper/t?token=s3cret")
    assert (await greeting(ws))["type"] == "cf_agent_chat_messages"
    assert (await client.get("/agents/helper/t/get-messages")).status == 401
    assert (await client.get("/agents/helper/t/get-messages", headers={"Authorization": "Bearer nope"})).status == 401
    assert (await client.get("/agents/helper/t/get-messages", headers={"Authorization": "Bearer s3cret"})).status == 200
    assert (await client.get("/agents/helper/t/get-messages?token=s3cret")).status == 200


async def test_names_classes_and_origins_are_checked(gateway: Any) -> None:
    client = await gateway(allowed_origins=["https://app.example"])
    assert (await client.get("/healthz")).status == 200
    bad_name = await client.get("/agents/helper/..%2Fetc/get-messages")
    assert bad_name.status in (400, 404)
    unknown = await client.get("/agents/nobody/x/get-messages")
    assert unknown.status == 404 and "the classes are: friendly, helper" in await unknown.text()
    assert (
        await client.get("/agents/helper/ok/get-messages", headers={"Origin": "https://evil.example"})
    ).status == 403
    # Allowed and well-named, but never run: not found (a read creates no agent).
    assert (await client.get("/agents/helper/ok/get-messages", headers={"Origin": "https://app.example"})).status == 404
    assert (await client.get("/agents/helper/a.b:c@d/get-messages")).status == 404
    assert (await client.get("/agents/helper/-bad/get-messages")).status == 400


async def test_client_tools_from_the_request_body_are_offered_for_that_turn(gateway: Any) -> None:
    model = ScriptedModel([text("ok")])
    client = await gateway(model=model)
    ws = await client.ws_connect("/agents/helper/ct")
    await greeting(ws)
    tool = {
        "name": "get_location",
        "description": "Where the user is",
        "parameters": {"type": "object", "properties": {}},
    }
    await ws.send_str(request("r", user("where am I?", "u1"), clientTools=[tool], selectedFile="a.py"))
    await frames_until_done(ws, "r")
    assert [t["function"]["name"] for t in model.requests[0].tools] == ["get_location"]


def test_the_cli_refuses_a_public_host_without_a_token_and_modules_without_agents() -> None:
    check_binding("127.0.0.1", None)
    check_binding("::1", None)
    check_binding("0.0.0.0", "token")
    check_binding("0.0.0.0", None, authenticate=lambda request: None)
    with pytest.raises(ta.ConfigurationError, match="without authentication: pass --token, define authenticate"):
        check_binding("0.0.0.0", None)
    with pytest.raises(ta.ConfigurationError, match="cannot import"):
        agent_classes("no.such.module")
    with pytest.raises(ta.ConfigurationError, match="defines no Think subclass"):
        agent_classes("json")
    assert {c.__name__ for c in agent_classes("agents.team")} >= {"Lead", "Researcher"}


async def test_think_actors_serve_runs_the_gateway_for_an_app_module(tmp_path: Any) -> None:
    import os
    import socket
    import sys
    from pathlib import Path

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "THINK_ACTORS_DATA_DIR": str(tmp_path)}
    command = [sys.executable, "-m", "think_actors.gateway.cli", "serve", "--local", "--app", "gateway_app"]
    process = await asyncio.create_subprocess_exec(
        *command, "--port", str(port), env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL
    )
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(200):
                try:
                    async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                        assert await response.json() == {"ok": True, "classes": ["echo"]}
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            async with session.ws_connect(f"http://127.0.0.1:{port}/agents/echo/cli") as ws:
                await greeting(ws)
                await ws.send_str(request("r", user("ping", "u1")))
                frames = await frames_until_done(ws, "r")
        assert transcript(frames)["messages"][-1]["parts"][-1]["text"] == "echo: ping"
    finally:
        process.terminate()
        await asyncio.wait_for(process.wait(), 10)
    refused = await asyncio.create_subprocess_exec(
        *command, "--host", "0.0.0.0", env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(refused.communicate(), 60)
    assert refused.returncode == 2
    assert "refusing to serve on '0.0.0.0' without authentication" in stderr.decode()


class Payments(ta.Think):
    @ta.tool(needs_approval=True)
    async def charge(self, amount: int) -> str:
        """Charge the card."""
        return f"charged {amount}"


async def receive_until(ws: Any, predicate: Any) -> list[dict[str, Any]]:
    seen = []
    while True:
        frame = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
        seen.append(frame)
        if predicate(frame):
            return seen


def continuation_done(frame: dict[str, Any]) -> bool:
    return frame["type"] == "cf_agent_use_chat_response" and frame["done"] and frame.get("continuation") is True


async def test_a_client_tool_result_frame_auto_continues_and_every_tab_sees_the_continuation() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), text("thanks, Oslo")])
    directory = LocalDirectory([Helper], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        tab = await client.ws_connect("/agents/helper/ct")
        other = await client.ws_connect("/agents/helper/ct")
        await greeting(tab)
        await greeting(other)
        ask = {"name": "ask", "description": "Ask the user", "parameters": {"type": "object", "properties": {}}}
        await tab.send_str(request("r", user("where?", "u1"), clientTools=[ask]))
        first = await frames_until_done(tab, "r")
        assert "tool-input-available" in chunks(first)

        result = {
            "type": "cf_agent_tool_result",
            "toolCallId": "c1",
            "toolName": "ask",
            "output": "Oslo",
            "autoContinue": True,
        }
        await tab.send_str(json.dumps(result))
        updated = await receive_until(other, lambda f: f["type"] == "cf_agent_message_updated")
        assert updated[-1]["message"]["parts"][-1]["state"] == "output-available"
        seen = await receive_until(other, continuation_done)
        continued = [
            json.loads(f["body"])["type"] for f in seen if f["type"] == "cf_agent_use_chat_response" and f["body"]
        ]
        assert "text-delta" in continued
        assert all(f.get("continuation") for f in seen if f["type"] == "cf_agent_use_chat_response")


async def test_an_approval_frame_runs_the_approved_tool_in_the_continuation() -> None:
    model = ScriptedModel([tool_call("charge", {"amount": 7}, id="p1"), delay(0.2) + text("paid 7")])
    directory = LocalDirectory([Payments], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/payments/a1")
        await greeting(ws)
        await ws.send_str(request("r", user("pay 7", "u1")))
        first = await frames_until_done(ws, "r")
        assert "tool-approval-request" in chunks(first)
        await ws.send_str(
            json.dumps({"type": "cf_agent_tool_approval", "toolCallId": "p1", "approved": True, "autoContinue": True})
        )
        # The socket that approved follows the continuation as the npm client does: RESUMING, ACK, replay, live.
        resuming = await receive_until(ws, lambda f: f["type"] == "cf_agent_stream_resuming")
        await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": resuming[-1]["id"]}))
        seen = await receive_until(ws, continuation_done)
        bodies = [json.loads(f["body"]) for f in seen if f["type"] == "cf_agent_use_chat_response" and f["body"]]
        assert {"type": "tool-output-available", "toolCallId": "p1", "output": "charged 7"} in bodies
        assert {f["id"] for f in seen if f["type"] == "cf_agent_use_chat_response"} == {resuming[-1]["id"]}
        transcript = await (await client.get("/agents/payments/a1/get-messages")).json()
        assert transcript[-1]["parts"][-1]["text"] == "paid 7"
        bad = {"type": "cf_agent_tool_approval", "toolCallId": "p1"}
        await ws.send_str(json.dumps(bad))
        error_frame = await receive_until(ws, lambda f: f["type"] == "think_actors_error")
        assert "approved: true or false" in error_frame[-1]["error"]


async def test_a_tab_that_reconnects_mid_stream_resumes_the_whole_answer(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([step(text("first half, "), delay(0.3), text("second half"))]))
    ws = await client.ws_connect("/agents/helper/resume")
    await greeting(ws)
    await ws.send_str(request("r", user("tell me", "u1")))
    await receive_until(ws, lambda f: f["type"] == "cf_agent_use_chat_response" and "first half" in f["body"])
    await ws.close()  # the tab reloads while the answer streams

    again = await client.ws_connect("/agents/helper/resume")
    hello = await greeting(again)
    assert hello == {"type": "cf_agent_stream_resuming", "id": "r"}  # not the transcript: it would clobber the reply
    await again.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "r"}))
    frames = await receive_until(again, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"])
    text_so_far = "".join(
        json.loads(f["body"])["delta"]
        for f in frames
        if f.get("body") and json.loads(f["body"])["type"] == "text-delta"
    )
    assert text_so_far == "first half, second half"
    replayed = [f for f in frames if f.get("replay")]
    assert replayed and replayed[0]["body"] and json.loads(replayed[0]["body"])["type"] == "start"
    assert any(f.get("replayComplete") for f in frames)
    await again.send_str(json.dumps({"type": "cf_agent_stream_resume_request", "probeId": "p1"}))
    idle = await receive_until(again, lambda f: f["type"] == "cf_agent_stream_resume_none")
    assert idle[-1] == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}


async def test_a_tab_that_was_away_replays_how_the_last_turn_failed(gateway: Any) -> None:
    client = await gateway(model=ScriptedModel([error(ta.ProviderError("upstream broke"), after=text("half an"))]))
    ws = await client.ws_connect("/agents/helper/err")
    await greeting(ws)
    await ws.send_str(request("r", user("hi", "u1")))
    await frames_until_done(ws, "r")
    await ws.close()

    later = await client.ws_connect("/agents/helper/err")
    assert (await greeting(later))["type"] == "cf_agent_chat_messages"  # idle: the transcript
    await later.send_str(json.dumps({"type": "cf_agent_stream_resume_request"}))
    resuming = await receive_until(later, lambda f: f["type"] == "cf_agent_stream_resuming")
    assert resuming[-1]["id"] == "r"
    await later.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "r"}))
    replay = await receive_until(later, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"])
    assert all(f.get("replay") for f in replay)
    # As the reference's _replayTerminalOnAck: the content, then the error as the terminal frame.
    assert replay[-1] == {
        "type": "cf_agent_use_chat_response",
        "id": "r",
        "body": "upstream broke",
        "done": True,
        "error": True,
        "replay": True,
    }
    assert [f["body"] for f in replay if f.get("error")] == ["upstream broke"]
    assert "half an" in "".join(f["body"] for f in replay)


class OverflowRecovering(ta.Think):
    context_overflow = ta.ContextOverflowConfig()
    classify_chat_error = ta.default_context_overflow_classifier

    async def configure_session(self, session: ta.Session) -> ta.Session:
        from think_actors.compaction import CompactionResult

        async def compact(history: list[ta.UIMessage], ctx: Any) -> Any:
            return CompactionResult("earlier talk", history[0].id, history[-2].id) if len(history) >= 3 else None

        return session.on_compaction(compact)


async def test_a_context_overflow_on_the_websocket_path_is_compacted_and_retried() -> None:
    overflow = ta.ContextOverflowError("prompt is too long: 300000 tokens > 200000 maximum", status_code=400)
    model = ScriptedModel([text("a0"), text("a1"), error(overflow), text("recovered over the socket")])
    directory = LocalDirectory([OverflowRecovering], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/overflow-recovering/o")
        await greeting(ws)
        for i in range(2):
            await ws.send_str(request(f"r{i}", user(f"q{i}", f"u{i}")))
            await frames_until_done(ws, f"r{i}")
        await ws.send_str(request("big", user("the long one", "u2")))
        frames = await frames_until_done(ws, "big")
        assert not any(f.get("error") for f in frames)
        assert transcript(frames)["messages"][-1]["parts"][-1]["text"] == "recovered over the socket"
        assert "data-context-compacted" in chunks(frames)


class Researcher(ta.Think):
    model = ScriptedModel([text("found it")])


class Lead(ta.Think):
    tools = (ta.agent_tool(Researcher, description="Research"),)


async def test_child_agent_progress_goes_out_as_agent_tool_event_frames() -> None:
    Researcher.model = ScriptedModel([text("found it")])
    model = ScriptedModel([tool_call("researcher", {"input": "look"}, id="c1"), text("done")])
    directory = LocalDirectory([Lead], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/lead/l1")
        await greeting(ws)
        await ws.send_str(request("r", user("research", "u1")))
        frames = await frames_until_done(ws, "r")
    events = [f for f in frames if f["type"] == "agent-tool-event"]
    kinds = [e["event"]["kind"] for e in events]
    assert (kinds[0], kinds[-1], set(kinds)) == ("started", "finished", {"started", "chunk", "finished"})
    assert {e["parentToolCallId"] for e in events} == {"c1"}
    inner = [json.loads(e["event"]["body"])["type"] for e in events if e["event"]["kind"] == "chunk"]
    assert "text-delta" in inner
    assert "agent-tool-event" not in chunks(frames)  # never inside the UI message stream


def test_reconciliation_keeps_the_server_copy_and_matches_client_snapshots() -> None:
    from think_actors.gateway.app import reconcile

    settled = ta.ToolPart(
        type="tool-ask", tool_call_id="t1", state="output-available", input={}, output="server result"
    )
    server = [
        ta.user_message("hi", id="u1"),
        ta.UIMessage(id="a1", role="assistant", parts=(ta.TextPart(text="hello"),)),
        ta.UIMessage(id="a2", role="assistant", parts=(settled,)),
    ]
    stale = settled.model_copy(update={"state": "input-available", "output": None})
    incoming = [
        ta.user_message("hi", id="u1"),  # known id: the server's copy stays
        ta.UIMessage(id="client-a1", role="assistant", parts=(ta.TextPart(text="hello"),)),  # same reply, other id
        ta.UIMessage(id="client-a2", role="assistant", parts=(stale,)),  # a stale snapshot of the tool reply
        ta.user_message("next", id="u2"),  # new
    ]
    assert [m.id for m in reconcile(incoming, server)] == ["u2"]


async def test_tool_result_frames_default_error_text_and_client_tools_for_the_continuation() -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), text("noted"), tool_call("ask", {}, id="c2")])
    directory = LocalDirectory([Helper], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/helper/tr")
        await greeting(ws)
        ask = {"name": "ask", "description": "Ask", "parameters": {"type": "object", "properties": {}}}
        await ws.send_str(request("r", user("go", "u1"), clientTools=[ask]))
        await frames_until_done(ws, "r")
        locate = {"name": "locate", "description": "Where", "parameters": {"type": "object", "properties": {}}}
        frame = {
            "type": "cf_agent_tool_result",
            "toolCallId": "c1",
            "toolName": "ask",
            "state": "output-error",
            "autoContinue": True,
            "clientTools": [ask, locate],
        }
        await ws.send_str(json.dumps(frame))
        updated = await receive_until(ws, lambda f: f["type"] == "cf_agent_message_updated")
        part = updated[-1]["message"]["parts"][-1]
        assert (part["state"], part["errorText"]) == ("output-error", "Tool execution denied by user")
        await receive_until(ws, continuation_done)
        assert [t["function"]["name"] for t in model.requests[1].tools] == ["ask", "locate"]
        bad = {"type": "cf_agent_tool_result", "toolCallId": "c1", "clientTools": [{"nameless": True}]}
        await ws.send_str(json.dumps(bad))
        error_frame = await receive_until(ws, lambda f: f["type"] == "think_actors_error")
        assert error_frame[-1]["error"].startswith("clientTools must be a list of {name, description?, parameters?}")
        await ws.send_str(request("r2", user("still fine?", "u2")))
        await frames_until_done(ws, "r2")  # the socket and the agent are fine


async def test_compaction_reaches_the_sockets_as_a_session_frame() -> None:
    overflow = ta.ContextOverflowError("prompt is too long: 300000 tokens > 200000 maximum", status_code=400)
    model = ScriptedModel([text("a0"), text("a1"), error(overflow), text("ok")])
    directory = LocalDirectory([OverflowRecovering], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/overflow-recovering/s")
        await greeting(ws)
        for i in range(2):
            await ws.send_str(request(f"r{i}", user(f"q{i}", f"u{i}")))
            await frames_until_done(ws, f"r{i}")
        await ws.send_str(request("r2", user("q2", "u2")))
        session = await receive_until(ws, lambda f: f["type"] == "cf_agent_session")
        assert session[-1] == {"type": "cf_agent_session", "phase": "idle", "compacted": True}


class Patient(ta.Think):
    message_concurrency = {"strategy": "debounce", "debounce_ms": 600}


async def test_a_tab_that_connects_while_a_request_waits_hears_pending_then_resuming() -> None:
    model = ScriptedModel([step(text("first"), delay(0.1)), delay(0.2) + text("the debounced answer")])
    directory = LocalDirectory([Patient], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        ws = await client.ws_connect("/agents/patient/p")
        await greeting(ws)
        await ws.send_str(request("r1", user("one", "u1")))
        await ws.send_str(request("r2", user("two", "u2")))  # overlapping: waits for its trailing edge
        await frames_until_done(ws, "r1")
        tab = await client.ws_connect("/agents/patient/p")  # r2 is accepted and not streaming yet
        hello = [await greeting(tab), json.loads((await asyncio.wait_for(tab.receive(), WAIT_S)).data)]
        assert [f["type"] for f in hello] == ["cf_agent_chat_messages", "cf_agent_stream_pending"]
        resuming = await receive_until(tab, lambda f: f["type"] == "cf_agent_stream_resuming")
        assert resuming[-1]["id"] == "r2"
        await tab.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "r2"}))
        frames = await receive_until(tab, lambda f: f["type"] == "cf_agent_use_chat_response" and f["done"])
        assert "the debounced answer" in "".join(f["body"] for f in frames if f["type"] == "cf_agent_use_chat_response")
