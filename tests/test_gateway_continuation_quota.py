"""A continuation a user asks for (a tool result or an approval with ``autoContinue``) is a turn of theirs: it
counts against their turns per minute when the answer arrives (refused before the answer is applied when they are
over), and its tokens count against their day when it ends, on the gateway that took the answer only. And a
socket takes no frame once the token that opened it has expired."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from test_gateway import chunks, continuation_done, frames_until_done, receive_until, request, user

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory, Quotas, Unauthenticated, access
from think_actors.models import Usage
from think_actors.testing import ScriptedModel, step, text, tool_call

ASK = {"name": "ask", "description": "Ask the user", "parameters": {"type": "object", "properties": {}}}


class Helper(ta.Think):
    instructions = "You help."


async def by_header(request: web.Request) -> ta.Principal:
    """Tests only: the principal the X-User header names."""
    user_id = request.headers.get("X-User")
    if not user_id:
        raise Unauthenticated("send X-User", sent=False)
    return ta.Principal(id=user_id)


def answer(call_id: str) -> str:
    return json.dumps(
        {
            "type": "cf_agent_tool_result",
            "toolCallId": call_id,
            "toolName": "ask",
            "output": "Oslo",
            "autoContinue": True,
        }
    )


async def test_a_continuation_counts_as_a_turn_and_its_tokens_count_for_the_day(tmp_path: Any) -> None:
    model = ScriptedModel(
        [
            step(tool_call("ask", {}, id="c1"), usage=Usage(input_tokens=10, output_tokens=5)),
            step(text("thanks, Oslo"), usage=Usage(input_tokens=30, output_tokens=7)),
            step(tool_call("ask", {}, id="c2"), usage=Usage(input_tokens=1, output_tokens=1)),
        ]
    )
    directory = LocalDirectory([Helper], model=model, store=ta.MemoryStore(), data_dir=str(tmp_path))
    gateway = Gateway(directory, authenticate=by_header, quotas=Quotas(turns_per_minute=2))
    async with TestClient(TestServer(gateway.app())) as client:
        ws = await client.ws_connect("/agents/helper/alice", headers={"X-User": "alice"})
        await greeting(ws)
        await ws.send_str(request("r1", user("where?", "u1"), clientTools=[ASK]))
        assert "tool-input-available" in chunks(await frames_until_done(ws, "r1"))

        await ws.send_str(answer("c1"))
        await receive_until(ws, continuation_done)
        used = await gateway.access.keeper.used("alice")
        assert used["turns"] == 2  # the chat request and the continuation it asked for
        assert used["tokens"] == 10 + 5 + 30 + 7

        await ws.send_str(request("r2", user("again", "u2"), clientTools=[ASK]))
        refused = await frames_until_done(ws, "r2")
        assert refused[-1]["error"] is True
        assert refused[-1]["body"].startswith("quota turns_per_minute: 'alice' sent 2 chat requests")
        messages = await (await client.get("/agents/helper/alice/get-messages", headers={"X-User": "alice"})).json()
        assert [m["id"] for m in messages if m["role"] == "user"] == ["u1"]  # the refused one was never stored
        await ws.close()


async def test_a_continuation_over_the_quota_is_refused_before_the_answer_is_applied(tmp_path: Any) -> None:
    model = ScriptedModel([tool_call("ask", {}, id="c1"), text("thanks")])
    directory = LocalDirectory([Helper], model=model, store=ta.MemoryStore(), data_dir=str(tmp_path))
    gateway = Gateway(directory, authenticate=by_header, quotas=Quotas(turns_per_minute=1))
    async with TestClient(TestServer(gateway.app())) as client:
        ws = await client.ws_connect("/agents/helper/bob", headers={"X-User": "bob"})
        await greeting(ws)
        await ws.send_str(request("r1", user("where?", "u1"), clientTools=[ASK]))
        await frames_until_done(ws, "r1")

        await ws.send_str(answer("c1"))
        error = await receive_until(ws, lambda f: f["type"] == "think_actors_error")
        assert error[-1]["error"].startswith("quota turns_per_minute: 'bob' sent 1 chat requests")
        messages = await (await client.get("/agents/helper/bob/get-messages", headers={"X-User": "bob"})).json()
        part = messages[-1]["parts"][-1]
        assert (part["toolCallId"], part["state"]) == ("c1", "input-available")  # still waiting: nothing applied
        assert len(model.requests) == 1  # no continuation ran
        await ws.close()


async def test_a_socket_takes_no_frame_once_the_token_that_opened_it_expired(monkeypatch: Any) -> None:
    async def expiring(request: web.Request) -> ta.Principal:
        return ta.Principal(id="carol", claims={"exp": 1_000_000})  # as a JWT's exp, a unix time

    monkeypatch.setattr(access, "clock", lambda: 999_999.0)
    model = ScriptedModel([text("hi")])
    directory = LocalDirectory([Helper], model=model, store=ta.MemoryStore())
    async with TestClient(TestServer(Gateway(directory, authenticate=expiring).app())) as client:
        ws = await client.ws_connect("/agents/helper/carol")
        await greeting(ws)
        await ws.send_str(request("r1", user("hello", "u1")))
        assert "text-delta" in chunks(await frames_until_done(ws, "r1"))

        monkeypatch.setattr(access, "clock", lambda: 1_000_000.0)  # the token expires
        await ws.send_str(request("r2", user("still there?", "u2")))
        error = await receive_until(ws, lambda f: f["type"] == "think_actors_error")
        assert error[-1]["error"] == "your token expired: connect again with a fresh one"
        closed = await ws.receive()
        assert (closed.type, ws.close_code) == (aiohttp.WSMsgType.CLOSE, aiohttp.WSCloseCode.POLICY_VIOLATION)
        messages = await (await client.get("/agents/helper/carol/get-messages")).json()
        assert [m["id"] for m in messages if m["role"] == "user"] == ["u1"]  # nothing of the late frame was stored
