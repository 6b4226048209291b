"""One admitted turn, start to end: input, assembly, ``before_turn``, the step loop, persistence, response hook.

Every entry point (``chat``, ``save_messages``, ``continue_last_turn``, and later submissions and agent-tool
runs) builds a ``TurnSpec`` and iterates ``turn_stream``. Blocking entry points just drain it.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from ..chunks import AbortChunk, ErrorChunk, MessageAccumulator, StartChunk
from ..errors import ConfigurationError, ModelError, NoMessagesError
from ..hooks import ChatErrorContext, ChatResponseResult, TurnConfig, TurnContext
from ..messages import ToolPart, UIMessage, new_id, user_message
from ..tools import Tool
from .abort import AbortSignal
from .convert import ensure_continue_checkpoint, repair_transcript, to_model_messages, truncate_older
from .loop import run_steps
from .run import TurnRun

if TYPE_CHECKING:
    from ..agent import Think

log = logging.getLogger("think_actors")


@dataclass(slots=True)
class TurnOutcome:
    status: str = "completed"
    message: UIMessage | None = None
    error: str | None = None
    output: Any = None
    classification: str | None = None


@dataclass(slots=True)
class TurnSpec:
    request_id: str
    trigger: str
    signal: AbortSignal
    generation: int
    input: Any = None  # None: no new input (continuation); list of messages; or a function of the transcript
    continuation: bool = False
    body: dict[str, Any] | None = None
    client_tools: list[Tool] = field(default_factory=list)
    raise_setup_errors: bool = False  # blocking callers get the exception; streams get an error chunk
    output: Any = None  # structured output type, unless before_turn sets one
    outcome: TurnOutcome = field(default_factory=TurnOutcome)


class _Aborted(Exception):
    pass


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


async def _resolve_input(agent: Think, value: Any) -> list[UIMessage]:
    if callable(value):
        value = value(agent.get_messages())
        if inspect.isawaitable(value):
            value = await value
    return normalize_input(value)


def _output_format(output: Any) -> dict[str, Any] | None:
    if output is None:
        return None
    if isinstance(output, type) and issubclass(output, BaseModel):
        return {
            "type": "json_schema",
            "json_schema": {"name": output.__name__, "schema": output.model_json_schema(), "strict": False},
        }
    if isinstance(output, dict):
        return output
    raise ConfigurationError("TurnConfig.output must be a pydantic model class or a response_format dict")


async def prepare(agent: Think, spec: TurnSpec) -> TurnRun:
    """Assemble the turn and apply ``before_turn``; raises on setup failures (stage ``turn``)."""
    repaired, changed, _ = repair_transcript(agent._messages, agent.repair_interrupted_tool_part)
    for message in changed:
        await agent._replace_message(message)
    model_messages = to_model_messages(truncate_older(repaired))
    if not model_messages:
        raise NoMessagesError(
            "No messages to send to the model: the transcript is empty",
            stage="turn",
            messages_persisted=True,
            request_id=spec.request_id,
        )
    tools = agent._collect_tools()
    for client_tool in spec.client_tools:  # client tools merge last: they override same-named server tools
        tools[client_tool.name] = client_tool
    model = agent.model
    system = agent.get_system_prompt(tools)
    ctx = TurnContext(
        request_id=spec.request_id,
        system=system,
        messages=model_messages,
        tools=dict(tools),
        model=model,
        continuation=spec.continuation,
        body=spec.body,
        trigger=spec.trigger,
    )
    cfg = await agent.before_turn(ctx) or TurnConfig()
    if cfg.model is None and model is None:
        raise ConfigurationError(
            f"{type(agent).__name__} has no model: set the class attribute `model` or return one from before_turn",
            request_id=spec.request_id,
        )
    if cfg.tools:
        for extra in cfg.tools:
            tools[extra.name] = extra.bind(agent)
    if cfg.instructions is not None or cfg.system is not None:
        system = cfg.instructions if cfg.instructions is not None else cfg.system  # type: ignore[assignment]
    elif cfg.tools or cfg.active_tools is not None:
        offered = {n: t for n, t in tools.items() if cfg.active_tools is None or n in cfg.active_tools}
        system = agent.get_system_prompt(offered)
    params = {
        k: v
        for k, v in (
            ("temperature", cfg.temperature),
            ("top_p", cfg.top_p),
            ("top_k", cfg.top_k),
            ("presence_penalty", cfg.presence_penalty),
            ("frequency_penalty", cfg.frequency_penalty),
            ("stop", list(cfg.stop_sequences) if cfg.stop_sequences else None),
            ("seed", cfg.seed),
            ("max_tokens", cfg.max_output_tokens),
        )
        if v is not None
    }
    return TurnRun(
        agent=agent,
        request_id=spec.request_id,
        signal=spec.signal,
        model=cfg.model or model,  # type: ignore[arg-type]
        system=system,
        messages=ensure_continue_checkpoint(cfg.messages if cfg.messages is not None else model_messages),
        tools=tools,
        active_tools=cfg.active_tools,
        tool_choice=cfg.tool_choice,
        max_steps=cfg.max_steps if cfg.max_steps is not None else agent.max_steps,
        stop_when=tuple(cfg.stop_when or ()),
        send_reasoning=cfg.send_reasoning if cfg.send_reasoning is not None else agent.send_reasoning,
        params=params,
        response_format=_output_format(cfg.output or spec.output),
        output_type=cfg.output or spec.output,
        headers=cfg.headers,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        provider_options=dict(cfg.provider_options or {}),
        repair_tool_call=cfg.repair_tool_call,
        continuation=spec.continuation,
        on_chunk=agent.on_chunk if agent._overrides("on_chunk") else None,
        tool_call_ids={p.tool_call_id for m in repaired for p in m.parts if isinstance(p, ToolPart)},
    )


def _parse_output(run: TurnRun) -> Any:
    text = run.steps[-1].text if run.steps else ""
    output_type = run.output_type
    if isinstance(output_type, type) and issubclass(output_type, BaseModel):
        return output_type.model_validate_json(text)
    return json.loads(text)


async def turn_stream(agent: Think, spec: TurnSpec) -> AsyncIterator[Any]:
    """The chunks of one turn, from the moment it holds the agent's turn slot to its response hook."""
    outcome = spec.outcome
    try:
        async with agent._queue.slot(agent, spec.request_id):
            # Chunks an earlier turn emitted after its stream ended (its on_chat_response) belong to no stream.
            agent._take_emitted()
            await agent._ensure_started()  # chat() streams come here without a blocking entry point's start
            if agent._queue.generation != spec.generation:
                outcome.status = "skipped"
                return
            if spec.input is not None:
                messages = await _resolve_input(agent, spec.input)
                if agent._queue.generation != spec.generation:
                    outcome.status = "skipped"
                    return
                for message in messages:
                    await agent._append(message)
            if spec.signal.aborted:  # a pre-aborted turn keeps its input but runs no model
                outcome.status = "aborted"
                return
            try:
                run = await prepare(agent, spec)
            except Exception as err:
                outcome.status = "error"
                if spec.raise_setup_errors:
                    outcome.error = str(err)
                    raise
                report = await agent._report_error(
                    err, ChatErrorContext(request_id=spec.request_id, stage="turn", messages_persisted=True)
                )
                outcome.error = report
                yield ErrorChunk(error_text=report)
                return
            inner = _stream(agent, spec, run)
            try:
                async for chunk in inner:
                    yield chunk
            finally:
                # Closing here (not at garbage collection) finalizes the turn inside its slot.
                await inner.aclose()
    finally:
        agent._aborts.remove(spec.request_id)


