"""The step loop (AI SDK ``streamText`` semantics): model request, streamed chunks, tool calls, repeat.

The loop ends when a step makes no tool calls, a call gets no result (a client tool), a stop condition
matches, or ``max_steps`` steps have run. Provider errors propagate as ``ModelError``; the caller turns them
into an in-band ``error`` chunk.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from .. import tracing
from ..chunks import (
    FileChunk,
    FinishChunk,
    FinishStepChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceUrlChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputDeltaChunk,
    ToolInputStartChunk,
    trusted_builder,
    ui_finish_reason,
)
from ..errors import RunLimitError
from ..extensions.chain import chain_of
from ..hooks import ChunkContext, StepConfig, StepContext, StepResponse, StepResult, ToolCall, ToolResult
from ..messages import FilePart, SourceUrlPart, new_id
from ..models import (
    FileEvent,
    FinishEvent,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
    Usage,
    resolve_model,
)
from ..run_account import RunTicket
from .abort import task_lookup
from .convert import to_model_messages
from .overflow import proactive_messages
from .run import TurnRun
from .tool_calls import input_chunk, parse_calls, run_calls

# The per-delta chunks (the hot path of a streamed reply), built without validation when the model client's text is
# a str, as its id (the engine's) always is; anything else goes through validation, which says what is wrong.
_build_text_delta = trusted_builder(TextDeltaChunk)
_build_reasoning_delta = trusted_builder(ReasoningDeltaChunk)


def _reasoning_delta(part_id: str, text: Any) -> ReasoningDeltaChunk:
    if type(text) is str:
        chunk: ReasoningDeltaChunk = _build_reasoning_delta({"type": "reasoning-delta", "id": part_id, "delta": text})
        return chunk
    return ReasoningDeltaChunk(id=part_id, delta=text)


def _unique_id(run: TurnRun, given: str | None) -> str:
    """The provider's tool call id, made unique in this agent's history.

    Some providers number calls per response (``call_0``, ``call_1``); a repeated id would apply a result to an
    older call and re-attach an agent tool to an old run, so a repeat gets a suffix.
    """
    tool_call_id = given or new_id()
    if tool_call_id in run.tool_call_ids:
        tool_call_id = f"{tool_call_id}-{new_id()[:8]}"
    run.tool_call_ids.add(tool_call_id)
    return tool_call_id


def _part(run: TurnRun, step_number: int, kind: str, **facts: Any) -> ChunkContext:
    """The ``on_chunk`` context of one model-level stream part."""
    return ChunkContext(request_id=run.request_id, step_number=step_number, type=kind, **facts)


async def _needs_approval(call: Any) -> bool:
    """``needs_approval``: a bool, or a predicate of the validated input (sync or async)."""
    gate = call.tool.needs_approval
    if callable(gate):
        verdict = gate(call.input)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        return bool(verdict)
    return bool(gate)


async def _settle(
    ticket: RunTicket | None, usage: Usage, cost: float | None, calls: list[Any], prepay: bool
) -> RunLimitError | None:
    """Charge the step to the run's account and ask it for the step's tool calls, in one call; with ``prepay`` (another
    step may follow the calls) the account may admit that step's request now, saving a call. When it refuses the
    calls, each gets the limit's error as its result (the model's message stays valid) and the error is returned,
    to end the turn once the step is recorded."""
    if ticket is None:
        return None
    wanted = [c for c in calls if c.error is None and c.tool is not None and c.tool.executable]
    try:
        await ticket.account.settle(
            usage.input_tokens or 0, usage.output_tokens or 0, cost or 0.0, len(wanted), prepay and bool(wanted)
        )
    except RunLimitError as err:
        for call in wanted:
            call.error = f"not run: {err}"
        return err
    return None


def _tool_choice(run: TurnRun, step_cfg: StepConfig, step_number: int) -> Any:
    """The step's tool choice: ``before_step``'s, else the turn's; a workflow prompt's last permitted step must
    call its final-answer tool (final_answer.py)."""
    if run.final_answer is not None and step_number >= run.max_steps - 1:
        return {"type": "function", "function": {"name": run.final_answer}}
    return step_cfg.tool_choice if step_cfg.tool_choice is not None else run.tool_choice


async def _stop(run: TurnRun) -> bool:
    for condition in run.stop_when:
        verdict = condition(run.steps)
        if inspect.isawaitable(verdict):
            verdict = await verdict
        if verdict:
            return True
    return False


def _step_messages(text: str, calls: list[Any], results: list[ToolResult]) -> list[dict[str, Any]]:
    """The assistant message and tool results this step adds to the next request."""
    entry: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        entry["tool_calls"] = [
            {
                "id": c.tool_call_id,
                "type": "function",
                "function": {
                    "name": c.tool_name,
                    "arguments": json.dumps(c.input if isinstance(c.input, dict) else {}),
                },
            }
            for c in calls
        ]
    out = [entry]
    by_id = {r.tool_call_id: r for r in results}
    for c in calls:
        if c.error is not None:
            content = f"Error: {c.error}"
        else:
            r = by_id.get(c.tool_call_id)
            if r is None:  # a call the caller answers (a client tool): no result yet
                continue
            content = (
                f"Error: {r.error}"
                if r.error is not None
                else (r.output if isinstance(r.output, str) else json.dumps(r.output, default=str))
            )
        out.append({"role": "tool", "tool_call_id": c.tool_call_id, "content": content})
    return out


async def run_steps(run: TurnRun) -> AsyncGenerator[Any, None]:
    agent = run.agent
    agent_engine = run.engine
    on_chunk = run.on_chunk
    extensions = chain_of(agent)
    signal = run.signal
    current_task = task_lookup(asyncio.get_running_loop())
    # On Ray each question to the run's account is an actor call: a step's charge also admits the next request
    # (given back by the attempt that runs this loop when the turn does not make it).
    prepay = agent_engine.runtime is not None
    for step_number in range(run.max_steps):
        if signal.aborted:  # never start a model request for a turn already aborted (the caller reports it)
            return
        run.step_number = step_number
        if agent_engine.steered and step_number > 0:
            # Messages sent while the turn ran join it here ("steer"): stored, and in this step's request.
            joining, agent_engine.steered = agent_engine.steered, []
            for message in joining:
                await agent_engine.append(message)
            run.messages = [*run.messages, *to_model_messages(joining)]
        if run.context_overflow is not None and run.context_overflow.proactive is not None and run.steps:
            await proactive_messages(run)
        agent_engine.check_owner()  # a superseded process stops before its next step's hooks
        step_ctx = StepContext(
            request_id=run.request_id,
            step_number=step_number,
            steps=tuple(run.steps),
            model=run.model,
            messages=run.messages,
        )
        own_step = await agent.before_step(step_ctx)
        step_cfg = own_step or StepConfig()
        if extensions.hooked("before_step") or extensions.hooked("on_decision"):
            step_cfg = await extensions.before_step(agent, step_ctx, step_cfg, own=own_step is not None)
        client, model_id = resolve_model(step_cfg.model or run.model)
        system = step_cfg.instructions or step_cfg.system or run.system
        messages = step_cfg.messages if step_cfg.messages is not None else run.messages
        active = step_cfg.active_tools if step_cfg.active_tools is not None else run.active_tools
        offered = [t for name, t in run.tools.items() if active is None or name in active]
        request = ModelRequest(
            model=model_id,
            messages=[{"role": "system", "content": system}, *messages] if system else list(messages),
            tools=[t.spec() for t in offered],
            tool_choice=_tool_choice(run, step_cfg, step_number),
            response_format=run.response_format,
            params=run.params,
            headers=run.headers,
            timeout_s=run.timeout_s,
            max_retries=run.max_retries,
            provider_options={**run.provider_options, **(step_cfg.provider_options or {})},
            prompt_caching=agent.prompt_caching,
        )
        started = False  # start-step goes out once the model's stream has started, as the AI SDK sends it

        text_id: str | None = None
        reasoning_id: str | None = None
        texts: list[str] = []
        reasoning: list[str] = []
        raw_calls: dict[int, list[Any]] = {}  # index -> [id, name, argument fragments]
        finish_reason = "stop"
        usage = Usage()
        finish: FinishEvent | None = None
        response = ResponseMetadata()
        sources: list[SourceUrlPart] = []
        files: list[FilePart] = []
        ticket = run.ticket
        if ticket is not None:  # the run's budget, asked before every model request (RunLimitError ends it)
            await ticket.account.admit_request()
        chat_span = tracing.start_chat(model=model_id, step=step_number, messages=request.messages, tools=len(offered))
        model_stream = client.stream(request)
        stream = (model_stream if run.transform is None else run.transform(model_stream)).__aiter__()
        next_event = stream.__anext__
        try:
            while True:
                signal.task = current_task()  # what signal.enter_wait() does, without its call: once per event
                signal.waiting = True
                try:
                    event = await next_event()
                except StopAsyncIteration:
                    break
                finally:
                    signal.waiting = False
                if not started:
                    started = True
                    if run.stats.first_chunk_at is None:  # once per step, not per chunk: time to first chunk
                        run.stats.first_chunk_at = time.monotonic()
                    yield StartStepChunk()
                if isinstance(event, TextDelta):
                    if text_id is None:
                        if reasoning_id is not None:  # reasoning ends where the answer starts
                            yield ReasoningEndChunk(id=reasoning_id)
                            reasoning_id = None
                        text_id = new_id()
                        yield TextStartChunk(id=text_id)
                    texts.append(event.text)
                    if on_chunk is not None:
                        await on_chunk(_part(run, step_number, "text-delta", text=event.text))
                    text_delta = event.text
                    yield (
                        _build_text_delta({"type": "text-delta", "id": text_id, "delta": text_delta})
                        if type(text_delta) is str
                        else TextDeltaChunk(id=text_id, delta=text_delta)  # validation says what is wrong
                    )
                elif isinstance(event, ReasoningDelta):
                    reasoning.append(event.text)
                    if on_chunk is not None:
                        await on_chunk(_part(run, step_number, "reasoning-delta", text=event.text))
                    if run.send_reasoning:
                        if reasoning_id is None:
                            reasoning_id = new_id()
                            yield ReasoningStartChunk(id=reasoning_id)
                        yield _reasoning_delta(reasoning_id, event.text)
                elif isinstance(event, ToolCallDelta):
                    entry = raw_calls.get(event.index)
                    if entry is None:
                        entry = raw_calls[event.index] = [_unique_id(run, event.id), event.name or "", []]
                        if on_chunk is not None:
                            await on_chunk(
                                _part(run, step_number, "tool-input-start", tool_call_id=entry[0], tool_name=entry[1])
                            )
                        yield ToolInputStartChunk(tool_call_id=entry[0], tool_name=entry[1])
                    elif event.name and not entry[1]:
                        entry[1] = event.name
                    if event.arguments:
                        entry[2].append(event.arguments)
                        if on_chunk is not None:
                            await on_chunk(
                                _part(run, step_number, "tool-input-delta", tool_call_id=entry[0], text=event.arguments)
                            )
                        yield ToolInputDeltaChunk(tool_call_id=entry[0], input_text_delta=event.arguments)
                elif isinstance(event, FinishEvent):
                    finish = event
                    finish_reason = event.finish_reason or finish_reason
                    usage = event.usage or usage
                elif isinstance(event, ResponseMetadata):
                    response = event
                elif isinstance(event, SourceEvent):
                    sources.append(SourceUrlPart(source_id=event.source_id, url=event.url, title=event.title))
                    if on_chunk is not None:
                        await on_chunk(_part(run, step_number, "source", output=sources[-1]))
                    yield SourceUrlChunk(source_id=event.source_id, url=event.url, title=event.title)
                elif isinstance(event, FileEvent):
                    files.append(FilePart(url=event.url, media_type=event.media_type))
                    yield FileChunk(url=event.url, media_type=event.media_type)
        except BaseException as err:
            tracing.fail_chat(chat_span, err)
            raise
        finally:
            close = getattr(stream, "aclose", None)
            if close is not None:
                await close()
            if stream is not model_stream:
                # A transform closed mid-stream does not close what it reads: the model's stream is closed here.
                close = getattr(model_stream, "aclose", None)
                if close is not None:
                    await close()
        if chat_span is not None:
            tracing.end_chat(
                chat_span,
                finish_reason=finish_reason,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                response_model=response.model,
                response_id=response.id,
                cost_usd=finish.cost_usd if finish is not None else None,
                output={"text": "".join(texts), "tool_calls": [[c[1], "".join(c[2])] for c in raw_calls.values()]},
                cache_read_input_tokens=usage.cached_input_tokens,
                cache_creation_input_tokens=usage.cache_write_input_tokens,
            )
        if not started:  # a stream that ended without an event still had a step
            yield StartStepChunk()
        if reasoning_id is not None:
            yield ReasoningEndChunk(id=reasoning_id)
        if text_id is not None:
            yield TextEndChunk(id=text_id)

        cost = finish.cost_usd if finish is not None else None
        calls = await parse_calls(run, [(c[0], c[1], "".join(c[2])) for _, c in sorted(raw_calls.items())])
        refused = await _settle(ticket, usage, cost, calls, prepay and step_number + 1 < run.max_steps)
        for call in calls:
            if on_chunk is not None:
                await on_chunk(
                    _part(
                        run,
                        step_number,
                        "tool-call",
                        tool_call_id=call.tool_call_id,
                        tool_name=call.tool_name,
                        input=call.input,
                    )
                )
            yield input_chunk(call)
        gated: set[str] = set()
        for call in calls:
            if call.error is None and call.tool is not None and await _needs_approval(call):
                # The call waits for a person: the loop ends with it, and the answer continues the turn.
                gated.add(call.tool_call_id)
                yield ToolApprovalRequestChunk(approval_id=new_id(), tool_call_id=call.tool_call_id)
        runnable = [
            c
            for c in calls
            if c.error is None and c.tool is not None and c.tool.executable and c.tool_call_id not in gated
        ]
        results: list[ToolResult] = []
        if runnable:
            async with aclosing(run_calls(run, runnable, results)) as executing:
                async for chunk in executing:
                    yield chunk
            if on_chunk is not None:
                for r in results:
                    await on_chunk(
                        _part(
                            run,
                            step_number,
                            "tool-result",
                            tool_call_id=r.tool_call_id,
                            tool_name=r.tool_name,
                            input=r.input,
                            output=r.output,
                        )
                    )
        text = "".join(texts)
        added = _step_messages(text, calls, results)
        result = StepResult(
            step_number=step_number,
            text=text,
            reasoning="".join(reasoning),
            tool_calls=tuple(
                ToolCall(tool_call_id=c.tool_call_id, tool_name=c.tool_name, input=c.input) for c in calls
            ),
            tool_results=tuple(results),
            finish_reason=finish_reason,
            usage=usage,
            model=model_id,
            files=tuple(files),
            sources=tuple(sources),
            warnings=finish.warnings if finish is not None else (),
            request=request,
            response=StepResponse(
                id=response.id, model=response.model, timestamp=response.timestamp, messages=tuple(added)
            ),
            provider_metadata=finish.provider_metadata if finish is not None else None,
            cost_usd=cost,
        )
        run.steps.append(result)
        run.finish_reason = finish_reason
        run.usage = run.usage + usage
        if cost is not None:
            run.cost_usd = (run.cost_usd or 0.0) + cost
        run.stats.add_step(usage, cost)
        agent_engine.check_owner()  # free: a process learns it was superseded at a refused write, not here
        await agent.on_step_finish(result)
        if extensions.hooked("on_step_finish"):
            await extensions.on_step_finish(agent, result, run.request_id)
        yield FinishStepChunk()
        if refused is not None:  # its calls were answered with the limit's error: the turn ends with it
            raise refused
        # A call the caller must answer (a client tool) ends the loop with that call waiting.
        waiting = bool(gated) or any(c.error is None and c.tool is not None and not c.tool.executable for c in calls)
        if not calls or waiting or await _stop(run):
            break
        # Build on the turn's messages, not on ``messages``: a before_step override is for its own step only.
        run.messages = [*run.messages, *added]
    yield FinishChunk(finish_reason=ui_finish_reason(run.finish_reason))
