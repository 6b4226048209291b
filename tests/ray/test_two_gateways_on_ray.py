"""Two gateway processes (two ``GatewayServer`` actors, each on its own port) in front of the same agent actors,
both serving ``gateway_auth_app``: the same JWT authentication, ``OwnerRule`` and quotas (3 turns a minute, 2
sockets). Either gateway accepts a user's token and refuses another user's agent; the quotas are the cluster's
(one ``QuotaKeeper``), so turns and sockets through both count together; a turn started through one gateway
streams to the user's socket on the other; the stored message names who sent it.

Every test has principals of its own: the quota keeper is one actor for the whole session.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import jwt
import pytest
import ray
from gateway_auth_app import SECRET, Journal
from helpers import greeting

import think_actors as ta
from think_actors.gateway.ray_server import GatewayServer

RESPONSE = "cf_agent_use_chat_response"
WAIT_S = 30


@pytest.fixture(scope="module")
def gateways(ray_runtime: Any) -> Iterator[list[str]]:
    """Two gateway actors serving ``gateway_auth_app``; their URLs."""
    actors = [
        GatewayServer.options(namespace=ray_runtime.namespace).remote(  # type: ignore[attr-defined]
            ray_runtime, "gateway_auth_app", {}
        )
        for _ in range(2)
    ]
    try:
        urls = ray.get([actor.start.remote("127.0.0.1", 0) for actor in actors], timeout=120)
        assert len(set(urls)) == 2
        yield urls
    finally:
        for actor in actors:
            try:
                ray.get(actor.stop.remote(), timeout=30)
            finally:
                ray.kill(actor)


def user(role: str) -> str:
    """A principal id (and so, by OwnerRule, an agent name) no other test uses."""
    return f"{role}-{uuid.uuid4().hex[:8]}"


def bearer(sub: str, secret: str = SECRET) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt.encode({'sub': sub, 'exp': int(time.time()) + 3600}, secret, 'HS256')}"}


def chat_request(request_id: str, words: str, metadata: dict[str, Any] | None = None) -> str:
    message: dict[str, Any] = {"id": f"u-{request_id}", "role": "user", "parts": [{"type": "text", "text": words}]}
    if metadata is not None:
        message["metadata"] = metadata
    body = {"messages": [message]}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(body)}}
    )


async def frames_of(ws: Any, request_id: str) -> list[dict[str, Any]]:
    """The response frames of one request, read to its ``done`` frame (other frames are skipped)."""
    frames = []
    while True:
        frame = json.loads((await asyncio.wait_for(ws.receive(), WAIT_S)).data)
        if frame["type"] == RESPONSE and frame["id"] == request_id:
            frames.append(frame)
            if frame["done"]:
                return frames


def chunks(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [json.loads(f["body"]) for f in frames if f["body"] and not f.get("error")]


def answered(frames: list[dict[str, Any]]) -> str:
    assert frames[-1]["done"] and frames[-1].get("outcome") == "completed", frames[-1]
    return "".join(c["delta"] for c in chunks(frames) if c["type"] == "text-delta")


UPGRADE = {
    "Connection": "Upgrade",
    "Upgrade": "websocket",
    "Sec-WebSocket-Version": "13",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
}


async def test_both_gateways_accept_a_users_token_and_refuse_another_users_agent(
    ray_runtime: Any, gateways: list[str]
) -> None:
    """alice's token opens her agent's socket on either gateway; bob's token is refused on alice's agent by both
    (403 on the upgrade and on get-messages), and a token signed with another secret is a 401 on both."""
    alice, bob = user("alice"), user("bob")
    path = f"/agents/journal/{alice}"
    async with aiohttp.ClientSession() as session:
        for url in gateways:
            async with session.ws_connect(url + path, headers=bearer(alice)) as ws:
                assert await greeting(ws, WAIT_S) == {"type": "cf_agent_chat_messages", "messages": [], "connect": True}
            refusal = {"error": f"read refused: '{bob}' may not read the agent 'journal/{alice}': it is not theirs"}
            for route, headers in ((path, {**UPGRADE, **bearer(bob)}), (path + "/get-messages", bearer(bob))):
                async with session.get(url + route, headers=headers) as refused:
                    assert (refused.status, await refused.json()) == (403, refusal)
            with pytest.raises(aiohttp.WSServerHandshakeError) as handshake:
                await session.ws_connect(url + path, headers=bearer(bob))
            assert handshake.value.status == 403
            async with session.get(url + path + "/get-messages", headers=bearer(alice, "x" * 40)) as forged:
                assert forged.status == 401
                assert forged.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'


async def test_turns_and_sockets_through_both_gateways_count_against_one_quota(
    ray_runtime: Any, gateways: list[str]
) -> None:
    """turns_per_minute=3: two chat requests through gateway 1 and two through gateway 2: the fourth is refused
    with the quota frame. sockets=2: with one socket on each gateway, a third is a 429 on either; bob, meanwhile,
    is untouched."""
    alice, bob = user("alice"), user("bob")
    first, second = gateways
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{first}/agents/journal/{alice}", headers=bearer(alice)) as one,
        session.ws_connect(f"{second}/agents/journal/{alice}:two", headers=bearer(alice)) as two,
    ):
        await greeting(one, WAIT_S)
        await greeting(two, WAIT_S)
        for request_id in ("r1", "r2"):
            await one.send_str(chat_request(request_id, request_id))
            assert answered(await frames_of(one, request_id)) == f"echo: {request_id}"
        await two.send_str(chat_request("r3", "r3"))
        assert answered(await frames_of(two, "r3")) == "echo: r3"
        await two.send_str(chat_request("r4", "r4"))
        [refused] = await frames_of(two, "r4")
        assert (refused["error"], refused["done"]) == (True, True)
        assert refused["body"].startswith(f"quota turns_per_minute: '{alice}' sent 3 chat requests in the last minute")

        for url in gateways:
            async with session.get(
                f"{url}/agents/journal/{alice}:three", headers={**UPGRADE, **bearer(alice)}
            ) as third:
                assert (third.status, third.headers["Retry-After"], await third.json()) == (
                    429,
                    "5",
                    {"error": f"'{alice}' has 2 sockets open already: close one (another tab) and connect again"},
                )

        async with session.ws_connect(f"{second}/agents/journal/{bob}", headers=bearer(bob)) as ws:
            await greeting(ws, WAIT_S)
            await ws.send_str(chat_request("b1", "mine"))
            assert answered(await frames_of(ws, "b1")) == "echo: mine"

    messages = await (await ta.get(Journal, f"{alice}:two")).get_messages()
    assert [m.parts[-1].text for m in messages] == ["r3", "echo: r3"]  # the refused r4 was never stored


async def test_a_turn_started_through_one_gateway_streams_to_the_users_socket_on_the_other(
    ray_runtime: Any, gateways: list[str]
) -> None:
    """alice has her agent open on both gateways; a chat request on gateway 1 streams its chunks, in the same
    order, to her socket on gateway 2 under the same request id, and both end with a completed done frame."""
    alice = user("alice")
    first, second = gateways
    path = f"/agents/journal/{alice}"
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(first + path, headers=bearer(alice)) as here,
        session.ws_connect(second + path, headers=bearer(alice)) as there,
    ):
        await greeting(here, WAIT_S)
        await greeting(there, WAIT_S)  # its gateway follows the agent's streams from now on
        await here.send_str(chat_request("r1", "across"))
        sent, relayed = await asyncio.gather(frames_of(here, "r1"), frames_of(there, "r1"))
    assert answered(sent) == answered(relayed) == "echo: across"
    assert chunks(relayed) == chunks(sent)
    assert chunks(sent)[0]["type"] == "start"


async def test_the_stored_user_message_carries_the_senders_principal_stamp(
    ray_runtime: Any, gateways: list[str]
) -> None:
    """A message alice sends through gateway 2 is stored with her principal (``metadata.turnMetadata``) in place
    of the admin stamp her client forged (the rest of the client's metadata stays); the agent's handle and either
    gateway's get-messages show it."""
    alice = user("alice")
    forged = {"turnMetadata": {"principal": {"id": "root", "roles": ["admin"]}}, "tab": 2}
    stamped = {"tab": 2, "channel": "web", "turnMetadata": {"principal": {"id": alice, "roles": []}}}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{gateways[1]}/agents/journal/{alice}", headers=bearer(alice)) as ws,
    ):
        await greeting(ws, WAIT_S)
        await ws.send_str(chat_request("r1", "who am I?", metadata=forged))
        assert answered(await frames_of(ws, "r1")) == "echo: who am I?"
        for url in gateways:
            async with session.get(f"{url}/agents/journal/{alice}/get-messages", headers=bearer(alice)) as response:
                messages = await response.json()
            assert [(m["role"], m.get("metadata")) for m in messages] == [("user", stamped), ("assistant", None)]
    [sent, _] = await (await ta.get(Journal, alice)).get_messages()
    assert sent.metadata == stamped
