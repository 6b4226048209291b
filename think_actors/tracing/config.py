"""What tracing a process does: ``TracingConfig``, and the one read of the standard ``OTEL_*`` variables.

Tracing is off unless something turns it on, in this order (the first that answers wins):

1. ``OTEL_SDK_DISABLED=true`` in the environment: off, whatever else says (the OpenTelemetry specification's
   switch for the whole SDK).
2. ``ta.init(tracing=...)`` or ``configure(...)``: ``True``, a ``TracingConfig``, or ``False``.
3. The environment: ``THINK_ACTORS_TRACING=1``, ``OTEL_TRACES_EXPORTER`` naming an exporter (not ``none``), or
   ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` set. ``OTEL_EXPORTER_OTLP_ENDPOINT`` alone does not turn traces on: it
   is shared with metrics and logs, which other parts of a user's process may export.

Where the spans go is the exporter's business, read from the same variables when a field here is None: the
OTLP/HTTP endpoint (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``,
else ``http://localhost:4318/v1/traces``), its headers (``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` /
``OTEL_EXPORTER_OTLP_HEADERS``), the service name (``OTEL_SERVICE_NAME``, else ``think_actors``) and the batch
processor's knobs (``OTEL_BSP_*``). Message content is recorded only when
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is true or ``capture_message_content=True``: prompts and
answers are the user's data, and a trace backend is often shared more widely than the agents' store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from ..errors import ConfigurationError

__all__ = [
    "CAPTURE_CONTENT_ENV",
    "TRACING_ENV",
    "Exporter",
    "TracingConfig",
    "otel_env",
    "resolve",
]

TRACING_ENV = "THINK_ACTORS_TRACING"
CAPTURE_CONTENT_ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})

# "otlp": the OTLP/HTTP exporter (protobuf) of the ``otel`` extra. "console": spans printed as JSON on stdout.
# "provider": install nothing, use the tracer provider the process already set (your own SDK set-up, a test's
# in-memory exporter); in an actor process where nobody set one, spans go nowhere.
Exporter = Literal["otlp", "console", "provider"]
_EXPORTERS: tuple[str, ...] = ("otlp", "console", "provider")


@dataclass(frozen=True, kw_only=True, slots=True)
class TracingConfig:
    """How a process traces; ``ta.init(tracing=...)`` ships it to every actor of the cluster.

    ``endpoint`` is the OTLP/HTTP traces URL (``http://collector:4318/v1/traces``); ``headers`` go with every
    export (an API key). None fields are read from the ``OTEL_*`` environment of the process that exports.
    ``capture_message_content`` records prompts, answers, tool inputs and results on the spans.
    ``resource`` adds resource attributes (``deployment.environment`` ...) beside ``service.name``.
    """

    exporter: Exporter = "otlp"
    endpoint: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    service_name: str | None = None
    capture_message_content: bool | None = None
    resource: Mapping[str, str] = field(default_factory=dict)
    export_delay_ms: int | None = None  # the batch processor's delay between exports (OTEL_BSP_SCHEDULE_DELAY)

    def __post_init__(self) -> None:
        if self.exporter not in _EXPORTERS:
            raise ConfigurationError(
                f"unknown tracing exporter {self.exporter!r}: use one of {', '.join(_EXPORTERS)}"
                " ('provider' uses the tracer provider your process set up)"
            )
        if self.export_delay_ms is not None and self.export_delay_ms <= 0:
            raise ConfigurationError(f"export_delay_ms must be positive, got {self.export_delay_ms}")
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"tracing endpoint {self.endpoint!r} is not an http(s) URL: give the OTLP/HTTP traces URL,"
                " such as http://localhost:4318/v1/traces (Phoenix: http://localhost:6006/v1/traces)"
            )


def _flag(value: str | None, name: str) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigurationError(f"{name}={value!r} is neither true nor false: set it to 1/true or 0/false")


def resolve(setting: bool | TracingConfig | None, environ: Mapping[str, str] | None = None) -> TracingConfig | None:
    """The tracing this process does (None: off), from an explicit setting and the environment (module docstring).

    The result is complete for another process: the endpoint, headers and service name read here travel with it,
    so actors export where the driver said even when their own environment differs.
    """
    env = os.environ if environ is None else environ
    if _flag(env.get("OTEL_SDK_DISABLED"), "OTEL_SDK_DISABLED"):
        return None
    if setting is False:
        return None
    if setting is None:
        exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
        turned_on = (
            _flag(env.get(TRACING_ENV), TRACING_ENV)
            or (exporter not in ("", "none"))
            or bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
        )
        if not turned_on:
            return None
        if exporter not in ("", "none", "otlp", "console"):
            raise ConfigurationError(
                f"OTEL_TRACES_EXPORTER={exporter!r}: think_actors exports traces with 'otlp' (OTLP/HTTP) or"
                " 'console'; send them to a collector over OTLP to reach another backend"
            )
        protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        if protocol and protocol not in ("http/protobuf",):
            raise ConfigurationError(
                f"OTLP protocol {protocol!r} is not supported: think_actors exports over http/protobuf"
                " (port 4318 of a collector; Phoenix serves it on 6006)"
            )
        setting = TracingConfig(exporter="console" if exporter == "console" else "otlp")
    config = TracingConfig() if setting is True else setting
    if not isinstance(config, TracingConfig):
        raise ConfigurationError(f"tracing must be True, False, None or a TracingConfig, got {setting!r}")
    if config.exporter == "otlp":
        config = replace(
            config,
            endpoint=config.endpoint or _endpoint(env),
            headers=dict(config.headers) or _headers(env),
        )
    capture = config.capture_message_content
    if capture is None:
        capture = bool(_flag(env.get(CAPTURE_CONTENT_ENV), CAPTURE_CONTENT_ENV))
    return replace(
        config,
        service_name=config.service_name or env.get("OTEL_SERVICE_NAME") or "think_actors",
        capture_message_content=capture,
    )


def _endpoint(env: Mapping[str, str]) -> str:
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if base:
        return base.rstrip("/") + "/v1/traces"
    return "http://localhost:4318/v1/traces"


def _headers(env: Mapping[str, str]) -> dict[str, str]:
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS") or env.get("OTEL_EXPORTER_OTLP_HEADERS") or ""
    headers: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigurationError(f"OTLP header {item.strip()!r} has no '=': write them as key1=value1,key2=value2")
        headers[key.strip()] = value.strip()
    return headers


def otel_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``OTEL_*`` and ``THINK_ACTORS_TRACING`` variables of this process, for the workers' runtime_env."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k.startswith("OTEL_") or k == TRACING_ENV}
