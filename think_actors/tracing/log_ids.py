"""Trace and span ids on log records: a record logged under a span names it, so a backend joins logs to traces.

Installed when tracing turns on (never before: off, records are not touched). Every record of a
``think_actors`` logger gets ``trace_id`` and ``span_id`` (32 and 16 hex digits, ``"-"`` outside any span), as
the record factory of ``think_actors.logs`` adds the agent and the request. ``TRACE_LOG_FORMAT`` shows them;
``TraceContextFilter`` adds the same attributes to the records of your own loggers or handlers.
"""

from __future__ import annotations

import logging
from typing import Any

from opentelemetry import trace

from ..logs import LOG_FORMAT

__all__ = ["TRACE_LOG_FORMAT", "TraceContextFilter", "install"]

TRACE_LOG_FORMAT = LOG_FORMAT.replace("] %(message)s", " trace=%(trace_id)s span=%(span_id)s] %(message)s")


def _annotate(record: logging.LogRecord) -> None:
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        record.trace_id = format(context.trace_id, "032x")
        record.span_id = format(context.span_id, "016x")
    else:
        record.trace_id = record.span_id = "-"


class TraceContextFilter(logging.Filter):
    """Adds ``trace_id`` and ``span_id`` to every record it sees; add it to your own loggers or handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "trace_id"):
            _annotate(record)
        return True


def install() -> None:
    """Annotate the records of ``think_actors`` loggers as they are made (a record factory chained to the one in
    place, for the reason ``think_actors.logs`` gives); once per process."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_think_actors_trace", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        name = record.name
        if isinstance(name, str) and (name == "think_actors" or name.startswith("think_actors.")):
            _annotate(record)
        return record

    factory._think_actors_trace = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
