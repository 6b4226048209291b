"""Multi-tenant isolation at a gateway in front of agent actors (``RayDirectory``): the in-process suite's user code
(tests/test_gateway_isolation.py), a representative subset of its attacks. Alice (a JWT of the test's identity
provider) leaves her actor ``notes/<alice>:notes`` with two answered turns and a tool call waiting for her
approval; bob, with his own valid token, tries to reach it by name, by frames on his own socket naming her ids, with
forged tokens and over MCP. Each attempt is refused for what it is; no actor or registry record appears under a
name bob tried, alice's transcript is the same bytes, and her call still waits (she approves it at the end).

Actors outlive a test, so each test's users are named afresh (``alice-<hex>``, ``bob-<hex>``).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx2
import pytest
import ray
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from isolation_attacks import (
    OTHER_SECRET,
    Diary,
    Notes,
    auth,
    bearer,
    chat_frame,
    continuation_done,
    done,
    frame,
    idle,
    name_variants,
    receive,
    tampered,
    token,
    unsigned,
    until,
    user,
)
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from yarl import URL

from think_actors import registry
from think_actors.gateway import Gateway, OwnerRule, RayDirectory

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(300)]

WAIT_S = 120.0  # upper bounds only: a busy machine starts actors slowly
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}
NO_SUCH_CALL = "waits for an answer: the id is unknown, or the call was answered already (the first answer wins)"


@dataclass
class RayWorld:
    client: TestClient[Any, Any]
    namespace: str
    alice: str  # her principal id, and the owner key of her agents
    bob: str
    alice_token: str
    bob_token: str
    transcript: bytes = b""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.client.port}"

    @property
    def notes(self) -> str:
        return f"{self.alice}:notes"

    async def request(self, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        async with self.client.session.request(method, URL(self.base + path, encoded=True), headers=headers) as answer:
            return answer.status, await answer.read()

    async def socket(self, name: str, who: str) -> aiohttp.ClientWebSocketResponse:
        ws = await self.client.session.ws_connect(f"{self.base}/agents/notes/{name}", headers=bearer(who))
        await greeting(ws, WAIT_S)
        return ws

    async def messages(self, name: str, who: str) -> bytes:
        status, body = await self.request("GET", f"/agents/notes/{name}/get-messages", bearer(who))
        assert status == 200, body
        return body

    def exists(self, path: str) -> bool:
        """Whether the cluster has an actor or a registry record for the agent ``path``."""
        try:
            ray.get_actor(path, namespace=self.namespace)
        except ValueError:
            return registry.lookup(self.namespace, path) is not None
        return True

    async def assert_untouched(self, tried: list[str]) -> None:
        """No actor or record exists under a name bob tried; alice's transcript is the same bytes."""
        assert [name for name in tried if self.exists(name)] == []
        assert await self.messages(self.notes, self.alice_token) == self.transcript

    async def alice_approves(self) -> None:
        """Her call still waits: her approval runs the tool in a continuation."""
        ws = await self.socket(self.notes, self.alice_token)
        await ws.send_str(frame("tool_approval", toolCallId="call-wipe", approved=True, autoContinue=True))
        resuming = await until(ws, lambda f: f["type"] == "cf_agent_stream_resuming", WAIT_S)
        await ws.send_str(frame("stream_resume_ack", id=resuming[-1]["id"]))
        await until(ws, continuation_done, WAIT_S)
        await ws.close()
        stored = json.loads(await self.messages(self.notes, self.alice_token))
        wipe = next(p for m in stored for p in m["parts"] if p.get("toolCallId") == "call-wipe")
        assert (wipe["state"], wipe["output"]) == ("output-available", "all notes deleted")
        assert stored[-1]["parts"][-1]["text"] == "wiped"


@pytest.fixture
async def world(ray_runtime: Any) -> AsyncIterator[RayWorld]:
    suffix = uuid.uuid4().hex[:8]
    alice, bob = f"alice-{suffix}", f"bob-{suffix}"
    gateway = Gateway(RayDirectory([Notes, Diary]), authenticate=auth(), authorize=OwnerRule(), mcp=True)
    client = TestClient(TestServer(gateway.app(), host="127.0.0.1"))
    await client.start_server()
    world = RayWorld(client, ray_runtime.namespace, alice, bob, token(alice), token(bob))
    try:
        ws = await world.socket(world.notes, world.alice_token)
        for request_id, words in (("a-1", "remember milk"), ("a-2", "wipe my notes")):
            await ws.send_str(chat_frame(request_id, user(words, f"m-{request_id}")))
            assert (await until(ws, done(request_id), WAIT_S))[-1]["outcome"] == "completed"
        await ws.close()
        world.transcript = await world.messages(world.notes, world.alice_token)
        assert json.loads(world.transcript)[-1]["parts"][-1]["state"] == "approval-requested"
        yield world
    finally:
        await client.close()


