"""Work handed to other agents and actors: agent tools, actor tools, and the in-process child handle.

Nothing here imports Ray: an agent tool runs its child through whatever handle ``sub_agent`` returns (a Ray
actor handle when the parent is hosted by the runtime, a ``LocalAgentHandle`` in-process).
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from . import tracing
from ._turn.agent_runs import AgentRunResult
from .chunks import AgentToolEventChunk
from .errors import AgentUnavailableError, ConfigurationError
from .hooks import TurnResult
from .identity import Principal
from .limits import RunLimits, RunUsage, child_refusal, counts_children, prepays
from .messages import UIMessage
from .run_account import RunTicket
from .tools import RUN_CONTEXT, Tool, ToolContext, _parse_docstring, _strip_titles, input_validator

__all__ = ["AgentRunResult", "LocalAgentHandle", "actor_tool", "agent_tool", "use_actor_calls"]

ActorCall = Callable[[Any, str, dict[str, Any], str | None], Awaitable[Any]]
"""``(actor handle or name, method, kwargs, namespace) -> result``: one awaited actor method call."""

_TRACE_CONTEXT = "trace_context"  # an actor tool's method with a parameter of this name gets the W3C trace context
_RUN_CONTEXT = RUN_CONTEXT  # ... and one of this name, the run it is called in (RunLimits)

# How an agent outside any actor calls actor methods: set by the Ray runtime when it loads (this module is below it).
_actor_calls: ActorCall | None = None


def use_actor_calls(call: ActorCall) -> None:
    """Set how actor tools of agents outside any actor reach their actors (``runtime`` passes its Ray call)."""
    global _actor_calls
    _actor_calls = call


_DEFAULT_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The task for the agent, in plain words."}},
    "required": ["input"],
}


class LocalAgentHandle:
    """The handle API over an in-process agent (what ``sub_agent`` returns without Ray)."""

    def __init__(self, agent: Any):
        self.agent = agent
        self.path: str = agent.path

    def chat(self, message: Any = "", **options: Any) -> Any:
        """``Think.chat``: its ``ChatStream`` (``request_id``, ``status``, ``outcome``, ``collect()``)."""
        return self.agent.chat(message, **options)

    async def save_messages(
        self,
        messages: Any,
        *,
        body: dict[str, Any] | None = None,
        output: Any = None,
        limits: RunLimits | dict[str, Any] | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> TurnResult:
        """``Think.save_messages``: run a turn and wait for its ``TurnResult`` (structured with ``output``)."""
        result: TurnResult = await self.agent.save_messages(
            messages, body=body, output=output, limits=limits, principal=principal, channel=channel, metadata=metadata
        )
        return result

    async def continue_last_turn(self, **options: Any) -> TurnResult:
        result: TurnResult = await self.agent.continue_last_turn(**options)
        return result

    async def add_messages(self, messages: Any, **options: Any) -> None:
        await self.agent.add_messages(messages, **options)

    async def get_messages(self) -> list[UIMessage]:
        messages: list[UIMessage] = await self.agent.load_messages()
        return messages

    async def load_messages(self) -> list[UIMessage]:
        """``Think.load_messages``: what code that takes an agent or a handle awaits."""
        return await self.get_messages()

    async def cancel_chat(self, request_id: str, reason: str | None = None) -> bool:
        return bool(self.agent.cancel_chat(request_id, reason))

    async def clear(self) -> None:
        await self.agent.clear()

    def run_as_tool(
        self, run_id: str, input: Any, *, output: Any = None, run: RunTicket | None = None
    ) -> AsyncIterator[Any]:
        result: AsyncIterator[Any] = self.agent.run_as_tool(run_id, input, output=output, run=run)
        return result

    async def observe(self, channel: str, callback: Any) -> Any:
        return self.agent.observe(channel, callback)

    async def submit_messages(
        self,
        messages: Any,
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        output: Any = None,
        limits: RunLimits | dict[str, Any] | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
    ) -> Any:
        """``Think.submit_messages``: the ``Submission``, once committed."""
        return await self.agent.submit_messages(
            messages,
            submission_id=submission_id,
            idempotency_key=idempotency_key,
            metadata=metadata,
            output=output,
            limits=limits,
            principal=principal,
            channel=channel,
        )

    async def inspect_submission(self, submission_id: str) -> Any:
        return await self.agent.inspect_submission(submission_id)

    async def list_submissions(self, status: Any = None, limit: int = 50) -> Any:
        return await self.agent.list_submissions(status, limit)

    async def cancel_submission(self, submission_id: str, reason: str | None = None) -> bool:
        return bool(await self.agent.cancel_submission(submission_id, reason))

    async def wait_for_submission(self, submission_id: str, *, timeout_s: float | None = None) -> Any:
        return await self.agent.wait_for_submission(submission_id, timeout_s=timeout_s)

    async def pending_approvals(self, execution_id: str | None = None) -> Any:
        return await self.agent.pending_approvals(execution_id)

    async def approve_execution(self, execution_id: str, **options: Any) -> Any:
        return await self.agent.approve_execution(execution_id, **options)

    async def reject_execution(self, execution_id: str, reason: str | None = None, **options: Any) -> Any:
        return await self.agent.reject_execution(execution_id, reason, **options)

    async def prompt(self, step: str, prompt: Any, **options: Any) -> Any:
        """``Think.prompt``: the workflow step ``step``, run once, its finished submission."""
        return await self.agent.prompt(step, prompt, **options)

    def attach(self, request_id: str, *, position: int | None = None) -> AsyncIterator[Any]:
        result: AsyncIterator[Any] = self.agent.attach(request_id, position=position)
        return result

    async def set_client_tools(self, client_tools: Any) -> None:
        await self.agent.set_client_tools(client_tools)

    async def steer(self, messages: Any) -> bool:
        return bool(await self.agent.steer(messages))

    async def chat_terminal(self) -> dict[str, Any] | None:
        record: dict[str, Any] | None = await self.agent.chat_terminal()
        return record

    async def remember_chat_terminal(self, record: dict[str, Any] | None) -> None:
        await self.agent.remember_chat_terminal(record)

    async def add_tool_result(self, tool_call_id: str, output: Any = None, **options: Any) -> bool:
        return bool(await self.agent.add_tool_result(tool_call_id, output, **options))

    async def add_tool_approval(self, tool_call_id: str, approved: bool, **options: Any) -> bool:
        return bool(await self.agent.add_tool_approval(tool_call_id, approved, **options))

    async def wait_until_stable(self, *, timeout_s: float | None = None) -> None:
        await self.agent.wait_until_stable(timeout_s=timeout_s)

    async def pending_continuation_id(self) -> str | None:
        result: str | None = await self.agent.pending_continuation_id()
        return result


CHILD_RESTART_WAIT_S = 60.0  # how long an agent tool waits for its child's actor to come back after a crash


def _run_name(tool_call_id: str) -> str:
    return "run-" + (re.sub(r"[^A-Za-z0-9._-]", "-", tool_call_id)[:120] or "call")


def _schema_of(input_schema: Any) -> tuple[dict[str, Any], type[BaseModel] | None]:
    if input_schema is None:
        return _DEFAULT_INPUT_SCHEMA, None
    if isinstance(input_schema, type) and issubclass(input_schema, BaseModel):
        return _strip_titles(input_schema.model_json_schema()), input_schema
    if isinstance(input_schema, dict):
        return input_schema, None
    raise ConfigurationError("input_schema must be a pydantic model class or a JSON schema dict")


def agent_tool(
    agent_class: type[Any],
    *,
    description: str,
    name: str | None = None,
    input_schema: Any = None,
    output_schema: type[BaseModel] | None = None,
    node_id: str | None = None,
) -> Tool:
    """A tool whose execution runs a turn of a child agent of ``agent_class``.

    The child is named under the parent's path after the tool call id, and its run id is
    ``agent-tool:<tool call id>``, so re-running the same call re-attaches instead of starting a second turn.
    The child's chunks reach the parent's stream as ``agent-tool-event`` chunks tagged with the child's path
    and the parent's tool call id. The tool's output is the child's final text, or its structured output
    validated against ``output_schema``; a failed child gives ``{"ok": False, "status", "error", ...}``.
    Cancelling the parent's turn cancels the child's. On Ray, children are spread over the nodes like any
    agent; ``node_id`` asks for that node instead (softly: if it is gone, the child goes elsewhere).
    """
    if not isinstance(agent_class, type):
        cls = type(agent_class).__name__
        raise ConfigurationError(
            f"agent_tool takes an agent class, not an instance: pass agent_tool({cls}, description=...) rather "
            f"than agent_tool({cls}(...), ...); each call of the tool starts a child agent of that class"
        )
    schema, validator = _schema_of(input_schema)
    tool_name = name or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", agent_class.__name__).lower()

    async def execute(value: Any, context: ToolContext) -> Any:
        emit = context.emit or (lambda chunk: None)
        run_id = f"agent-tool:{context.tool_call_id}"
        parent = context.agent
        engine = parent._engine
        ticket = context.run
        # Admitted before the child exists (Think's maxConcurrentAgentTools: over the cap a run fails at once).
        cap = parent.max_concurrent_agent_tools
        refusal = child_refusal(cap) if cap is not None and engine.agent_tools_running >= cap else None
        # On Ray the child is an actor whose every question to the account is a call: its admission pays its first
        # request too (in process there is no call to save).
        prepaid = ticket is not None and engine.runtime is not None and prepays(ticket.limits)
        if refusal is None and ticket is not None:
            refusal = await ticket.account.start_child(parent.path, ticket.depth + 1, prepaid)
        if refusal is not None:
            path = parent.child_path(agent_class, _run_name(context.tool_call_id))
            for kind in ("started", "error"):
                emit(
                    AgentToolEventChunk(
                        agent=path,
                        parent_tool_call_id=context.tool_call_id,
                        run_id=run_id,
                        kind=kind,
                        **({"error": refusal} if kind == "error" else {}),
                    )
                )
            return {"ok": False, "status": "error", "error": refusal, "retryable": False, "agent": path}
        engine.agent_tools_running += 1
        try:
            return await _run_child(context, emit, run_id, ticket, value, prepaid)
        finally:
            engine.agent_tools_running -= 1
            if ticket is not None and counts_children(ticket.limits):  # without a cap the account does not count
                await asyncio.shield(ticket.account.finish_child(parent.path))

    async def _run_child(
        context: ToolContext, emit: Any, run_id: str, ticket: RunTicket | None, value: Any, prepaid: bool
    ) -> Any:
        parent = context.agent
        try:
            child = await parent.sub_agent(agent_class, _run_name(context.tool_call_id), node_id=node_id)
            child_run = None
            if ticket is not None:
                runtime = parent._engine.runtime  # on Ray the child is another actor: the run's account is shared
                account = await runtime.share_account(ticket) if runtime is not None else ticket.account
                child_run = ticket.child(account.for_turn(ticket.started_at, ticket.limits.timeout_s, prepaid))
        except BaseException:
            if prepaid and ticket is not None:
                ticket.account.give_back()  # the child never got its prepaid request
            raise
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        emit(
            AgentToolEventChunk(
                agent=child.path, parent_tool_call_id=context.tool_call_id, run_id=run_id, kind="started"
            )
        )
        result: AgentRunResult | None = None
        sequence = 0
        waited = 0.0
        while result is None:
            stream = child.run_as_tool(run_id, value, output=output_schema, run=child_run)
            replayed = 0
            try:
                async for item in stream:
                    if isinstance(item, AgentRunResult):
                        result = item
                        break
                    replayed += 1
                    if replayed <= sequence:
                        continue  # sent before the child's process died: its recovered run replays it
                    sequence += 1
                    emit(
                        AgentToolEventChunk(
                            agent=child.path,
                            parent_tool_call_id=context.tool_call_id,
                            run_id=run_id,
                            kind="chunk",
                            sequence=sequence,
                            chunk=item,
                        )
                    )
                else:
                    break  # ended without a result
            except AgentUnavailableError as err:
                # The child's process died: Ray restarts it, its recovery finishes the run, and asking again by
                # the run's id joins it (never a second run).
                if not err.retryable or waited >= CHILD_RESTART_WAIT_S:
                    raise
                await asyncio.sleep(0.5)
                waited += 0.5
            except asyncio.CancelledError:
                # Cancellation does not cross processes by itself: tell the child to stop its run.
                await asyncio.shield(child.cancel_chat(run_id, "parent turn cancelled"))
                raise
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()
        if result is None:
            result = AgentRunResult(run_id=run_id, status="error", error="the child run ended without a result")
        if result.run_over and ticket is not None:
            ticket.account.learn_over()  # the run is over budget: this turn's next request asks, and is refused
        # The child, and what it and its own children used, count in this turn's tree.
        parent._engine.add_child_usage(context.request_id, (result.usage or RunUsage()) + RunUsage(agents=1))
        kind = {"completed": "finished", "aborted": "aborted"}.get(result.status, "error")
        emit(
            AgentToolEventChunk(
                agent=child.path,
                parent_tool_call_id=context.tool_call_id,
                run_id=run_id,
                kind=kind,
                summary=result.summary,
                error=result.error,
                usage=result.usage.as_dict() if result.usage is not None else None,
            )
        )
        if result.status == "completed":
            return result.output
        return {
            "ok": False,
            "status": result.status,
            "error": result.error or result.status,
            "retryable": False,
            "agent": child.path,
        }

    # Idempotent: a re-run re-attaches to the child's run by its id instead of running the child twice.
    return Tool(tool_name, description, schema, validator=validator, executor=execute, idempotent=True)


def actor_tool(
    target: Any,
    method: str,
    *,
    name: str | None = None,
    description: str | None = None,
    actor_class: object | None = None,  # the actor's class, plain or as @ray.remote made it
    namespace: str | None = None,
) -> Tool:
    """A tool that runs as ``method`` of a Ray actor: ``target`` is an actor handle or a named actor's name.

    The schema comes from the method's signature (from the handle, or from ``actor_class`` when ``target`` is
    a name) and its docstring is the description. Hooks wrap it like any tool: a blocked or substituted call
    never reaches the actor.

    A method with a parameter named ``trace_context`` gets the tool call's span context in it, as W3C
    trace-context headers (``{"traceparent": ...}``; ``{}`` when tracing is off), and the model never sees it.
    Spans the actor makes under it are children of the ``execute_tool`` span: with your own OpenTelemetry set-up,
    ``tracer.start_as_current_span(name, context=opentelemetry.propagate.extract(trace_context))``; where
    ``think_actors.tracing`` is on, ``ta.tracing.adopt(trace_context)``.

    A method with a parameter named ``run_context`` gets the run the call belongs to (``RunLimits``), as
    ``{"runId": ..., "depth": ..., "remainingS": ...}`` (``remainingS``: seconds before the run's deadline, or
    None), or ``{}`` for a turn without limits; the model never sees it. The turn stops waiting for the method at
    the run's deadline.
    """
    parameters: list[inspect.Parameter] | None = None
    doc: str | None = None
    cls = actor_class
    if cls is not None:
        cls = getattr(cls, "__ray_actor_class__", None) or getattr(cls, "_ray_actor_class", None) or cls
        fn = getattr(getattr(cls, "__ray_metadata__", None), "modified_class", cls)
        func = getattr(fn, method, None) or getattr(cls, method, None)
        if func is None:
            raise ConfigurationError(f"{cls!r} has no method {method!r}")
        parameters = list(inspect.signature(func).parameters.values())
        doc = func.__doc__
    elif not isinstance(target, str):
        signatures = getattr(target, "_ray_method_signatures", None)
        if not signatures or method not in signatures:
            raise ConfigurationError(f"actor has no method {method!r}")
        parameters = list(signatures[method])
    else:
        raise ConfigurationError("actor_tool with an actor name needs actor_class= to read the method's signature")
    tool_name = name or method
    traced = any(p.name == _TRACE_CONTEXT for p in parameters)
    in_run = any(p.name == _RUN_CONTEXT for p in parameters)
    validator, _ = input_validator(tool_name, [p for p in parameters if p.name not in (_TRACE_CONTEXT, _RUN_CONTEXT)])
    described, _ = _parse_docstring(doc)

    async def execute(value: Any, context: ToolContext) -> Any:
        kwargs = value.model_dump() if isinstance(value, BaseModel) else dict(value)
        if traced:
            kwargs[_TRACE_CONTEXT] = tracing.carrier() or {}  # this call's execute_tool span
        if in_run:
            kwargs[_RUN_CONTEXT] = context.run.facts() if context.run is not None else {}
        runtime = context.agent._engine.runtime
        if runtime is not None:
            return await runtime.call_actor_method(target, method, kwargs, namespace)
        if _actor_calls is None:
            raise ConfigurationError(
                f"tool {tool_name!r} calls a Ray actor from an agent outside any actor: start the runtime first "
                "(ta.init(); with `think-actors chat`, pass --ray)"
            )
        return await _actor_calls(target, method, kwargs, namespace)

    return Tool(
        tool_name,
        description or described or f"Calls {method} on an actor.",
        _strip_titles(validator.model_json_schema()),
        validator=validator,
        executor=execute,
    )
