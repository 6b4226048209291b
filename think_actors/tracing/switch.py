"""Tracing on or off in this process, and the entry points the engine, the runtime and the gateway call.

Off (the default), every entry point is a global read and a return: no span, no ``opentelemetry`` import, no
record touched. The first entry point called decides from the environment unless ``configure`` was called
(``ta.init`` calls it in the driver and ships the result to every actor, which calls it at its start). On, the
entry points forward to ``spans``.

The entry points take plain values, so the engine needs no OpenTelemetry type, and return None (or a shared
no-op) when off; callers test ``is None`` rather than calling into a no-op span per chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from types import ModuleType
from typing import Any

from ..errors import ConfigurationError
from .config import TracingConfig, resolve

__all__ = [
    "adopt",
    "carrier",
    "configure",
    "current_config",
    "enabled",
    "end_chat",
    "end_turn",
    "fail_chat",
    "flush",
    "link",
    "operation",
    "start_chat",
    "start_turn",
    "tool_call",
    "traceparent",
]

log = logging.getLogger("think_actors.tracing")

_impl: ModuleType | None = None  # the spans module, once tracing is on
_decided = False
_config: TracingConfig | None = None
_exporting = False  # an exporter of ours is installed in this process


def configure(setting: bool | TracingConfig | None = None, *, node_id: str | None = None) -> TracingConfig | None:
    """Turn tracing on or off in this process (``None``: as the environment says); returns what is in force.

    With exporter ``otlp`` or ``console`` this needs the ``otel`` extra (``pip install 'think_actors[otel]'``)
    and installs a tracer provider that exports through it; ``provider`` uses the one your process set.
    ``node_id`` names the Ray node on every span (the runtime passes it in actors).
    """
    global _impl, _decided, _config, _exporting
    config = resolve(setting)
    _decided = True
    _config = config
    if _exporting and (config is None or config.exporter == "provider"):
        from . import exporters

        exporters.uninstall()  # what it holds is exported first
        _exporting = False
    if config is None:
        _impl = None
        return None
    if config.exporter != "provider":
        try:
            from . import exporters
        except ImportError as err:
            raise ConfigurationError(
                f"tracing with exporter {config.exporter!r} needs the OpenTelemetry SDK and OTLP exporter:"
                " pip install 'think_actors[otel]' (or use TracingConfig(exporter='provider') with your own"
                f" tracer provider); missing: {err.name}"
            ) from err
        exporters.install(config)
        _exporting = True
    from . import log_ids, spans

    spans.set_process(capture_content=bool(config.capture_message_content), node_id=node_id)
    log_ids.install()
    _impl = spans
    return config


def current_config() -> TracingConfig | None:
    """What ``configure`` put in force (None: off, or not decided yet)."""
    return _config


def _active() -> ModuleType | None:
    if _impl is None and not _decided:
        try:
            configure(None)
        except ConfigurationError:
            log.exception("tracing stays off: the OTEL_* environment asks for it but cannot be followed")
    return _impl


def enabled() -> bool:
    return _active() is not None


def flush(timeout_s: float = 10.0) -> bool:
    """Export the spans this process holds now (before it exits, or before a test reads the backend).

    It blocks until the export is done: from a coroutine, ``await asyncio.to_thread(tracing.flush)``.
    """
    if _impl is None or _config is None or _config.exporter == "provider":
        return True
    from . import exporters

    return exporters.flush(timeout_s)


def start_turn(
    *, agent: str, agent_path: str, request_id: str, trigger: str, model: Any, links: Sequence[str] = ()
) -> Any:
    """Open a turn's ``invoke_agent`` span and make it current; None when off. ``end_turn`` closes it."""
    impl = _active()
    if impl is None:
        return None
    return impl.start_turn(
        agent=agent,
        agent_path=agent_path,
        request_id=request_id,
        trigger=trigger,
        model=model if isinstance(model, str) else None,
        links=links,
    )


