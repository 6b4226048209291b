"""The gateway's HTTP side under attack: pages of other sites (and DNS rebinding), reads that would create agents,
tokens of odd bytes, and the token in logs and in ``/healthz`` (issue 16, items 15-18)."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from gateway_app import EchoModel
from helpers import greeting, open_test_store

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.gateway.cli import main
from think_actors.gateway.security import redact
from think_actors.store.postgres import close_pools
from think_actors.testing import ScriptedModel

EVIL = "https://evil.example"


class Helper(ta.Think):
    pass


def chat_request(request_id: str, words: str) -> str:
    body = {"messages": [{"id": f"u-{request_id}", "role": "user", "parts": [{"type": "text", "text": words}]}]}
    return json.dumps(
        {"type": "cf_agent_use_chat_request", "id": request_id, "init": {"method": "POST", "body": json.dumps(body)}}
    )


async def chat(client: TestClient, path: str, words: str) -> None:
    """One chat over the agent's WebSocket, to its ``done`` frame."""
    async with client.ws_connect(path) as ws:
        await greeting(ws)
        await ws.send_str(chat_request("r1", words))
        while True:
            frame = json.loads((await asyncio.wait_for(ws.receive(), 10)).data)
            if frame["type"] == "cf_agent_use_chat_response" and frame["done"]:
                return


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    clients: list[TestClient] = []

    async def make(directory: LocalDirectory | None = None, **options: Any) -> TestClient:
        directory = directory or LocalDirectory([Helper], model=EchoModel(), store=ta.MemoryStore())
        client = TestClient(TestServer(Gateway(directory, **options).app()))
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def raw_request(client: TestClient, head: bytes) -> tuple[int, bytes]:
    """Send ``head`` (request line and headers, any bytes) and return the status and body of the answer."""
    assert client.port is not None
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    try:
        writer.write(head + b"\r\n\r\n" if not head.endswith(b"\r\n\r\n") else head)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        length = 0
        while (line := await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        body = await asyncio.wait_for(reader.readexactly(length), 10)
    finally:
        writer.close()
    return int(status_line.split()[1]), body


def files(directory: Path) -> list[str]:
    """The files under ``directory`` (directories left out), relative to it."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


# -- 15: pages of other sites --------------------------------------------------------------------------------------


async def test_a_page_of_another_site_is_refused_on_the_socket_and_every_route(serve: Any) -> None:
    client = await serve()
    own = f"http://127.0.0.1:{client.port}"
    await chat(client, "/agents/helper/c", "hi")  # a client without Origin (Node, Python) is served

    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await client.ws_connect("/agents/helper/c", headers={"Origin": EVIL})
    assert refused.value.status == 403
    response = await client.get("/agents/helper/c/get-messages", headers={"Origin": EVIL})
    assert response.status == 403
    error = (await response.json())["error"]
    assert f"think-actors serve --origin {EVIL}" in error and "Gateway(allowed_origins=[...])" in error
    assert (await client.get("/", headers={"Origin": EVIL})).status == 403
    assert await (await client.get("/healthz", headers={"Origin": EVIL})).json() == {"ok": True}

    # The gateway's own pages: the origin of the Host they were served from.
    async with client.ws_connect("/agents/helper/c", headers={"Origin": own}) as ws:
        assert [m["role"] for m in (await greeting(ws))["messages"]] == ["user", "assistant"]
    assert (await client.get("/agents/helper/c/get-messages", headers={"Origin": own})).status == 200


async def test_a_request_a_browser_marks_as_another_sites_is_refused_unless_it_is_a_top_level_navigation(
    serve: Any,
) -> None:
    """A no-cors GET (an <img>, fetch with mode "no-cors") sends no Origin; Sec-Fetch-Site still names its site."""
    client = await serve()
    await chat(client, "/agents/helper/c", "hi")
    marked = {
        ("cross-site", "no-cors", "image"): 403,
        ("same-site", "no-cors", "empty"): 403,  # another port of 127.0.0.1 is the same site
        ("cross-site", "navigate", "iframe"): 403,  # the chat page framed by another site
        ("cross-site", "navigate", "document"): 200,  # a link to it
        ("same-origin", "cors", "empty"): 200,
        ("none", "navigate", "document"): 200,  # typed into the address bar
    }
    for (site, mode, dest), status in marked.items():
        headers = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": dest}
        for path in ("/", "/agents/helper/c/get-messages"):
            response = await client.get(path, headers=headers)
            assert response.status == status, (site, mode, dest, path)


async def test_the_origin_must_match_the_host_in_scheme_host_and_port(serve: Any) -> None:
    client = await serve()
    await chat(client, "/agents/helper/c", "hi")
    port = client.port
    assert port is not None
    for origin in (
        f"https://127.0.0.1:{port}",  # another scheme
        f"http://127.0.0.1:{port + 1}",  # another port
        f"http://localhost:{port}",  # another host than the one in Host
        "http://127.0.0.1",  # port 80
        "null",  # a sandboxed or file:// page
        f"http://127.0.0.1:{port}/page",  # not an origin at all
        "\udcff",  # bytes that are not UTF-8
    ):
        response = await client.get("/agents/helper/c/get-messages", headers={"Origin": origin})
        assert response.status == 403, origin
    same = await client.get("/agents/helper/c/get-messages", headers={"Origin": f"http://127.0.0.1:{port}"})
    assert same.status == 200
    localhost = {"Origin": f"http://localhost:{port}", "Host": f"localhost:{port}"}
    assert (await client.get("/agents/helper/c/get-messages", headers=localhost)).status == 200


async def test_listed_origins_may_use_the_gateway_and_a_bad_one_is_refused_at_start(serve: Any) -> None:
    client = await serve(allowed_origins=["http://localhost:5173", "https://App.Example/"])
    await chat(client, "/agents/helper/c", "hi")
    for origin in ("http://localhost:5173", "https://app.example", "https://app.example:443"):
        async with client.ws_connect("/agents/helper/c", headers={"Origin": origin}) as ws:
            assert (await greeting(ws))["type"] == "cf_agent_chat_messages"
    assert (
        await client.get("/agents/helper/c/get-messages", headers={"Origin": "http://localhost:5174"})
    ).status == 403

    with pytest.raises(ta.ConfigurationError, match="give scheme://host\\[:port\\]"):
        Gateway(LocalDirectory([Helper]), allowed_origins=["app.example"])
    assert main(["serve", "--local", "--app", "gateway_app", "--origin", "app.example", "--port", "1"]) == 2


async def test_without_a_token_only_requests_for_a_loopback_host_are_served(serve: Any) -> None:
    """DNS rebinding: a page whose domain now points at 127.0.0.1 is same-origin with itself, and its GETs send no
    Origin; only the Host header still names its domain."""
    client = await serve()
    await chat(client, "/agents/helper/c", "hi")
    port = client.port
    rebound = {"Host": f"evil.example:{port}"}
    response = await client.get("/agents/helper/c/get-messages", headers=rebound)
    assert response.status == 403 and "serve with --token" in (await response.json())["error"]
    with_origin = {**rebound, "Origin": f"http://evil.example:{port}"}
    assert (await client.get("/agents/helper/c/get-messages", headers=with_origin)).status == 403
    with pytest.raises(aiohttp.WSServerHandshakeError):
        await client.ws_connect("/agents/helper/c", headers=with_origin)
    for host in (f"localhost:{port}", f"127.0.0.2:{port}", f"[::1]:{port}", f"app.localhost:{port}"):
        assert (await client.get("/agents/helper/c/get-messages", headers={"Host": host})).status == 200, host

    listed = await serve(allowed_origins=[f"http://chat.example:{port}"])
    await chat(listed, "/agents/helper/d", "hi")
    assert (await listed.get("/agents/helper/d/get-messages", headers={"Host": "chat.example"})).status == 200
    # With a token the page would need the token, which a rebinding page cannot have: Host is not checked.
    tokened = await serve(token="s3cret")
    await chat(tokened, "/agents/helper/e?token=s3cret", "hi")
    answer = await tokened.get("/agents/helper/e/get-messages?token=s3cret", headers=rebound)
    assert answer.status == 200


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
ATTACK = """<!doctype html><script>
const socket = new WebSocket("ws://127.0.0.1:PORT/agents/helper/c");
socket.onopen = () => { document.title = "open"; };
socket.onerror = () => { document.title = "refused"; };
fetch("http://127.0.0.1:PORT/agents/helper/c/get-messages", {mode: "no-cors"}).catch(() => {});
</script>"""


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (apt-get install chromium)")
@pytest.mark.timeout(120)
async def test_in_a_browser_another_site_and_a_rebound_domain_cannot_use_the_gateway(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    playwright_api = pytest.importorskip("playwright.async_api")
    caplog.set_level(logging.INFO, logger="aiohttp.access")
    client = await serve()
    await chat(client, "/agents/helper/c", "hi")
    attack = web.Application()
    attack.router.add_get(
        "/", lambda _: web.Response(text=ATTACK.replace("PORT", str(client.port)), content_type="text/html")
    )
    site = TestServer(attack)
    await site.start_server()
    # The rebound domain: evil.test resolves to 127.0.0.1, as a DNS-rebinding page's own domain comes to.
    args = [*BROWSER_ARGS, "--host-resolver-rules=MAP evil.test 127.0.0.1"]
    try:
        async with playwright_api.async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
            try:
                page = await browser.new_page()
                await page.goto(f"http://127.0.0.1:{site.port}/")
                await page.wait_for_function("document.title === 'open' || document.title === 'refused'")
                assert await page.title() == "refused"
                rebound = await page.goto(f"http://evil.test:{client.port}/")
                assert rebound is not None and rebound.status == 403
                own = await page.goto(f"http://127.0.0.1:{client.port}/")  # the gateway's own page still loads
                assert own is not None and own.status == 200
            finally:
                await browser.close()
    finally:
        await site.close()
    await client.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "aiohttp.access"]
    assert any('"GET /agents/helper/c HTTP/1.1" 403' in line for line in lines), lines
    assert any('"GET /agents/helper/c/get-messages HTTP/1.1" 403' in line for line in lines), lines


# -- 16: reads never create agents ---------------------------------------------------------------------------------


async def test_a_read_of_an_agent_that_never_ran_is_a_404_and_creates_nothing(serve: Any, tmp_path: Path) -> None:
    client = await serve(LocalDirectory([Helper], model=EchoModel(), data_dir=str(tmp_path)))
    response = await client.get("/agents/helper/nobody/get-messages")
    assert response.status == 404
    assert await response.json() == {
        "error": "no agent helper/nobody here: it never ran (a chat over its WebSocket starts it)"
    }
    assert files(tmp_path) == []
    unknown_class = await client.get("/agents/nobody/x/get-messages")
    assert unknown_class.status == 404
    assert await unknown_class.json() == {"error": "no agent class 'nobody' here; the classes are: helper"}

    await chat(client, "/agents/helper/talked", "hello")  # a chat creates the agent, as before
    assert {f.split(".db")[0] for f in files(tmp_path)} == {"helper/talked"}  # with its -wal and -shm
    messages = await (await client.get("/agents/helper/talked/get-messages")).json()
    assert [m["parts"][-1]["text"] for m in messages] == ["hello", "echo: hello"]
    assert (await client.get("/agents/helper/nobody/get-messages")).status == 404

    # A restarted gateway finds the agent in its store.
    restarted = await serve(LocalDirectory([Helper], model=ScriptedModel(), data_dir=str(tmp_path)))
    again = await (await restarted.get("/agents/helper/talked/get-messages")).json()
    assert [m["parts"][-1]["text"] for m in again] == ["hello", "echo: hello"]
    assert (await restarted.get("/agents/helper/nobody/get-messages")).status == 404
    assert {f.split(".db")[0] for f in files(tmp_path)} == {"helper/talked"}  # with its -wal and -shm


async def test_a_store_says_whether_its_agent_exists_without_creating_it(store_location: tuple[str, str]) -> None:
    kind, where = store_location
    store = open_test_store(kind, where, agent="helper/a")
    try:
        assert await store.exists() is False
        assert await store.exists() is False  # asking created nothing
        if kind == "sqlite":
            assert files(Path(where).parent) == []
        assert await store.load_messages() == []  # the first use creates the agent's file or rows
        assert await store.exists() is True
        if kind != "memory":  # a second store of the same agent (another process, a restart) sees it too
            other = open_test_store(kind, where, agent="helper/a")
            assert await other.exists() is True
            await other.close()
        if kind == "postgres":  # asking claimed no lease: the first store still owns the agent
            stranger = open_test_store(kind, where, agent="helper/b")
            assert await stranger.exists() is False
            await store.set_kv("k", 1)
            assert await store.get_kv("k") == 1
            await stranger.close()
    finally:
        await store.close()
        await close_pools()


# -- 17: tokens of odd bytes ---------------------------------------------------------------------------------------


async def test_tokens_of_odd_bytes_are_wrong_tokens_never_server_errors(serve: Any) -> None:
    client = await serve(token="tök\u00e9n")
    await chat(client, "/agents/helper/c?token=t%C3%B6k%C3%A9n", "hi")
    path = b"/agents/helper/c/get-messages"
    for head in (
        b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff",
        b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\xf6k\xe9n",  # latin-1, not UTF-8
        b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: \xff\xfe",
        b"GET " + path + b"?token=%FF HTTP/1.1\r\nHost: x",
        b"GET " + path + b"?token=%ED%A0%80 HTTP/1.1\r\nHost: x",  # an encoded UTF-16 surrogate
        b"GET " + path + b"?token=t%C3%B6k%C3%A9n%00 HTTP/1.1\r\nHost: x",
        b"GET /healthz?token=%FF HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff",
    ):
        status, body = await raw_request(client, head)
        assert status == (200 if head.startswith(b"GET /healthz") else 401), (head, body)
    status, body = await raw_request(client, b"GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff")
    assert (status, json.loads(body)) == (200, {"ok": True})
    # Raw bytes in the query are refused by aiohttp's parser before the gateway sees them.
    status, _ = await raw_request(client, b"GET " + path + b"?token=\xff HTTP/1.1\r\nHost: x")
    assert status == 400
    # The token's own bytes, as UTF-8 in the header or percent-encoded in the query, are the token.
    status, _ = await raw_request(
        client, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\xc3\xb6k\xc3\xa9n"
    )
    assert status == 200
    assert (await client.get(path.decode() + "?token=t%C3%B6k%C3%A9n")).status == 200


async def test_an_odd_websocket_protocol_header_neither_carries_a_token_nor_breaks_the_upgrade(serve: Any) -> None:
    """The gateway takes no token from Sec-WebSocket-Protocol; odd bytes there change nothing."""
    client = await serve(token="s3cret")
    upgrade = (
        b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: \xff, s3cret\r\nHost: x"
    )
    status, _ = await raw_request(client, b"GET /agents/helper/c HTTP/1.1\r\n" + upgrade)
    assert status == 401
    status, _ = await raw_request(client, b"GET /agents/helper/c?token=s3cret HTTP/1.1\r\n" + upgrade)
    assert status == 101


# -- 18: the token in logs and in /healthz -------------------------------------------------------------------------


async def test_the_token_never_reaches_the_logs(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = await serve(token="s3cret")
    await chat(client, "/agents/helper/c?token=s3cret", "hi")
    port = client.port
    referer = {"Referer": f"http://127.0.0.1:{port}/?lang=en&token=s3cret"}
    assert (await client.get("/agents/helper/c/get-messages?token=s3cret", headers=referer)).status == 200
    status, _ = await raw_request(client, b"GET /agents/helper/c/get-messages?a=1&%74oken=s3cret HTTP/1.1\r\nHost: x")
    assert status == 200  # aiohttp reads the key as "token"
    assert (await client.get("/agents/helper/c/get-messages", headers={"Authorization": "Bearer s3cret"})).status == 200
    # A request line aiohttp cannot parse is logged with its traceback, which quotes the line.
    status, _ = await raw_request(client, b"GET /agents/helper/c/get-messages?token=s3cret\xff HTTP/1.1\r\nHost: x")
    assert status == 400
    await client.close()  # the access log of the socket is written when it closes

    access = [r for r in caplog.records if r.name == "aiohttp.access"]
    lines = [r.getMessage() for r in access]
    assert any('"GET /agents/helper/c?token=*** HTTP/1.1" 101' in line for line in lines), lines
    assert any(f'"http://127.0.0.1:{port}/?lang=en&token=***"' in line for line in lines), lines
    assert any("?a=1&%74oken=*** HTTP/1.1" in line for line in lines), lines
    assert all(r.first_request_line.count("s3cret") == 0 for r in access)  # type: ignore[attr-defined]
    server = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert any("Invalid char in url query" in (r.exc_text or "") and "token=***" in (r.exc_text or "") for r in server)
    assert "s3cret" not in caplog.text
    assert all("s3cret" not in logging.Formatter().format(r) for r in caplog.records)


def test_redaction_hides_token_values_and_bearer_credentials_only() -> None:
    assert redact('"GET /a?token=abc&b=2 HTTP/1.1"') == '"GET /a?token=***&b=2 HTTP/1.1"'
    assert redact("/a?b=token&token=x%20y#frag") == "/a?b=token&token=***#frag"
    assert redact("/a?TOKEN=abc&%74oken=def&t%6Fken=ghi&tokens=keep") == (
        "/a?TOKEN=***&%74oken=***&t%6Fken=***&tokens=keep"
    )
    assert redact("b'GET /a?token=s3cret\\xff HTTP/1.1'") == "b'GET /a?token=*** HTTP/1.1'"
    assert redact("Authorization: Bearer s3cret, bearer  other") == "Authorization: Bearer ***, bearer  ***"
    assert redact("no secrets here: token = plain words") == "no secrets here: token = plain words"


async def test_healthz_lists_the_classes_only_to_who_may_use_the_gateway(serve: Any) -> None:
    tokened = await serve(token="s3cret")
    assert await (await tokened.get("/healthz")).json() == {"ok": True}
    assert await (await tokened.get("/healthz?token=wrong")).json() == {"ok": True}
    assert await (await tokened.get("/healthz?token=s3cret")).json() == {"ok": True, "classes": ["helper"]}
    bearer = {"Authorization": "Bearer s3cret"}
    assert await (await tokened.get("/healthz", headers=bearer)).json() == {"ok": True, "classes": ["helper"]}
    # The chat page asks for them with the ?token= of its own URL, from its own origin.
    own = {"Origin": f"http://127.0.0.1:{tokened.port}"}
    health = await tokened.get("/healthz?token=s3cret", headers=own)
    assert await health.json() == {"ok": True, "classes": ["helper"]}
    open_ = await serve()
    assert await (await open_.get("/healthz")).json() == {"ok": True, "classes": ["helper"]}
    assert await (await open_.get("/healthz", headers={"Origin": EVIL})).json() == {"ok": True}
    assert await (await open_.get("/healthz", headers={"Host": "evil.example"})).json() == {"ok": True}


@pytest.mark.parametrize("path", ["/agents/helper/a/get-messages", "/agents/helper/a", "/mcp"])
async def test_a_401_carries_a_bearer_challenge_and_says_when_the_token_sent_was_wrong(serve: Any, path: str) -> None:
    # RFC 6750 §3: a client told 401 learns the scheme to use, and whether the token it sent was refused.
    client = await serve(token="s3cret", mcp=True)
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13"}
    upgrade["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ=="
    headers = upgrade if path == "/agents/helper/a" else {}
    cases = [
        ({}, "", "Bearer"),
        ({"Authorization": "Bearer wrong"}, "", 'Bearer error="invalid_token"'),
        ({}, "?token=wrong", 'Bearer error="invalid_token"'),
    ]
    for extra, query, challenge in cases:
        response = await client.get(path + query, headers={**headers, **extra})
        assert response.status == 401, (path, extra, query)
        assert response.headers["WWW-Authenticate"] == challenge, (path, extra, query)
    right = await client.get(path + "?token=s3cret", headers=headers)
    assert right.status != 401 and "WWW-Authenticate" not in right.headers


async def test_the_chat_page_loads_without_a_token_and_holds_no_agent_data(serve: Any) -> None:
    # The page is static HTML and script: a user gives it their token in its settings (a cookie), and every
    # request it then makes (the socket, get-messages, /healthz's classes) is checked as any other.
    client = await serve(token="s3cret")
    page = await client.get("/")
    assert page.status == 200
    text = await page.text()
    assert "s3cret" not in text and "helper" not in text
    assert (await (await client.get("/healthz")).json()) == {"ok": True}
    assert (await client.get("/agents/helper/a/get-messages")).status == 401
