"""One trace across actors: every agent actor exports its spans over OTLP/HTTP to a receiver this test runs.

The receiver is a real OTLP/HTTP endpoint (aiohttp on 127.0.0.1, decoding ExportTraceServiceRequest with
opentelemetry-proto, as a collector does); the agents' actors use the SDK's OTLP exporter, configured by
``ta.init(tracing=...)`` in the driver. A real trace backend (Arize Phoenix) is in test_tracing_phoenix.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
import ray
from aiohttp import web
from helpers import greeting
from opentelemetry import propagate, trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from ray_agents import CrashAgent, CrashControl, ServerBacked

import think_actors as ta
from think_actors import tracing
from think_actors.gateway.ray_server import start_gateways
from think_actors.testing import ScriptedModel, ScriptedOpenAIServer, step, text, tool_call

WAIT_S = 60


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    return getattr(value, kind) if kind else None


@dataclass(frozen=True)
class Received:
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: tuple[tuple[str, str, dict[str, Any]], ...]
    status: int  # 0 unset, 1 ok, 2 error
    start_ns: int
    kind: int  # 1 internal, 2 server, 3 client


class OtlpReceiver:
    """An OTLP/HTTP traces endpoint that keeps what it receives."""

    def __init__(self) -> None:
        self.spans: list[Received] = []
        self.changed = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        message = ExportTraceServiceRequest.FromString(body)
        for resource_spans in message.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        Received(
                            name=span.name,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            resource=resource,
                            links=tuple(
                                (
                                    link.trace_id.hex(),
                                    link.span_id.hex(),
                                    {a.key: _value(a.value) for a in link.attributes},
                                )
                                for link in span.links
                            ),
                            status=span.status.code,
                            start_ns=span.start_time_unix_nano,
                            kind=span.kind,
                        )
                    )
        self.changed.set()
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(), content_type="application/x-protobuf"
        )

    async def until(self, done: Callable[[list[Received]], bool], timeout_s: float = WAIT_S) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while not done(self.spans):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"spans not received in {timeout_s} s: {[s.name for s in self.spans]}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)
        return list(self.spans)


@pytest.fixture
async def receiver(ray_runtime: Any) -> AsyncIterator[OtlpReceiver]:
    """The receiver, and tracing on for the agents spawned during the test (off again after it)."""
    sink = OtlpReceiver()
    app = web.Application()
    app.router.add_post("/v1/traces", sink.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)  # exporters keep their connections open
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    sink.url = f"http://127.0.0.1:{port}/v1/traces"
    same = {"num_cpus": 2, "data_dir": ray_runtime.data_dir, "model_pool_size": ray_runtime.model_pool_size}
    ta.init(**same, tracing=ta.TracingConfig(endpoint=sink.url, export_delay_ms=50))
    try:
        yield sink
    finally:
        # The driver's spans go out first, while this loop still serves the receiver (flush blocks its thread).
        await asyncio.to_thread(tracing.flush)
        ta.init(**same, tracing=False)
        await runner.cleanup()


def tree(spans: list[Received], root: Received) -> list[tuple[int, str]]:
    """(depth, name) under ``root``, depth-first, children by name (parallel calls start in either order)."""
    out: list[tuple[int, str]] = []

    def walk(parent: Received, depth: int) -> None:
        out.append((depth, parent.name))
        for child in sorted((s for s in spans if s.parent_id == parent.span_id), key=lambda s: (s.name, s.start_ns)):
            walk(child, depth + 1)

    walk(root, 0)
    return out


class Searcher(ta.Think):
    model = ScriptedModel([tool_call("search", {"query": "ray"}), text("Ray runs actors.")])

    @ta.tool
    async def search(self, query: str) -> str:
        """Search the corpus."""
        return f"found {query}"


class Writer(ta.Think):
    model = ScriptedModel([text("A short report.")])


@ta.tool(num_cpus=1)
def crunch(n: int) -> int:
    """Sum the numbers below n (a Ray task: it has resources)."""
    with trace.get_tracer("user-code").start_as_current_span("inside the task"):
        return sum(range(n))


class Cruncher(ta.Think):
    model = ScriptedModel([tool_call("crunch", {"n": 10}, id="c-1"), text("45")])
    tools = (crunch,)


class Lead(ta.Think):
    tools = [
        ta.agent_tool(Searcher, description="Search a topic."),
        ta.agent_tool(Writer, description="Write it up."),
    ]


@pytest.mark.timeout(120)
async def test_a_lead_and_its_children_in_three_actors_make_one_trace(receiver: OtlpReceiver, unique: str) -> None:
    lead = await ta.spawn(
        Lead,
        unique,
        model=ScriptedModel(
            [
                step(tool_call("searcher", {"input": "ray"}, id="c-s"), tool_call("writer", {"input": "x"}, id="c-w")),
                text("Both done."),
            ]
        ),
    )
    with trace.get_tracer("test").start_as_current_span("request") as request:
        chunks = await lead.chat("Research Ray").collect()
    assert chunks[-1].type == "finish"
    # The driver's own span; flush blocks, and the receiver runs on this event loop.
    assert await asyncio.to_thread(tracing.flush)

    root_id = format(request.get_span_context().span_id, "016x")
    expected = 1 + (1 + 2 + 2) + (1 + 2 + 1) + (1 + 1)  # request; lead: turn, chats, tools; searcher; writer
    spans = await receiver.until(lambda got: len([s for s in got if s.trace_id == got[0].trace_id]) >= expected)
    (root,) = [s for s in spans if s.span_id == root_id]
    assert [s for s in spans if s.trace_id != root.trace_id] == []
    assert tree(spans, root) == [
        (0, "request"),
        (1, "invoke_agent Lead"),
        (2, "chat scripted"),
        (2, "chat scripted"),
        (2, "execute_tool searcher"),
        (3, "invoke_agent Searcher"),
        (4, "chat scripted"),
        (4, "chat scripted"),
        (4, "execute_tool search"),
        (2, "execute_tool writer"),
        (3, "invoke_agent Writer"),
        (4, "chat scripted"),
    ]
    lead_turn = next(s for s in spans if s.name == "invoke_agent Lead")
    in_order = sorted((s for s in spans if s.parent_id == lead_turn.span_id), key=lambda s: s.start_ns)
    names = [s.name for s in in_order]
    assert names[0] == names[-1] == "chat scripted"  # the model asked for the tools before they ran, then answered

    turns = {s.name: s for s in spans if s.name.startswith("invoke_agent")}
    assert turns["invoke_agent Searcher"].attributes["think_actors.agent.path"] == f"{lead.path}/searcher/run-c-s"
    assert turns["invoke_agent Lead"].attributes["think_actors.trigger"] == "rpc"  # chat() through a handle
    node_id = ray.get_runtime_context().get_node_id()
    assert {s.attributes["think_actors.node_id"] for s in turns.values()} == {node_id}
    # Three agent actors, three processes, none of them this driver; every one exports as think_actors.
    pids = {s.resource["process.pid"] for s in turns.values()}
    assert len(pids) == 3 and os.getpid() not in pids
    assert {s.resource["service.name"] for s in spans if s.name != "request"} == {"think_actors"}
    assert [s.status for s in spans] == [0] * len(spans)


@pytest.mark.timeout(120)
async def test_a_recovered_turn_after_a_real_crash_links_to_the_interrupted_trace(
    receiver: OtlpReceiver, ray_runtime: Any, unique: str
) -> None:
    control_name = f"crash-control/{unique}"
    CrashControl.options(name=control_name, namespace=ray_runtime.namespace, lifetime="detached").remote(
        "before_step:1"
    )
    agent = await ta.spawn(CrashAgent, unique, control=control_name, namespace=ray_runtime.namespace)
    with trace.get_tracer("test").start_as_current_span("request") as request, pytest.raises(ta.AgentUnavailableError):
        await agent.chat("pay 42 and note it").collect()  # the actor dies before its second step
    interrupted_trace = format(request.get_span_context().trace_id, "032x")

    spans = await receiver.until(
        lambda got: any(s.name == "invoke_agent CrashAgent" and s.attributes.get("think_actors.status") for s in got)
    )
    (recovered,) = [s for s in spans if s.name == "invoke_agent CrashAgent"]
    assert recovered.attributes["think_actors.trigger"] == "recovery"
    assert recovered.attributes["think_actors.status"] == "completed"
    (link_trace, link_span, link_attributes) = recovered.links[0]
    assert (link_trace, link_attributes) == (interrupted_trace, {"think_actors.link": "recovers"})
    assert recovered.trace_id != interrupted_trace  # the recovery is a trace of its own, linked to the first
    (recover,) = [s for s in spans if s.span_id == recovered.parent_id]
    assert recover.name == "recover CrashAgent" and recover.parent_id == ""
    # What the dead process exported before it died belongs to the interrupted trace, under the linked span.
    before = [s for s in spans if s.trace_id == interrupted_trace]
    assert len(link_span) == 16 and int(link_span, 16) != 0
    assert {s.parent_id for s in before if s.name == "chat plan"} <= {link_span}


@pytest.mark.timeout(120)
async def test_a_task_tool_runs_under_its_tool_calls_span_in_the_tasks_process(
    receiver: OtlpReceiver, unique: str
) -> None:
    agent = await ta.spawn(Cruncher, unique)
    result = await agent.save_messages("crunch")
    assert result.status == "completed"
    spans = await receiver.until(lambda got: {"invoke_agent Cruncher", "inside the task"} <= {s.name for s in got})
    (turn,) = [s for s in spans if s.name == "invoke_agent Cruncher"]
    assert tree(spans, turn) == [
        (0, "invoke_agent Cruncher"),
        (1, "chat scripted"),
        (1, "chat scripted"),
        (1, "execute_tool crunch"),
        (2, "run_task crunch"),
        (3, "inside the task"),  # the user's own span, in the task, under ours
    ]
    (task,) = [s for s in spans if s.name == "run_task crunch"]
    assert task.resource["process.pid"] != turn.resource["process.pid"]  # the task ran in another worker


INTERNAL, SERVER, CLIENT = 1, 2, 3  # OTLP's span kinds


@pytest.mark.timeout(120)
async def test_the_model_servers_span_of_a_call_is_a_child_of_the_agents_chat_span(
    receiver: OtlpReceiver, unique: str
) -> None:
    async with ScriptedOpenAIServer(model="gpt-4o-mini-2024-07-18") as server:
        server.add_text("Pooled.", usage={"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13})
        server.add_error(400, message="the request is malformed", error_type="invalid_request_error")
        agent = await ta.spawn(ServerBacked, unique, model="openai/gpt-4o-mini", api_base=server.base_url)
        assert (await agent.save_messages("hi")).status == "completed"
        assert (await agent.save_messages("again")).status == "error"

    def served(spans: list[Received]) -> list[Received]:
        return [s for s in spans if s.name == "chat gpt-4o-mini" and s.kind == SERVER]

    def turns_ended(spans: list[Received]) -> int:
        return len([s for s in spans if s.name == "invoke_agent ServerBacked"])

    spans = await receiver.until(lambda got: len(served(got)) == 2 and turns_ended(got) == 2)
    answered, failed = sorted(served(spans), key=lambda s: s.start_ns)
    turns = sorted((s for s in spans if s.name == "invoke_agent ServerBacked"), key=lambda s: s.start_ns)
    assert [tree(spans, turn) for turn in turns] == [
        [(0, "invoke_agent ServerBacked"), (1, "chat gpt-4o-mini"), (2, "chat gpt-4o-mini")]
    ] * 2
    (agents_chat,) = [s for s in spans if s.span_id == answered.parent_id]
    assert (agents_chat.kind, agents_chat.trace_id) == (CLIENT, answered.trace_id)
    # The model server is a process of its own, neither the agent's nor this driver's.
    assert answered.resource["process.pid"] not in {agents_chat.resource["process.pid"], os.getpid()}
    node_id = ray.get_runtime_context().get_node_id()
    assert answered.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.provider.name": "openai",
        "think_actors.model": "openai/gpt-4o-mini",
        "think_actors.node_id": node_id,
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.id": "chatcmpl-scripted-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 2,
        "think_actors.cost_usd": pytest.approx(11 * 0.15e-6 + 2 * 0.6e-6),
    }
    assert (failed.status, failed.attributes["error.type"]) == (2, "ProviderError")


@ray.remote
class Library:
    """A user's own actor: it sets up tracing in its process and opens its spans under the caller's."""

    def __init__(self, endpoint: str):
        tracing.configure(ta.TracingConfig(endpoint=endpoint, export_delay_ms=50))

    async def lookup(self, isbn: str, trace_context: dict[str, str] | None = None) -> str:
        """Look a book up by its ISBN."""
        parent = propagate.extract(trace_context or {})
        with trace.get_tracer("library").start_as_current_span("catalogue lookup", context=parent):
            return f"book {isbn} ({os.getpid()})"


class Librarian(ta.Think):
    model = ScriptedModel([tool_call("lookup", {"isbn": "42"}, id="c-l"), text("Found it.")])

    def __init__(self, *args: Any, library: str, namespace: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tools = (ta.actor_tool(library, "lookup", actor_class=Library, namespace=namespace),)


@pytest.mark.timeout(120)
async def test_a_user_actor_tools_spans_nest_under_its_execute_tool_span(
    receiver: OtlpReceiver, ray_runtime: Any, unique: str
) -> None:
    name = f"library/{unique}"
    library = Library.options(name=name, namespace=ray_runtime.namespace).remote(receiver.url)  # type: ignore[attr-defined]
    try:
        agent = await ta.spawn(Librarian, unique, library=name, namespace=ray_runtime.namespace)
        assert (await agent.save_messages("find 42")).status == "completed"
        spans = await receiver.until(
            lambda got: {"invoke_agent Librarian", "catalogue lookup"} <= {s.name for s in got}
        )
    finally:
        ray.kill(library)
    (turn,) = [s for s in spans if s.name == "invoke_agent Librarian"]
    assert tree(spans, turn) == [
        (0, "invoke_agent Librarian"),
        (1, "chat scripted"),
        (1, "chat scripted"),
        (1, "execute_tool lookup"),
        (2, "catalogue lookup"),  # in the library's process, under the tool call
    ]
    (lookup,) = [s for s in spans if s.name == "catalogue lookup"]
    assert lookup.resource["process.pid"] != turn.resource["process.pid"]


class Nightly(ta.Think):
    model = ScriptedModel([text("Report written.")])


@pytest.mark.timeout(120)
async def test_a_submissions_drain_links_to_the_trace_that_submitted_it(receiver: OtlpReceiver, unique: str) -> None:
    agent = await ta.spawn(Nightly, unique)
    with trace.get_tracer("test").start_as_current_span("nightly job") as job:
        submission = await agent.submit_messages("write the report")
    done = await agent.wait_for_submission(submission.submission_id, timeout_s=WAIT_S)
    assert done.status == "completed"
    spans = await receiver.until(lambda got: any(s.name == "drain_submissions Nightly" for s in got))
    (drain,) = [s for s in spans if s.name == "drain_submissions Nightly"]
    job_trace = format(job.get_span_context().trace_id, "032x")
    job_span = format(job.get_span_context().span_id, "016x")
    assert drain.links == (
        (job_trace, job_span, {"think_actors.link": "drains", "think_actors.submission_id": submission.submission_id}),
    )
    assert drain.trace_id != job_trace  # the drain is a trace of its own, linked to the submitter's
    assert tree(spans, drain) == [(0, "drain_submissions Nightly"), (1, "invoke_agent Nightly"), (2, "chat scripted")]


@pytest.mark.timeout(120)
async def test_the_gateway_actors_chat_request_is_the_parent_of_the_agents_turn(
    receiver: OtlpReceiver, unique: str
) -> None:
    gateways = await start_gateways("ray_agents", host="127.0.0.1", port=0, options={})
    try:
        [(_, url)] = gateways
        async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/agents/survivor/{unique}") as ws:
            await greeting(ws)
            body = {"messages": [{"id": "u1", "role": "user", "parts": [{"type": "text", "text": "traced"}]}]}
            frame = {
                "type": "cf_agent_use_chat_request",
                "id": "r1",
                "init": {"method": "POST", "body": json.dumps(body)},
            }
            await ws.send_str(json.dumps(frame))
            while True:
                data = json.loads((await asyncio.wait_for(ws.receive(), 30)).data)
                if data["type"] == "cf_agent_use_chat_response" and data["done"]:
                    break
        assert data["outcome"] == "completed"
        spans = await receiver.until(
            lambda got: {f"chat_request survivor/{unique}", "invoke_agent Survivor"} <= {s.name for s in got}
        )
    finally:
        for actor, _ in gateways:
            await actor.stop.remote()
            ray.kill(actor)
    (request,) = [s for s in spans if s.name == f"chat_request survivor/{unique}"]
    assert (request.kind, request.parent_id, request.attributes["think_actors.request_id"]) == (SERVER, "", "r1")
    assert tree(spans, request) == [
        (0, f"chat_request survivor/{unique}"),
        (1, "invoke_agent Survivor"),
        (2, "chat echo"),
    ]
    (turn,) = [s for s in spans if s.name == "invoke_agent Survivor"]
    assert turn.trace_id == request.trace_id and turn.attributes["think_actors.request_id"] == "r1"
    # The gateway runs in an actor of its own, the agent in another: one trace across both.
    assert len({request.resource["process.pid"], turn.resource["process.pid"], os.getpid()}) == 3
