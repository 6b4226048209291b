"""The gateway puts on the WebSocket what ``@cloudflare/think`` 0.23 does, frame for frame apart from ids.

Each file in ``tests/data/think_wire/`` was recorded from the reference itself, running in workerd
(``scripts/think_wire/capture.mjs``): the actions a client took (open a socket, send a frame, wait for a frame,
wait for silence) and every frame each socket received. Here the same actions run against our gateway, whose
scripted model streams what the reference's mock model streamed, and every socket's frames must be the same once
ids are replaced by their order of first appearance (so an id still has to match wherever the reference repeats
it, e.g. ``start.messageId`` and the stored assistant message).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientWebSocketResponse, WSMsgType
from aiohttp.test_utils import TestClient, TestServer

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, delay, error, step, text, tool_call

WIRE = Path(__file__).parent / "data" / "think_wire"


class Assistant(ta.Think):
    system_prompt = "You are terse."


class Calculator(ta.Think):
    @ta.tool
    def add(self, a: int, b: int) -> int:
        """Add two numbers."""
        return a + b


class Broken(ta.Think):
    pass


class Locator(ta.Think):
    """Its only tool is the client's ``getLocation``, offered in the request body."""


class Guarded(ta.Think):
    @ta.tool(needs_approval=True)
    def deleteFile(self, path: str) -> str:  # the reference's tool name
        """Delete a file."""
        return f"deleted {path}"


class Staller(ta.Think):
    pass


class Queueing(ta.Think):  # the default message_concurrency, "queue"
    pass


class Latest(ta.Think):
    message_concurrency = "latest"


class Merging(ta.Think):
    message_concurrency = "merge"


class Dropping(ta.Think):
    message_concurrency = "drop"


class Debouncing(ta.Think):
    message_concurrency = {"strategy": "debounce", "debounce_ms": 100}


HELLO = step(text("Hello"), text(" there"))
LOCATE = tool_call("getLocation", {}, id="call_1")
DELETE = tool_call("deleteFile", {"path": "/tmp/x"}, id="call_1")
# The reference's model starts the step after a tool result 300 ms late (see worker.mjs's `scripted`).
LATE = delay(0.3)

# The agent of each recording and what the reference's MockLanguageModelV4 streamed (see its "model" field).
SCRIPTS: dict[str, tuple[type[ta.Think], list[Any]]] = {
    "plain_reply": (Assistant, [HELLO]),
    "server_tool": (Calculator, [tool_call("add", {"a": 2, "b": 3}, id="call_1"), text("It is 5.")]),
    "provider_error": (Broken, [error(RuntimeError("provider exploded"))]),
    "client_tool": (Locator, [LOCATE, LATE + text("You are in Paris.")]),
    "client_tool_resumed": (Locator, [LOCATE, LATE + text("You are in Paris.")]),
    "client_tool_error": (Locator, [LOCATE]),
    "approval_granted": (Guarded, [DELETE, LATE + text("Done.")]),
    "approval_denied": (Guarded, [DELETE, LATE + text("Done.")]),
    "cancel": (Staller, [step(text("Hel"), delay(3600))]),
    "resume": (Staller, [step(text("Hel"), delay(3600))]),
    "resume_when_idle": (Assistant, []),
    "clear": (Assistant, [HELLO]),
    "regenerate": (Assistant, [HELLO, HELLO]),
    # The first turn's model answers 300 ms late, so the next two requests overlap it.
    **{
        f"concurrency_{ta.kebab_case(cls.__name__)}": (cls, [delay(0.3) + text("Hello"), text("Hello"), text("Hello")])
        for cls in (Queueing, Latest, Merging, Dropping, Debouncing)
    },
}

RENAMED = ("id", "messageId", "approvalId")


def normalised(frames: list[dict[str, Any]], names: dict[str, str]) -> list[Any]:
    """The frames with chunk bodies parsed and every generated id renamed."""

    def rename(value: str) -> str:
        return names.setdefault(value, f"<id{len(names)}>")

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str) and (key in RENAMED or (key == "messageIds")):
            return rename(value)
        return value

    out = []
    for frame in frames:
        frame = dict(frame)
        if frame.get("type") == "cf_agent_use_chat_response" and frame.get("body") and not frame.get("error"):
            frame["body"] = json.loads(frame["body"])
        if isinstance(frame.get("messageIds"), list):
            frame["messageIds"] = [rename(i) for i in frame["messageIds"]]
        out.append(walk(frame))
    return out


