"""The spans themselves, named and attributed as OpenTelemetry's GenAI semantic conventions say.

Imported only once tracing is on (``switch.configure``), so a process that never traces never imports
``opentelemetry``. Each helper takes plain values (names, ids, counts), never an engine object: this module sits
below the engine and knows nothing of it.

Spans that must be current while code runs under them (a turn, a model call, a tool call, an operation) are made
current by ``otel_context.attach``. A turn and a model call run in an async generator, closed perhaps by another
task than the one that started it, so their spans are left by attaching the context that was current before them
(as ``logs.restore`` does), never by detaching a token, which fails in another context. Tool calls and
operations are plain ``with`` blocks inside one coroutine, which may detach their tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from . import names

__all__ = [
    "ChatSpan",
    "ToolSpan",
    "TurnSpan",
    "adopt",
    "carrier",
    "end_chat",
    "end_turn",
    "fail_chat",
    "link",
    "operation",
    "start_chat",
    "start_turn",
    "tool_call",
    "traceparent",
]

_tracer = trace.get_tracer("think_actors")
_W3C = TraceContextTextMapPropagator()  # a stored traceparent is W3C's, whatever OTEL_PROPAGATORS says
_capture = False
_node_id: str | None = None


def set_process(*, capture_content: bool, node_id: str | None) -> None:
    """What every span of this process gets: whether content is recorded, and the Ray node it runs on."""
    global _capture, _node_id
    _capture = capture_content
    _node_id = node_id


def _linked(value: str) -> SpanContext | None:
    context = trace.get_current_span(_W3C.extract({"traceparent": value})).get_span_context()
    return context if context.is_valid else None


def _links(parents: Sequence[str]) -> list[Link]:
    return [Link(context, {names.LINK_REASON: "recovers"}) for value in parents if (context := _linked(value))]


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


@dataclass(slots=True)
class TurnSpan:
    span: Span
    previous: otel_context.Context


def start_turn(
    *,
    agent: str,
    agent_path: str,
    request_id: str,
    trigger: str,
    model: str | None,
    links: Sequence[str] = (),
) -> TurnSpan:
    attributes: dict[str, Any] = {
        names.OPERATION: "invoke_agent",
        names.AGENT_NAME: agent,
        names.AGENT_ID: agent_path,
        names.CONVERSATION_ID: agent_path,
        names.REQUEST_ID: request_id,
        names.AGENT_PATH: agent_path,
        names.TRIGGER: trigger,
    }
    if model:
        attributes[names.REQUEST_MODEL] = model
    if _node_id:
        attributes[names.NODE_ID] = _node_id
    span = _tracer.start_span(
        f"invoke_agent {agent}", kind=SpanKind.INTERNAL, attributes=attributes, links=_links(links)
    )
    previous = otel_context.get_current()
    otel_context.attach(trace.set_span_in_context(span, previous))
    return TurnSpan(span, previous)


def end_turn(
    turn: TurnSpan,
    *,
    status: str,
    error: str | None,
    classification: str | None,
    steps: int,
    input_tokens: int,
    output_tokens: int,
    cost_usd: float | None,
    tree: Any = None,
    limit: str | None = None,
    principal: Any = None,
    channel: str | None = None,
) -> None:
    span = turn.span
    span.set_attribute(names.STATUS, status)
    if channel is not None:
        span.set_attribute(names.CHANNEL, channel)
    if principal is not None:  # who sent the turn, as the server authenticated them
        span.set_attribute(names.USER_ID, principal.id)
        if principal.roles:
            span.set_attribute(names.USER_ROLES, sorted(principal.roles))
    if tree is not None:  # a turn that started agents: what they and it used together
        span.set_attribute(names.TREE_INPUT_TOKENS, tree.input_tokens)
        span.set_attribute(names.TREE_OUTPUT_TOKENS, tree.output_tokens)
        span.set_attribute(names.TREE_REQUESTS, tree.requests)
        span.set_attribute(names.TREE_AGENTS, tree.agents)
        span.set_attribute(names.TREE_COST, tree.cost_usd)
    if limit is not None:
        span.set_attribute(names.RUN_LIMIT, limit)
    span.set_attribute(names.STEPS, steps)
    span.set_attribute(names.INPUT_TOKENS, input_tokens)
    span.set_attribute(names.OUTPUT_TOKENS, output_tokens)
    if cost_usd is not None:
        span.set_attribute(names.COST, cost_usd)
    if status == "error":
        span.set_attribute(names.ERROR_TYPE, classification or "turn_error")
        span.set_status(Status(StatusCode.ERROR, error or None))
    span.end()
    otel_context.attach(turn.previous)


@dataclass(slots=True)
class ChatSpan:
    span: Span
    previous: otel_context.Context


def start_chat(
    *, model: str, step: int | None = None, messages: Any = None, tools: int = 0, kind: str = "client"
) -> ChatSpan:
    """A model call's span, a child of the current one, and current until it ends: a model client that calls
    another process (the model-server pool) sends it as the parent of the work done there.

    ``kind="server"`` is the model server's own span of the call (no step: the agent's span has it).
    """
    request_model, provider = names.model_names(model)
    attributes: dict[str, Any] = {
        names.OPERATION: "chat",
        names.REQUEST_MODEL: request_model,
    }
    if step is not None:
        attributes[names.STEP] = step
    if provider is not None:
        attributes[names.PROVIDER] = provider
        attributes[names.MODEL_ID] = model
    if tools:
        attributes[names.TOOLS_OFFERED] = tools
    if _capture and messages is not None:
        attributes[names.INPUT_MESSAGES] = _json(messages)
    span_kind = SpanKind.CLIENT
    if kind == "server":
        span_kind = SpanKind.SERVER
        if _node_id:
            attributes[names.NODE_ID] = _node_id
    span = _tracer.start_span(f"chat {request_model}", kind=span_kind, attributes=attributes)
    previous = otel_context.get_current()
    otel_context.attach(trace.set_span_in_context(span, previous))
    return ChatSpan(span, previous)


def end_chat(
    chat: ChatSpan,
    *,
    finish_reason: str,
    input_tokens: int | None,
    output_tokens: int | None,
    response_model: str | None,
    response_id: str | None,
    cost_usd: float | None,
    output: Any = None,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
) -> None:
    span = chat.span
    span.set_attribute(names.FINISH_REASONS, (finish_reason,))
    if input_tokens is not None:
        span.set_attribute(names.INPUT_TOKENS, input_tokens)
    for name, tokens in (
        (names.CACHE_READ_INPUT_TOKENS, cache_read_input_tokens),
        (names.CACHE_CREATION_INPUT_TOKENS, cache_creation_input_tokens),
    ):
        if tokens is not None:
            span.set_attribute(name, tokens)
    if output_tokens is not None:
        span.set_attribute(names.OUTPUT_TOKENS, output_tokens)
    if response_model:
        span.set_attribute(names.RESPONSE_MODEL, response_model)
    if response_id:
        span.set_attribute(names.RESPONSE_ID, response_id)
    if cost_usd is not None:
        span.set_attribute(names.COST, cost_usd)
    if _capture and output is not None:
        span.set_attribute(names.OUTPUT_MESSAGES, _json(output))
    span.end()
    otel_context.attach(chat.previous)


def fail_chat(chat: ChatSpan, error: BaseException) -> None:
    """End a model call that raised, or that its turn stopped (closed or cancelled: not an error)."""
    span = chat.span
    if isinstance(error, GeneratorExit | asyncio.CancelledError):
        span.set_attribute(names.STATUS, "aborted")
    else:
        span.set_attribute(names.ERROR_TYPE, type(error).__name__)
        span.record_exception(error)
        span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__name__))
    span.end()
    otel_context.attach(chat.previous)


class ToolSpan:
    """The current tool call's span; ``result`` records how the call ended (a failed tool is a result)."""

    __slots__ = ("span",)

    def __init__(self, span: Span):
        self.span = span

    def result(self, *, error: str | None, output: Any = None, outcome: str | None = None) -> None:
        self.span.set_attribute(names.STATUS, outcome or ("error" if error is not None else "ok"))
        if error is not None:
            self.span.set_attribute(names.ERROR_TYPE, "tool_error")
            self.span.set_status(Status(StatusCode.ERROR, error))
        elif _capture and output is not None:
            self.span.set_attribute(names.TOOL_RESULT, _json(output))


