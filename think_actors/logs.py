"""Log context: every record of a ``think_actors`` logger names the agent and the request it was logged for.

Two attributes are added to each record whose logger is ``think_actors`` or below it (other libraries' records
are left alone): ``agent``, the agent path (``lead/team-1``), and ``request_id``, the running turn's request id;
``"-"`` where there is none. The engine sets both when a turn starts and restores them when it ends; an actor
that hosts an agent names it for the whole process, so records outside turns carry its path too.

``LOG_FORMAT`` shows them; agent actors log with it unless logging is configured already. Records of your own
loggers get the same attributes through ``LogContextFilter``, and ``log_context()`` returns the current values.
"""

from __future__ import annotations

import contextvars
import logging
from dataclasses import dataclass
from typing import Any

__all__ = ["LOG_FORMAT", "LogContext", "LogContextFilter", "configure_logging", "log_context"]

LOG_FORMAT = "%(asctime)s %(levelname)s [%(name)s agent=%(agent)s request=%(request_id)s] %(message)s"

_agent: contextvars.ContextVar[str | None] = contextvars.ContextVar("think_actors_log_agent", default=None)
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("think_actors_log_request", default=None)
_process_agent: str | None = None  # the agent an actor process hosts (set by the runtime)


@dataclass(frozen=True, kw_only=True, slots=True)
class LogContext:
    """The agent path and request id the running code logs for (None outside an agent or a turn)."""

    agent: str | None
    request_id: str | None


def log_context() -> LogContext:
    """The agent path and request id that records logged here and now carry."""
    return LogContext(agent=_agent.get() or _process_agent, request_id=_request_id.get())


def bind(agent: str, request_id: str | None) -> tuple[str | None, str | None]:
    """Name the agent and request of what runs from here on (a turn's start); returns what ``restore`` needs.

    A turn is an async generator, so this sets the context of whichever task iterates it; ``restore`` sets the
    previous values back rather than resetting a token, which would fail when the generator is closed elsewhere.
    """
    previous = (_agent.get(), _request_id.get())
    _agent.set(agent)
    _request_id.set(request_id)
    return previous


def restore(previous: tuple[str | None, str | None]) -> None:
    _agent.set(previous[0])
    _request_id.set(previous[1])


def set_process_agent(path: str | None) -> None:
    """Name the agent this process hosts (an agent actor): its records carry the path outside turns too."""
    global _process_agent
    _process_agent = path


def _annotate(record: logging.LogRecord) -> None:
    record.agent = _agent.get() or _process_agent or "-"
    record.request_id = _request_id.get() or "-"


class LogContextFilter(logging.Filter):
    """Adds ``agent`` and ``request_id`` to every record it sees; add it to your own loggers or handlers."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            _annotate(record)
        return True


def _install_record_factory() -> None:
    """Annotate the records of ``think_actors`` loggers as they are made, whatever handler formats them.

    A record factory (chained to the one in place, as Ray's own is) rather than a logger filter: a filter on
    ``think_actors`` would miss records of ``think_actors.gateway`` and the other child loggers.
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "_think_actors", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        name = record.name  # None from logging.makeLogRecord, which fills the record in afterwards
        if isinstance(name, str) and (name == "think_actors" or name.startswith("think_actors.")):
            _annotate(record)
        return record

    factory._think_actors = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def configure_logging(level: int) -> None:
    """Set the ``think_actors`` loggers' level; log to stderr with ``LOG_FORMAT`` unless a handler exists.

    Called in every actor process: there the root logger has no handler, so records would otherwise reach only
    Python's last-resort handler (warnings and up, message text alone).
    """
    logger = logging.getLogger("think_actors")
    logger.setLevel(level)
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler.addFilter(LogContextFilter())  # should a later record factory not chain to ours
        logger.addHandler(handler)


_install_record_factory()