def matches(frame: dict[str, Any], pattern: dict[str, Any]) -> bool:
    """capture.mjs's ``matches``: every key equal; ``chunk`` is the type of the UI chunk in a response's body."""
    for key, want in pattern.items():
        if key == "chunk":
            body = frame.get("body")
            if frame.get("type") != "cf_agent_use_chat_response" or not body or frame.get("error"):
                return False
            if json.loads(body).get("type") != want:
                return False
        elif frame.get(key) != want:
            return False
    return True


def resolve(value: Any, frames: list[dict[str, Any]]) -> Any:
    """capture.mjs's ``resolve``: ``{$from: TYPE, key}`` is that key of the last TYPE frame on the socket."""
    if isinstance(value, list):
        return [resolve(v, frames) for v in value]
    if isinstance(value, dict):
        if "$from" in value:
            last = [f for f in frames if f.get("type") == value["$from"]]
            return last[-1].get(value["key"]) if last else None
        return {k: resolve(v, frames) for k, v in value.items()}
    return value


async def play(client: TestClient[Any, Any], path: str, actions: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Run a recording's actions against our gateway, as capture.mjs ran them against the reference."""
    sockets: dict[str, ClientWebSocketResponse] = {}
    frames: dict[str, list[dict[str, Any]]] = {}
    readers: list[asyncio.Task[None]] = []
    last = [time.monotonic()]

    async def read(label: str, ws: ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                frames[label].append(json.loads(msg.data))
                last[0] = time.monotonic()

    async def until(check: Any, what: str) -> None:
        deadline = time.monotonic() + 10
        while not check():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; got {frames}"
            await asyncio.sleep(0.01)

    try:
        for action in actions:
            if "open" in action:
                label = action["open"]
                frames[label] = []
                sockets[label] = ws = await client.ws_connect(path)
                readers.append(asyncio.create_task(read(label, ws)))
            elif "send" in action:
                await sockets[action["send"]].send_str(json.dumps(resolve(action["frame"], frames[action["send"]])))
            elif "wait" in action:
                seen, pattern, count = frames[action["wait"]], action["for"], action.get("count", 1)

                def enough(seen: list[Any] = seen, pattern: dict[str, Any] = pattern, count: int = count) -> bool:
                    return sum(matches(f, pattern) for f in seen) >= count

                await until(enough, f"{pattern} on {action['wait']}")
            elif "settle" in action:
                last[0] = time.monotonic()
                quiet_s = action["settle"] / 1000
                await until(lambda quiet_s=quiet_s: time.monotonic() - last[0] >= quiet_s, "silence")
            elif "close" in action:
                await sockets.pop(action["close"]).close()
    finally:
        for ws in sockets.values():
            await ws.close()
        for reader in readers:
            reader.cancel()
    return frames


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_the_frames_match_a_recording_of_the_reference(name: str) -> None:
    recording = json.loads((WIRE / f"{name}.json").read_text())
    cls, script = SCRIPTS[name]
    directory = LocalDirectory([cls], model=ScriptedModel(script), store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    try:
        path = f"/agents/{ta.kebab_case(cls.__name__)}/{name.replace('_', '-')}"
        ours = await play(client, path, recording["actions"])
    finally:
        await client.close()
    assert sorted(ours) == sorted(recording["sockets"])
    names_ours: dict[str, str] = {}
    names_ref: dict[str, str] = {}
    for label in sorted(ours):  # ids are renamed across sockets, so one id seen on two sockets must match on both
        assert normalised(ours[label], names_ours) == normalised(recording["sockets"][label], names_ref), label
    bodies = [
        f["body"]
        for frames in ours.values()
        for f in frames
        if f["type"] == "cf_agent_use_chat_response" and f["body"] and not f.get("error")
    ]
    assert all(b == json.dumps(json.loads(b), separators=(",", ":")) for b in bodies)  # as JSON.stringify


def test_every_recording_has_a_script() -> None:
    assert sorted(p.stem for p in WIRE.glob("*.json")) == sorted(SCRIPTS)
