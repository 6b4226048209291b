"""Port of ``packages/think/src/tests/onconnect-broadcast.test.ts``: what a socket gets when it connects (the
transcript only while no stream runs; a resume offer instead while one does), a resume ACK that arrives after the
stream ended, and the replay of a turn that failed while no client was there; also
``packages/think/src/tests/errored-stream-replay.test.ts`` (the replay of a turn that failed in band).

The reference starts a resumable stream by hand (``testStartResumableStream``); here a real turn runs with a model
held open (``Held``), so "a stream is active" is a state the test waits for. Left out (README.md): the two sub-agent
socket cases (:120, :143), since the gateway serves every agent under its own ``/agents/{class}/{name}`` and has
no ``/sub/`` route through a parent.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import think_actors as ta
from think_actors.testing import ScriptedModel, error, text

from .conftest import WAIT_S, Held, Recorder, chat_request, next_frame, skip_greeting, until_done, wire_user

SRC = "packages/think/src/tests/onconnect-broadcast.test.ts"
TERMINAL = "Recovery exhausted — the assistant could not finish."


class Connecting(Recorder):
    pass


async def greeting(ws: Any) -> list[str]:
    """The types of the three frames a socket gets on connect."""
    return [(await next_frame(ws))["type"] for _ in range(3)]


async def test_an_idle_agent_sends_the_transcript_on_connect(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:85 "broadcasts CHAT_MESSAGES on connect when no stream is active"."""
    client, _ = await gateway(Connecting, model=Held([]))
    ws = await client.ws_connect("/agents/connecting/r1")
    assert await greeting(ws) == ["cf_agent_chat_messages", "cf_agent_identity", "cf_agent_mcp_servers"]


async def streaming(gateway: Any) -> tuple[Any, Any, Held]:
    """A client whose first socket started a turn the model holds open after its first text delta."""
    model = Held([text("hello there", chunk_size=5)], after=2)
    client, _ = await gateway(Connecting, model=model)
    first = await client.ws_connect("/agents/connecting/r1")
    await skip_greeting(first)
    await first.send_str(chat_request("req-active", wire_user("hi", "u1")))
    await asyncio.wait_for(model.held.wait(), WAIT_S)
    return client, first, model


async def test_a_running_stream_is_offered_for_resume_instead_of_the_transcript(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:98 "suppresses CHAT_MESSAGES on connect while a resumable stream is active"."""
    client, _, model = await streaming(gateway)
    ws = await client.ws_connect("/agents/connecting/r1")
    resuming = await next_frame(ws)
    assert (resuming["type"], resuming["id"]) == ("cf_agent_stream_resuming", "req-active")
    assert [(await next_frame(ws))["type"] for _ in range(2)] == ["cf_agent_identity", "cf_agent_mcp_servers"]
    model.release.set()


async def test_after_the_stream_a_new_socket_gets_the_transcript_again(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:173 "resumes broadcasting CHAT_MESSAGES once the stream completes"."""
    client, first, model = await streaming(gateway)
    model.release.set()
    await until_done(first, "req-active")
    ws = await client.ws_connect("/agents/connecting/r1")
    transcript = await next_frame(ws)
    assert transcript["type"] == "cf_agent_chat_messages"
    assert [(m["role"], m["parts"][-1].get("text")) for m in transcript["messages"]] == [
        ("user", "hi"),
        ("assistant", "hello there"),
    ]


async def test_an_ack_after_the_stream_ended_replays_it_whole(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:192 "finalizes resume if the stream completes before the client ACK
    arrives"."""
    client, first, model = await streaming(gateway)
    ws = await client.ws_connect("/agents/connecting/r1")
    assert (await skip_greeting(ws))["type"] == "cf_agent_stream_resuming"
    model.release.set()
    await until_done(first, "req-active")
    # A socket told RESUMING that has not ACKed still hears how the stream ended (with the transcript first).
    live = await until_done(ws, "req-active")
    assert [(f["type"], f.get("done"), f.get("replay")) for f in live] == [
        ("cf_agent_chat_messages", None, None),
        ("cf_agent_use_chat_response", True, None),
    ]
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "req-active"}))
    replayed = await until_done(ws, "req-active")
    assert {(f["type"], f["id"], f.get("replay")) for f in replayed} == {
        ("cf_agent_use_chat_response", "req-active", True)
    }
    bodies = [json.loads(f["body"]) for f in replayed if f["body"]]
    assert [b["type"] for b in bodies] == ["start", "start-step", "text-start"] + ["text-delta"] * 3 + [
        "text-end",
        "finish-step",
        "finish",
    ]
    assert "".join(b["delta"] for b in bodies if b["type"] == "text-delta") == "hello there"
    assert (replayed[-1]["done"], replayed[-1]["body"]) == (True, "")


