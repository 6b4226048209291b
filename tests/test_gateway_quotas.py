"""Per-user quotas at a gateway of in-process agents: turns per minute, sockets open at once, model tokens per UTC
day. Each quota refuses only the principal over it, refuses a chat request before anything of it is stored, and
says when to try again; the counts survive a restart of the gateway (SQLite under ``data_dir``); an admin is
exempt. Below, ``QuotaBook`` (the arithmetic) with a fake clock, and ``Quotas`` validation.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer
from gateway_app import EchoModel
from helpers import greeting
from pydantic import ValidationError

import think_actors as ta
from think_actors.gateway import Gateway, JWTAuth, LocalDirectory, OwnerRule, QuotaExceeded, Quotas
from think_actors.models import Usage
from think_actors.quotas import QuotaBook
from think_actors.testing import ScriptedModel, step, text

SECRET = "quota-test-secret-" + "k" * 32  # HS256 wants 32 bytes or more
RESPONSE = "cf_agent_use_chat_response"
DAY_S = 86_400


class Notebook(ta.Think):
    """The agent class the gateway serves (its model comes from the directory's options)."""


def token(sub: str, roles: list[str] | None = None) -> str:
    claims: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + 3600}
    if roles:
        claims["roles"] = roles
    return jwt.encode(claims, SECRET, "HS256")


def bearer(sub: str, roles: list[str] | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token(sub, roles)}"}


def chat_request(request_id: str, words: str) -> str:
    body = {"messages": [{"id": f"u-{request_id}", "role": "user", "parts": [{"type": "text", "text": words}]}]}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(body)}}
    )


async def read(ws: Any) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
    return frame


