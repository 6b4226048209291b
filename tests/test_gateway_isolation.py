"""Multi-tenant isolation at the gateway, from the attacker's side.

Two users of one gateway (``JWTAuth`` + ``OwnerRule``, ``/mcp`` on, agents in process in SQLite files): alice uses
her agents ``notes/alice:notes``, ``notes/alice`` and ``notes/alice:work`` (turns answered, a tool call waiting
for her approval, a client tool's call waiting for her answer, a turn still running), then bob, with his own valid
token, tries to reach them: by name (encoded, cased, traversing, look-alike), by frames on his own socket naming
alice's request and tool-call ids or forging her identity, with forged or mixed credentials, over MCP, and as
principals whose ids try to collide with alice's owner key. Every attempt must be refused for what it is (401,
403 "<action> refused: ...", 400 / 404 for a bad name, an error frame, an MCP tool error), never answered with
alice's data and never a 500; afterwards no agent exists that did not before, alice's transcripts are the same
bytes, her waiting calls still wait (she answers them at the end) and her running turn ends as it would have.
The positive controls show the same requests succeed for whom they should: alice on hers, bob on his, an admin.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from isolation_attacks import (
    ASK,
    GATED,
    OTHER_SECRET,
    SECRET,
    WAIT_S,
    Diary,
    Notes,
    PromptedModel,
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

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory, OwnerRule

ALICE = token("alice")
BOB = token("bob")
ADMIN = token("root", roles=["admin"])
UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}
ALICES = ("alice:notes", "alice", "alice:work")  # her agents, all of class notes


def files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def hashed(principal_id: str) -> str:
    """OwnerRule's key for an id outside the safe characters."""
    return "h=" + hashlib.sha256(principal_id.encode()).hexdigest()[:32]