@contextmanager
def tool_call(
    *, tool_name: str, tool_call_id: str, arguments: Any = None, kind: str = "function"
) -> Iterator[ToolSpan]:
    attributes: dict[str, Any] = {
        names.OPERATION: "execute_tool",
        names.TOOL_NAME: tool_name,
        names.TOOL_CALL_ID: tool_call_id,
        names.TOOL_TYPE: kind,
    }
    if _capture and arguments is not None:
        attributes[names.TOOL_ARGUMENTS] = _json(arguments)
    with _tracer.start_as_current_span(
        f"execute_tool {tool_name}", kind=SpanKind.INTERNAL, attributes=attributes, record_exception=True
    ) as span:
        yield ToolSpan(span)


@contextmanager
def operation(
    name: str,
    attributes: Mapping[str, Any],
    links: Sequence[str] = (),
    kind: str = "internal",
    parent: Mapping[str, str] | None = None,
) -> Iterator[Span]:
    """A span of ours (a submission drain, a recovery, a gateway request), current while the block runs; a child
    of the span the W3C headers ``parent`` name when they name one."""
    span_kind = SpanKind.SERVER if kind == "server" else SpanKind.INTERNAL
    attrs = dict(attributes)
    if _node_id:
        attrs.setdefault(names.NODE_ID, _node_id)
    context = _W3C.extract(parent) if parent else None
    with _tracer.start_as_current_span(
        name, context=context, kind=span_kind, attributes=attrs, links=_links(links)
    ) as span:
        yield span


def link(traceparent: str, reason: str, attributes: Mapping[str, Any]) -> None:
    """Link the current span to the span a stored W3C ``traceparent`` names (a no-op for an invalid one)."""
    context = _linked(traceparent)
    if context is not None:
        trace.get_current_span().add_link(context, {names.LINK_REASON: reason, **attributes})


def carrier() -> dict[str, str]:
    """The current span context as W3C trace-context headers (``traceparent``, maybe ``tracestate``); {} if none."""
    headers: dict[str, str] = {}
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)
    return headers


def traceparent() -> str | None:
    """The current span as a W3C ``traceparent`` (what a turn record keeps for a later recovery's link)."""
    headers: dict[str, str] = {}
    if trace.get_current_span().get_span_context().is_valid:
        _W3C.inject(headers)
    return headers.get("traceparent")


def adopt(headers: Mapping[str, str]) -> None:
    """Make the caller's span (from ``carrier()`` in its process) the parent of what runs here from now on.

    Set, never reset: called at the start of a remote call, which runs in its own task (Ray gives every call of
    an async actor one), as the caller chain is.
    """
    otel_context.attach(propagate.extract(headers))
