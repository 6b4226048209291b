"""OpenTelemetry spans of agents in process, read back from the SDK's in-memory exporter.

The span names and attributes are those of OpenTelemetry's GenAI semantic conventions (agent, inference and
execute_tool spans); think_actors.tracing.names lists them. Across Ray actors: tests/ray/test_tracing_on_ray.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
import tree_agents
from aiohttp.test_utils import TestClient, TestServer
from helpers import greeting
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_gateway import Helper, frames_until_done, request, user
from test_recovery import WAIT_S, Effects, crash, restart

import think_actors as ta
from think_actors import delegation, tracing
from think_actors.errors import ConfigurationError, ProviderError
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.models import FinishEvent, ResponseMetadata, TextDelta, Usage
from think_actors.runtime.model_pool import _traced
from think_actors.testing import ScriptedModel, error, text, tool_call

EXPORTER = InMemorySpanExporter()


def _provider() -> TracerProvider:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the first test module of the session to trace sets it
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    return provider


_provider().add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on with the process's provider; off again after the test (the rest of the suite runs untraced)."""
    EXPORTER.clear()
    tracing.configure(ta.TracingConfig(exporter="provider"))
    try:
        yield EXPORTER
    finally:
        tracing.configure(False)
        EXPORTER.clear()


def tree(exported: InMemorySpanExporter) -> list[tuple[int, str]]:
    """The finished spans as (depth, name), depth-first in start order: the shape a trace backend shows."""
    finished = exported.get_finished_spans()
    by_parent: dict[int | None, list[ReadableSpan]] = {}
    for span in finished:
        by_parent.setdefault(span.parent.span_id if span.parent else None, []).append(span)
    out: list[tuple[int, str]] = []

    def walk(parent: int | None, depth: int) -> None:
        for span in sorted(by_parent.get(parent, []), key=lambda s: s.start_time or 0):
            out.append((depth, span.name))
            walk(span.context.span_id, depth + 1)

    walk(None, 0)
    assert len(out) == len(finished), "a span whose parent is not in the trace"
    return out


def named(exported: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exported.get_finished_spans() if s.name == name]


class Searcher(ta.Think):
    @ta.tool
    async def search(self, query: str) -> str:
        """Search the corpus."""
        logging.getLogger("think_actors.test_tracing").warning("searching %s", query)
        return f"found {query}"

    @ta.tool
    async def broken(self) -> str:
        """Always fails."""
        raise RuntimeError("disk on fire")


async def test_a_turn_is_an_invoke_agent_span_over_its_model_calls_and_tool_calls(
    spans: InMemorySpanExporter,
) -> None:
    model = ScriptedModel([tool_call("search", {"query": "ray"}, id="c1"), text("Ray runs actors.")])
    agent = Searcher("s1", model=model, store=ta.MemoryStore())
    result = await agent.save_messages("what is ray?")

    assert tree(spans) == [
        (0, "invoke_agent Searcher"),
        (1, "chat scripted"),
        (1, "execute_tool search"),
        (1, "chat scripted"),
    ]
    (turn,) = named(spans, "invoke_agent Searcher")
    first, second = named(spans, "chat scripted")
    used = [(c.attributes or {})["gen_ai.usage.input_tokens"] for c in (first, second)]
    produced = [(c.attributes or {})["gen_ai.usage.output_tokens"] for c in (first, second)]
    assert all(isinstance(n, int) and n > 0 for n in [*used, *produced])
    assert dict(turn.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "Searcher",
        "gen_ai.agent.id": "searcher/s1",
        "gen_ai.conversation.id": "searcher/s1",
        "think_actors.request_id": result.request_id,
        "think_actors.agent.path": "searcher/s1",
        "think_actors.trigger": "programmatic",
        "think_actors.status": "completed",
        "think_actors.channel": "web",
        "think_actors.steps": 2,
        "gen_ai.usage.input_tokens": sum(used),  # type: ignore[arg-type]
        "gen_ai.usage.output_tokens": sum(produced),  # type: ignore[arg-type]
    }
    assert turn.status.status_code is StatusCode.UNSET
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "scripted",
        "think_actors.step": 0,
        "think_actors.tools_offered": 2,
        "gen_ai.response.finish_reasons": ("tool_calls",),
        "gen_ai.usage.input_tokens": used[0],
        "gen_ai.usage.output_tokens": produced[0],
        "gen_ai.response.model": "scripted",
        "gen_ai.response.id": "scripted-1",
    }
    assert first.kind is trace.SpanKind.CLIENT
    assert (second.attributes or {})["gen_ai.response.finish_reasons"] == ("stop",)
    (tool,) = named(spans, "execute_tool search")
    assert dict(tool.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.id": "c1",
        "gen_ai.tool.type": "function",
        "think_actors.status": "ok",
    }
    # One trace: every span shares the turn's trace id.
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {turn.context.trace_id}