async def test_on_ray_bob_cannot_reach_alices_actor_by_any_spelling_of_its_name(world: RayWorld) -> None:
    """Attack: bob names alice's actor exactly, bare, percent-encoded, capitalised, with a traversal, a NUL tail and
    a Cyrillic look-alike, on get-messages and the WebSocket upgrade. A name of alice's is a 403 read refusal, one
    that is no name a 400; no actor or record appears (Alice-... is nobody's yet, and stays so)."""
    variants = name_variants(world.alice)
    refused = {
        "exact": world.notes,
        "bare": world.alice,
        "percent-encoded letter": world.notes,
        "percent-encoded colon": world.notes,
        "capitalised": f"{world.alice.capitalize()}:notes",
        "suffix": f"{world.notes}:x",
    }
    bob = world.bob
    for kind, name in refused.items():
        expected = {"error": f"read refused: {bob!r} may not read the agent 'notes/{name}': it is not theirs"}
        for headers in (bearer(world.bob_token), {**bearer(world.bob_token), **UPGRADE}):
            for suffix in ("/get-messages", ""):
                status, body = await world.request("GET", f"/agents/notes/{variants[kind]}{suffix}", headers)
                assert (status, json.loads(body)) == (403, expected), (kind, suffix)
    for kind in ("traversal", "trailing NUL", "cyrillic a"):
        for headers in (bearer(world.bob_token), {**bearer(world.bob_token), **UPGRADE}):
            status, body = await world.request("GET", f"/agents/notes/{variants[kind]}/get-messages", headers)
            assert status == 400 and b"invalid agent name" in body, kind
    # A control: an admin reads alice's actor, the same bytes she does.
    assert await world.messages(world.notes, token("root", roles=["admin"])) == world.transcript
    await world.assert_untouched([f"notes/{name}" for name in refused.values() if name != world.notes])
    await world.alice_approves()


async def test_on_ray_frames_on_bobs_own_socket_naming_alices_ids_reach_only_bobs_actor(world: RayWorld) -> None:
    """Attack: on his own actor's socket bob approves alice's waiting call by its id, cancels and ACKs a resume of
    her request id, and sends a chat request reusing her message id with her identity forged in
    ``metadata.turnMetadata``. The approval is an unknown call, the cancel a no-op, the ACK replays nothing; the
    message is stored in bob's actor stamped with bob. Alice's call still waits and her transcript is unchanged."""
    bob = await world.socket(f"{world.bob}:x", world.bob_token)
    await bob.send_str(frame("tool_approval", toolCallId="call-wipe", approved=True, autoContinue=True))
    assert await receive(bob, WAIT_S) == {
        "type": "think_actors_error",
        "error": f"no tool call 'call-wipe' {NO_SUCH_CALL}",
    }
    await bob.send_str(frame("chat_request_cancel", id="a-2"))
    assert await idle(bob, "p1") == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}
    await bob.send_str(frame("stream_resume_ack", id="a-2"))
    replay = {"type": "cf_agent_use_chat_response", "id": "a-2", "body": "", "done": True, "replay": True}
    assert await receive(bob, WAIT_S) == replay
    forged = {"turnMetadata": {"principal": {"id": world.alice, "roles": ["admin"]}}}
    await bob.send_str(chat_frame("b-1", user("hijack", "m-a-1", metadata=forged)))
    assert (await until(bob, done("b-1"), WAIT_S))[-1]["outcome"] == "completed"
    await bob.close()
    stored = json.loads(await world.messages(f"{world.bob}:x", world.bob_token))
    assert [(m["id"], m["metadata"]) for m in stored if m["role"] == "user"] == [
        ("m-a-1", {"channel": "web", "turnMetadata": {"principal": {"id": world.bob, "roles": []}}})
    ]
    assert stored[-1]["parts"][-1]["text"] == "echo: hijack"
    await world.assert_untouched([])
    await world.alice_approves()


async def test_on_ray_forged_tokens_prove_no_one_and_mcp_refuses_alices_names(world: RayWorld) -> None:
    """Attack: a token signed with another key, ``alg: none`` naming alice, her expired token and bob's with its
    sub edited are 401s that say why; over MCP bob calls the notes tool on alice's names (refused) and encoded
    forms (no agent name). No actor appears under any of them; a control: bob's own MCP chat works."""
    forged = {
        "signed with another key": (token(world.alice, key=OTHER_SECRET), "bad signature"),
        "alg none": (unsigned(world.alice), "algorithm 'none' is not accepted"),
        "expired": (token(world.alice, expires_in_s=-60), "token expired"),
        "sub edited": (tampered(world.bob_token, sub=world.alice), "bad signature"),
    }
    for kind, (credential, reason) in forged.items():
        for path, extra in (
            (f"/agents/notes/{world.notes}/get-messages", {}),
            (f"/agents/notes/{world.notes}", UPGRADE),
        ):
            status, body = await world.request("GET", path, {**bearer(credential), **extra})
            assert (status, json.loads(body)) == (401, {"error": reason}), (kind, path)

    tried = [world.notes, world.alice, f"{world.alice.capitalize()}:notes"]
    encoded = [f"%61{world.alice[1:]}:notes", f"{world.alice}%3Anotes"]
    async with (
        httpx2.AsyncClient(headers=bearer(world.bob_token), timeout=WAIT_S) as http,
        streamable_http_client(f"{world.base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await asyncio.wait_for(client.initialize(), WAIT_S)
        for name in tried + encoded:
            result = await asyncio.wait_for(client.call_tool("notes", {"message": "hi", "agent_name": name}), WAIT_S)
            said = "".join(c.text for c in result.content if c.type == "text")
            assert result.is_error, name
            if name in tried:
                assert said == f"chat refused: {world.bob!r} may not chat the agent 'notes/{name}': it is not theirs"
            else:
                assert said.startswith(f"agent_name {name!r} is not an agent name: invalid agent name"), said
        own = await asyncio.wait_for(
            client.call_tool("diary", {"message": "dear diary", "agent_name": world.bob}), WAIT_S
        )
        assert not own.is_error and [c.text for c in own.content if c.type == "text"] == ["echo: dear diary"]
    await world.assert_untouched([f"notes/{name}" for name in tried[1:]] + [f"diary/{world.notes}"])
    await world.alice_approves()