@dataclass
class World:
    """The gateway, alice's agents as she left them, and what an attack must leave as it found."""

    client: TestClient[Any, Any]
    directory: LocalDirectory
    data_dir: Path
    model: PromptedModel
    work: Any  # alice's socket on alice:work, whose turn "a-run" runs until the model's gate opens
    transcripts: dict[str, bytes] = field(default_factory=dict)
    stored: dict[str, bytes] = field(default_factory=dict)
    agents: set[str] = field(default_factory=set)
    files: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.client.port}"

    async def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, data: bytes | None = None
    ) -> tuple[int, bytes]:
        """Send ``path`` exactly as written (percent-escapes and dot segments kept); the status and body."""
        url = URL(self.base + path, encoded=True)
        async with self.client.session.request(method, url, headers=headers, data=data) as response:
            return response.status, await response.read()

    async def socket(self, name: str, who: str, cls: str = "notes") -> aiohttp.ClientWebSocketResponse:
        ws = await self.client.session.ws_connect(
            URL(f"{self.base}/agents/{cls}/{name}", encoded=True), headers=bearer(who)
        )
        await greeting(ws)
        return ws

    async def messages(self, name: str, who: str = ALICE) -> bytes:
        status, body = await self.request("GET", f"/agents/notes/{name}/get-messages", bearer(who))
        assert status == 200, body
        return body

    async def agent(self, name: str) -> Any:
        handle = self.directory._agents[f"notes/{name}"]
        return handle.agent

    async def store_bytes(self, name: str) -> bytes:
        """Alice's transcript as her agent's store holds it (read from the store, not the agent)."""
        messages = await (await self.agent(name)).store.load_messages()
        return json.dumps([m.model_dump(mode="json") for m in messages], sort_keys=True).encode()

    async def snapshot(self) -> None:
        for name in ALICES[:2]:
            self.transcripts[name] = await self.messages(name)
            self.stored[name] = await self.store_bytes(name)
        self.agents = set(self.directory._agents)
        self.files = files(self.data_dir)

    async def assert_untouched(self) -> None:
        """No agent was created, alice's transcripts are the same bytes, her calls still wait, her turn runs."""
        assert set(self.directory._agents) == self.agents
        assert files(self.data_dir) == self.files
        for name in ALICES[:2]:
            assert await self.messages(name) == self.transcripts[name], name
            assert await self.store_bytes(name) == self.stored[name], name
            assert (await self.agent(name)).has_pending_interaction(), name
        assert self.model.gate is not None and not self.model.gate.is_set()

    async def alice_finishes(self) -> None:
        """Alice's running turn ends as it would have, and her waiting calls take her answers."""
        assert self.model.gate is not None
        self.model.gate.set()
        frames = await until(self.work, done("a-run"))
        assert frames[-1]["outcome"] == "completed"
        assert json.loads(await self.messages("alice:work"))[-1]["parts"][-1]["text"] == "working done"

        notes = await self.socket("alice:notes", ALICE)
        await notes.send_str(frame("tool_approval", toolCallId="call-wipe", approved=True, autoContinue=True))
        resuming = await until(notes, lambda f: f["type"] == "cf_agent_stream_resuming")
        await notes.send_str(frame("stream_resume_ack", id=resuming[-1]["id"]))
        await until(notes, continuation_done)
        stored = json.loads(await self.messages("alice:notes"))
        wipe = next(p for m in stored for p in m["parts"] if p.get("toolCallId") == "call-wipe")
        assert (wipe["state"], wipe["output"]) == ("output-available", "all notes deleted")
        assert stored[-1]["parts"][-1]["text"] == "wiped"
        await notes.close()

        bare = await self.socket("alice", ALICE)
        await bare.send_str(
            frame("tool_result", toolCallId="call-ask", toolName="ask", output="Oslo", autoContinue=True)
        )
        resuming = await until(bare, lambda f: f["type"] == "cf_agent_stream_resuming")
        await bare.send_str(frame("stream_resume_ack", id=resuming[-1]["id"]))
        await until(bare, continuation_done)
        stored = json.loads(await self.messages("alice"))
        ask = next(p for m in stored for p in m["parts"] if p.get("toolCallId") == "call-ask")
        assert (ask["state"], ask["output"]) == ("output-available", "Oslo")
        assert stored[-1]["parts"][-1]["text"] == "you are in Oslo"
        await bare.close()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    gate = asyncio.Event()
    model = PromptedModel(gate=gate)
    directory = LocalDirectory([Notes, Diary], model=model, data_dir=str(tmp_path))
    gateway = Gateway(directory, authenticate=auth(), authorize=OwnerRule(), mcp=True)
    client = TestClient(TestServer(gateway.app(), host="127.0.0.1"))
    await client.start_server()
    world = World(client, directory, tmp_path, model, work=None)
    try:
        notes = await world.socket("alice:notes", ALICE)
        for request_id, words in (("a-1", "remember milk"), ("a-2", "remember eggs"), ("a-3", "wipe my notes")):
            await notes.send_str(chat_frame(request_id, user(words, f"m-{request_id}")))
            assert (await until(notes, done(request_id)))[-1]["outcome"] == "completed"
        await notes.close()
        bare = await world.socket("alice", ALICE)
        await bare.send_str(chat_frame("a-4", user("where am I?", "m-a-4"), clientTools=[ASK]))
        await until(bare, done("a-4"))
        await bare.close()
        world.work = await world.socket("alice:work", ALICE)
        await world.work.send_str(chat_frame("a-run", user(GATED, "m-a-run")))
        await until(world.work, lambda f: f.get("id") == "a-run" and "working" in f.get("body", ""))
        await world.snapshot()
        assert json.loads(world.transcripts["alice:notes"])[-1]["parts"][-1]["state"] == "approval-requested"
        assert json.loads(world.transcripts["alice"])[-1]["parts"][-1]["state"] == "input-available"
        yield world
    finally:
        gate.set()
        await client.close()


def refused_read(name: str, cls: str = "notes", who: str = "bob") -> bytes:
    """The body of OwnerRule's 403 for a read."""
    return json.dumps(
        {"error": f"read refused: {who!r} may not read the agent '{cls}/{name}': it is not theirs"}
    ).encode()


def invalid_name(name: str) -> bytes:
    return json.dumps(
        {
            "error": f"invalid agent name {name!r}: use 1-128 letters, digits or . _ @ : + = - starting with a "
            "letter or digit"
        }
    ).encode()


# What the gateway reads each of name_variants("alice") as: a valid name (refused to bob: it is alice's, or no one's
# he owns) or an invalid one (400 before anyone is asked).
DECODED = {
    "exact": "alice:notes",
    "bare": "alice",
    "percent-encoded letter": "alice:notes",
    "percent-encoded colon": "alice:notes",
    "percent-encoded colon, lower case": "alice:notes",
    "capitalised": "Alice:notes",
    "upper case": "ALICE:notes",
    "trailing dot": "alice:notes.",
    "second colon": "alice:notes:",
    "suffix": "alice:notes:x",
}
SLUGS = {"notes": "notes", "diary": "diary", "note%73": "notes", "Notes": "Notes", "notes-": "notes-"}  # as sent: read
INVALID = {
    "traversal": "../alice:notes",
    "traversal, double-encoded": "..%2Falice:notes",
    "encoded slash inside": "bob/../alice:notes",
    "dot segment": "./alice:notes",
    "trailing NUL": "alice:notes\x00",
    "trailing space": "alice:notes ",
    "trailing newline": "alice:notes\n",
    "cyrillic a": "\u0430lice:notes",
    "fullwidth a": "\uff41lice:notes",
    "fullwidth colon": "alice\uff1anotes",
    "dotless i": "al\u0131ce:notes",
    "zero-width space": "alice\u200b:notes",
    "combining acute": "ali\u0301ce:notes",
}


