"""The gateway puts on the WebSocket what ``@cloudflare/think`` 0.23 does, frame for frame apart from ids.

Each file in ``tests/data/think_wire/`` was recorded from the reference itself, running in workerd
(``scripts/think_wire/capture.mjs``): the request a client sent and every frame the agent sent back. Here the same
request goes to our gateway, whose scripted model streams what the reference's mock model streamed, and the frames
must be the same once ids are replaced by their order of first appearance (so an id still has to match wherever the
reference repeats it, e.g. ``start.messageId`` and the stored assistant message).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, error, step, text, tool_call

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


# The agent of each recording and what the reference's MockLanguageModelV4 streamed (see its "model" field).
SCRIPTS: dict[str, tuple[type[ta.Think], list[Any]]] = {
    "plain_reply": (Assistant, [step(text("Hello"), text(" there"))]),
    "server_tool": (Calculator, [tool_call("add", {"a": 2, "b": 3}, id="call_1"), text("It is 5.")]),
    "provider_error": (Broken, [error(RuntimeError("provider exploded"))]),
}

# Extensions of ours the reference does not send: the time a message was created.
EXTENSIONS = ("createdAt",)


def normalised(frames: list[dict[str, Any]]) -> list[Any]:
    """The frames with chunk bodies parsed, our extension fields dropped, and every generated id renamed."""
    names: dict[str, str] = {}

    def rename(value: str) -> str:
        return names.setdefault(value, f"<id{len(names)}>")

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items() if k not in EXTENSIONS}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if key in ("id", "messageId") and isinstance(value, str):
            return rename(value)
        return value

    out = []
    for frame in frames:
        frame = dict(frame)
        if frame.get("type") == "cf_agent_use_chat_response" and frame.get("body") and not frame.get("error"):
            frame["body"] = json.loads(frame["body"])
        out.append(walk(frame))
    return out


async def our_frames(name: str, request: dict[str, Any], expected: int) -> list[dict[str, Any]]:
    cls, script = SCRIPTS[name]
    directory = LocalDirectory([cls], model=ScriptedModel(script), store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect(f"/agents/{ta.kebab_case(cls.__name__)}/{name.replace('_', '-')}")
        frames = [json.loads((await asyncio.wait_for(ws.receive(), 10)).data) for _ in range(3)]  # on connect
        await ws.send_str(json.dumps(request))
        while len(frames) < expected + 5:
            frames.append(json.loads((await asyncio.wait_for(ws.receive(), 10)).data))
            if frames[-1]["type"] == "cf_agent_use_chat_response" and frames[-1]["done"]:
                break
        await ws.close()
        return frames
    finally:
        await client.close()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_the_frames_match_a_recording_of_the_reference(name: str) -> None:
    recording = json.loads((WIRE / f"{name}.json").read_text())
    reference = recording["frames"]
    ours = await our_frames(name, recording["request"], len(reference))
    assert normalised(ours) == normalised(reference)
    bodies = [f["body"] for f in ours if f["type"] == "cf_agent_use_chat_response" and f["body"] and not f.get("error")]
    assert bodies and all(b == json.dumps(json.loads(b), separators=(",", ":")) for b in bodies)  # as JSON.stringify


def test_every_recording_has_a_script() -> None:
    assert sorted(p.stem for p in WIRE.glob("*.json")) == sorted(SCRIPTS)