async def until_done(ws: Any, ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The response frames of each request id, read until every one of them had its ``done`` frame."""
    frames: dict[str, list[dict[str, Any]]] = {i: [] for i in ids}
    pending = set(ids)
    while pending:
        frame = await read(ws)
        if frame["type"] == RESPONSE and frame["id"] in frames:
            frames[frame["id"]].append(frame)
            if frame["done"]:
                pending.discard(frame["id"])
    return frames


def answered(frames: list[dict[str, Any]]) -> str:
    """The text a request's turn streamed, checked to have completed."""
    assert frames[-1]["done"] and frames[-1].get("outcome") == "completed", frames[-1]
    chunks = [json.loads(f["body"]) for f in frames if f["body"]]
    return "".join(c["delta"] for c in chunks if c["type"] == "text-delta")


def refusal(frames: list[dict[str, Any]], request_id: str) -> tuple[str, int]:
    """The body of a request's quota refusal (its only frame) and the retry-after seconds it names."""
    [frame] = frames
    assert frame == {"type": RESPONSE, "id": request_id, "body": frame["body"], "done": True, "error": True}
    seconds = re.findall(r"(?:try again in|retry after) (\d+) s\b", frame["body"])
    assert frame["body"].startswith("quota ") and seconds and len(set(seconds)) == 1, frame["body"]
    return frame["body"], int(seconds[0])


async def user_texts(client: TestClient, name: str, sub: str) -> list[str]:
    response = await client.get(f"/agents/notebook/{name}/get-messages", headers=bearer(sub))
    assert response.status == 200
    return [m["parts"][-1]["text"] for m in await response.json() if m["role"] == "user"]


Serve = Callable[..., Awaitable[tuple[TestClient, Gateway]]]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    """Start a gateway (JWT + OwnerRule + the quotas given) whose agents and quota counts live in ``tmp_path``."""
    clients: list[TestClient] = []

    async def make(quotas: Quotas | dict[str, Any], model: Any = None) -> tuple[TestClient, Gateway]:
        directory = LocalDirectory([Notebook], model=model or EchoModel(), data_dir=str(tmp_path))
        gateway = Gateway(
            directory, authenticate=JWTAuth(algorithms=["HS256"], key=SECRET), authorize=OwnerRule(), quotas=quotas
        )
        client = TestClient(TestServer(gateway.app()))
        await client.start_server()
        clients.append(client)
        return client, gateway

    yield make
    for client in clients:
        await client.close()


# ---------------------------------------------------------------------------------------------- turns per minute


async def test_a_burst_over_turns_per_minute_is_refused_before_it_is_stored_and_leaves_others_alone(
    serve: Serve,
) -> None:
    """turns_per_minute=3: of alice's burst of 5 chat requests the first 3 are answered and the last 2 get the quota
    frame (with the seconds to wait), and her transcript holds the 3 accepted messages only; bob's 3 requests in
    the same minute are all answered."""
    client, _ = await serve(Quotas(turns_per_minute=3))
    before = time.time()
    async with client.ws_connect("/agents/notebook/alice", headers=bearer("alice")) as ws:
        await greeting(ws)
        ids = [f"a{i}" for i in range(1, 6)]
        for i, request_id in enumerate(ids, 1):
            await ws.send_str(chat_request(request_id, f"alice {i}"))
        frames = await until_done(ws, ids)
    after = time.time()
    assert [answered(frames[i]) for i in ids[:3]] == ["echo: alice 1", "echo: alice 2", "echo: alice 3"]
    # The window opened with the first accepted turn, between `before` and `after`: it frees 60 s later.
    for request_id in ids[3:]:
        body, retry = refusal(frames[request_id], request_id)
        assert body.startswith("quota turns_per_minute: 'alice' sent 3 chat requests in the last minute: ")
        assert int(before + 60 - after) + 1 <= retry <= 61
    assert await user_texts(client, "alice", "alice") == ["alice 1", "alice 2", "alice 3"]

    async with client.ws_connect("/agents/notebook/bob", headers=bearer("bob")) as ws:
        await greeting(ws)
        ids = ["b1", "b2", "b3"]
        for i, request_id in enumerate(ids, 1):
            await ws.send_str(chat_request(request_id, f"bob {i}"))
        frames = await until_done(ws, ids)
    assert [answered(frames[i]) for i in ids] == ["echo: bob 1", "echo: bob 2", "echo: bob 3"]
    assert await user_texts(client, "bob", "bob") == ["bob 1", "bob 2", "bob 3"]


# ---------------------------------------------------------------------------------------------- sockets


async def test_a_socket_over_the_quota_is_a_429_until_one_closes_and_others_are_unaffected(serve: Serve) -> None:
    """sockets=2: alice's third socket (on any of her agents) is refused at the upgrade with 429 and Retry-After;
    once she closes one, a new one opens; bob opens his two meanwhile."""
    client, _ = await serve(Quotas(sockets=2))
    first = await client.ws_connect("/agents/notebook/alice", headers=bearer("alice"))
    second = await client.ws_connect("/agents/notebook/alice:work", headers=bearer("alice"))
    try:
        await greeting(first)
        await greeting(second)
        upgrade = {
            **bearer("alice"),
            "Connection": "Upgrade",
            "Upgrade": "websocket",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
        }
        refused = await client.get("/agents/notebook/alice:other", headers=upgrade)
        assert (refused.status, refused.headers["Retry-After"], await refused.json()) == (
            429,
            "5",
            {"error": "'alice' has 2 sockets open already: close one (another tab) and connect again"},
        )
        with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
            await client.ws_connect("/agents/notebook/alice", headers=bearer("alice"))
        assert (handshake.value.status, handshake.value.headers["Retry-After"]) == (429, "5")

        async with (
            client.ws_connect("/agents/notebook/bob", headers=bearer("bob")) as bob1,
            client.ws_connect("/agents/notebook/bob:x", headers=bearer("bob")) as bob2,
        ):
            await greeting(bob1)
            await greeting(bob2)

        await second.close()
        third = await client.ws_connect("/agents/notebook/alice:other", headers=bearer("alice"))
        assert await greeting(third) == {"type": "cf_agent_chat_messages", "messages": [], "connect": True}
        await third.close()
    finally:
        await first.close()
        await second.close()


# ---------------------------------------------------------------------------------------------- tokens per day


def seconds_to_midnight(now: float) -> int:
    return int((now // DAY_S + 1) * DAY_S - now) + 1


async def test_a_turn_that_spends_the_days_tokens_refuses_the_next_until_utc_midnight(serve: Serve) -> None:
    """tokens_per_day=100: alice's turn reports 150 tokens (a scripted usage), so her next chat request is refused
    with quota tokens_per_day and the seconds to UTC midnight, and is not stored; bob still chats."""
    model = ScriptedModel(
        [
            step(text("a long answer"), usage=Usage(input_tokens=100, output_tokens=50, total_tokens=150)),
            step(text("bob's answer"), usage=Usage(input_tokens=3, output_tokens=2, total_tokens=5)),
        ]
    )
    client, gateway = await serve(Quotas(tokens_per_day=100), model=model)
    async with client.ws_connect("/agents/notebook/alice", headers=bearer("alice")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("a1", "spend it"))
        assert answered((await until_done(ws, ["a1"]))["a1"]) == "a long answer"
        assert await gateway.access.keeper.used("alice") == {"turns": 1, "tokens": 150, "sockets": 1}
        before = time.time()
        await ws.send_str(chat_request("a2", "one more"))
        body, retry = refusal((await until_done(ws, ["a2"]))["a2"], "a2")
        after = time.time()
    assert body.startswith("quota tokens_per_day: 'alice' used its 100 model tokens of today (UTC)")
    assert seconds_to_midnight(after) <= retry <= seconds_to_midnight(before)
    assert await user_texts(client, "alice", "alice") == ["spend it"]

    async with client.ws_connect("/agents/notebook/bob", headers=bearer("bob")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("b1", "my turn"))
        assert answered((await until_done(ws, ["b1"]))["b1"]) == "bob's answer"
    assert await gateway.access.keeper.used("bob") == {"turns": 1, "tokens": 5, "sockets": 0}
    model.assert_complete()


# ---------------------------------------------------------------------------------------------- restart


async def test_the_counts_survive_a_restart_of_the_gateway(serve: Serve, tmp_path: Path) -> None:
    """Quota counts are saved under data_dir: after the gateway app stops and a new Gateway starts on the same
    data_dir, alice's 3 turns of this minute and carol's tokens of today still count, and both are refused as
    before the restart; dave, new, chats."""
    quotas = Quotas(turns_per_minute=3, tokens_per_day=100)
    small = Usage(input_tokens=1, output_tokens=1, total_tokens=2)
    model = ScriptedModel([step(text(f"ok {i}"), usage=small) for i in (1, 2, 3)])
    model.add(step(text("big"), usage=Usage(input_tokens=100, output_tokens=20, total_tokens=120)))
    client, _ = await serve(quotas, model=model)
    async with client.ws_connect("/agents/notebook/alice", headers=bearer("alice")) as ws:
        await greeting(ws)
        for request_id in ("a1", "a2", "a3"):
            await ws.send_str(chat_request(request_id, request_id))
            await until_done(ws, [request_id])
    async with client.ws_connect("/agents/notebook/carol", headers=bearer("carol")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("c1", "spend"))
        assert answered((await until_done(ws, ["c1"]))["c1"]) == "big"
    await client.close()
    model.assert_complete()
    assert (tmp_path / "gateway" / "quotas.sqlite").exists()

    restarted, gateway = await serve(quotas, model=ScriptedModel([text("welcome")]))
    assert await gateway.access.keeper.used("alice") == {"turns": 3, "tokens": 6, "sockets": 0}
    assert await gateway.access.keeper.used("carol") == {"turns": 1, "tokens": 120, "sockets": 0}
    async with restarted.ws_connect("/agents/notebook/alice", headers=bearer("alice")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("a4", "after the restart"))
        body, _ = refusal((await until_done(ws, ["a4"]))["a4"], "a4")
        assert body.startswith("quota turns_per_minute: 'alice' sent 3 chat requests in the last minute")
    async with restarted.ws_connect("/agents/notebook/carol", headers=bearer("carol")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("c2", "after the restart"))
        body, _ = refusal((await until_done(ws, ["c2"]))["c2"], "c2")
        assert body.startswith("quota tokens_per_day: 'carol' used its 100 model tokens of today (UTC)")
    async with restarted.ws_connect("/agents/notebook/dave", headers=bearer("dave")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("d1", "hello"))
        assert answered((await until_done(ws, ["d1"]))["d1"]) == "welcome"
    assert await user_texts(restarted, "alice", "alice") == ["a1", "a2", "a3"]
    assert await user_texts(restarted, "carol", "carol") == ["spend"]


# ---------------------------------------------------------------------------------------------- exempt


async def test_an_admin_has_no_quotas_and_is_never_counted(serve: Serve) -> None:
    """With turns_per_minute=1 and sockets=1, a principal with the role admin opens 2 sockets and has 3 requests
    answered, and the keeper counts nothing for it; a plain user is refused at its second request."""
    client, gateway = await serve({"turns_per_minute": 1, "sockets": 1})
    admin = bearer("root", ["admin"])
    async with (
        client.ws_connect("/agents/notebook/alice", headers=admin) as ws,
        client.ws_connect("/agents/notebook/root", headers=admin) as other,
    ):
        await greeting(ws)
        await greeting(other)
        for request_id in ("r1", "r2", "r3"):
            await ws.send_str(chat_request(request_id, request_id))
        frames = await until_done(ws, ["r1", "r2", "r3"])
        assert [answered(frames[i]) for i in ("r1", "r2", "r3")] == ["echo: r1", "echo: r2", "echo: r3"]
        assert await gateway.access.keeper.used("root") == {"turns": 0, "tokens": 0, "sockets": 0}

    async with client.ws_connect("/agents/notebook/bob", headers=bearer("bob")) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("b1", "one"))
        await ws.send_str(chat_request("b2", "two"))
        frames = await until_done(ws, ["b1", "b2"])
    assert answered(frames["b1"]) == "echo: one"
    assert refusal(frames["b2"], "b2")[0].startswith("quota turns_per_minute: 'bob' sent 1 chat requests")


# ---------------------------------------------------------------------------------------------- QuotaBook


class FakeClock:
    """A clock the test moves (seconds since the epoch)."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def refused(call: Callable[[], None]) -> tuple[str, int]:
    with pytest.raises(QuotaExceeded) as raised:
        call()
    return raised.value.quota, raised.value.retry_after_s


def test_the_minute_window_slides_with_the_oldest_turn() -> None:
    """Turns at 0 and 30 s fill a 2-per-minute window; at 30 s and 59.5 s a third is refused until the turn of
    0 s is 60 s old (31 s, then 1 s to wait); at 60 s it is accepted, and the window is full again until 90 s."""
    clock = FakeClock(1_000_000.0)
    book = QuotaBook(Quotas(turns_per_minute=2), clock=clock)
    book.start_turn("alice")
    clock.now += 30
    book.start_turn("alice")
    assert refused(lambda: book.start_turn("alice")) == ("turns_per_minute", 31)
    clock.now = 1_000_059.5
    assert refused(lambda: book.start_turn("alice")) == ("turns_per_minute", 1)
    assert book.used("alice") == {"turns": 2, "tokens": 0, "sockets": 0}
    clock.now = 1_000_060.0
    book.start_turn("alice")
    assert book.used("alice") == {"turns": 2, "tokens": 0, "sockets": 0}
    assert refused(lambda: book.start_turn("alice")) == ("turns_per_minute", 31)
    book.start_turn("bob")  # another principal's window is its own
    clock.now = 1_000_090.0
    book.start_turn("alice")
    assert book.used("alice") == {"turns": 2, "tokens": 0, "sockets": 0}


def test_the_token_budget_is_per_utc_day_and_a_refused_turn_counts_nothing() -> None:
    """100 tokens a day: at 23:53:20 UTC alice has used them, so a turn is refused for the 401 s to midnight and
    is not counted; at midnight the count starts again from 0."""
    day = 20_000
    clock = FakeClock(day * DAY_S + 86_000.0)
    book = QuotaBook(Quotas(tokens_per_day=100, turns_per_minute=10), clock=clock)
    book.start_turn("alice")
    book.add_tokens("alice", 60)
    book.start_turn("alice")  # under the budget at its start: runs, and may pass it
    book.add_tokens("alice", 60)
    book.add_tokens("alice", 0)
    book.add_tokens("alice", -5)  # nothing to count
    assert book.used("alice") == {"turns": 2, "tokens": 120, "sockets": 0}
    assert refused(lambda: book.start_turn("alice")) == ("tokens_per_day", 401)
    assert book.used("alice") == {"turns": 2, "tokens": 120, "sockets": 0}
    clock.now = (day + 1) * DAY_S
    assert book.used("alice") == {"turns": 0, "tokens": 0, "sockets": 0}
    book.start_turn("alice")
    assert book.used("alice") == {"turns": 1, "tokens": 0, "sockets": 0}


def test_sockets_count_over_gateways_and_a_forgotten_gateway_frees_its_own() -> None:
    """sockets=2 over every gateway: one on g1 and one on g2 fill it; closing frees one; forgetting g1 (it
    stopped) drops g1's sockets only; closing a socket nobody counted changes nothing."""
    book = QuotaBook(Quotas(sockets=2), clock=FakeClock(0.0))
    book.open_socket("alice", "g1")
    book.open_socket("alice", "g2")
    assert refused(lambda: book.open_socket("alice", "g1")) == ("sockets", 5)
    book.open_socket("bob", "g1")
    book.close_socket("alice", "g2")
    book.open_socket("alice", "g1")
    assert book.used("alice") == {"turns": 0, "tokens": 0, "sockets": 2}
    book.forget_gateway("g1")
    assert book.used("alice")["sockets"] == 0
    assert book.used("bob")["sockets"] == 0
    book.open_socket("alice", "g2")
    book.close_socket("alice", "g1")  # g1 was forgotten: nothing of it is left to close
    book.close_socket("nobody", "g1")
    assert book.used("alice")["sockets"] == 1
    assert book.used("nobody") == {"turns": 0, "tokens": 0, "sockets": 0}


def test_the_state_round_trips_through_json_and_keeps_turns_and_tokens_but_not_sockets() -> None:
    """What a keeper saves (``state``) restored into a new book (``restore``) refuses as the old one would: the
    minute's turns and the day's tokens come back; sockets do not (they closed with the old keeper)."""
    clock = FakeClock(1_000_000.0)
    quotas = Quotas(turns_per_minute=2, tokens_per_day=50, sockets=1)
    old = QuotaBook(quotas, clock=clock)
    old.start_turn("alice")
    old.add_tokens("alice", 10)
    clock.now += 5
    old.start_turn("alice")
    old.start_turn("carol")
    old.add_tokens("carol", 70)
    old.open_socket("alice", "g1")
    saved = json.loads(json.dumps(old.state()))  # what the SQLite key-value store keeps
    assert saved == {
        "alice": {"turns": [1_000_000.0, 1_000_005.0], "day": 1_000_000 // DAY_S, "tokens": 10},
        "carol": {"turns": [1_000_005.0], "day": 1_000_000 // DAY_S, "tokens": 70},
    }

    new = QuotaBook(quotas, clock=clock)
    new.restore(saved)
    assert new.state() == old.state()
    assert new.used("alice") == {"turns": 2, "tokens": 10, "sockets": 0}
    assert (
        refused(lambda: new.start_turn("alice"))
        == refused(lambda: old.start_turn("alice"))
        == (
            "turns_per_minute",
            56,
        )
    )
    assert refused(lambda: new.start_turn("carol"))[0] == "tokens_per_day"
    new.open_socket("alice", "g2")  # the old keeper's socket was not restored


def test_a_quota_refusal_pickles_and_never_says_retry_in_less_than_a_second() -> None:
    """QuotaExceeded crosses from the Ray quota actor as is: its facts survive pickling."""
    error = QuotaExceeded("sockets", "too many", 0)
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.quota, copy.message, copy.retry_after_s, str(copy)) == (
        QuotaExceeded,
        "sockets",
        "too many",
        1,
        "too many",
    )


# ---------------------------------------------------------------------------------------------- Quotas


@pytest.mark.parametrize("field", ["turns_per_minute", "sockets", "tokens_per_day"])
def test_a_limit_under_one_is_refused(field: str) -> None:
    """Each limit is None (no limit) or 1 or more: 0 or a negative is a configuration error, in Gateway too."""
    for value in (0, -1):
        with pytest.raises(ValidationError, match="greater than or equal to 1"):
            Quotas(**{field: value})
        with pytest.raises(ValidationError, match="greater than or equal to 1"):
            Gateway(LocalDirectory([Notebook]), token="t", quotas={field: value})
    assert getattr(Quotas(**{field: 1}), field) == 1


def test_an_unknown_quota_field_is_refused_and_quotas_are_frozen() -> None:
    """A misspelt quota is an error, not a silently missing limit; a Quotas cannot be changed after it is made."""
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Quotas(turns_per_minutes=3)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Gateway(LocalDirectory([Notebook]), token="t", quotas={"turns": 3})
    quotas = Quotas(sockets=2)
    with pytest.raises(ValidationError):
        quotas.sockets = 3  # type: ignore[misc]
    assert Quotas() == Quotas(turns_per_minute=None, sockets=None, tokens_per_day=None, exempt_roles={"admin"})
