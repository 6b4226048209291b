"""The SDK side: a tracer provider with an exporter, installed once per process (the ``otel`` extra).

Imported only when tracing is on with an exporter of ours; without the extra the import fails and
``switch.configure`` says what to install.
"""

from __future__ import annotations

import os

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from .config import TracingConfig

__all__ = ["flush", "install", "uninstall"]

_installed: tuple[TracingConfig, SpanProcessor] | None = None


def install(config: TracingConfig) -> None:
    """Export this process's spans as ``config`` says (once: a second call with the same config does nothing).

    A process that already set an SDK tracer provider (your own set-up) gets our exporter added to it; otherwise
    ours becomes the global provider, with ``service.name`` and the config's resource attributes.
    """
    global _installed
    if _installed is not None:
        if _installed[0] == config:
            return
        _installed[1].shutdown()  # the previous exporter's spans are flushed; new spans go the new way
    exporter: SpanExporter
    if config.exporter == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=config.endpoint, headers=dict(config.headers) or None)
    processor = BatchSpanProcessor(exporter, schedule_delay_millis=config.export_delay_ms)
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        # process.pid tells the actors apart: on Ray every agent is a process of its own.
        resource = Resource.create(
            {"service.name": config.service_name or "think_actors", "process.pid": os.getpid(), **config.resource}
        )
        provider = TracerProvider(resource=resource)
        trace.set_tracer_provider(provider)
    provider.add_span_processor(processor)
    _installed = (config, processor)


def flush(timeout_s: float) -> bool:
    """Export what this process's provider holds; True when everything went out in time."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        return provider.force_flush(int(timeout_s * 1000))
    return True


def uninstall() -> None:
    """Stop exporting: the processor exports what it holds, then drops what later spans reach it."""
    global _installed
    if _installed is not None:
        _installed[1].shutdown()
        _installed = None
