"""What a turn is asked to do (``TurnSpec``), how it ended (``TurnOutcome``), and its input as messages."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from ..channels import DEFAULT_CHANNEL
from ..errors import (
    ConfigurationError,
)
from ..hooks import ChatResponseResult
from ..identity import Principal
from ..limits import RunLimits, RunUsage
from ..messages import UIMessage, user_message
from ..models import Usage
from ..run_account import RunTicket
from ..turn_metadata import latest_channel, latest_principal, latest_turn_metadata
from .abort import AbortSignal
from .engine import Engine
from .run import TurnStats

__all__ = ["TurnOutcome", "TurnSpec", "normalize_input", "resolve_turn_facts"]


@dataclass(slots=True)
class TurnOutcome:
    """How a turn ended: ``ChatStream.outcome`` (and an ``AgentHandle``'s stream's) once the stream has ended.

    ``status`` is ``completed``, ``error``, ``aborted`` or ``skipped``; ``message`` the assistant message the turn
    stored (None when it stored none); ``error`` the text ``on_chat_error`` chose; ``output`` the structured output
    (``output=``); ``classification`` what ``classify_chat_error`` said of its error; ``usage`` and ``cost_usd``
    what its model requests used and cost. ``tree_usage`` is what the turn and every agent it started used
    together (its requests, tool calls, tokens, cost and child agents); ``limit`` names the ``RunLimits`` field that
    ended the turn, when one did.
    """

    status: str = "completed"
    message: UIMessage | None = None
    error: str | None = None
    output: Any = None
    classification: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    tree_usage: RunUsage = field(default_factory=RunUsage)
    limit: str | None = None


@dataclass(slots=True)
class TurnSpec:
    request_id: str
    trigger: str
    signal: AbortSignal
    generation: int
    input: Any = None  # None: no new input (continuation); list of messages; or a function of the transcript
    continuation: bool = False
    body: dict[str, Any] | None = None
    client_tools: list[Any] = field(default_factory=list)
    raise_setup_errors: bool = False  # blocking callers get the exception; streams get an error chunk
    output: Any = None  # structured output type, unless before_turn sets one
    submission_id: str | None = None
    branch_from: str | None = None  # a regeneration: the id of the message the new reply answers
    # Tool calls recovery runs before the model's turn: the transcript repair leaves them waiting, so a crash
    # before they ran does not leave them stored as "interrupted" (the next recovery runs them again).
    reruns: frozenset[str] = frozenset()
    recover: Any = None  # the TurnRecord of an interrupted turn this turn recovers
    recover_body: Callable[[Engine, TurnSpec], AsyncGenerator[Any, None]] | None = None  # runs it, in the slot
    should_apply: Callable[[], Awaitable[bool]] | None = None  # checked before the input is appended (submissions)
    on_applied: Callable[[], Awaitable[None]] | None = None  # after the input was appended
    # A submission's status: written after the response hook, while the record (marked finished) still exists.
    on_finished: Callable[[TurnOutcome], Awaitable[None]] | None = None
    finalize: Callable[[], Awaitable[None]] | None = None  # what ``finish`` left for after the response hook
    resumed: bool = False  # handed to recovery (a stalled stream, a dead model server), which finishes it
    limits: RunLimits | None = None  # a run starts here with these (unless ``run`` says it belongs to one)
    run: RunTicket | None = None  # the run this turn belongs to (set when the turn starts, or by a parent)
    # Who sent the turn (set by the server, never by a client): stamped on its user messages, seen by every hook.
    principal: Principal | None = None
    channel: str | None = None  # where it came from (resolved when the turn starts: given, the conversation's, web)
    metadata: dict[str, Any] | None = None  # the turn's own facts (Think's turnMetadata), stamped like the principal
    final_answer: bool = False  # structured output through a final-answer tool (a workflow prompt: final_answer.py)
    outcome: TurnOutcome = field(default_factory=TurnOutcome)
    response: ChatResponseResult | None = None  # what on_chat_response gets once the slot is released
    stats: TurnStats = field(default_factory=TurnStats)  # steps, tokens, tool calls: for chat:turn:finish


class _Aborted(Exception):
    pass


class _SetupFailed(Exception):
    """A setup failure already reported through on_chat_error; ``raised`` is what a blocking caller gets."""

    def __init__(self, raised: BaseException):
        self.raised = raised


def normalize_input(value: Any) -> list[UIMessage]:
    """Messages from a str, a UIMessage, a dict in wire form, or a list of those."""
    if value is None:
        return []
    if isinstance(value, str):
        return [user_message(value)]
    if isinstance(value, UIMessage):
        return [value]
    if isinstance(value, dict):
        try:
            return [UIMessage.model_validate(value)]
        except ValidationError as err:
            raise ConfigurationError(
                f"invalid message: {err.error_count()} problem(s): {err.errors()[0]['msg']} "
                f"at {'.'.join(str(p) for p in err.errors()[0]['loc'])}"
            ) from None
    if isinstance(value, list | tuple):
        return [m for item in value for m in normalize_input(item)]
    raise ConfigurationError(f"cannot make messages of {type(value).__name__}: pass str, UIMessage or a list")


def resolve_turn_facts(spec: TurnSpec, messages: list[UIMessage]) -> None:
    """Who sent the turn, its channel and its metadata, where its caller did not say: from the latest user message
    of ``messages`` (its new input, else the conversation), else nobody, ``web`` and none."""
    if spec.principal is None:
        spec.principal = latest_principal(messages)
    if spec.metadata is None:
        facts = latest_turn_metadata(messages)
        if facts is not None:
            facts.pop("principal", None)
            spec.metadata = facts or None
    if spec.channel is None:
        spec.channel = latest_channel(messages) or DEFAULT_CHANNEL
