"""End to end: the demo's research team on Ray arrives in a real trace backend, Arize Phoenix, as one trace.

The test starts Phoenix itself (``phoenix serve`` from ``.venv-phoenix``, which ``make test`` creates from
``requirements/phoenix.txt``; its own venv because Phoenix is ~850 MB with its own stack), points every agent
actor's OTLP/HTTP exporter at it with ``ta.init(tracing=...)``, runs the demo's lead (which fans out to two
researchers, each searching the library through its MCP server), and reads the spans back through Phoenix's REST
API (``GET /v1/projects/{project}/spans``). With ``THINK_ACTORS_TRACE_SCREENSHOT=path.png`` set it also saves a
picture of the trace in Phoenix's own page, taken in headless chromium (the README's picture is made this way).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import free_port

import think_actors as ta
from agents.team import Lead

ROOT = Path(__file__).resolve().parents[2]
PHOENIX = Path(os.environ.get("THINK_ACTORS_PHOENIX") or ROOT / ".venv-phoenix" / "bin" / "phoenix")
PROJECT = "think-actors-e2e"
START_S = (
    300  # Phoenix migrates its database and imports its whole stack before it listens (≈20 s idle, ≈100 s at load 30)
)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def phoenix() -> Iterator[str]:
    """A Phoenix server on a free loopback port with a throwaway database; its base URL."""
    if not PHOENIX.exists():
        message = f"{PHOENIX} is missing: `make test` creates .venv-phoenix from requirements/phoenix.txt"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    work = tempfile.mkdtemp(prefix="think-actors-phoenix-")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
    env.update(
        PHOENIX_WORKING_DIR=work,
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_TELEMETRY_ENABLED="false",
    )
    log = open(Path(work) / "phoenix.log", "wb")  # noqa: SIM115 - open for the server's whole life
    server = subprocess.Popen([str(PHOENIX), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_S
        while True:
            if server.poll() is not None:
                raise AssertionError(f"phoenix exited with {server.returncode}: see {work}/phoenix.log")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError(f"phoenix did not answer in {START_S} s: see {work}/phoenix.log")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def _attribute(span: dict[str, Any], dotted: str) -> Any:
    """An attribute as Phoenix returns it: flat (``"gen_ai.agent.name"``) or nested by its dots."""
    attributes = span["attributes"]
    if dotted in attributes:
        return attributes[dotted]
    value: Any = attributes
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _tree(spans: list[dict[str, Any]], root: dict[str, Any]) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []

    def walk(span: dict[str, Any], depth: int) -> None:
        out.append((depth, span["name"]))
        children = [s for s in spans if s.get("parent_id") == span["context"]["span_id"]]
        for child in sorted(children, key=lambda s: (s["name"], s["start_time"])):
            walk(child, depth + 1)

    walk(root, 0)
    return out


async def _spans(url: str, expected: int, timeout_s: float = 60) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    spans: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(urllib.error.HTTPError):  # 404 until the project's first span arrives
            spans = (await asyncio.to_thread(_get, f"{url}/v1/projects/{PROJECT}/spans?limit=1000"))["data"]
            if len(spans) >= expected:
                return spans
        await asyncio.sleep(0.5)
    raise AssertionError(f"Phoenix holds {len(spans)} spans of {expected}: {[s['name'] for s in spans]}")


@pytest.mark.timeout(600)
async def test_the_demo_team_on_ray_arrives_in_phoenix_as_one_trace(
    phoenix: str, ray_runtime: Any, unique: str
) -> None:
    same = {"num_cpus": 2, "data_dir": ray_runtime.data_dir, "model_pool_size": ray_runtime.model_pool_size}
    config = ta.TracingConfig(
        endpoint=f"{phoenix}/v1/traces", export_delay_ms=100, resource={"openinference.project.name": PROJECT}
    )
    ta.init(**same, tracing=config)
    try:
        lead = await ta.spawn(Lead, unique)
        chunks = await lead.chat("Compare Ray actors and asyncio").collect()
    finally:
        ta.init(**same, tracing=False)
    assert chunks[-1].type == "finish"

    researchers = 2  # the scripted lead asks two researchers, in one step
    expected = (1 + 2 + researchers) + researchers * (1 + 2 + 1)
    spans = await _spans(phoenix, expected)
    roots = [s for s in spans if not s.get("parent_id")]
    assert [r["name"] for r in roots] == ["invoke_agent Lead"]
    (root,) = roots
    assert {s["context"]["trace_id"] for s in spans} == {root["context"]["trace_id"]}  # one trace
    research = [
        (1, "execute_tool researcher"),
        (2, "invoke_agent Researcher"),
        (3, "chat scripted-researcher"),
        (3, "chat scripted-researcher"),
        (3, "execute_tool library_search"),
    ]
    assert _tree(spans, root) == [
        (0, "invoke_agent Lead"),
        (1, "chat scripted-lead"),
        (1, "chat scripted-lead"),
        *research * researchers,
    ]
    assert _attribute(root, "gen_ai.operation.name") == "invoke_agent"
    assert _attribute(root, "gen_ai.agent.id") == lead.path
    assert _attribute(root, "think_actors.status") == "completed"
    children = [s for s in spans if s["name"] == "invoke_agent Researcher"]
    assert (
        sorted(_attribute(s, "think_actors.agent.path").rsplit("/", 1)[0] for s in children)
        == [f"{lead.path}/researcher"] * researchers
    )
    searches = [s for s in spans if s["name"] == "execute_tool library_search"]
    assert all(_attribute(s, "gen_ai.tool.name") == "library_search" for s in searches)
    assert all(s["status_code"] != "ERROR" for s in spans)

    if os.environ.get("THINK_ACTORS_TRACE_SCREENSHOT"):
        await asyncio.to_thread(_screenshot, phoenix, root["context"]["trace_id"])


def _screenshot(url: str, trace_id: str) -> None:
    """Phoenix's page of the trace, in headless chromium, saved where THINK_ACTORS_TRACE_SCREENSHOT says."""
    from playwright.sync_api import sync_playwright

    project_id = next(p["id"] for p in _get(f"{url}/v1/projects")["data"] if p["name"] == PROJECT)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium",
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 800})
        page.goto(f"{url}/projects/{project_id}/traces/{trace_id}", wait_until="networkidle")
        page.get_by_text("invoke_agent Lead").first.wait_for(timeout=60_000)
        page.get_by_text("gen_ai.operation.name").first.wait_for(timeout=60_000)  # the root span's attributes
        page.screenshot(path=os.environ["THINK_ACTORS_TRACE_SCREENSHOT"])
        browser.close()
