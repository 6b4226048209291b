"""The chat page in a real browser: Debian's chromium, headless, driven by Playwright, against the gateway on
127.0.0.1. Sends a message, sees the streamed answer and a server tool call, approves an approval-gated tool,
reloads while the answer streams and sees it resume. The screenshot is kept in ``.test-artifacts/``.

Chromium comes from Debian's package (``.ci/run`` installs it); without it the test is skipped on a developer's
machine and fails under CI.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / ".test-artifacts"

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing: .ci/run installs Debian's chromium package for the browser test")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

playwright_api = pytest.importorskip("playwright.async_api")


class Shopkeeper(ta.Think):
    @ta.tool
    async def lookup(self, item: str) -> dict[str, Any]:
        """Look an item up."""
        return {"item": item, "price": 5}

    @ta.tool(needs_approval=True)
    async def charge(self, amount: int) -> str:
        """Charge the card."""
        return f"charged {amount}"


@pytest.fixture
async def site() -> AsyncIterator[str]:
    model = ScriptedModel(
        [
            step(text("Let me check. "), tool_call("lookup", {"item": "tea"}, id="call-lookup")),
            tool_call("charge", {"amount": 5}, id="call-charge"),
            step(text("Paid. "), delay(2.0), text("Your receipt follows.")),
        ]
    )
    gateway = Gateway(LocalDirectory([Shopkeeper], model=model, store=ta.MemoryStore()))
    runner = web.AppRunner(gateway.app())
    await runner.setup()
    tcp = web.TCPSite(runner, "127.0.0.1", 0)
    await tcp.start()
    port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()


@pytest.mark.timeout(120)
async def test_the_page_streams_shows_tools_approves_and_resumes_after_a_reload(site: str) -> None:
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = await browser.new_page()
            await page.goto(site)
            await page.wait_for_function("document.getElementById('status').textContent.startsWith('connected')")
            await page.fill("#input", "I would like tea")
            await page.click("#send")

            lookup = page.locator(".tool[data-tool-call='call-lookup']")
            await lookup.locator("text=output-available").wait_for()
            assert '"price": 5' in await lookup.inner_text()
            assert "Let me check." in await page.locator("#log").inner_text()

            approve = page.locator(".tool[data-tool-call='call-charge'] button.approve")
            await approve.wait_for()
            await approve.click()
            await page.locator("text=Paid.").wait_for()
            await page.reload()  # mid-stream: the rest of the answer is still two seconds away
            await page.locator("text=Your receipt follows.").wait_for(timeout=15_000)

            log = await page.locator("#log").inner_text()
            assert "charged 5" in log
            assert "I would like tea" in log
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "chat-page.png"), full_page=True)
        finally:
            await browser.close()