def end_turn(
    turn: Any,
    *,
    status: str,
    error: str | None,
    classification: str | None,
    stats: Any,
    limit: str | None = None,
    principal: Any = None,
    channel: str | None = None,
) -> None:
    """Close what ``start_turn`` opened (``stats``: the turn's steps, tokens and cost, and what the agents it
    started used; ``limit``: the RunLimits field that ended it; ``principal``: who sent it;
    ``channel``: where from); no-op for None."""
    if turn is None or _impl is None:
        return
    _impl.end_turn(
        turn,
        status=status,
        error=error,
        classification=classification,
        steps=stats.steps,
        input_tokens=stats.input_tokens,
        output_tokens=stats.output_tokens,
        cost_usd=stats.cost_usd,
        tree=stats.tree_usage() if stats.children.agents else None,
        limit=limit,
        principal=principal,
        channel=channel,
    )


def start_chat(
    *, model: str, step: int | None = None, messages: Any = None, tools: int = 0, kind: str = "client"
) -> Any:
    """Open a model call's ``chat`` span under the current one, current until ``end_chat``; None when off.

    ``kind="server"``: the model server's span of a call an agent sent it (after ``adopt`` of the agent's).
    """
    if _impl is None:
        return None
    return _impl.start_chat(model=model, step=step, messages=messages, tools=tools, kind=kind)


def end_chat(chat: Any, **facts: Any) -> None:
    if chat is not None and _impl is not None:
        _impl.end_chat(chat, **facts)


def fail_chat(chat: Any, error: BaseException) -> None:
    if chat is not None and _impl is not None:
        _impl.fail_chat(chat, error)


class _NoToolSpan:
    __slots__ = ()

    def result(self, *, error: str | None, output: Any = None, outcome: str | None = None) -> None:
        return None


_NO_TOOL_SPAN = _NoToolSpan()
_NO_TOOL_CALL: AbstractContextManager[Any] = nullcontext(_NO_TOOL_SPAN)


def tool_call(*, tool_name: str, tool_call_id: str, arguments: Any = None, kind: str = "function") -> Any:
    """A ``with`` block for one tool call's ``execute_tool`` span (current inside); ``as span`` has ``result``."""
    if _impl is None:
        return _NO_TOOL_CALL
    return _impl.tool_call(tool_name=tool_name, tool_call_id=tool_call_id, arguments=arguments, kind=kind)


def operation(
    name: str,
    attributes: Mapping[str, Any],
    *,
    links: Sequence[str] = (),
    kind: str = "internal",
    parent: Mapping[str, str] | None = None,
) -> AbstractContextManager[Any]:
    """A ``with`` block for one span of ours (a submission drain, a recovery, a gateway request); it yields the span
    (None when off). ``parent``: incoming W3C headers (``traceparent``, ``tracestate``) whose span is this one's
    parent, as an HTTP server continues its client's trace; without them (or with an invalid one) the span is a
    child of the current span, or a root."""
    impl = _active()
    if impl is None:
        return nullcontext()
    cm: AbstractContextManager[Any] = impl.operation(name, attributes, links, kind, parent)
    return cm


def incoming(headers: Mapping[str, str]) -> dict[str, str]:
    """The W3C trace-context headers of a request (to keep for ``operation(parent=...)``); {} when it has none."""
    return {key: value for key in ("traceparent", "tracestate") if (value := headers.get(key))}


def link(traceparent: str | None, *, reason: str, attributes: Mapping[str, Any] | None = None) -> None:
    """Link the current span to the one a stored ``traceparent`` names (``reason`` says why); no-op when off."""
    if traceparent and _impl is not None:
        _impl.link(traceparent, reason, attributes or {})


def carrier() -> dict[str, str] | None:
    """The current span's W3C trace context (``{"traceparent": ...}``) to send with a remote call; None when off
    or outside any span."""
    impl = _active()
    if impl is None:
        return None
    headers: dict[str, str] = impl.carrier()
    return headers or None


def traceparent() -> str | None:
    """The current span's ``traceparent`` (to store with a durable record); None when off or outside a span."""
    if _impl is None:
        return None
    value: str | None = _impl.traceparent()
    return value


def adopt(headers: Mapping[str, str] | None) -> None:
    """On the receiving side of a remote call: what runs here from now on is a child of the caller's span."""
    if headers and _active() is not None:
        assert _impl is not None
        _impl.adopt(headers)
