"""Actions (Think's ``action()``): tools whose side effect is worth guarding.

An action is a tool with four guards around its function, in this order:

1. **Permissions.** It names the permissions it needs (a list, or a function of its input); ``authorize_action``
   decides, by default allowing what ``authorize_turn`` granted the turn. Refused, the call's output is an
   ``ActionAuthorizationError`` envelope the model reads; nothing runs.
2. **Approval.** ``kind="approval-gated"`` asks a person as any tool with ``needs_approval`` does: the turn ends
   at the call, and the answer (the approval frame, ``add_tool_approval``) runs it in a continuation.
   ``kind="durable-pause"`` parks instead: the call answers ``{"status": "paused", "executionId": "actpause_..."}``
   at once, the turn ends, and the approval may come hours or days later, after restarts and from anywhere
   (``pending_approvals()``, ``approve_execution(id)``, ``reject_execution(id, reason)`` on the agent or its
   handle). Approving runs the function then; either answer replaces the paused output in the conversation and
   continues it with no socket needed.
3. **The ledger.** Each run is keyed (``action:<name>:<idempotency key>``, else the tool call's id) in the agent's
   store: a settled key replays its stored result instead of running again; the same key with another input is an
   ``ActionKeyConflict`` (a programming error); a key whose run never finished (its process died) answers
   ``ActionPendingError`` rather than risk a second side effect, unless it has an explicit idempotency key and its
   lease (5 minutes) has passed, when it runs again.
4. **Limits.** A timeout (30 s by default) and an output cap (20,000 characters: longer text is cut, a longer
   JSON value becomes a preview) bound what reaches the model; an exception becomes an ``{"error": {"name",
   "message"}}`` envelope the model reads instead of failing the turn.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import time
import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

from pydantic import BaseModel

from .errors import ConfigurationError
from .hooks import ActionAuthorization, ActionAuthorizationContext
from .messages import TextPart, ToolPart, UIMessage, new_id
from .tools import Tool, ToolContext, _tool_from_function

__all__ = [
    "ACTION_KINDS",
    "ActionTool",
    "PendingApproval",
    "action",
    "approve_execution",
    "pending_approvals",
    "reject_execution",
]

ActionKind = Literal["server", "approval-gated", "durable-pause"]
ACTION_KINDS: tuple[str, ...] = ("server", "approval-gated", "durable-pause")
PAUSE_PREFIX = "actpause_"
DEFAULT_TIMEOUT_S = 30.0
OUTPUT_MAX_CHARS = 20_000
PENDING_LEASE_S = 300.0
OUTCOME_PREFIX = "exec-outcome-"
_LEDGER_KEY = "action-ledger:"
_PENDING_KEY = "action-pending"
_PAUSED_MESSAGE = "This action is awaiting human approval. Stop and wait for the approval result before proceeding."


@dataclass(frozen=True, kw_only=True, slots=True)
class ActionSpec:
    kind: ActionKind
    approval: bool | Callable[[Any], Any] | None
    permissions: Sequence[str] | Callable[[Any], Any]
    idempotency_key: str | Callable[[Any], Any] | None
    summary: str
    risk: str | None
    timeout_s: float | None


@dataclass(frozen=True, kw_only=True, slots=True)
class PendingApproval:
    """A parked durable-pause action waiting for a person: ``approve_execution(execution_id)`` or
    ``reject_execution(execution_id, reason)``. ``descriptor`` says what it would do: ``action``, ``summary``,
    ``input``, ``permissions``, ``risk``, ``kind``, ``requestId``, ``toolCallId``."""

    execution_id: str
    descriptor: dict[str, Any]
    source: str = "action"


class ActionTool(Tool):
    """A tool made by ``action``: its calls go through the guards of this module before its function runs."""

    action: ActionSpec

    def call(self, validated: Any, context: ToolContext) -> Any:
        return _run(self, validated, context)

    def run_function(self, validated: Any, context: ToolContext) -> Any:
        return Tool.call(self, validated, context)


@overload
def action(fn: Callable[..., Any], /) -> ActionTool: ...


@overload
def action(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ActionKind | None = None,
    approval: bool | Callable[[Any], Any] | None = None,
    permissions: Sequence[str] | Callable[[Any], Any] = (),
    idempotency_key: str | Callable[[Any], Any] | None = None,
    approval_summary: str | None = None,
    approval_risk: Literal["low", "medium", "high"] | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> Callable[[Callable[..., Any]], ActionTool]: ...


def action(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    kind: ActionKind | None = None,
    approval: bool | Callable[[Any], Any] | None = None,
    permissions: Sequence[str] | Callable[[Any], Any] = (),
    idempotency_key: str | Callable[[Any], Any] | None = None,
    approval_summary: str | None = None,
    approval_risk: Literal["low", "medium", "high"] | None = None,
    timeout_s: float | None = DEFAULT_TIMEOUT_S,
) -> Any:
    """Make a function (or an agent's method) an action: ``@ta.action(kind="durable-pause", permissions=[...])``.

    Args:
        kind: ``"server"`` (runs in the call, the default without ``approval``), ``"approval-gated"`` (the turn
            ends at the call with a tool-approval request a person answers with ``add_tool_approval``; the default
            with ``approval``) or ``"durable-pause"`` (parks for an approval that may come much later).
        approval: Whether a call needs a person: a bool, or a function of the call's input (sync or async). For a
            durable-pause action it decides whether the call parks (None: always) or runs at once.
        permissions: The permissions a call needs (``authorize_action`` checks them): names, or a function of the
            input returning them.
        idempotency_key: A domain key (an order id, an inbound event id) under which a settled run is replayed
            instead of run again: a str, or a function of the input. None: the tool call's id.
        approval_summary: What a person approving sees (default: the description). ``approval_risk``: low,
            medium or high, for approval screens.
        timeout_s: How long the function may run (None: no limit); past it the call answers a timeout error.
    """
    if kind is not None and kind not in ACTION_KINDS:
        raise ConfigurationError(f"action kind {kind!r}: use one of {', '.join(ACTION_KINDS)}")
    if kind == "durable-pause" and approval is False:
        raise ConfigurationError(
            f"action {name or getattr(fn, '__name__', '?')!r}: a durable-pause action with approval=False never "
            "parks; use kind='server' for an action that runs at once, or a predicate to decide when it parks"
        )
    if timeout_s is not None and (not isinstance(timeout_s, int | float) or timeout_s <= 0):
        raise ConfigurationError(f"action timeout_s must be a number of seconds > 0 or None, not {timeout_s!r}")

    def wrap(f: Callable[..., Any]) -> ActionTool:
        base = _tool_from_function(f, name=name, description=description, remote=None, needs_approval=False)
        made = ActionTool.__new__(ActionTool)
        made.__dict__.update(base.__dict__)
        chosen: ActionKind = kind or ("approval-gated" if approval else "server")
        made.action = ActionSpec(
            kind=chosen,
            approval=approval,
            permissions=permissions,
            idempotency_key=idempotency_key,
            summary=approval_summary or made.description,
            risk=approval_risk,
            timeout_s=timeout_s,
        )
        if chosen == "approval-gated":
            made.needs_approval = True if approval is None else approval
        return made

    return wrap(fn) if fn is not None else wrap


# ---------------------------------------------------------------------------------------------------- the call


def _envelope(name: str, message: str, **facts: Any) -> dict[str, Any]:
    return {"error": {"name": name, "message": message, **facts}}


def _input_of(validated: Any) -> Any:
    return validated.model_dump(mode="json") if isinstance(validated, BaseModel) else validated


async def _value(spec: Any, value: Any) -> Any:
    result = spec(value) if callable(spec) else spec
    return await result if inspect.isawaitable(result) else result


async def _run(tool: ActionTool, validated: Any, context: ToolContext) -> Any:
    agent = context.agent
    spec = tool.action
    value = _input_of(validated)
    try:
        permissions = tuple(await _value(spec.permissions, value) or ())
        turn = agent._engine.action_authorization
        decision = ActionAuthorization.of(
            await agent.authorize_action(
                ActionAuthorizationContext(
                    request_id=context.request_id,
                    tool_call_id=context.tool_call_id,
                    action=tool.name,
                    kind=spec.kind,
                    input=value,
                    required_permissions=permissions,
                    granted_permissions=turn.granted_permissions,
                    principal=context.principal,
                    turn_allowed=turn.allowed,
                    turn_reason=turn.reason,
                )
            )
        )
        if not decision.allowed:
            message = decision.reason or "Action is not authorized"
            return _envelope("ActionAuthorizationError", message, permissions=list(permissions))
        if spec.kind == "durable-pause" and (spec.approval is None or await _value(spec.approval, value)):
            return await _park(tool, value, context, permissions)
        return await _ledgered(tool, validated, value, context)
    except Exception as err:  # the model reads what went wrong; the turn goes on
        return _envelope(type(err).__name__, str(err))


_ACTIVE: weakref.WeakKeyDictionary[Any, dict[str, asyncio.Future[Any]]] = weakref.WeakKeyDictionary()
_LOCKS: weakref.WeakKeyDictionary[Any, asyncio.Lock] = weakref.WeakKeyDictionary()


def _lock(engine: Any) -> asyncio.Lock:
    lock = _LOCKS.get(engine)
    if lock is None:
        lock = _LOCKS[engine] = asyncio.Lock()
    return lock


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:32]


def prepare_output(output: Any) -> Any:
    """What the model gets of an action's output: text over the cap is cut, a JSON value over it is a preview."""
    if isinstance(output, str):
        if len(output) <= OUTPUT_MAX_CHARS:
            return output
        return f"{output[:OUTPUT_MAX_CHARS]}\n\n[truncated {len(output) - OUTPUT_MAX_CHARS} chars]"
    text = json.dumps(output, default=str)
    if len(text) <= OUTPUT_MAX_CHARS:
        return output
    return {
        "truncated": True,
        "chars": len(text),
        "preview": f"{text[:OUTPUT_MAX_CHARS]}\n\n[truncated {len(text) - OUTPUT_MAX_CHARS} chars]",
    }


async def _execute(tool: ActionTool, validated: Any, context: ToolContext) -> Any:
    async def run() -> Any:
        return await Tool.resolve(tool.run_function(validated, context))

    try:
        output = await asyncio.wait_for(run(), tool.action.timeout_s)
    except TimeoutError:
        raise TimeoutError(f"Action timed out after {tool.action.timeout_s:g} s") from None
    return prepare_output(output)


async def _ledgered(tool: ActionTool, validated: Any, value: Any, context: ToolContext) -> Any:
    """Run the action's function through the ledger (module docstring, rule 3)."""
    engine = context.agent._engine
    store = engine.store
    explicit = tool.action.idempotency_key is not None
    if explicit:
        key = await _value(tool.action.idempotency_key, value)
        if not isinstance(key, str) or not key:
            raise ConfigurationError(f"action {tool.name!r} gave an empty idempotency key")
        ledger_key = f"action:{tool.name}:{key}"
    else:
        ledger_key = f"tool:{context.tool_call_id}"
    active = _ACTIVE.setdefault(engine, {})
    if ledger_key in active:  # the same key running in this process: one run, both get its result
        return await asyncio.shield(active[ledger_key])
    digest = _hash(value)
    async with _lock(engine):
        row = await store.get_kv(_LEDGER_KEY + ledger_key)
        if isinstance(row, dict):
            if row.get("action") != tool.name or row.get("inputHash") != digest:
                engine.publish("action:ledger:conflict", {"action": tool.name, "key": ledger_key})
                return _envelope(
                    "ActionKeyConflict",
                    f'Idempotency key "{ledger_key}" for action "{tool.name}" was reused with different input. '
                    "This is a programming error; do not retry.",
                )
            if row.get("status") == "settled":
                engine.publish("action:ledger:replayed", {"action": tool.name, "key": ledger_key})
                return row.get("result")
            stale = explicit and time.time() - float(row.get("updatedAt", 0)) > PENDING_LEASE_S
            if not stale:
                engine.publish("action:ledger:pending", {"action": tool.name, "key": ledger_key})
                return _envelope(
                    "ActionPendingError",
                    "A prior attempt of this action is in an unknown state; not re-executed. Manual reconciliation "
                    "may be required.",
                )
            engine.publish("action:ledger:reclaimed", {"action": tool.name, "key": ledger_key})
        claim = {"action": tool.name, "inputHash": digest, "status": "pending", "updatedAt": time.time()}
        await store.set_kv(_LEDGER_KEY + ledger_key, claim)
        running: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        active[ledger_key] = running
    try:
        output = await _execute(tool, validated, context)
    except BaseException as err:
        await store.set_kv(_LEDGER_KEY + ledger_key, None)  # released: a later call may run it
        active.pop(ledger_key, None)
        failed = _envelope(type(err).__name__, str(err))
        running.set_result(failed)
        if not isinstance(err, Exception):
            raise
        return failed
    settled = {**claim, "status": "settled", "result": output, "updatedAt": time.time()}
    await store.set_kv(_LEDGER_KEY + ledger_key, settled)
    engine.publish("action:ledger:settled", {"action": tool.name, "key": ledger_key})
    active.pop(ledger_key, None)
    running.set_result(output)
    return output


# ---------------------------------------------------------------------------------------------------- durable pause


async def _park(tool: ActionTool, value: Any, context: ToolContext, permissions: tuple[str, ...]) -> dict[str, Any]:
    engine = context.agent._engine
    execution_id = f"{PAUSE_PREFIX}{uuid.uuid4().hex}"
    descriptor: dict[str, Any] = {
        "requestId": context.request_id,
        "toolCallId": context.tool_call_id,
        "action": tool.name,
        "summary": tool.action.summary,
        "input": value,
        "permissions": list(permissions),
        "kind": "durable-pause",
    }
    if tool.action.risk is not None:
        descriptor["risk"] = tool.action.risk
    async with _lock(engine):
        rows = dict(await engine.store.get_kv(_PENDING_KEY) or {})
        rows[execution_id] = {
            "action": tool.name,
            "toolCallId": context.tool_call_id,
            "requestId": context.request_id,
            "input": value,
            "descriptor": descriptor,
            "createdAt": time.time(),
        }
        await engine.store.set_kv(_PENDING_KEY, rows)
    engine.publish("action:pause:created", {"action": tool.name, "executionId": execution_id})
    return {"status": "paused", "executionId": execution_id, "action": tool.name, "message": _PAUSED_MESSAGE}


async def pending_approvals(agent: Any, execution_id: str | None = None) -> list[PendingApproval]:
    """The parked actions of ``agent``, oldest first (``execution_id``: that one only)."""
    rows = await agent._engine.store.get_kv(_PENDING_KEY) or {}
    found = sorted(rows.items(), key=lambda item: item[1].get("createdAt", 0))
    return [
        PendingApproval(execution_id=eid, descriptor=dict(row.get("descriptor") or {}))
        for eid, row in found
        if execution_id is None or eid == execution_id
    ]


async def _claim(agent: Any, execution_id: str) -> dict[str, Any] | None:
    """Take the parked row (claim by delete): exactly one approve or reject gets it."""
    engine = agent._engine
    async with _lock(engine):
        rows: dict[str, dict[str, Any]] = dict(await engine.store.get_kv(_PENDING_KEY) or {})
        row = rows.pop(execution_id, None)
        if row is not None:
            await engine.store.set_kv(_PENDING_KEY, rows or None)
    return row


def _gone(execution_id: str) -> dict[str, Any]:
    return {
        "status": "error",
        "executionId": execution_id,
        "error": f'Execution "{execution_id}" is no longer pending: it was approved or rejected elsewhere, or it '
        "never existed.",
    }


async def approve_execution(agent: Any, execution_id: str, *, auto_continue: bool = True) -> Any:
    """Run a parked action (module docstring, rule 2) and continue its conversation; its output, or an error."""
    if not isinstance(execution_id, str) or not execution_id.startswith(PAUSE_PREFIX):
        return _gone(str(execution_id))
    await agent._engine.ensure_started()
    row = await _claim(agent, execution_id)
    if row is None:
        return _gone(execution_id)
    engine = agent._engine
    tool = engine.collect_tools().get(row["action"])
    if not isinstance(tool, ActionTool):
        output: Any = {
            "status": "error",
            "executionId": execution_id,
            "action": row["action"],
            "error": f'Action "{row["action"]}" is no longer registered, so the approved call cannot run. The '
            "approval was consumed.",
        }
    else:
        context = ToolContext(
            tool_call_id=row["toolCallId"],
            tool_name=tool.name,
            request_id=row.get("requestId") or "",
            agent=agent,
            messages=[],
        )
        try:
            output = await _ledgered(tool, tool.validate_input(row["input"]), row["input"], context)
        except Exception as err:
            output = _envelope(type(err).__name__, str(err))
    engine.publish("action:pause:approved", {"action": row["action"], "executionId": execution_id})
    await _apply_outcome(agent, execution_id, row, output, auto_continue)
    return output


async def reject_execution(
    agent: Any, execution_id: str, reason: str | None = None, *, auto_continue: bool = True
) -> Any:
    """Reject a parked action: its function never runs, and the model sees ``{"status": "rejected", ...}``."""
    if not isinstance(execution_id, str) or not execution_id.startswith(PAUSE_PREFIX):
        return _gone(str(execution_id))
    await agent._engine.ensure_started()
    row = await _claim(agent, execution_id)
    if row is None:
        return _gone(execution_id)
    output = {
        "status": "rejected",
        "executionId": execution_id,
        "action": row["action"],
        "reason": reason or "Rejected by user",
    }
    agent._engine.publish("action:pause:rejected", {"action": row["action"], "executionId": execution_id})
    await _apply_outcome(agent, execution_id, row, output, auto_continue)
    return output


def _paused_here(part: Any, execution_id: str) -> bool:
    output = part.output if isinstance(part, ToolPart) else None
    return isinstance(output, dict) and output.get("executionId") == execution_id


async def _apply_outcome(agent: Any, execution_id: str, row: dict[str, Any], output: Any, auto_continue: bool) -> None:
    """Put the outcome where the paused output was (or, when that part is gone, a note after the conversation),
    and continue the conversation so the model acts on it, with or without anyone connected."""
    engine = agent._engine

    def replace(part: ToolPart) -> ToolPart | None:
        if part.state != "output-available" or not _paused_here(part, execution_id):
            return None
        return part.with_state("output-available", output=output, preliminary=False)

    if await engine.interactions.resolve_paused(row["toolCallId"], replace, auto_continue):
        return
    try:
        summary = json.dumps(output, default=str)[:4000]
    except (TypeError, ValueError):
        summary = str(output)[:4000]
    text = (
        f'[durable action] The paused execution "{execution_id}" was resolved, but its tool call is no longer in '
        f'the transcript (it may have been compacted). Outcome: {{"action":"{row["action"]}","output":{summary}}}'
    )
    note = UIMessage(id=f"{OUTCOME_PREFIX}{execution_id}-{new_id()[:8]}", role="system", parts=(TextPart(text=text),))
    await agent.add_messages(note)
    if auto_continue:
        await engine.interactions.continue_now()
