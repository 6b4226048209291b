"""The docs site: it builds with ``mkdocs build --strict`` (what ``make docs`` runs: a broken link or anchor, a page
missing from the nav or an API reference that does not resolve fails it), the API reference covers every public
name, and the built pages load in headless chromium without a console error.

Chromium is Debian's package (``.ci/run`` installs it); without it the browser test is skipped on a developer's
machine and fails under CI, as the chat page's test does.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import think_actors as ta
from think_actors import errors

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
MODULES = {"logs", "mcp", "metrics", "schedule", "testing", "__version__"}  # documented by their members


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    mkdocs = Path(sys.executable).with_name("mkdocs")
    built = subprocess.run(
        [str(mkdocs), "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert built.returncode == 0, f"mkdocs build --strict failed:\n{built.stderr[-4000:]}"
    return out


def test_the_api_reference_covers_every_public_name() -> None:
    targets = set()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        targets |= set(re.findall(r"^::: ([\w.]+)", page.read_text(), flags=re.MULTILINE))
    documented = {target.rsplit(".", 1)[-1] for target in targets}
    if "think_actors.errors" in targets:
        documented |= set(errors.__all__)
    assert sorted(set(ta.__all__) - MODULES - documented) == []


def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "agents" / "index.html").is_file()


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def chromium() -> str:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            raise RuntimeError("chromium is missing: .ci/run installs Debian's chromium package for the browser tests")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture
def pages() -> list[str]:
    """Home, a concept, an API page, troubleshooting and the first guide (the guides may not all exist yet)."""
    guides = sorted((ROOT / "docs" / "guides").glob("*.md"))
    pages = ["", "getting-started/", "concepts/hooks/", "reference/agents/", "troubleshooting/"]
    return pages + ([f"guides/{guides[0].stem}/"] if guides else [])


@pytest.mark.timeout(180)
async def test_the_pages_load_in_chromium_without_errors(served: str, chromium: str, pages: list[str]) -> None:
    playwright_api = pytest.importorskip("playwright.async_api")
    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=chromium, headless=True, args=args)
        try:
            page = await browser.new_page()
            problems: list[str] = []
            page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
            for path in pages:
                response = await page.goto(served + path, wait_until="networkidle")
                assert response is not None and response.status == 200, path
                assert problems == [], (path, problems)

            await page.goto(served + "reference/agents/", wait_until="networkidle")
            chat = page.locator('[id="think_actors.Think.chat"]')
            assert await chat.count() == 1
            assert "chat" in await chat.inner_text()
            assert await page.locator('[id="think_actors.Think.before_tool_call"]').count() == 1  # inherited hooks

            # The search index loads in a web worker; a query typed before it is ready gets no answer, so type it
            # again until one comes (on a loaded machine the index takes seconds).
            search = page.locator("input.md-search__input")
            for _ in range(12):
                await search.fill("")
                await search.focus()
                await page.keyboard.type("before_tool_call")  # key by key, as a reader types
                try:
                    await page.wait_for_selector(".md-search-result__item", timeout=5_000)
                    break
                except playwright_api.TimeoutError:
                    continue
            assert await page.locator(".md-search-result__item").count() > 0, "the site's search never answered"
            assert problems == []
        finally:
            await browser.close()
