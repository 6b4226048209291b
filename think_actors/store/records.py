"""Durable records beside the messages: submissions, turn records, the chunk log and the effect ledger.

Everything that must survive a crash of the agent's process is one of these, written before it is acknowledged
(DESIGN §2). Records are plain mutable dataclasses; a store hands out copies, so changing one changes nothing
until it is written back with the store's ``update_*`` / ``put_*`` methods.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..messages import UIMessage

__all__ = [
    "SUBMISSION_STATUSES",
    "TERMINAL_SUBMISSION_STATUSES",
    "EffectRecord",
    "SubmissionRecord",
    "SubmissionStatus",
    "TurnRecord",
]

SubmissionStatus = Literal["pending", "running", "completed", "aborted", "skipped", "error"]
SUBMISSION_STATUSES: tuple[str, ...] = ("pending", "running", "completed", "aborted", "skipped", "error")
TERMINAL_SUBMISSION_STATUSES: frozenset[str] = frozenset({"completed", "aborted", "skipped", "error"})


@dataclass(kw_only=True, slots=True)
class SubmissionRecord:
    """One accepted ``submit_messages`` call (reference §1.7).

    ``seq`` is the store's insertion order (FIFO among equal ``created_at``); the store assigns it.
    ``messages_applied_at`` is set once the submission's turn appended its messages. ``traceparent`` is the W3C
    trace context of the span that submitted it (tracing on), which the drain's span links to.
    """

    submission_id: str
    request_id: str
    status: str
    messages: list[UIMessage]
    created_at: float
    idempotency_key: str | None = None
    metadata: dict[str, Any] | None = None
    error: str | None = None
    started_at: float | None = None
    completed_at: float | None = None
    messages_applied_at: float | None = None
    seq: int = 0
    traceparent: str | None = None


@dataclass(kw_only=True, slots=True)
class TurnRecord:
    """A turn in flight, written when it starts and removed (or marked) when it ends, so a restarted agent
    knows which turns a crash interrupted.

    ``input_ids`` are the ids of the messages the turn appended; ``message_id`` the assistant message it builds.
    ``attempts`` counts recovery attempts (reset when an attempt makes progress); ``data`` holds what recovery
    needs to re-run the turn (body, structured output type name, submission id, ...).
    """

    request_id: str
    trigger: str
    status: str
    started_at: float
    updated_at: float
    continuation: bool = False
    input_ids: list[str] = field(default_factory=list)
    message_id: str | None = None
    attempts: int = 0
    progress: int = 0
    submission_id: str | None = None
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True, slots=True)
class EffectRecord:
    """One tool call's effect: ``started`` before the tool runs, ``finished`` (with its output or error) after.

    ``key`` is ``<agent path>/<request id>/<tool call id>``. A ``started`` record without ``finished`` after a
    crash is "in doubt": the tool may or may not have had its effect.
    """

    key: str
    request_id: str
    tool_call_id: str
    tool_name: str
    status: str  # "started" | "finished"
    started_at: float
    input: Any = None
    output: Any = None
    error: str | None = None
    finished_at: float | None = None
