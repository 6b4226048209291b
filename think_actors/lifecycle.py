"""Think's lifecycle hooks, declared in one place: when each fires, whether the turn lock is held, what returning
and raising do. ``Think`` inherits them; override the ones you need (every default is a no-op or the documented
default). The reference semantics are in ``shared/reference/think-semantics.md`` §4.
"""

from __future__ import annotations

from typing import Any

from ._turn.convert import default_repair
from .hooks import (
    ActionAuthorization,
    ActionAuthorizationContext,
    ChatErrorContext,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    ErrorClassification,
    ReconcileDecision,
    RecoveryDecision,
    StepConfig,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    ToolReconcileContext,
    TurnConfig,
    TurnContext,
)
from .messages import MessagePart, ToolPart
from .session import Session
from .submissions import Submission

__all__ = ["LifecycleHooks"]


class LifecycleHooks:
    """The hooks of a Think agent and their defaults (``Think`` is the class to subclass)."""

    async def configure_session(self, session: Session) -> Session | None:
        """Configure the session once, when the agent starts (before its history loads).

        Return the session (or a replacement); None keeps it. Raising fails the agent's start.
        """
        return session

    async def before_turn(self, ctx: TurnContext) -> TurnConfig | None:
        """Change the turn before its first model request. Turn lock held; once per turn, every entry point.

        Return a TurnConfig to override the model, prompt, messages, tools, limits or sampling, or to rewrite the
        model's stream (``transform``, an async generator function over each step's model events); None keeps all.
        Raising fails the turn (stage ``turn``): ``chat`` streams an error chunk, ``save_messages`` raises.
        """
        return None

    async def authorize_turn(self, ctx: TurnContext) -> bool | str | ActionAuthorization | None:
        """Decide what this turn's actions may do, after ``before_turn`` and before the first model request. Turn
        lock held; once per turn, every entry point (recoveries and continuations included).

        ``ctx.principal`` is who sent the turn. Return None or True to allow every action, False or a reason (str)
        to refuse them all (each call answers with an ``ActionAuthorizationError`` the model sees; the turn goes
        on), or ``ActionAuthorization(granted_permissions=(...))`` to allow only actions whose permissions are all
        granted (Think's ``authorizeTurn``). Ordinary tools are not affected. Raising fails the turn.
        """
        return None

    async def authorize_action(self, ctx: ActionAuthorizationContext) -> bool | str | ActionAuthorization | None:
        """Decide whether one action call may run, once its input and the permissions it needs are known (Think's
        ``authorizeAction``). Runs in the action's call; a durable-pause action is authorized when it parks.

        The default enforces ``authorize_turn``'s decision: refused when the turn's actions are, else allowed when
        every permission the action needs was granted (``ctx.granted_permissions`` None: all were). Return None or
        True to allow, False or a reason (str) to refuse: the call's output is then
        ``{"error": {"name": "ActionAuthorizationError", "message": ..., "permissions": [...]}}``.
        """
        if not ctx.turn_allowed:
            return ActionAuthorization(allowed=False, reason=ctx.turn_reason)
        granted = ctx.granted_permissions
        if granted is None:
            return None
        missing = [p for p in ctx.required_permissions if p not in granted]
        return f"Missing required permission: {', '.join(missing)}" if missing else None

    async def before_step(self, ctx: StepContext) -> StepConfig | None:
        """Change one step before its model request. Turn lock held; once per step.

        Return a StepConfig (model, tool_choice, active_tools, instructions, messages, provider_options) for this
        step only; None keeps all. Raising ends the turn with an error.
        """
        return None

    async def on_chunk(self, ctx: ChunkContext) -> None:
        """Observe each model-level stream part (text, reasoning, tool input, tool call, tool result).

        Turn lock held; awaited, so a slow hook slows the stream. Not called at all unless overridden. The
        return value is ignored; raising ends the turn with an error (the partial reply is kept).
        """

    async def before_tool_call(self, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Decide whether a tool call runs. Turn lock held; once per call, calls of a step concurrently.

        Return None or Allow() to run it, Allow(input=...) to run it with new input, Block(reason) to skip it,
        or Substitute(output) to answer for it. Raising becomes a tool error the model sees; the turn goes on.
        """
        return None

    async def after_tool_call(self, ctx: ToolCallResultContext) -> None:
        """Observe a finished tool call (success, output or error, duration), blocked and substituted ones too.

        Turn lock held; once per executed call, as each finishes. The return value is ignored. Raising ends the
        turn with an error (the partial reply is kept). Not called in a process whose agent a newer process took
        over (its store refused the call's result): the newer owner settles the call and calls it there.
        """

    async def on_step_finish(self, ctx: StepResult) -> None:
        """Observe a finished step: the whole step record (text, reasoning, files, sources, tool calls and
        results, finish reason, usage, warnings, request, response id/model/timestamp, provider metadata, cost).

        Turn lock held; once per step, after its tool calls, before the next step. The return value is ignored.
        Raising ends the turn with an error (stage ``stream``; the partial reply is kept).
        """

    async def on_chat_response(self, result: ChatResponseResult) -> None:
        """Observe a finished turn whose assistant message was persisted. Turn lock already released.

        Fires for every entry point (``chat``, child-agent calls, ``save_messages``, ``continue_last_turn``) with
        ``completed`` (even for an empty reply), ``aborted``, or ``error`` when a partial reply with at least one
        part was persisted; a turn that fails before any part exists fires only ``on_chat_error``. Not fired for
        skipped turns or for an attempt discarded by context-overflow recovery, nor in a process whose agent a
        newer process took over mid-turn (its store refused the reply): the newer owner finishes the turn and
        fires it there.

        The lock is released before this runs (the seed's contract; the reference's code runs it inside the
        slot), so ``save_messages``, ``continue_last_turn`` and ``chat`` work here: the new turn queues behind
        turns already waiting, and the next queued turn may start while this hook runs. The entry point that ran
        the turn returns only after this hook finished. A turn started from here does not fire this hook again
        (re-entrancy guard), so a follow-up turn does not recurse. Raising is logged and ignored.
        """

    async def on_chat_error(self, error: BaseException, ctx: ChatErrorContext) -> Any:
        """Choose the error to report for a failed turn. Called exactly once per failed turn, at every stage
        (not in a process whose agent a newer process took over: its turn ends quietly there).

        Stages (``ctx.stage``): ``persist`` (the input could not be resolved or stored), ``turn`` (setup: no
        model, no messages, ``before_turn`` raising), ``transcript`` (repairing the transcript failed),
        ``stream`` (a provider error before or during the stream, an error event inside it, a hook or the
        consumer raising). ``ctx.messages_persisted`` says whether the user's input is stored;
        ``ctx.classification`` is ``"context_overflow"`` only when overflow recovery could not save the turn.
        The partial reply, if any, is persisted before this runs. Turn lock held.

        This is the seed's contract (the reference's code skips in-band stream errors): return the error
        (default), a replacement exception, or any value; its message (``str(x)``) is what every caller sees —
        the ``error`` chunk, ``TurnResult.error``, the exception ``save_messages`` raises for a setup failure,
        and the ``chat:request:failed`` event. Returning None keeps the error. Raising is logged and the original
        error is reported.
        """
        return error

    async def classify_chat_error(self, error: Any, ctx: ChatErrorContext) -> ErrorClassification | None:
        """Classify a failed model request, before ``on_chat_error``; None (the default) means no opinion.

        Called only when ``context_overflow.reactive`` is on, with ``ctx = ChatErrorContext(stage="stream",
        request_id=...)`` (so it may ``self.cancel_chat(ctx.request_id)`` to stop the recovery). ``error`` is the
        project's error — ``ContextOverflowError``, or a ``ProviderError`` with ``status_code`` and the
        provider's ``response_body`` — or, for an error event inside the stream, the error text as a ``str``.
        ``"context_overflow"`` starts compact-and-retry; the other categories are reserved: they change nothing
        and are not passed to ``on_chat_error``. For the shipped classifier, return
        ``ta.default_context_overflow_classifier(error, ctx)`` from your override. May be sync or async. Turn lock
        held. Raising counts as no opinion.
        """
        return None

    async def on_chat_recovery(self, ctx: ChatRecoveryContext) -> RecoveryDecision | dict[str, bool] | None:
        """Decide how a turn a crash interrupted is finished, when the agent starts again. Turn lock held.

        ``ctx.kind`` is ``"continue"`` (a partial reply exists) or ``"retry"`` (the user's message is unanswered).
        Return ``RecoveryDecision(persist=..., resume=...)`` (or ``{"persist": ..., "continue": ...}``): persist
        False keeps only the partial's settled tool results; resume False ends the turn without a continuation.
        None keeps both True. Raising is logged and the defaults apply.
        """
        return None

    async def on_chat_recovery_exhausted(self, ctx: ChatRecoveryContext) -> None:
        """Observe a turn recovery gave up on (``ctx.reason``: ``max_attempts``, ``work_budget``,
        ``no_progress_timeout``, ``disabled``); ``on_chat_error`` then reports it (stage ``recovery``).
        Raising is logged and ignored."""

    async def reconcile_tool_call(self, ctx: ToolReconcileContext) -> ReconcileDecision | None:
        """Decide a tool call that started before a crash and has no recorded end (it may have had its effect).

        Return ``Rerun()`` to run it again, ``Substitute(output)`` to settle it with a result, or
        ``Fail(error)`` to settle it with an error the model sees. None (the default) re-runs tools declared
        ``idempotent=True`` and fails the others, saying their outcome is unknown — a payment tool is never
        charged twice. Raising settles the call with an error. Turn lock held.
        """
        return None

    async def on_submission_status(self, submission: Submission) -> None:
        """Observe a submission's status change: accepted (``pending``), ``running``, and its final status.

        Awaited before the change is reported on (``submit_messages`` returns after the ``pending`` call). The
        turn lock may or may not be held. The return value is ignored; raising is logged and ignored.
        """

    def repair_interrupted_tool_part(self, part: ToolPart) -> ToolPart | MessagePart | None:
        """Repair a tool call that has no result, before the next model request sees the transcript.

        Turn lock held; once per unsettled tool part (except ``approval-responded``) of a turn's transcript.
        Return the part to keep (default: an error result), another part (e.g. a text part), or None to drop
        it; the repaired message is persisted. Raising fails the turn's setup (stage ``turn``).
        """
        return default_repair(part)