async def test_bob_cannot_reach_alices_agents_by_any_spelling_of_their_names(world: World) -> None:
    """Attack: bob (valid token) names alice's agents exactly, percent-encoded (%61lice:notes, alice%3Anotes), in
    other cases (Alice:notes), with traversals (..%2Falice:notes, double-encoded), NUL / space / newline tails and
    Unicode look-alikes, under both class slugs and two wrong ones; as a WebSocket upgrade, get-messages, HEAD,
    POST and OPTIONS. A valid name is a 403 read refusal, an invalid one a 400, an unknown class a 404; never 200."""
    variants = name_variants("alice")
    assert set(variants) == set(DECODED) | set(INVALID)
    for kind, segment in variants.items():
        for cls, slug in SLUGS.items():
            if kind in INVALID:
                expected = (400, invalid_name(INVALID[kind]))
            elif slug in ("notes", "diary"):
                expected = (403, refused_read(DECODED[kind], slug))
            else:
                unknown = {"error": f"no agent class {slug!r} here; the classes are: diary, notes"}
                expected = (404, json.dumps(unknown).encode())
            path = f"/agents/{cls}/{segment}"
            where = (kind, cls)
            assert await world.request("GET", f"{path}/get-messages", bearer(BOB)) == expected, where
            assert await world.request("GET", path, {**bearer(BOB), **UPGRADE}) == expected, where
            assert await world.request("GET", path, bearer(BOB)) == expected, where  # no upgrade
            assert await world.request("HEAD", f"{path}/get-messages", bearer(BOB)) == (expected[0], b""), where
            for method, route in (("POST", path), ("POST", f"{path}/get-messages"), ("OPTIONS", path), ("PUT", path)):
                assert (await world.request(method, route, bearer(BOB), b"{}"))[0] == 405, (where, method)
            with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
                await world.client.session.ws_connect(URL(world.base + path, encoded=True), headers=bearer(BOB))
            assert handshake.value.status == expected[0], where
    await world.assert_untouched()
    await world.alice_finishes()


PATH_TRICKS = {
    "/agents/notes/alice:notes/": 404,
    "/agents/notes/alice:notes//get-messages": 404,
    "/agents/notes//alice:notes": 404,
    "/agents//notes/alice:notes": 404,
    "//agents/notes/alice:notes": 404,
    "/agents/notes/alice:notes/get-messages/": 404,
    "/agents/notes/bob/../alice:notes": 404,  # dot segments sent as they are: no route has three segments
    "/agents/notes/bob:x/../alice:notes/get-messages": 404,
    "/agents/notes/./alice:notes": 404,
    "/agents/notes/alice:notes/get-messages%2F..%2F..%2Fbob": 404,
    "/agents/notes/alice:notes?name=bob": 403,
    "/agents/notes/alice:notes;bob": 400,  # ";bob" is part of the name, which is no name
    "/agents/notes%2Falice:notes": 404,
    "/agents/notes/alice%253Anotes": 400,
    "/mcp/../agents/notes/alice:notes/get-messages": 404,
}


async def test_bob_cannot_reach_alices_agents_by_path_tricks(world: World) -> None:
    """Attack: trailing and doubled slashes, dot segments, an encoded slash in the class, a query or a matrix
    parameter naming bob, a double-encoded colon: each is a 404 (no route: aiohttp resolves no dot segment), a 400
    (no valid name) or a 403 (alice's agent), with and without a WebSocket upgrade; never 200 and never a 500."""
    for path, status in PATH_TRICKS.items():
        for headers in (bearer(BOB), {**bearer(BOB), **UPGRADE}):
            got, body = await world.request("GET", path, headers)
            assert got == status, (path, got, body)
            assert b"noted" not in body and b"milk" not in body, path
    await world.assert_untouched()
    await world.alice_finishes()


NO_SUCH_CALL = "waits for an answer: the id is unknown, or the call was answered already (the first answer wins)"