async def _stream(agent: Think, spec: TurnSpec, run: TurnRun) -> AsyncGenerator[Any, None]:
    outcome = spec.outcome
    signal = spec.signal
    acc = MessageAccumulator(new_id(), continuation=spec.continuation)
    steps = run_steps(run)
    status = "completed"
    error_text: str | None = None
    thrown: Exception | None = None
    external_cancel = False
    consumer_gone = False
    finished = False
    try:
        start = StartChunk(message_id=None if spec.continuation else acc.message_id)
        acc.apply(start)
        yield start
        async for chunk in steps:
            if agent._emitted:  # chunks a hook or tool put into the stream go out first, in order
                for extra in agent._take_emitted():
                    acc.apply(extra)
                    yield extra
            update = acc.apply(chunk)
            if update is not None:
                await agent._apply_tool_update(update)
            if signal.aborted:
                raise _Aborted
            finished = chunk.type == "finish"
            yield chunk
            if signal.aborted and not finished:
                raise _Aborted
        if signal.aborted and not finished:  # aborted before the loop could make a request
            raise _Aborted
    except _Aborted:
        status = "aborted"
    except asyncio.CancelledError:
        status = "aborted"
        external_cancel = not signal.absorb_cancel()
    except GeneratorExit:
        consumer_gone = True
        if not finished:
            status = "aborted"
    except ModelError as err:  # provider failures arrive in-band, as the AI SDK streams them
        status = "error"
        error_text = err.message or str(err)
        outcome.classification = await agent._classify(err, spec.request_id)
    except Exception as err:
        status = "error"
        thrown = err
    finally:
        await steps.aclose()

    can_yield = not consumer_gone and not external_cancel
    if status == "aborted" and can_yield:
        yield AbortChunk(reason=signal.reason)
    if error_text is not None and can_yield:
        yield ErrorChunk(error_text=error_text)

    current = agent._queue.generation == spec.generation
    message = acc.message()
    if current and acc.has_content:
        # Persist before the response hook and before releasing the slot, so the next turn sees this reply.
        await agent._upsert(message)
        outcome.message = message
    if thrown is not None:
        log.exception("turn %s failed while streaming", spec.request_id, exc_info=thrown)
        error_text = await agent._report_error(
            thrown, ChatErrorContext(request_id=spec.request_id, stage="stream", messages_persisted=True)
        )
        if can_yield:
            yield ErrorChunk(error_text=error_text)
    if status == "completed" and run.output_type is not None:
        try:
            outcome.output = _parse_output(run)
        except (ValidationError, ValueError) as err:
            status, error_text = "error", f"The model's answer does not match the output schema: {err}"
    # A turn whose conversation was cleared under it wrote nothing: for every caller it was skipped.
    outcome.status = "skipped" if not current and status == "completed" else status
    outcome.error = error_text
    if current and (thrown is None or acc.has_content):
        await agent._fire_response(
            ChatResponseResult(
                request_id=spec.request_id,
                message=message,
                status=status,  # type: ignore[arg-type]
                continuation=spec.continuation,
                error=error_text,
            )
        )
    if external_cancel:
        raise asyncio.CancelledError
