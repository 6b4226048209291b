"""Hook contexts, configs and decisions: what each lifecycle hook of ``Think`` receives and may return.

Contexts are frozen, keyword-only dataclasses; new fields go at the end with defaults so no override breaks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .identity import Principal
from .limits import RunUsage
from .messages import FilePart, SourceUrlPart, UIMessage
from .models import ModelClient, ModelEvent, ModelRequest, Usage

if TYPE_CHECKING:
    from .tools import Tool

__all__ = [
    "Allow",
    "Block",
    "ChatErrorContext",
    "ChatErrorStage",
    "ChatRecoveryConfig",
    "ChatRecoveryContext",
    "ChatResponseResult",
    "ChunkContext",
    "ContextOverflowConfig",
    "ErrorClassification",
    "Fail",
    "Proactive",
    "ReconcileDecision",
    "RecoveryDecision",
    "Rerun",
    "StepConfig",
    "StepContext",
    "StepResponse",
    "StepResult",
    "StopCondition",
    "Substitute",
    "ToolCall",
    "ToolCallContext",
    "ToolCallDecision",
    "ToolCallResultContext",
    "ToolReconcileContext",
    "ToolResult",
    "TurnConfig",
    "TurnContext",
    "TurnStatus",
    "has_tool_call",
    "step_count_is",
]

TurnStatus = Literal["completed", "error", "aborted", "skipped"]
ChatErrorStage = Literal["parse", "persist", "turn", "stream", "recovery", "transcript"]
ErrorClassification = Literal["context_overflow", "rate_limit", "transient", "fatal", "unknown"]

_UNSET: Any = object()


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCall:
    tool_call_id: str
    tool_name: str
    input: Any


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolResult:
    tool_call_id: str
    tool_name: str
    input: Any
    output: Any = None
    error: str | None = None

    @property
    def success(self) -> bool:
        return self.error is None


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResponse:
    """The provider's side of a step: the response id, the model the provider says answered, when it answered
    (unix seconds), and the messages the step adds to the conversation (OpenAI format)."""

    id: str | None = None
    model: str | None = None
    timestamp: float | None = None
    messages: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class StepResult:
    """What one step (one model request and its tool calls) produced: the AI SDK's step record.

    ``model`` is the model id the request named; ``response.model`` what the provider reports. ``request`` is
    the request as sent. ``cost_usd`` comes from litellm's price table when the model is priced, else None.
    """

    step_number: int
    text: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]
    tool_results: tuple[ToolResult, ...]
    finish_reason: str
    usage: Usage
    model: str = ""
    files: tuple[FilePart, ...] = ()
    sources: tuple[SourceUrlPart, ...] = ()
    warnings: tuple[str, ...] = ()
    request: ModelRequest | None = None
    response: StepResponse = field(default_factory=StepResponse)
    provider_metadata: dict[str, Any] | None = None
    cost_usd: float | None = None

    @property
    def reasoning_text(self) -> str:
        return self.reasoning


StopCondition = Callable[[Sequence[StepResult]], bool | Awaitable[bool]]


def step_count_is(count: int) -> StopCondition:
    """Stop once ``count`` steps have run."""
    return lambda steps: len(steps) >= count


def has_tool_call(name: str) -> StopCondition:
    """Stop after a step that called the tool ``name``."""
    return lambda steps: bool(steps) and any(c.tool_name == name for c in steps[-1].tool_calls)


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnContext:
    """What ``before_turn`` sees: the turn as assembled, before any override.

    ``messages`` are the OpenAI-format messages the model will get (repaired, truncated, converted);
    ``tools`` are the merged tools by name; ``body`` is the caller's custom body, if any; ``principal`` who sent
    the turn, as the server authenticated them (a gateway's user, or ``chat(..., principal=...)``), else None;
    ``channel`` where it came from (``chat(..., channel=...)``, else the conversation's, else ``"web"``) and
    ``metadata`` its own facts (``chat(..., metadata=...)``, Think's turn metadata), both also read back by a
    continuation or a recovery from the latest user message.
    """

    request_id: str
    system: str
    messages: list[dict[str, Any]]
    tools: dict[str, Tool]
    model: str | ModelClient | None
    continuation: bool
    body: dict[str, Any] | None = None
    trigger: str = "programmatic"
    principal: Principal | None = None
    channel: str = "web"
    metadata: dict[str, Any] | None = None


StreamTransform = Callable[[AsyncIterator[ModelEvent]], AsyncIterator[ModelEvent]]
"""``TurnConfig.transform``: a step's stream of model events in, the stream the turn uses out."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnConfig:
    """What ``before_turn`` may return; every field is optional and None means "keep".

    ``instructions`` (preferred) or ``system`` replaces the system prompt; ``messages`` replaces the model
    messages; ``tools`` adds tools (by name, later wins); ``active_tools`` restricts the tools offered;
    ``stop_when`` conditions are added to the ``max_steps`` bound; ``output`` is a pydantic model class for
    structured output (the validated object is ``TurnResult.output``; a final answer that does not validate
    makes the turn's status ``error`` with the reason in ``TurnResult.error``); ``repair_tool_call`` is
    ``async (ctx: ToolRepairContext) -> dict | None``, called for an unknown tool or invalid input and
    returning repaired input (re-validated) or None to keep the error. ``chat_stream_stall_timeout_s`` overrides
    the agent's stall watchdog for this turn (0 turns it off).

    ``transform`` (the reference's ``experimental_transform``) rewrites the model's stream: a function of each
    step's stream of model events (``TextDelta``, ``ReasoningDelta``, ``ToolCallDelta``, ``FinishEvent``, ... from
    ``think_actors.models``) returning the stream to use instead, most simply an async generator function::

        async def shout(events):
            async for event in events:
                yield TextDelta(event.text.upper()) if isinstance(event, TextDelta) else event

    It may change, drop or add events. Everything downstream sees what it yields: ``on_chunk``, the step's
    result, the stored reply and the caller's stream. It is called once per step with that step's stream, and
    closed (with the model's stream) when the step ends or the turn is aborted; raising in it fails the turn as
    a model error would. None (the default) costs nothing.
    """

    model: str | ModelClient | None = None
    instructions: str | None = None
    system: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: Sequence[Any] | None = None
    active_tools: Sequence[str] | None = None
    tool_choice: Any = None
    max_steps: int | None = None
    stop_when: Sequence[StopCondition] | None = None
    send_reasoning: bool | None = None
    output: Any = None
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    stop_sequences: Sequence[str] | None = None
    seed: int | None = None
    max_retries: int | None = None
    timeout_s: float | None = None
    headers: dict[str, str] | None = None
    provider_options: dict[str, Any] | None = None
    repair_tool_call: Callable[[Any], Awaitable[Any]] | None = None
    context_overflow: ContextOverflowConfig | None = None
    chat_stream_stall_timeout_s: float | None = None
    transform: StreamTransform | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Proactive:
    """Compact before a step when the previous step's input tokens reached ``headroom * max_input_tokens``.

    ``max_input_tokens`` None takes the model's context window from litellm's model table (through the model
    client) when it is known; without a window the guard stays off. At most ``max_compactions`` compactions per
    turn (an attempt that could not shorten the history counts too).
    """

    max_input_tokens: int | None = None
    headroom: float = 0.9
    max_compactions: int = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextOverflowConfig:
    """Context-window overflow recovery (class attribute ``context_overflow``, or per turn in ``TurnConfig``).

    ``reactive``: when a model request fails and ``classify_chat_error`` says ``"context_overflow"``, discard
    the failed attempt's partial reply, compact the history (the session's compaction function) and run the turn
    again, at most ``max_retries`` times; when compaction cannot shorten the history or the retries are spent,
    the turn fails through ``on_chat_error`` with ``classification="context_overflow"``. Continuation turns are
    never retried. ``proactive``: see ``Proactive``.
    """

    reactive: bool = True
    max_retries: int = 1
    proactive: Proactive | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class StepContext:
    """What ``before_step`` sees: the step about to run (0-based) and the steps before it in this turn."""

    request_id: str
    step_number: int
    steps: tuple[StepResult, ...]
    model: str | ModelClient
    messages: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True, slots=True)
class StepConfig:
    """What ``before_step`` may return for this step only; None means "keep"."""

    model: str | ModelClient | None = None
    tool_choice: Any = None
    active_tools: Sequence[str] | None = None
    instructions: str | None = None
    system: str | None = None
    messages: list[dict[str, Any]] | None = None
    provider_options: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChunkContext:
    """One model-level stream part: ``type`` is ``text-delta``, ``reasoning-delta``, ``tool-input-start``,
    ``tool-input-delta``, ``tool-call`` or ``tool-result``."""

    request_id: str
    step_number: int
    type: str
    text: str | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    input: Any = None
    output: Any = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallContext:
    """A tool call about to run (its input already validated against the tool's schema)."""

    request_id: str
    tool_call_id: str
    tool_name: str
    input: Any
    step_number: int
    messages: list[dict[str, Any]]
    dynamic: bool = False


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionAuthorization:
    """What ``authorize_turn`` or ``authorize_action`` decides (Think's ``ActionAuthorizationDecision``): whether
    actions may run, why not (the model sees the reason), and, from ``authorize_turn``, which permissions this
    turn's actions have (None: all)."""

    allowed: bool = True
    reason: str | None = None
    granted_permissions: tuple[str, ...] | None = None

    @classmethod
    def of(cls, decision: Any) -> ActionAuthorization:
        """A hook's answer as a decision: None or True allows, False refuses, a str refuses with that reason."""
        if decision is None or decision is True:
            return cls()
        if decision is False:
            return cls(allowed=False)
        if isinstance(decision, str):
            return cls(allowed=False, reason=decision)
        if isinstance(decision, ActionAuthorization):
            return decision
        raise TypeError(
            f"an authorization hook returns None, a bool, a reason (str) or ActionAuthorization, not {decision!r}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionAuthorizationContext:
    """An action call to authorize (``authorize_action``): its input is known, and so are the permissions it
    needs; ``granted_permissions`` is what ``authorize_turn`` granted the turn (None: everything)."""

    request_id: str
    tool_call_id: str
    action: str
    kind: str
    input: Any
    required_permissions: tuple[str, ...]
    granted_permissions: tuple[str, ...] | None
    principal: Principal | None = None
    turn_allowed: bool = True  # authorize_turn allowed the turn's actions
    turn_reason: str | None = None  # why not, when it did not


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolCallResultContext:
    """A finished tool call. ``input`` is the model's input even when ``before_tool_call`` replaced it."""

    request_id: str
    tool_call_id: str
    tool_name: str
    input: Any
    step_number: int
    success: bool
    output: Any = None
    error: str | None = None
    duration_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Allow:
    """Run the tool; with ``input`` given, run it with that input instead (not re-validated)."""

    input: Any = _UNSET

    @property
    def replaces_input(self) -> bool:
        return self.input is not _UNSET


@dataclass(frozen=True, slots=True)
class Block:
    """Skip the tool; the model sees ``reason`` (or a default sentence) as its output."""

    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Substitute:
    """Skip the tool; the model sees ``output`` as its result."""

    output: Any


ToolCallDecision = Allow | Block | Substitute


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatResponseResult:
    """A finished turn: the assistant message (possibly with no parts) and how the turn ended. ``usage`` and
    ``cost_usd`` are this agent's own model requests; ``tree_usage`` adds every agent the turn started (the whole
    run, for the run's first turn); ``limit`` names the ``RunLimits`` field that ended the turn, when one did;
    ``principal`` who sent the turn (``TurnContext.principal``)."""

    request_id: str
    message: UIMessage
    status: Literal["completed", "error", "aborted"]
    continuation: bool = False
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    tree_usage: RunUsage = field(default_factory=RunUsage)
    limit: str | None = None
    principal: Principal | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatErrorContext:
    """Where a turn failed: ``stage`` is ``persist`` (resolving or storing the input), ``turn`` (setup:
    ``before_turn``, no model, no messages), ``transcript`` (repairing the transcript), ``stream`` (the model
    request or anything after it, hooks included), ``parse`` (a malformed client frame) or ``recovery``.
    ``messages_persisted`` tells whether the user's input is already stored; ``classification`` is set only on
    the final call for a context overflow that recovery could not save."""

    request_id: str | None
    stage: ChatErrorStage
    messages_persisted: bool = False
    classification: ErrorClassification | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class TurnResult:
    """What a blocking entry point returns. ``message`` is the assistant message the turn wrote, if any.
    ``usage`` and ``cost_usd``: this agent's own model requests; ``tree_usage``: the turn and every agent it started,
    together; ``limit``: the ``RunLimits`` field that ended the turn, when one did."""

    request_id: str
    status: TurnStatus
    message: UIMessage | None = None
    error: str | None = None
    continuation: bool = False
    output: Any = field(default=None)
    usage: Usage | None = None
    cost_usd: float | None = None
    tree_usage: RunUsage = field(default_factory=RunUsage)
    limit: str | None = None


# ---------------------------------------------------------------------- durable turns: recovery after a crash


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRecoveryConfig:
    """How hard an agent tries to finish turns a crash interrupted (class attribute ``chat_recovery``).

    ``max_attempts``: recovery attempts per turn without progress (an attempt that got further than the last
    one resets the count). ``max_total_attempts``: the work budget, progress or not. ``no_progress_timeout_s``:
    a turn whose last progress is older than this is not resumed. ``enabled=False`` ends interrupted turns
    instead of resuming them (their settled tool results are still kept).

    This budget, not Ray's restart count, ends a crash loop: each attempt is counted in the store before it
    runs, so a turn that kills its process every time is given up at the restart after the budget is spent (the
    turn ends with an error, ``on_chat_recovery_exhausted`` fires once) and the agent takes the next turn. On Ray
    that needs the actor to be restarted that often: ``ta.init``'s default ``max_restarts=-1`` always restarts it.
    """

    enabled: bool = True
    max_attempts: int = 3
    max_total_attempts: int = 10
    no_progress_timeout_s: float = 3600.0


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatRecoveryContext:
    """An interrupted turn found after a restart. ``kind`` is ``"continue"`` (a partial reply exists: resume
    it) or ``"retry"`` (the user's message was never answered: run the turn again). ``partial`` is the reply as
    rebuilt from the chunk log, with tool results from the effect ledger; ``attempt`` counts from 1."""

    request_id: str
    trigger: str
    kind: Literal["continue", "retry"]
    attempt: int
    max_attempts: int
    partial: UIMessage | None = None
    submission_id: str | None = None
    reason: str | None = None  # set on the exhaustion hook: why recovery gave up


@dataclass(frozen=True, kw_only=True, slots=True)
class RecoveryDecision:
    """What ``on_chat_recovery`` may return: ``persist`` keeps the partial reply (False keeps only its settled
    tool results), ``resume`` runs the continuation or retry (False ends the turn here)."""

    persist: bool = True
    resume: bool = True


@dataclass(frozen=True, kw_only=True, slots=True)
class ToolReconcileContext:
    """A tool call that started before the crash and has no recorded end: it may or may not have had its effect.

    ``idempotent`` is the tool's declaration; ``started_at`` when the call started (unix seconds).
    """

    request_id: str
    tool_call_id: str
    tool_name: str
    input: Any
    idempotent: bool
    started_at: float


@dataclass(frozen=True, slots=True)
class Rerun:
    """Run the in-doubt call again (the default for idempotent tools)."""


@dataclass(frozen=True, slots=True)
class Fail:
    """Settle the in-doubt call with an error result the model sees (the default for other tools)."""

    error: str


ReconcileDecision = Rerun | Substitute | Fail
