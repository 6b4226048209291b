"""The chat page signing in, in a real browser: Debian's chromium, headless, driven by Playwright, against a
gateway with JWT authentication and ``OwnerRule`` on 127.0.0.1. alice gives her token in the page's settings, opens
her own conversation, sends a message and sees the reply; the conversation of bob is refused, and bob's agent is
neither created nor read.

Chromium comes from Debian's package (``.ci/run`` installs it); without it the test is skipped on a developer's
machine and fails under CI (as ``tests/test_chat_page.py``).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from gateway_app import EchoModel

import think_actors as ta
from think_actors.gateway import Gateway, JWTAuth, LocalDirectory, OwnerRule

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / ".test-artifacts"
SECRET = "chat-page-login-secret-" + "k" * 32

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing: .ci/run installs Debian's chromium package for the browser test")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

playwright_api = pytest.importorskip("playwright.async_api")


class Diary(ta.Think):
    """The agent class the page talks to (its model, an echo, comes from the directory's options)."""


class WatchedDirectory(LocalDirectory):
    """A LocalDirectory that records every agent it is asked to find or start, as ``class/name``."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    async def get(self, slug: str, name: str) -> Any:
        self.asked.append(f"{slug}/{name}")
        return await super().get(slug, name)

    async def find(self, slug: str, name: str) -> Any | None:
        self.asked.append(f"{slug}/{name}")
        return await super().find(slug, name)


def token(sub: str, roles: list[str] | None = None) -> str:
    claims: dict[str, Any] = {"sub": sub, "exp": int(time.time()) + 3600}
    if roles:
        claims["roles"] = roles
    return jwt.encode(claims, SECRET, "HS256")


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[tuple[str, WatchedDirectory]]:
    directory = WatchedDirectory([Diary], model=EchoModel(), data_dir=str(tmp_path))
    gateway = Gateway(directory, authenticate=JWTAuth(algorithms=["HS256"], key=SECRET), authorize=OwnerRule())
    runner = web.AppRunner(gateway.app())
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/", directory
    finally:
        await runner.cleanup()


# Every text the status line shows from now on, in order (a closing socket's handler may write after a new one's).
RECORD_STATUS = """() => {
  window.statuses = [];
  const status = document.getElementById("status");
  new MutationObserver(() => window.statuses.push(status.textContent))
    .observe(status, {childList: true, characterData: true, subtree: true});
}"""
OPENED = "['connected', 'refused']"


@pytest.fixture
async def page(site: tuple[str, WatchedDirectory]) -> AsyncIterator[Any]:
    """The chat page of ``site`` in headless chromium, after its first socket (it has no token yet) was refused."""
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = await browser.new_page()
            await page.goto(site[0])
            # Unauthenticated, /healthz lists no class and the page's first socket is refused.
            await page.wait_for_function("document.getElementById('status').textContent.startsWith('refused')")
            assert await page.locator("#agent-class option").count() == 0
            yield page
        finally:
            await browser.close()


def refused(name: str) -> str:
    """What the page's status line says when the socket to ``name`` was refused."""
    return f"refused: check your token, and that {name} is yours"


async def open_conversation(page: Any, *, name: str | None = None, token: str | None = None) -> str:
    """Fill the settings given and click Open; the status that says how the new socket went (connected or
    refused; a "disconnected" from the socket it replaced is skipped)."""
    await page.evaluate(RECORD_STATUS)
    if token is not None:
        await page.fill("#token", token)
    if name is not None:
        await page.fill("#conversation", name)
    await page.click("#connect")
    outcome = f"window.statuses.find((s) => {OPENED}.some((w) => s.startsWith(w)))"
    await page.wait_for_function(f"{outcome} !== undefined")
    said: str = await page.evaluate(outcome)
    return said


@pytest.mark.timeout(120)
async def test_open_with_a_token_connects_to_the_conversation_typed_with_it(page: Any) -> None:
    """A user who types her token and her conversation's name, then clicks Open, is connected to that
    conversation."""
    assert await open_conversation(page, name="alice", token=token("alice")) == "connected to diary/alice"


@pytest.mark.timeout(120)
async def test_a_user_signs_in_with_a_token_chats_with_her_agent_and_is_refused_anothers(
    page: Any, site: tuple[str, WatchedDirectory]
) -> None:
    """alice gives her token in the page's token field and Opens (the page's conversation, "default", is not hers:
    refused), then sets the conversation to "alice" and Opens: connected, and a message gets its echo. Opening
    bob's conversation is refused (the status line says so; the transcript shown is still alice's); the gateway
    never asked its directory for bob's agent, and an admin's read afterwards finds that it never ran."""
    url, directory = site
    assert await open_conversation(page, token=token("alice")) == refused("default")
    assert await page.input_value("#token") == ""  # kept in the page's cookie, not in the field
    assert await page.locator("#agent-class option").all_inner_texts() == ["diary"]  # /healthz knows her now

    assert await open_conversation(page, name="alice") == "connected to diary/alice"
    await page.fill("#input", "hello from alice")
    await page.click("#send")
    await page.locator(".message.assistant", has_text="echo: hello from alice").wait_for()

    assert await open_conversation(page, name="bob") == refused("bob")
    assert "connected to diary/bob" not in await page.evaluate("window.statuses")
    log = await page.locator("#log").inner_text()
    assert "hello from alice" in log and "echo: hello from alice" in log
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / "chat-page-login.png"), full_page=True)

    assert directory.asked.count("diary/bob") == 0
    assert set(directory.asked) == {"diary/alice"}
    headers = {"Authorization": f"Bearer {token('root', ['admin'])}"}
    async with aiohttp.ClientSession() as session:
        async with session.get(f"{url}agents/diary/bob/get-messages", headers=headers) as response:
            assert (response.status, await response.json()) == (
                404,
                {"error": "no agent diary/bob here: it never ran (a chat over its WebSocket starts it)"},
            )
        async with session.get(f"{url}agents/diary/alice/get-messages", headers=headers) as response:
            transcript = await response.json()
    assert [(m["role"], m["parts"][-1]["text"]) for m in transcript] == [
        ("user", "hello from alice"),
        ("assistant", "echo: hello from alice"),
    ]
    assert transcript[0]["metadata"]["turnMetadata"] == {"principal": {"id": "alice", "roles": []}}