async def test_message_content_is_recorded_only_when_opted_in(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = [tool_call("search", {"query": "secret plans"}, id="c1"), text("the plans")]
    await Searcher("s2", model=ScriptedModel(list(script)), store=ta.MemoryStore()).save_messages("psst")
    content_keys = {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments"}
    assert all(not content_keys & set(s.attributes or {}) for s in spans.get_finished_spans())
    assert "secret" not in repr([dict(s.attributes or {}) for s in spans.get_finished_spans()])

    spans.clear()
    monkeypatch.setenv(tracing.CAPTURE_CONTENT_ENV, "true")
    tracing.configure(ta.TracingConfig(exporter="provider"))
    await Searcher("s3", model=ScriptedModel(list(script)), store=ta.MemoryStore()).save_messages("psst")
    first, second = named(spans, "chat scripted")
    sent = json.loads(str((first.attributes or {})["gen_ai.input.messages"]))
    assert sent[-1] == {"role": "user", "content": "psst"}
    assert json.loads(str((first.attributes or {})["gen_ai.output.messages"])) == {
        "text": "",
        "tool_calls": [["search", '{"query": "secret plans"}']],
    }
    assert json.loads(str((second.attributes or {})["gen_ai.output.messages"]))["text"] == "the plans"
    (tool,) = named(spans, "execute_tool search")
    assert json.loads(str((tool.attributes or {})["gen_ai.tool.call.arguments"])) == {"query": "secret plans"}
    assert json.loads(str((tool.attributes or {})["gen_ai.tool.call.result"])) == "found secret plans"


async def test_a_failed_tool_and_a_failed_model_call_are_error_spans(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel(
        [tool_call("broken", {}, id="b1"), error(ProviderError("upstream 503", status_code=503, retryable=False))]
    )
    agent = Searcher("s4", model=model, store=ta.MemoryStore())
    result = await agent.save_messages("try")
    assert result.status == "error"

    (tool,) = named(spans, "execute_tool broken")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.status.description == "disk on fire"
    assert (tool.attributes or {})["error.type"] == "tool_error"
    assert (tool.attributes or {})["think_actors.status"] == "error"
    failed = named(spans, "chat scripted")[1]
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "ProviderError"
    assert [e.name for e in failed.events] == ["exception"]
    (turn,) = named(spans, "invoke_agent Searcher")
    assert turn.status.status_code is StatusCode.ERROR
    assert (turn.attributes or {})["think_actors.status"] == "error"
    assert (turn.attributes or {})["error.type"] == "turn_error"
    assert "upstream 503" in (turn.status.description or "")


class Researcher(ta.Think):
    model = ScriptedModel([text("Ray runs actors.")])


class Lead(ta.Think):
    tools = [ta.agent_tool(Researcher, description="Research a topic.")]


async def test_a_child_agent_tool_runs_inside_its_execute_tool_span(spans: InMemorySpanExporter) -> None:
    model = ScriptedModel([tool_call("researcher", {"input": "What is Ray?"}, id="call-r"), text("Done.")])
    await Lead("l1", model=model, store=ta.MemoryStore()).save_messages("go")

    assert tree(spans) == [
        (0, "invoke_agent Lead"),
        (1, "chat scripted"),
        (1, "execute_tool researcher"),
        (2, "invoke_agent Researcher"),
        (3, "chat scripted"),
        (1, "chat scripted"),
    ]
    (child,) = named(spans, "invoke_agent Researcher")
    assert (child.attributes or {})["think_actors.agent.path"] == "lead/l1/researcher/run-call-r"


async def test_a_span_the_caller_holds_is_the_turns_parent_and_travels_as_a_plain_carrier(
    spans: InMemorySpanExporter,
) -> None:
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        carrier = tracing.carrier()
        await Researcher("r1", model=ScriptedModel([text("hi")]), store=ta.MemoryStore()).save_messages("x")
    assert carrier is not None and set(carrier) == {"traceparent"}
    trace_id = format(request.get_span_context().trace_id, "032x")
    span_id = format(request.get_span_context().span_id, "016x")
    assert carrier["traceparent"].startswith(f"00-{trace_id}-{span_id}-")  # then the flags: sampled
    (turn,) = named(spans, "invoke_agent Researcher")
    assert turn.parent is not None and turn.parent.span_id == request.get_span_context().span_id

    # The receiving side of a remote call: adopt the carrier, and the turn is the caller's child.
    spans.clear()

    async def remote_call() -> None:
        tracing.adopt(carrier)
        await Researcher("r2", model=ScriptedModel([text("hi")]), store=ta.MemoryStore()).save_messages("x")

    await asyncio.get_running_loop().create_task(remote_call(), context=contextvars.Context())
    (adopted,) = named(spans, "invoke_agent Researcher")
    assert adopted.parent is not None and adopted.parent.span_id == request.get_span_context().span_id
    assert tracing.carrier() is None  # outside any span


async def test_log_records_carry_the_trace_and_span_ids_of_the_current_span(
    spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture
) -> None:
    model = ScriptedModel([tool_call("search", {"query": "logs"}, id="c1"), text("ok")])
    with caplog.at_level(logging.WARNING, logger="think_actors.test_tracing"):
        await Searcher("s5", model=model, store=ta.MemoryStore()).save_messages("go")
    (record,) = [r for r in caplog.records if r.getMessage() == "searching logs"]
    (tool,) = named(spans, "execute_tool search")
    assert record.trace_id == format(tool.context.trace_id, "032x")  # type: ignore[attr-defined]
    assert record.span_id == format(tool.context.span_id, "016x")  # type: ignore[attr-defined]
    outside = logging.getLogger("think_actors.test_tracing").makeRecord("think_actors.x", 30, "f", 1, "m", (), None)
    assert (outside.trace_id, outside.span_id) == ("-", "-")  # type: ignore[attr-defined]
    other = logging.LogRecord("elsewhere", 30, "f", 1, "m", (), None)
    assert ta.tracing.log_ids.TraceContextFilter().filter(other) and other.trace_id == "-"  # type: ignore[attr-defined]


async def test_a_recovered_turn_links_to_the_interrupted_turns_span(spans: InMemorySpanExporter) -> None:
    effects = Effects()
    model = ScriptedModel([tool_call("read", {}, id="r1"), text("never")])
    store = await crash(model, "tool:read", effects)
    (record,) = await store.list_turns()
    traceparent = record.data["traceparent"]
    # In process the frozen turn is cancelled (a dead process's span would never end): wait for its span.
    for _ in range(1000):
        if named(spans, "invoke_agent Crashable"):
            break
        await asyncio.sleep(0.001)
    (interrupted,) = named(spans, "invoke_agent Crashable")
    assert (interrupted.attributes or {})["think_actors.trigger"] == "programmatic"
    assert traceparent.split("-")[1:3] == [
        format(interrupted.context.trace_id, "032x"),
        format(interrupted.context.span_id, "016x"),
    ]
    spans.clear()

    agent = await restart(store, ScriptedModel([text("recovered")]), effects)
    assert agent.get_messages()[-1].text.endswith("recovered")
    assert tree(spans) == [
        (0, "recover Crashable"),
        (1, "invoke_agent Crashable"),
        (2, "execute_tool read"),
        (2, "chat scripted"),
    ]
    (turn,) = named(spans, "invoke_agent Crashable")
    assert (turn.attributes or {})["think_actors.trigger"] == "recovery"
    (link,) = turn.links
    assert (link.context.trace_id, link.context.span_id) == (interrupted.context.trace_id, interrupted.context.span_id)
    assert dict(link.attributes or {}) == {"think_actors.link": "recovers"}
    assert turn.context.trace_id != interrupted.context.trace_id  # a trace of its own, linked to the first
    # The recovery's own span, the root of that trace, links there too: a trace view shows it at the top.
    (recover,) = named(spans, "recover Crashable")
    (recover_link,) = recover.links
    assert (recover_link.context.trace_id, recover_link.context.span_id) == (
        interrupted.context.trace_id,
        interrupted.context.span_id,
    )
    assert dict(recover_link.attributes or {}) == {"think_actors.link": "recovers"}


async def test_submissions_run_inside_a_drain_span(spans: InMemorySpanExporter) -> None:
    agent = Researcher("r3", model=ScriptedModel([text("one"), text("two")]), store=ta.MemoryStore())
    first = await agent.submit_messages("a")
    second = await agent.submit_messages("b")
    await agent.wait_for_submission(first.submission_id, timeout_s=WAIT_S)
    await agent.wait_for_submission(second.submission_id, timeout_s=WAIT_S)
    shape = tree(spans)
    assert shape[0] == (0, "drain_submissions Researcher")
    assert shape[1:] == [(1, "invoke_agent Researcher"), (2, "chat scripted")] * (len(shape[1:]) // 2)
    triggers = [(s.attributes or {})["think_actors.trigger"] for s in named(spans, "invoke_agent Researcher")]
    assert triggers == ["submission", "submission"]


async def test_a_drain_links_to_the_span_that_submitted_each_submission(spans: InMemorySpanExporter) -> None:
    agent = Researcher("r4", model=ScriptedModel([text("one"), text("two")]), store=ta.MemoryStore())
    with trace.get_tracer("test").start_as_current_span("nightly job") as job:
        first = await agent.submit_messages("a")
    second = await agent.submit_messages("b")  # outside any span: nothing to link to
    await agent.wait_for_submission(first.submission_id, timeout_s=WAIT_S)
    await agent.wait_for_submission(second.submission_id, timeout_s=WAIT_S)
    stored = await agent._engine.store.get_submission(first.submission_id)
    assert stored is not None and stored.traceparent is not None
    assert stored.traceparent.split("-")[1:3] == [
        format(job.get_span_context().trace_id, "032x"),
        format(job.get_span_context().span_id, "016x"),
    ]
    links = [link for drain in named(spans, "drain_submissions Researcher") for link in drain.links]
    assert [((x.context.trace_id, x.context.span_id), dict(x.attributes or {})) for x in links] == [
        (
            (job.get_span_context().trace_id, job.get_span_context().span_id),
            {"think_actors.link": "drains", "think_actors.submission_id": first.submission_id},
        )
    ]
    drains = {s.context.trace_id for s in named(spans, "drain_submissions Researcher")}
    assert job.get_span_context().trace_id not in drains  # the drain is a trace of its own, linked to the job's


class CarrierModel(ScriptedModel):
    """A model client that, like the model-server pool, sends the current span context with its call."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sent: list[dict[str, str] | None] = []

    async def stream(self, request: Any) -> Any:
        self.sent.append(tracing.carrier())
        async for event in super().stream(request):
            yield event


async def test_a_model_client_runs_inside_its_chat_span(spans: InMemorySpanExporter) -> None:
    model = CarrierModel([tool_call("search", {"query": "ray"}, id="c1"), text("done")])
    await Searcher("s6", model=model, store=ta.MemoryStore()).save_messages("go")
    chats = named(spans, "chat scripted")
    assert [c["traceparent"].split("-")[2] for c in model.sent if c] == [
        format(c.context.span_id, "016x") for c in chats
    ]
    assert tree(spans)[1:] == [(1, "chat scripted"), (1, "execute_tool search"), (1, "chat scripted")]


async def _events(*events: Any, fail: BaseException | None = None) -> AsyncGenerator[Any, None]:
    for event in events:
        yield event
    if fail is not None:
        raise fail


async def test_the_model_servers_span_of_a_call_is_a_child_of_the_agents_chat_span(
    spans: InMemorySpanExporter,
) -> None:
    metadata = ResponseMetadata(id="chatcmpl-1", model="gpt-4o-mini-2024-07-18")
    finish = FinishEvent("stop", Usage(input_tokens=12, output_tokens=3), cost_usd=0.25)
    config = tracing.current_config()
    assert config is not None
    with trace.get_tracer("test").start_as_current_span("the agent's chat span") as agents:
        carrier = tracing.carrier()
    assert carrier is not None

    async def server_call(events: Any) -> list[Any]:  # in the server's process: a task of its own
        return [event async for event in _traced(events, "openai/gpt-4o-mini", carrier, config)]

    loop = asyncio.get_running_loop()
    got = await loop.create_task(server_call(_events(metadata, TextDelta("hi"), finish)), context=contextvars.Context())
    assert got == [metadata, TextDelta("hi"), finish]
    with pytest.raises(ProviderError):
        failing = _events(metadata, fail=ProviderError("overloaded", status_code=529, retryable=True))
        await loop.create_task(server_call(failing), context=contextvars.Context())

    served, failed = named(spans, "chat gpt-4o-mini")
    for span in (served, failed):
        assert span.kind is trace.SpanKind.SERVER
        assert span.parent is not None and span.parent.span_id == agents.get_span_context().span_id
    assert dict(served.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.provider.name": "openai",
        "think_actors.model": "openai/gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 3,
        "think_actors.cost_usd": 0.25,
    }
    assert failed.status.status_code is StatusCode.ERROR
    assert (failed.attributes or {})["error.type"] == "ProviderError"


class Library:
    def lookup(self, isbn: str, trace_context: dict[str, str] | None = None) -> str:
        """Look a book up."""
        return isbn


async def test_an_actor_tools_method_with_trace_context_gets_its_execute_tool_span(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[dict[str, Any]] = []

    async def call(target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
        calls.append(kwargs)
        return "found"

    monkeypatch.setattr(delegation, "_actor_calls", call)
    tool = ta.actor_tool("library", "lookup", actor_class=Library)
    assert tool.input_schema["properties"] == {"isbn": {"type": "string"}}  # the model never sees it
    model = ScriptedModel([tool_call("lookup", {"isbn": "42"}, id="c1"), text("done")])
    await ta.Think("t1", model=model, tools=[tool], store=ta.MemoryStore()).save_messages("find 42")
    (executed,) = named(spans, "execute_tool lookup")
    ((isbn, context),) = [(c["isbn"], c["trace_context"]) for c in calls]
    assert isbn == "42" and set(calls[0]) == {"isbn", "trace_context"}
    assert context["traceparent"].split("-")[1:3] == [
        format(executed.context.trace_id, "032x"),
        format(executed.context.span_id, "016x"),
    ]

    tracing.configure(False)  # off: the method still gets its parameter, empty
    model = ScriptedModel([tool_call("lookup", {"isbn": "7"}, id="c2"), text("done")])
    await ta.Think("t2", model=model, tools=[tool], store=ta.MemoryStore()).save_messages("find 7")
    assert calls[-1] == {"isbn": "7", "trace_context": {}}


def test_config_follows_the_standard_environment() -> None:
    assert tracing.resolve(None, {}) is None
    assert tracing.resolve(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}) is None  # shared with metrics
    assert tracing.resolve(None, {"OTEL_TRACES_EXPORTER": "none"}) is None
    on = tracing.resolve(
        None,
        {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/",
            "OTEL_EXPORTER_OTLP_HEADERS": "api_key=abc, x-team = agents",
            "OTEL_SERVICE_NAME": "research",
        },
    )
    assert on == ta.TracingConfig(
        exporter="otlp",
        endpoint="http://collector:4318/v1/traces",
        headers={"api_key": "abc", "x-team": "agents"},
        service_name="research",
        capture_message_content=False,
    )
    traces_only = tracing.resolve(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://p:6006/v1/traces"})
    assert traces_only is not None and traces_only.endpoint == "http://p:6006/v1/traces"
    assert tracing.resolve(None, {"THINK_ACTORS_TRACING": "1"}) == ta.TracingConfig(
        endpoint="http://localhost:4318/v1/traces", service_name="think_actors", capture_message_content=False
    )
    assert tracing.resolve(True, {"OTEL_SDK_DISABLED": "true"}) is None
    assert tracing.resolve(False, {"OTEL_TRACES_EXPORTER": "otlp"}) is None
    captured = tracing.resolve(True, {tracing.CAPTURE_CONTENT_ENV: "TRUE"})
    assert captured is not None and captured.capture_message_content is True


@pytest.mark.parametrize(
    ("env", "setting", "message"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, None, "OTEL_TRACES_EXPORTER='zipkin'"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, None, "http/protobuf"),
        ({"THINK_ACTORS_TRACING": "maybe"}, None, "THINK_ACTORS_TRACING='maybe' is neither true nor false"),
        ({"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "novalue"}, True, "has no '='"),
        ({}, "yes", "tracing must be True, False, None or a TracingConfig"),
    ],
)
def test_bad_settings_say_what_to_do(env: dict[str, str], setting: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(").replace("[", r"\[")):
        tracing.resolve(setting, env)


def test_bad_configs_are_refused_when_made() -> None:
    with pytest.raises(ConfigurationError, match="not an http\\(s\\) URL"):
        ta.TracingConfig(endpoint="localhost:4318")
    with pytest.raises(ConfigurationError, match="unknown tracing exporter 'jaeger'"):
        ta.TracingConfig(exporter="jaeger")  # type: ignore[arg-type]


def test_tracing_off_imports_no_opentelemetry_and_makes_no_span() -> None:
    """A real interpreter with a clean environment: an agent's turn, then a look at what it imported."""
    script = """
import asyncio, sys
import think_actors as ta
from think_actors import tracing
from think_actors.testing import ScriptedModel, text, tool_call

class A(ta.Think):
    @ta.tool
    async def t(self) -> str:
        \"\"\"A tool.\"\"\"
        return "x"

async def main():
    agent = A("a", model=ScriptedModel([tool_call("t", {}), text("done")]), store=ta.MemoryStore())
    await agent.save_messages("go")
    assert not tracing.enabled()
    print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != tracing.TRACING_ENV}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_otlp_exporter_needs_the_extra_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the SDK (hidden from the import system here) tracing with an exporter names the extra."""
    monkeypatch.setitem(sys.modules, "think_actors.tracing.exporters", None)
    monkeypatch.delattr(ta.tracing, "exporters", raising=False)
    with pytest.raises(ConfigurationError, match=r"pip install 'think_actors\[otel\]'"):
        tracing.configure(ta.TracingConfig())
    assert tracing.configure(False) is None


async def test_a_gateway_chat_request_is_a_server_span_over_the_agents_turn(spans: InMemorySpanExporter) -> None:
    directory = LocalDirectory([Helper], model=ScriptedModel([text("Hello there")]), store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    try:
        ws = await client.ws_connect("/agents/helper/c1")
        await greeting(ws)
        await ws.send_str(request("req-1", user("hi", "u1")))
        await frames_until_done(ws, "req-1")
    finally:
        await client.close()
    assert tree(spans) == [(0, "chat_request helper/c1"), (1, "invoke_agent Helper"), (2, "chat scripted")]
    (served,) = named(spans, "chat_request helper/c1")
    assert served.kind is trace.SpanKind.SERVER
    assert dict(served.attributes or {}) == {"think_actors.request_id": "req-1"}
    (turn,) = named(spans, "invoke_agent Helper")
    assert (turn.attributes or {})["think_actors.request_id"] == "req-1"


BROWSER_TRACE = "0af7651916cd43dd8448eb211c80319c"
BROWSER_SPAN = "b7ad6b7169203331"


async def test_a_traceparent_from_the_client_makes_the_gateways_spans_part_of_its_trace(
    spans: InMemorySpanExporter,
) -> None:
    # An instrumented web app sends W3C trace context with the WebSocket upgrade and with its HTTP requests: the
    # agent's work is one trace with the browser's, not a new root.
    directory = LocalDirectory([Helper], model=ScriptedModel([text("Hello there")]), store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    context = {"traceparent": f"00-{BROWSER_TRACE}-{BROWSER_SPAN}-01", "tracestate": "vendor=browser"}
    try:
        ws = await client.ws_connect("/agents/helper/c1", headers=context)
        await greeting(ws)
        await ws.send_str(request("req-1", user("hi", "u1")))
        await frames_until_done(ws, "req-1")
        read = await client.get("/agents/helper/c1/get-messages", headers=context)
        assert read.status == 200
        untraced = await client.get("/agents/helper/c1/get-messages")  # no context: a root of its own
        assert untraced.status == 200
    finally:
        await client.close()
    (served,) = named(spans, "chat_request helper/c1")
    (turn,) = named(spans, "invoke_agent Helper")
    assert served.parent is not None and format(served.parent.span_id, "016x") == BROWSER_SPAN
    assert {format(s.context.trace_id, "032x") for s in (served, turn)} == {BROWSER_TRACE}
    assert served.context.trace_state.get("vendor") == "browser"
    traced, root = named(spans, "GET /agents/{cls}/{name}/get-messages")
    assert traced.kind is trace.SpanKind.SERVER
    assert format(traced.context.trace_id, "032x") == BROWSER_TRACE
    assert traced.parent is not None and format(traced.parent.span_id, "016x") == BROWSER_SPAN
    assert dict(traced.attributes or {}) == {
        "http.request.method": "GET",
        "http.route": "/agents/{cls}/{name}/get-messages",
        "url.path": "/agents/helper/c1/get-messages",
        "http.response.status_code": 200,
    }
    assert root.parent is None and format(root.context.trace_id, "032x") != BROWSER_TRACE


async def test_a_malformed_traceparent_starts_a_root_and_breaks_nothing(spans: InMemorySpanExporter) -> None:
    directory = LocalDirectory([Helper], model=ScriptedModel([text("Hello there")]), store=ta.MemoryStore())
    client = TestClient(TestServer(Gateway(directory).app()))
    await client.start_server()
    try:
        for bad in ("garbage", "00-" + "0" * 32 + "-" + "0" * 16 + "-01", "ff-zz"):
            ws = await client.ws_connect("/agents/helper/c1", headers={"traceparent": bad})
            await greeting(ws)
            await ws.close()
        ws = await client.ws_connect("/agents/helper/c1", headers={"traceparent": "garbage"})
        await greeting(ws)
        await ws.send_str(request("req-1", user("hi", "u1")))
        await frames_until_done(ws, "req-1")
    finally:
        await client.close()
    (served,) = named(spans, "chat_request helper/c1")
    assert served.parent is None


@pytest.mark.parametrize(
    ("model", "request_model", "provider"),
    [
        ("openai/gpt-4o-mini", "gpt-4o-mini", "openai"),
        ("anthropic/claude-3-5-sonnet-20241022", "claude-3-5-sonnet-20241022", "anthropic"),
        ("gemini/gemini-2.0-flash", "gemini-2.0-flash", "gcp.gemini"),
        ("bedrock/anthropic.claude-3", "anthropic.claude-3", "aws.bedrock"),
        ("openrouter/meta-llama/llama-3-70b", "meta-llama/llama-3-70b", "openrouter"),  # the first prefix only
        ("gpt-4o", "gpt-4o", None),  # no prefix: litellm infers the provider, the span does not guess
        ("scripted", "scripted", None),
    ],
)
def test_a_chat_span_names_the_providers_model_and_keeps_the_litellm_id_aside(
    model: str, request_model: str, provider: str | None
) -> None:
    # Dashboards group by gen_ai.request.model: the provider's own name, as the GenAI conventions want it.
    assert tracing.names.model_names(model) == (request_model, provider)


async def test_the_root_span_carries_the_trees_totals_and_the_limit_that_ended_it(
    spans: InMemorySpanExporter,
) -> None:
    result = await tree_agents.Lead("traced", store=ta.MemoryStore()).save_messages(
        "research it", limits=ta.RunLimits(max_requests=4)
    )
    assert result.limit == "max_requests"
    (root,) = named(spans, "invoke_agent Lead")
    attributes = dict(root.attributes or {})
    assert attributes["gen_ai.usage.input_tokens"] == 100  # the lead's own step
    assert attributes["think_actors.tree.requests"] == result.tree_usage.requests
    assert attributes["think_actors.tree.input_tokens"] == result.tree_usage.input_tokens
    assert attributes["think_actors.tree.agents"] == result.tree_usage.agents > 0
    assert attributes["think_actors.run.limit"] == "max_requests"
    researchers = named(spans, "invoke_agent Researcher")
    assert researchers and all(s.attributes["gen_ai.usage.input_tokens"] == 100 for s in researchers)


async def test_a_turns_span_says_who_sent_it(spans: InMemorySpanExporter) -> None:
    alice = ta.Principal(id="alice", roles=frozenset({"editor", "reader"}))
    agent = ta.Think("who", model=ScriptedModel([text("hi"), text("again")]), store=ta.MemoryStore())

    await agent.save_messages("hello", principal=alice)
    await agent.save_messages("nobody said")

    first, second = named(spans, "invoke_agent Think")
    assert (first.attributes or {})["user.id"] == "alice"
    assert (first.attributes or {})["think_actors.channel"] == "web"
    assert list((first.attributes or {})["user.roles"]) == ["editor", "reader"]
    assert "user.id" not in (second.attributes or {})
