"""OpenTelemetry traces of agents: one trace per request across actors and nodes, in the GenAI conventions.

Off by default and free when off (``switch``): the package depends on ``opentelemetry-api`` alone and imports
it only once tracing is on; the SDK and the OTLP/HTTP exporter are the ``otel`` extra. Turned on by
``ta.init(tracing=True | TracingConfig(...))`` (every actor of the cluster follows the driver), by
``configure(...)`` in a process without Ray, or by the standard ``OTEL_*`` variables (``config``).

The tree of one request (span names and ``gen_ai.operation.name`` as the GenAI semantic conventions say)::

    invoke_agent Lead                  a turn, whatever started it (chat, save_messages, a submission, ...)
    ├── chat gpt-4o-mini               one model call (a step); usage, finish reasons, cost
    │   └── chat gpt-4o-mini           the model-server actor's side of it (string model ids, kind SERVER)
    ├── execute_tool research          one tool call; a child agent's turn nests under it, in its own actor
    │   └── invoke_agent Researcher
    │       ├── chat ...
    │       └── execute_tool search
    └── chat gpt-4o-mini

A chat span is named by the provider's model name (``gen_ai.request.model``, ``gpt-4o-mini``); the provider is
``gen_ai.provider.name`` (``openai``, ``gcp.gemini``, ...) and the model id as the agent gave it, litellm's prefix
included, is ``think_actors.model``.

``drain_submissions <Agent>`` holds the turns of queued submissions (and links to the span of each submitter: the
submission record keeps its ``traceparent``), ``recover <Agent>`` a recovered turn (whose span links to the
interrupted turn's: the turn record keeps its ``traceparent``; so does the ``recover`` span), the gateway's
``chat_request <class>/<name>`` (a server span) the turn a socket started and ``GET /agents/{cls}/{name}/...`` /
``POST /mcp`` its HTTP requests (each a child of the client's span when the request, or the WebSocket upgrade,
carries W3C ``traceparent``/``tracestate`` headers, so a browser's trace goes on into the agents), and ``run_task
<fn>`` a tool that runs as a Ray task, in the task's worker. Across processes the span context travels as a plain
dict of W3C trace-context headers (``carrier()`` in the caller, ``adopt()`` in the callee) with every remote call
that can start a turn, every model-server call and every task tool; an actor tool's method gets it if it has a
``trace_context`` parameter (``ta.actor_tool``).
Records of ``think_actors`` loggers carry ``trace_id`` / ``span_id`` (``log_ids``).
"""

from __future__ import annotations

from . import names
from .config import CAPTURE_CONTENT_ENV, TRACING_ENV, TracingConfig, otel_env, resolve
from .switch import (
    adopt,
    carrier,
    configure,
    current_config,
    enabled,
    end_chat,
    end_turn,
    fail_chat,
    flush,
    incoming,
    link,
    operation,
    start_chat,
    start_turn,
    tool_call,
    traceparent,
)

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "TRACING_ENV",
    "TracingConfig",
    "adopt",
    "carrier",
    "configure",
    "current_config",
    "enabled",
    "end_chat",
    "end_turn",
    "fail_chat",
    "flush",
    "incoming",
    "link",
    "names",
    "operation",
    "otel_env",
    "resolve",
    "start_chat",
    "start_turn",
    "tool_call",
    "traceparent",
]