def failed_record(request_id: str) -> dict[str, Any]:
    """How a turn that failed while no client was connected is stored: its frames, ending in the error."""
    frame = {"type": "cf_agent_use_chat_response", "id": request_id, "body": TERMINAL, "done": True, "error": True}
    return {"requestId": request_id, "frames": [frame]}


async def test_a_turn_that_failed_while_nobody_was_there_is_replayed_over_the_resume_handshake(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:249 "delivers the terminal over the resume handshake to a client that reconnects
    after it ended"."""
    client, agent_of = await gateway(Connecting, model=Held([]))
    agent = await agent_of("connecting", "r1")
    await agent.remember_chat_terminal(failed_record("root-think"))
    ws = await client.ws_connect("/agents/connecting/r1")
    await skip_greeting(ws)
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request"}))
    resuming = await next_frame(ws)
    assert (resuming["type"], resuming["id"]) == ("cf_agent_stream_resuming", "root-think")
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "root-think"}))
    [terminal] = await until_done(ws, "root-think")
    assert (terminal["body"], terminal["error"], terminal["done"]) == (TERMINAL, True, True)


async def test_a_clear_forgets_the_failed_turn(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:312 "drops the terminal record when the conversation is cleared"."""
    agent = Connecting(model=Held([]), store=ta.MemoryStore())
    await agent.remember_chat_terminal(failed_record("root-clear"))
    assert (await agent.chat_terminal()) == failed_record("root-clear")
    await agent.clear()
    assert await agent.chat_terminal() is None


class ParkedStep(Connecting):
    """Holds its first step until ``release``: the new turn never finishes during the test."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parked = asyncio.Event()
        self.release = asyncio.Event()

    async def before_step(self, ctx: ta.StepContext) -> ta.StepConfig | None:
        self.parked.set()
        await self.release.wait()
        return None


async def test_a_new_request_forgets_the_failed_turn_before_it_streams(gateway: Any) -> None:
    """onconnect-broadcast.test.ts:334 "eagerly drops the terminal record when a new turn is submitted, before it
    streams (#1645)"."""
    client, agent_of = await gateway(ParkedStep, model=ScriptedModel([text("late")]))
    agent = await agent_of("parked-step", "r1")
    await agent.remember_chat_terminal(failed_record("root-old"))
    ws = await client.ws_connect("/agents/parked-step/r1")
    await skip_greeting(ws)
    await ws.send_str(chat_request("root-new", wire_user("hi", "u-new")))
    await asyncio.wait_for(agent.parked.wait(), WAIT_S)
    assert await agent.chat_terminal() is None
    agent.release.set()
    await until_done(ws, "root-new")


async def replayed_after_an_in_band_error(gateway: Any) -> list[dict[str, Any]]:
    """A turn fails in band after streaming some text; a tab that comes back resumes it: the replayed frames."""
    model = ScriptedModel([error(ta.ProviderError("boom"), after=text("partial response"))])
    client, _ = await gateway(Connecting, model=model)
    first = await client.ws_connect("/agents/connecting/r1")
    await skip_greeting(first)
    await first.send_str(chat_request("req-err", wire_user("hi", "u1")))
    await until_done(first, "req-err")
    await first.close()
    ws = await client.ws_connect("/agents/connecting/r1")
    await skip_greeting(ws)
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_request"}))
    resuming = await next_frame(ws)
    assert (resuming["type"], resuming["id"]) == ("cf_agent_stream_resuming", "req-err")
    await ws.send_str(json.dumps({"type": "cf_agent_stream_resume_ack", "id": "req-err"}))
    replayed = await until_done(ws, "req-err")
    assert all(f.get("replay") is True for f in replayed)
    return replayed


async def test_a_tab_back_after_an_in_band_error_gets_the_partial_reply_before_the_error(gateway: Any) -> None:
    """``think/src/tests/errored-stream-replay.test.ts``:29 "replays pre-error partial content before the terminal
    error on resume-ACK" (the replayed content and its place before the error)."""
    replayed = await replayed_after_an_in_band_error(gateway)
    content = [json.loads(f["body"]) for f in replayed if not f.get("error") and f["body"]]
    assert "".join(c.get("delta", "") for c in content if c["type"] == "text-delta") == "partial response"
    first_error = next(i for i, f in enumerate(replayed) if f.get("error"))
    assert replayed[first_error]["body"] == "boom"
    assert all(not f.get("error") for f in replayed[:first_error])


async def test_the_replay_after_an_in_band_error_ends_with_the_error_terminal(gateway: Any) -> None:
    """``think/src/tests/errored-stream-replay.test.ts``:29 (its last frame)."""
    replayed = await replayed_after_an_in_band_error(gateway)
    assert (replayed[-1]["body"], replayed[-1]["done"], replayed[-1].get("error")) == ("boom", True, True)