async def test_frames_on_bobs_own_socket_naming_alices_ids_reach_only_bobs_agent(world: World) -> None:
    """Attack: on his own socket (bob:x) bob cancels alice's running request id, answers her waiting client tool
    call and her waiting approval by their ids (with and without autoContinue, approving and denying), ACKs a
    resume of her stream id and asks for the running stream. Each reaches bob's agent only: an unknown call is an
    error frame, the ACK replays nothing, the agent is idle; alice's turn still runs and her calls still wait."""
    bob = await world.socket("bob:x", BOB)
    await bob.send_str(frame("chat_request_cancel", id="a-run"))
    assert await idle(bob, "p1") == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}
    for attack, call in (
        (frame("tool_result", toolCallId="call-ask", toolName="ask", output="Paris", autoContinue=True), "call-ask"),
        (frame("tool_result", toolCallId="call-ask", toolName="ask", output="Paris"), "call-ask"),
        (frame("tool_result", toolCallId="call-ask", state="output-error", errorText="no"), "call-ask"),
        (frame("tool_approval", toolCallId="call-wipe", approved=True, autoContinue=True), "call-wipe"),
        (frame("tool_approval", toolCallId="call-wipe", approved=False), "call-wipe"),
    ):
        await bob.send_str(attack)
        assert await receive(bob) == {"type": "think_actors_error", "error": f"no tool call {call!r} {NO_SUCH_CALL}"}
    await bob.send_str(frame("stream_resume_ack", id="a-run"))
    replay = {"type": "cf_agent_use_chat_response", "id": "a-run", "body": "", "done": True, "replay": True}
    assert await receive(bob) == replay  # nothing of alice's stream
    assert await idle(bob, "p2") == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p2"}
    await bob.close()
    assert set(world.directory._agents) == world.agents | {"notes/bob:x"}
    world.agents.add("notes/bob:x")
    world.files = files(world.data_dir)
    await world.assert_untouched()
    await world.alice_finishes()


FORGED = {"turnMetadata": {"principal": {"id": "alice", "roles": ["admin"]}}, "channel": "mcp"}
BOBS_STAMP = {"channel": "web", "turnMetadata": {"principal": {"id": "bob", "roles": []}}}


async def test_a_chat_request_carrying_alices_message_ids_or_her_identity_is_bobs_own(world: World) -> None:
    """Attack: on bob:x, bob sends chat requests whose messages reuse alice's user and assistant message ids (one
    claiming her tool call settled), forge ``metadata.turnMetadata.principal = alice/admin`` and a body
    ``principal``, and regenerate from alice's message id. They are stored in bob's transcript only, each user
    message stamped with bob (the forged stamp dropped); alice's transcript is the same bytes."""
    alices = json.loads(world.transcripts["alice:notes"])
    bob = await world.socket("bob:x", BOB)
    await bob.send_str(chat_frame("b-1", user("hijack", "m-a-1", metadata=FORGED), principal=FORGED["turnMetadata"]))
    assert (await until(bob, done("b-1")))[-1]["outcome"] == "completed"
    settled = {
        "id": alices[-1]["id"],
        "role": "assistant",
        "parts": [
            {"type": "tool-wipe", "toolCallId": "call-wipe", "state": "output-available", "input": {}, "output": "ok"}
        ],
    }
    await bob.send_str(chat_frame("b-2", user("hijack", "m-a-1"), settled, user("and now", "m-a-3", metadata=FORGED)))
    assert (await until(bob, done("b-2")))[-1]["outcome"] == "completed"
    await bob.send_str(chat_frame("b-3", user("again", "m-a-2"), trigger="regenerate-message"))
    assert (await until(bob, done("b-3")))[-1]["outcome"] == "completed"
    await bob.close()

    stored = json.loads(await world.messages("bob:x", BOB))
    users = [(m["id"], m["parts"][0]["text"], m["metadata"]) for m in stored if m["role"] == "user"]
    assert users == [("m-a-1", "hijack", BOBS_STAMP), ("m-a-3", "and now", BOBS_STAMP), ("m-a-2", "again", BOBS_STAMP)]
    assert stored[2] == settled  # his copy of "her" settled call, in his agent only
    world.agents.add("notes/bob:x")
    world.files = files(world.data_dir)
    await world.assert_untouched()
    await world.alice_finishes()


