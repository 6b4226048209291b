"""Run limits from a gateway's clients: a chat request's ``runLimits`` lowers the agent class's ``run_limits`` where
the server allows it (``Gateway(client_limits=True)``, ``serve --client-limits``), and is refused elsewhere."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_gateway import frames_until_done, greeting, request, user
from tree_agents import Lead

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory


class BudgetedLead(Lead):
    run_limits = ta.RunLimits(max_total_tokens=100_000, max_requests=5)


@pytest.fixture
async def gateway() -> AsyncIterator[Any]:
    clients: list[TestClient] = []

    async def make(**options: Any) -> TestClient:
        client = TestClient(
            TestServer(Gateway(LocalDirectory([BudgetedLead], store=ta.MemoryStore()), **options).app())
        )
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


def said(frames: list[dict[str, Any]]) -> str:
    """Everything the response frames carried (chunks as JSON text, an error frame's text as is)."""
    return " ".join(f["body"] for f in frames if f["type"] == "cf_agent_use_chat_response" and f.get("body"))


async def test_a_client_may_lower_its_budget_never_raise_it(gateway: Any) -> None:
    client = await gateway(client_limits=True)
    ws = await client.ws_connect("/agents/budgeted-lead/a1")
    await greeting(ws)
    # Lowered: 300 tokens stop the tree after the lead's and the researchers' first steps.
    await ws.send_str(request("r1", user("go", "u1"), runLimits={"max_total_tokens": 300}))
    assert "max_total_tokens limit (300)" in said(await frames_until_done(ws, "r1"))
    # Asking for more than the class allows gets the class's: max_requests stays 5 (a whole run needs 10).
    await ws.send_str(request("r2", user("again", "u2"), runLimits={"max_requests": 1000}))
    assert "max_requests limit (5)" in said(await frames_until_done(ws, "r2"))
    await ws.close()


async def test_run_limits_are_refused_where_the_server_does_not_take_them_and_when_malformed(gateway: Any) -> None:
    closed = await gateway()
    ws = await closed.ws_connect("/agents/budgeted-lead/b1")
    await greeting(ws)
    await ws.send_str(request("r1", user("go", "u1"), runLimits={"max_total_tokens": 300}))
    frame = json.loads((await ws.receive()).data)
    assert frame["error"] is True and "--client-limits" in frame["body"]
    open_ = await gateway(client_limits=True)
    ws2 = await open_.ws_connect("/agents/budgeted-lead/b2")
    await greeting(ws2)
    await ws2.send_str(request("r2", user("go", "u2"), runLimits={"max_total_tokens": -1, "tokens": 5}))
    frame = json.loads((await ws2.receive()).data)
    assert frame["error"] is True and "runLimits" in frame["body"]
    # Nothing of a refused request was stored.
    for client, name in ((closed, "b1"), (open_, "b2")):
        assert await (await client.get(f"/agents/budgeted-lead/{name}/get-messages")).json() == []
    await ws.close()
    await ws2.close()


def test_tightened_takes_the_smaller_of_each_field() -> None:
    mine = ta.RunLimits(max_total_tokens=300, max_requests=1000)
    theirs = ta.RunLimits(max_requests=5, timeout_s=60)
    assert mine.tightened(theirs) == ta.RunLimits(max_total_tokens=300, max_requests=5, timeout_s=60)
    assert mine.tightened(None) == mine
