"""message_concurrency through the gateway (reference §2.3, plus "steer"): what a chat request that arrives while
a turn runs does — queue, latest, merge, drop, debounce, steer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from helpers import RecordingAgent, greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

WAIT_S = 5


def request(request_id: str, message_id: str, text_: str) -> str:
    body = {"messages": [{"id": message_id, "role": "user", "parts": [{"type": "text", "text": text_}]}]}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(body)}}
    )


# How a request that started no turn of its own ends (reference: _completeSkippedRequest).
SKIPPED_R2 = {
    "type": "cf_agent_use_chat_response",
    "id": "r2",
    "body": "",
    "done": True,
    "outcome": "skipped",
    "messageIds": ["u2"],
}


async def done_frames(ws: Any, ids: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Each request's response frames, until every one of ``ids`` is done."""
    frames: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    finished: set[str] = set()
    while finished != ids:
        frame = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
        if frame["type"] == "cf_agent_use_chat_response" and frame["id"] in ids:
            frames[frame["id"]].append(frame)
            if frame["done"]:
                finished.add(frame["id"])
    return frames


async def chat(
    cls: type[ta.Think], model: ScriptedModel, sends: list[tuple[str, str, str]], gap_s: float = 0.05
) -> tuple[Any, dict[str, Any], list[Any]]:
    directory = LocalDirectory([cls], model=model, store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    ws = await client.ws_connect(f"/agents/{ta.kebab_case(cls.__name__)}/c")
    await greeting(ws)
    for i, (request_id, message_id, text_) in enumerate(sends):
        if i:
            await asyncio.sleep(gap_s)  # the later requests arrive while the first turn runs
        await ws.send_str(request(request_id, message_id, text_))
    frames = await done_frames(ws, {r for r, _, _ in sends})
    await asyncio.sleep(0.05)
    messages = await (await client.get(f"/agents/{ta.kebab_case(cls.__name__)}/c/get-messages")).json()
    await client.close()
    return (
        frames,
        {"requests": len(model.requests)},
        [(m["role"], "".join(p.get("text", "") for p in m["parts"])) for m in messages],
    )


def slow_then(*answers: str) -> ScriptedModel:
    return ScriptedModel([step(text("first"), delay(0.3)), *(text(a) for a in answers)])


class Queued(ta.Think):
    message_concurrency = "queue"


class Latest(ta.Think):
    message_concurrency = "latest"


class Merged(ta.Think):
    message_concurrency = "merge"


class Dropping(ta.Think):
    message_concurrency = "drop"


class Debounced(ta.Think):
    message_concurrency = {"strategy": "debounce", "debounce_ms": 100}


class Steered(ta.Think):
    message_concurrency = "steer"

    @ta.tool
    async def look(self) -> str:
        """Look around."""
        await asyncio.sleep(0.2)
        return "a room"


def answered(frames: list[dict[str, Any]]) -> bool:
    return any(f["body"] for f in frames)


async def test_queue_runs_every_request_in_order() -> None:
    frames, _, transcript = await chat(Queued, slow_then("second"), [("r1", "u1", "one"), ("r2", "u2", "two")])
    assert answered(frames["r1"]) and answered(frames["r2"])
    # As the reference: the overlapping message is stored on arrival, before the running turn's reply.
    assert transcript == [("user", "one"), ("user", "two"), ("assistant", "first"), ("assistant", "second")]


async def test_latest_runs_only_the_newest_which_sees_every_message() -> None:
    sends = [("r1", "u1", "one"), ("r2", "u2", "two"), ("r3", "u3", "three")]
    model = slow_then("answer to two and three")
    frames, stats, transcript = await chat(Latest, model, sends)
    assert (answered(frames["r2"]), answered(frames["r3"])) == (False, True)
    assert frames["r2"] == [SKIPPED_R2]
    assert stats["requests"] == 2
    assert transcript == [  # every message stored on arrival (reference §2.3)
        ("user", "one"),
        ("user", "two"),
        ("user", "three"),
        ("assistant", "first"),
        ("assistant", "answer to two and three"),
    ]
    # It sees both newer messages; its history ends with the first reply, so the reference's ephemeral
    # "continue" message follows.
    assert [m["content"] for m in model.requests[1].messages if m["role"] == "user"][-3:-1] == ["two", "three"]


async def test_merge_keeps_every_message_for_one_turn() -> None:
    sends = [("r1", "u1", "one"), ("r2", "u2", "two"), ("r3", "u3", "three")]
    _, stats, transcript = await chat(Merged, slow_then("both"), sends)
    assert stats["requests"] == 2
    assert [t for r, t in transcript if r == "user"] == ["one", "two", "three"]


async def test_drop_refuses_an_overlapping_request_before_storing_it() -> None:
    frames, stats, transcript = await chat(Dropping, slow_then(), [("r1", "u1", "one"), ("r2", "u2", "two")])
    assert frames["r2"] == [SKIPPED_R2]
    assert stats["requests"] == 1
    assert transcript == [("user", "one"), ("assistant", "first")]


async def test_debounce_waits_for_the_trailing_edge() -> None:
    sends = [("r1", "u1", "one"), ("r2", "u2", "two"), ("r3", "u3", "three")]
    frames, stats, transcript = await chat(Debounced, slow_then("after the pause"), sends, gap_s=0.03)
    assert (answered(frames["r2"]), answered(frames["r3"])) == (False, True)
    assert stats["requests"] == 2
    assert transcript[-1] == ("assistant", "after the pause")


async def test_steer_adds_the_message_to_the_running_turn_at_its_next_step() -> None:
    model = ScriptedModel([tool_call("look", {}, id="l1"), text("I see you also asked about the door.")])
    frames, stats, transcript = await chat(Steered, model, [("r1", "u1", "look around"), ("r2", "u2", "and the door?")])
    assert frames["r2"] == [SKIPPED_R2]
    assert stats["requests"] == 2  # one turn, two steps: no turn of its own for the steered message
    assert [m["content"] for m in model.requests[1].messages if m["role"] == "user"] == ["look around", "and the door?"]
    assert ("user", "and the door?") in transcript
    assert transcript[-1] == ("assistant", "I see you also asked about the door.")


async def test_the_first_request_always_runs_even_when_the_next_arrives_at_once() -> None:
    # Sent back to back: the second overlaps the first, which must still run (only overlapping ones are skipped).
    sends = [("r1", "u1", "one"), ("r2", "u2", "two"), ("r3", "u3", "three")]
    frames, stats, _ = await chat(Latest, slow_then("for three"), sends, gap_s=0)
    assert (answered(frames["r1"]), answered(frames["r2"]), answered(frames["r3"])) == (True, False, True)
    assert stats["requests"] == 2


class CountingLatest(RecordingAgent):
    message_concurrency = "latest"


class CountingDropping(RecordingAgent):
    message_concurrency = "drop"


async def socket_for(cls: type[ta.Think], model: ScriptedModel) -> tuple[TestClient[Any, Any], Any, Any]:
    directory = LocalDirectory([cls], model=model, store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    ws = await client.ws_connect(f"/agents/{ta.kebab_case(cls.__name__)}/c")
    await greeting(ws)
    return client, ws, (await directory.get(ta.kebab_case(cls.__name__), "c")).agent


async def test_latest_fires_on_chat_response_only_for_the_turns_that_ran() -> None:
    sends = [("r1", "u1", "one"), ("r2", "u2", "two"), ("r3", "u3", "three")]
    client, ws, agent = await socket_for(CountingLatest, slow_then("for three"))
    for i, (request_id, message_id, text_) in enumerate(sends):
        await ws.send_str(request(request_id, message_id, text_))
        await asyncio.sleep(0.05 if not i else 0)
    await done_frames(ws, {"r1", "r2", "r3"})
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [r.message.text for r in agent.contexts("on_chat_response")] == ["first", "for three"]
    await client.close()


async def test_drop_fires_on_chat_response_only_for_the_accepted_turn() -> None:
    client, ws, agent = await socket_for(CountingDropping, slow_then())
    await ws.send_str(request("r1", "u1", "one"))
    await ws.send_str(request("r2", "u2", "two"))
    await done_frames(ws, {"r1", "r2"})
    await agent.wait_until_stable(timeout_s=WAIT_S)
    assert [r.message.text for r in agent.contexts("on_chat_response")] == ["first"]
    await client.close()


async def test_it_applies_to_submit_message_only_not_to_regenerate_message() -> None:
    client, ws, agent = await socket_for(CountingDropping, slow_then("regenerated"))
    await ws.send_str(request("r1", "u1", "one"))
    regenerate = json.loads(request("r2", "u1", "one"))
    body = json.loads(regenerate["init"]["body"])
    regenerate["init"]["body"] = json.dumps({**body, "trigger": "regenerate-message"})
    await ws.send_str(json.dumps(regenerate))  # overlaps r1, but a regeneration is never dropped: it waits
    frames = await done_frames(ws, {"r1", "r2"})
    assert answered(frames["r1"]) and answered(frames["r2"])
    assert [m.text for m in agent.get_messages()] == ["one", "regenerated"]  # the newest branch under u1
    await client.close()


async def test_clear_skips_queued_latest_submits_and_later_submits_do_not_overlap_them() -> None:
    model = ScriptedModel([step(text("first"), delay(5)), text("after the clear")])
    client, ws, agent = await socket_for(CountingLatest, model)
    await ws.send_str(request("r1", "u1", "one"))
    await ws.send_str(request("r2", "u2", "two"))  # overlapping, queued behind r1
    await asyncio.sleep(0.1)
    await ws.send_str(json.dumps({"type": "cf_agent_chat_clear"}))
    frames = await done_frames(ws, {"r1", "r2"})
    assert frames["r1"][-1]["outcome"] == "aborted" and frames["r2"] == [SKIPPED_R2]
    # The first request after the clear overlaps nothing (r1 may still be winding down): it runs.
    await ws.send_str(request("r3", "u3", "three"))
    frames = await done_frames(ws, {"r3"})
    assert answered(frames["r3"])
    assert [m.text for m in agent.get_messages()] == ["three", "after the clear"]
    await client.close()