async def test_calls_of_bob_under_alices_call_ids_take_bobs_answers_only(world: World) -> None:
    """Attack (id collision): bob's own agents get tool calls under the very ids alice's wait under (call-wipe,
    call-ask); bob answers them on his sockets. His calls settle and continue; alice's, the same ids in her agents,
    still wait, and take her answers afterwards."""
    bob = await world.socket("bob:x", BOB)
    await bob.send_str(chat_frame("b-1", user("bob wipes", "m-b-1")))
    await until(bob, done("b-1"))
    await bob.send_str(frame("tool_approval", toolCallId="call-wipe", approved=True, autoContinue=True))
    resuming = await until(bob, lambda f: f["type"] == "cf_agent_stream_resuming")
    await bob.send_str(frame("stream_resume_ack", id=resuming[-1]["id"]))
    await until(bob, continuation_done)
    await bob.close()
    bare = await world.socket("bob", BOB)
    await bare.send_str(chat_frame("b-2", user("where is bob?", "m-b-2"), clientTools=[ASK]))
    await until(bare, done("b-2"))
    await bare.send_str(frame("tool_result", toolCallId="call-ask", toolName="ask", output="home", autoContinue=True))
    resuming = await until(bare, lambda f: f["type"] == "cf_agent_stream_resuming")
    await bare.send_str(frame("stream_resume_ack", id=resuming[-1]["id"]))
    await until(bare, continuation_done)
    await bare.close()

    wiped = json.loads(await world.messages("bob:x", BOB))
    wipe = next(p for m in wiped for p in m["parts"] if p.get("toolCallId") == "call-wipe")
    assert (wipe["state"], wipe["output"]) == ("output-available", "all notes deleted")
    assert wiped[-1]["parts"][-1]["text"] == "bob's notes wiped"
    assert json.loads(await world.messages("bob", BOB))[-1]["parts"][-1]["text"] == "bob is home"
    world.agents |= {"notes/bob:x", "notes/bob"}
    world.files = files(world.data_dir)
    await world.assert_untouched()
    await world.alice_finishes()


def cookie(value: str) -> dict[str, str]:
    return {"Cookie": f"think_actors_token={value}"}


EXPIRED_ALICE = token("alice", expires_in_s=-60)
MISSING = "missing token: send Authorization: Bearer <JWT>, the think_actors_token cookie, or ?token="
# Credentials that prove no one: (headers, query) -> the 401's reason.
FORGED_CREDENTIALS: dict[str, tuple[dict[str, str], str, str]] = {
    "none": ({}, "", MISSING),
    "signed with another key": (bearer(token("alice", key=OTHER_SECRET)), "", "bad signature"),
    "alg none, sub alice": (bearer(unsigned("alice")), "", "algorithm 'none' is not accepted"),
    "alg none in a cookie": (cookie(unsigned("alice")), "", "algorithm 'none' is not accepted"),
    "alg none in ?token=": ({}, f"?token={unsigned('alice')}", "algorithm 'none' is not accepted"),
    "alice's, expired": (bearer(EXPIRED_ALICE), "", "token expired"),
    "bob's with sub edited to alice": (bearer(tampered(BOB, sub="alice")), "", "bad signature"),
    "bob's with roles edited to admin": (bearer(tampered(BOB, roles=["admin"])), "", "bad signature"),
    "bob's with its expiry extended": (
        bearer(tampered(token("bob", expires_in_s=-60), exp=2**40)),
        "",
        "bad signature",
    ),
    "signed HS384 with the right key": (
        bearer(jwt.encode({"sub": "alice", "exp": 2**40}, SECRET, algorithm="HS384")),
        "",
        "algorithm 'HS384' is not accepted: this server accepts HS256",
    ),
    "no expiry": (bearer(jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")), "", "token lacks the 'exp' claim"),
    "empty sub": (bearer(token("")), "", "the token's 'sub' claim is not a non-empty string"),
    "sub with a zero-width space": (
        bearer(token("alice\u200b")),
        "",
        "the token's 'sub' claim is not a usable id: 1-256 printable characters",
    ),
    # The header is the credential when it is a bearer one: a bad header is not rescued by a good cookie or query.
    "expired header, alice's cookie": ({**bearer(EXPIRED_ALICE), **cookie(ALICE)}, "", "token expired"),
    "garbage header, alice's ?token=": (bearer("x.y.z"), f"?token={ALICE}", "malformed token"),
}
# Credentials that prove bob, whatever else the request carries: refused as bob.
BOB_WITH_ALICES: dict[str, tuple[dict[str, str], str]] = {
    "bob's header, alice's cookie": ({**bearer(BOB), **cookie(ALICE)}, ""),
    "bob's header, alice's expired ?token=": (bearer(BOB), f"?token={EXPIRED_ALICE}"),
    "bob's header, alice's ?token=": (bearer(BOB), f"?token={ALICE}"),
    "bob's cookie, alice's ?token=": (cookie(BOB), f"?token={ALICE}"),
    "a Basic header of alice's, bob's cookie": ({"Authorization": f"Basic {ALICE}", **cookie(BOB)}, ""),
    "an empty Bearer header, bob's cookie, alice's ?token=": (
        {"Authorization": "Bearer ", **cookie(BOB)},
        f"?token={ALICE}",
    ),
    "bob granted the OAuth scope admin": (bearer(token("bob", scope="admin")), ""),
}


async def test_forged_and_mixed_credentials_prove_no_one_or_bob_never_alice(world: World) -> None:
    """Attack: a token signed with another key, ``alg: none`` naming alice (header, cookie, query), alice's expired
    token, bob's token with its sub, roles or expiry edited, another HS algorithm, no expiry, an empty or invisible
    sub, and a bad header beside alice's good cookie or query: each is a 401 that says why, on get-messages, the
    WebSocket upgrade and /mcp. Bob's good credential beside alice's (cookie, ?token=, a Basic header) proves bob
    alone, and bob granted the OAuth scope "admin" is not the role admin: a 403 read refusal."""
    for kind, (headers, query, reason) in FORGED_CREDENTIALS.items():
        challenge = 'Bearer error="invalid_token"' if kind != "none" else "Bearer"
        for method, path, extra in (
            ("GET", "/agents/notes/alice:notes/get-messages", {}),
            ("GET", "/agents/notes/alice:notes", UPGRADE),
            ("POST", "/mcp", {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}),
        ):
            url = URL(world.base + path + query, encoded=True)
            async with world.client.session.request(method, url, headers={**headers, **extra}, data=b"{}") as answer:
                assert (answer.status, await answer.json()) == (401, {"error": reason}), (kind, path)
                assert answer.headers["WWW-Authenticate"] == challenge, kind
    for kind, (headers, query) in BOB_WITH_ALICES.items():
        for path in ("/agents/notes/alice:notes/get-messages", "/agents/notes/alice:notes"):
            sent = {**headers, **UPGRADE} if "get-" not in path else headers
            assert await world.request("GET", path + query, sent) == (403, refused_read("alice:notes")), (kind, path)
    # The other way round, the header is who asks too: alice's header beside bob's cookie reads her own notes.
    assert await world.request("GET", "/agents/notes/alice:notes/get-messages", {**bearer(ALICE), **cookie(BOB)}) == (
        200,
        world.transcripts["alice:notes"],
    )
    await world.assert_untouched()
    await world.alice_finishes()


@asynccontextmanager
async def mcp_session(world: World, who: str) -> AsyncIterator[ClientSession]:
    """The MCP SDK's own client on the gateway's /mcp, as ``who``."""
    async with (
        httpx2.AsyncClient(headers=bearer(who), timeout=WAIT_S) as http,
        streamable_http_client(f"{world.base}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await asyncio.wait_for(client.initialize(), WAIT_S)
        yield client


async def tool_error(client: ClientSession, tool: str, arguments: dict[str, Any]) -> str:
    result = await asyncio.wait_for(client.call_tool(tool, arguments), WAIT_S)
    assert result.is_error, (tool, arguments, result)
    return "".join(c.text for c in result.content if c.type == "text")


def refused_chat(name: str, cls: str = "notes", who: str = "bob") -> str:
    return f"chat refused: {who!r} may not chat the agent '{cls}/{name}': it is not theirs"


async def test_bob_cannot_chat_with_alices_agents_over_mcp(world: World) -> None:
    """Attack: bob calls each class's MCP tool with agent_name alice:notes, alice, alice:work, Alice:notes,
    alice:notes:x, without one (the default agent "mcp", not his), and encoded or look-alike forms (%61lice:notes,
    alice%3Anotes, a NUL tail, a Cyrillic a, a traversal). A name of someone else's is a "chat refused" tool error,
    a name that is none an "is not an agent name" one; no agent is created, alice's notes are unchanged."""
    async with mcp_session(world, BOB) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["diary", "notes"]  # classes, no agent data
        for cls in ("notes", "diary"):
            for name in ("alice:notes", "alice", "alice:work", "Alice:notes", "alice:notes:x", "alice:notes."):
                assert await tool_error(client, cls, {"message": "hi", "agent_name": name}) == refused_chat(name, cls)
            assert await tool_error(client, cls, {"message": "hi"}) == refused_chat("mcp", cls)
            for name in ("%61lice:notes", "alice%3Anotes", "alice:notes\x00", "\u0430lice:notes", "../alice:notes"):
                error = await tool_error(client, cls, {"message": "hi", "agent_name": name})
                assert error == f"agent_name {name!r} is not an agent name: " + json.loads(invalid_name(name))["error"]
        assert await tool_error(client, "Notes", {"message": "hi", "agent_name": "alice:notes"}) == (
            "no agent class 'Notes' here: the tools (agent classes) are diary, notes"
        )
        assert await tool_error(client, "notes", {"message": "hi", "agent_name": ["alice:notes"]}) == (
            "agent_name must be a string, not list"
        )
    await world.assert_untouched()
    await world.alice_finishes()


# Principals whose ids try to collide with alice's owner key "alice", or look like it.
COLLIDERS = ["alice:notes", "alice:", "alice:work", ":alice", "alice ", " alice", "ALICE", "Alice", "alice.", "alice/x"]


async def test_principals_whose_ids_collide_with_alices_owner_key_own_none_of_her_agents(world: World) -> None:
    """Attack: an identity provider's users named "alice:notes", "alice:", "alice:work", "ALICE", "alice " and
    the like (valid tokens) try alice's agents by socket, get-messages and MCP. An id outside the safe characters
    owns only agents under its "h=" key, a differently cased one its own: each is a 403 / "chat refused"."""
    for sub in COLLIDERS:
        who = token(sub)
        for name in ALICES:
            expected = (403, refused_read(name, who=sub))
            assert await world.request("GET", f"/agents/notes/{name}/get-messages", bearer(who)) == expected, sub
            assert await world.request("GET", f"/agents/notes/{name}", {**bearer(who), **UPGRADE}) == expected, sub
        async with mcp_session(world, who) as client:
            for name in ("alice:notes", "alice"):
                error = await tool_error(client, "notes", {"message": "hi", "agent_name": name})
                assert error == refused_chat(name, who=sub), sub
    await world.assert_untouched()
    await world.alice_finishes()


async def test_an_id_outside_the_safe_characters_owns_its_h_key_and_nothing_of_alices(world: World) -> None:
    """Attack and control: the user "alice:notes" (a valid token) chats with the agent under its own key
    ("h=" + 32 hex of the id's SHA-256) and gets it, stamped with its id; the user whose id is that very key
    ("h=...", which holds "=") owns a key of its own hashed again, so it may not read that agent."""
    key = hashed("alice:notes")
    assert OwnerRule.owner_key(ta.Principal(id="alice:notes")) == key
    colliding = token("alice:notes")
    ws = await world.socket(f"{key}:x", colliding)
    await ws.send_str(chat_frame("c-1", user("hello", "m-c-1")))
    assert (await until(ws, done("c-1")))[-1]["outcome"] == "completed"
    await ws.close()
    stored = json.loads(await world.messages(f"{key}:x", colliding))
    assert stored[0]["metadata"]["turnMetadata"] == {"principal": {"id": "alice:notes", "roles": []}}
    assert set(world.directory._agents) == world.agents | {f"notes/{key}:x"}

    for sub in (key, f"{key}:x"):
        refused = await world.request("GET", f"/agents/notes/{key}:x/get-messages", bearer(token(sub)))
        assert refused == (403, refused_read(f"{key}:x", who=sub))
    world.agents.add(f"notes/{key}:x")
    world.files = files(world.data_dir)
    await world.assert_untouched()
    await world.alice_finishes()


# -- positive controls: the same requests succeed for whom they should ---------------------------------------------


async def test_control_alice_may_do_everything_on_her_own_agents(world: World) -> None:
    """Control: alice reads her agents, follows and cancels her running turn from another tab, answers her
    waiting approval and client tool call, chats over MCP and clears an agent: none of it is refused."""
    for name in ALICES:
        assert (await world.request("GET", f"/agents/notes/{name}/get-messages", bearer(ALICE)))[0] == 200
    tab = await world.client.session.ws_connect(f"{world.base}/agents/notes/alice:work", headers=bearer(ALICE))
    assert await greeting(tab) == {"type": "cf_agent_stream_resuming", "id": "a-run"}
    await tab.send_str(frame("stream_resume_ack", id="a-run"))
    replayed = await until(tab, lambda f: f.get("replayComplete") is True)
    assert any('"working"' in f["body"] for f in replayed if f.get("body"))
    await tab.send_str(frame("chat_request_cancel", id="a-run"))
    assert (await until(tab, done("a-run")))[-1]["outcome"] == "aborted"
    await tab.send_str(frame("chat_clear"))
    assert await idle(tab, "p1") == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}
    assert await world.messages("alice:work") == b"[]"
    await tab.close()

    async with mcp_session(world, ALICE) as client:
        result = await client.call_tool("notes", {"message": "hello from mcp", "agent_name": "alice:notes"})
        assert not result.is_error and [c.text for c in result.content if c.type == "text"] == ["echo: hello from mcp"]
    stored = json.loads(await world.messages("alice:notes"))
    assert stored[-2]["metadata"]["turnMetadata"] == {"principal": {"id": "alice", "roles": []}}


async def test_control_bob_may_do_everything_on_his_own_agents(world: World) -> None:
    """Control: bob chats with, reads, cancels a turn of and clears his own agents (bob:x and bob), and chats
    with bob:mcp over MCP; his turn runs beside alice's and his cancel stops his own only."""
    bob = await world.socket("bob:x", BOB)
    await bob.send_str(chat_frame("b-1", user("hi", "m-b-1")))
    assert (await until(bob, done("b-1")))[-1]["outcome"] == "completed"
    await bob.send_str(chat_frame("b-run", user(GATED, "m-b-run")))
    await until(bob, lambda f: f.get("id") == "b-run" and "working" in f.get("body", ""))
    await bob.send_str(frame("chat_request_cancel", id="b-run"))
    assert (await until(bob, done("b-run")))[-1]["outcome"] == "aborted"
    assert [m["role"] for m in json.loads(await world.messages("bob:x", BOB))] == [
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    await bob.send_str(frame("chat_clear"))
    assert await idle(bob, "p1") == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p1"}
    assert await world.messages("bob:x", BOB) == b"[]"
    await bob.close()
    async with mcp_session(world, BOB) as client:
        result = await client.call_tool("diary", {"message": "dear diary", "agent_name": "bob"})
        assert not result.is_error and [c.text for c in result.content if c.type == "text"] == ["echo: dear diary"]
    world.agents |= {"notes/bob:x", "diary/bob"}
    world.files = files(world.data_dir)
    await world.assert_untouched()
    await world.alice_finishes()


async def test_control_an_admin_may_read_alices_agents(world: World) -> None:
    """Control: a principal with the role admin reads alice's transcripts (the same bytes she reads) and opens
    her sockets; reading creates and changes nothing."""
    for name in ALICES[:2]:
        assert await world.messages(name, ADMIN) == world.transcripts[name]
        ws = await world.client.session.ws_connect(f"{world.base}/agents/notes/{name}", headers=bearer(ADMIN))
        assert (await greeting(ws))["messages"] == json.loads(world.transcripts[name])
        await ws.close()
    await world.assert_untouched()
    await world.alice_finishes()


# -- found: one store instance shared by every agent of a LocalDirectory -------------------------------------------


async def test_bobs_own_agent_does_not_hold_alices_transcript_with_a_store_instance_option() -> None:
    """Attack: with the directory the guides show (``LocalDirectory([...], store=ta.MemoryStore())``), bob reads
    his own agent bob:x, which never ran (authorized: it is his). It must be a 404 and, once he chats, hold his
    messages only; alice's transcript must stay hers."""
    directory = LocalDirectory([Notes], model=PromptedModel(), store=ta.MemoryStore())
    gateway = Gateway(directory, authenticate=auth(), authorize=OwnerRule(), mcp=True)
    async with TestClient(TestServer(gateway.app(), host="127.0.0.1")) as client:
        async with client.ws_connect("/agents/notes/alice:notes", headers=bearer(ALICE)) as ws:
            await greeting(ws)
            await ws.send_str(chat_frame("a-1", user("remember milk", "m-a-1")))
            await until(ws, done("a-1"))
        alices = await (await client.get("/agents/notes/alice:notes/get-messages", headers=bearer(ALICE))).read()

        never_ran = await client.get("/agents/notes/bob:x/get-messages", headers=bearer(BOB))
        assert (never_ran.status, b"milk" in await never_ran.read()) == (404, False)
        async with client.ws_connect("/agents/notes/bob:x", headers=bearer(BOB)) as ws:
            assert (await greeting(ws))["messages"] == []
            await ws.send_str(chat_frame("b-1", user("hi", "m-b-1")))
            await until(ws, done("b-1"))
        bobs = await (await client.get("/agents/notes/bob:x/get-messages", headers=bearer(BOB))).json()
        assert [m["id"] for m in bobs if m["role"] == "user"] == ["m-b-1"]
        assert (
            await (await client.get("/agents/notes/alice:notes/get-messages", headers=bearer(ALICE))).read() == alices
        )
