"""A turn's set-up before its model request: the tools it offers, its config, ``before_turn``, the output format."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from ..channels import DEFAULT_CHANNEL, Channel
from ..errors import (
    ConfigurationError,
    NoMessagesError,
)
from ..extensions.chain import chain_of, chunk_hook
from ..hooks import ActionAuthorization, ChatErrorStage, TurnConfig, TurnContext
from ..messages import ToolPart
from .assembly import assemble_history, system_prompt
from .convert import ensure_continue_checkpoint
from .engine import Engine
from .final_answer import final_answer_name, final_answer_tool, final_output
from .run import TurnRun
from .spec import TurnSpec

__all__ = ["prepare"]


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


async def prepare(engine: Engine, spec: TurnSpec) -> TurnRun:
    """Assemble the turn and apply ``before_turn``; raises on setup failures (stage ``turn``)."""
    agent = engine.agent
    try:
        repaired, model_messages = await assemble_history(engine, spec.request_id, spec.branch_from, spec.reruns)
    except Exception as err:
        raise _StageError("transcript", err) from err
    if not model_messages:
        raise NoMessagesError(
            "No messages to send to the model: the transcript is empty",
            stage="turn",
            messages_persisted=True,
            request_id=spec.request_id,
        )
    await agent._settle_tools()  # a tools/list_changed just before this turn: its tools are offered
    tools = engine.collect_tools()
    if spec.continuation:
        # A continuation (after a client tool's result, an approval, a recovery) sees the custom body of the turn
        # it continues and offers the stored client tools (set_client_tools), so the model can call them again
        # (reference: lastBody, lastClientTools). A new turn sets the body to what it brought; the client tools
        # it brought are for it only (reference: chat() forwards them per turn), so the stored ones stay.
        spec.body = spec.body or (dict(engine.last_body) if engine.last_body else None)
        spec.client_tools = spec.client_tools or list(engine.last_client_tools)
    else:
        await engine.remember_turn_context(dict(spec.body) if spec.body else None, list(engine.last_client_tools))
    for client_tool in spec.client_tools:  # client tools merge last: they override same-named server tools
        tools[client_tool.name] = client_tool
    channel = agent._channels.get(spec.channel or DEFAULT_CHANNEL)  # one the class no longer declares: no policy
    if channel is not None and channel.tools is not None:  # the channel narrows the set; before_turn may add
        kept = channel.keeps(set(tools))
        tools = {name: t for name, t in tools.items() if name in kept}
    model = agent.model
    system = await system_prompt(engine, agent.get_system_prompt(tools))
    if channel is not None and channel.instructions:
        system = f"{channel.instructions}\n\n{system}" if system else channel.instructions
    ctx = TurnContext(
        request_id=spec.request_id,
        system=system,
        messages=model_messages,
        tools=dict(tools),
        model=model,
        continuation=spec.continuation,
        body=spec.body,
        trigger=spec.trigger,
        principal=spec.principal,
        channel=spec.channel or DEFAULT_CHANNEL,
        metadata=spec.metadata,
    )
    own = await agent.before_turn(ctx)
    cfg = own or TurnConfig()
    if not isinstance(cfg, TurnConfig):
        raise ConfigurationError(
            f"before_turn must return a TurnConfig or None, not {type(cfg).__name__}", request_id=spec.request_id
        )
    extensions = chain_of(agent)
    if extensions.hooked("before_turn") or extensions.hooked("on_decision"):  # theirs merge on top, in order
        cfg = await extensions.before_turn(agent, ctx, cfg, own=own is not None)
    # What this turn's actions may do (Think's authorizeTurn): the actions' default authorize_action enforces it.
    engine.action_authorization = ActionAuthorization.of(await agent.authorize_turn(ctx))
    if cfg.model is None and model is None:
        raise ConfigurationError(
            f"{type(agent).__name__} has no model: set the class attribute `model` or return one from before_turn",
            request_id=spec.request_id,
        )
    if cfg.transform is not None and not callable(cfg.transform):
        raise ConfigurationError(
            "TurnConfig.transform must be a function of the model's stream (an async generator function), "
            f"not {type(cfg.transform).__name__}",
            request_id=spec.request_id,
        )
    if cfg.tools:
        for extra in cfg.tools:
            tools[extra.name] = extra.bind(agent)
    if cfg.instructions is not None or cfg.system is not None:
        system = cfg.instructions if cfg.instructions is not None else cfg.system  # type: ignore[assignment]
    elif cfg.tools or cfg.active_tools is not None:
        offered = {n: t for n, t in tools.items() if cfg.active_tools is None or n in cfg.active_tools}
        system = await system_prompt(engine, agent.get_system_prompt(offered))
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
    messages = ensure_continue_checkpoint(cfg.messages if cfg.messages is not None else model_messages)
    output_type = cfg.output or spec.output
    active_tools, tool_choice, final = cfg.active_tools, cfg.tool_choice, None
    if spec.final_answer and isinstance(output_type, type) and issubclass(output_type, BaseModel):
        # A workflow prompt's output comes as the input of a final-answer call (final_answer.py), not in JSON mode.
        final = final_answer_name(tools)
        tools[final] = final_answer_tool(final, output_type)
        active_tools = None if active_tools is None else [*active_tools, final]
        tool_choice = tool_choice if tool_choice is not None else "required"
    return TurnRun(
        engine=engine,
        request_id=spec.request_id,
        signal=spec.signal,
        model=cfg.model or model,
        system=system,
        messages=messages,
        tools=tools,
        active_tools=active_tools,
        tool_choice=tool_choice,
        max_steps=_max_steps(cfg, channel, agent.max_steps),
        stop_when=tuple(cfg.stop_when or ()),
        send_reasoning=cfg.send_reasoning if cfg.send_reasoning is not None else agent.send_reasoning,
        params=params,
        response_format=None if final else _output_format(output_type),
        output_type=output_type,
        headers=cfg.headers,
        timeout_s=cfg.timeout_s,
        max_retries=cfg.max_retries,
        provider_options=dict(cfg.provider_options or {}),
        repair_tool_call=cfg.repair_tool_call,
        continuation=spec.continuation,
        on_chunk=chunk_hook(agent, engine.overrides("on_chunk")),
        tool_call_ids={p.tool_call_id for m in repaired for p in m.parts if isinstance(p, ToolPart)},
        context_overflow=cfg.context_overflow if cfg.context_overflow is not None else agent.context_overflow,
        baseline=len(messages),
        stall_timeout_s=(
            cfg.chat_stream_stall_timeout_s
            if cfg.chat_stream_stall_timeout_s is not None
            else agent.chat_stream_stall_timeout_s
        ),
        stats=spec.stats,
        transform=cfg.transform,
        ticket=spec.run,
        final_answer=final,
    )


class _StageError(Exception):
    """A setup failure at a stage other than ``turn``."""

    def __init__(self, stage: ChatErrorStage, error: BaseException):
        super().__init__(str(error))
        self.stage: ChatErrorStage = stage
        self.error = error


def _parse_output(run: TurnRun) -> Any:
    if run.final_answer is not None:
        return final_output(run)
    text = run.steps[-1].text if run.steps else ""
    output_type = run.output_type
    if isinstance(output_type, type) and issubclass(output_type, BaseModel):
        return output_type.model_validate_json(text)
    return json.loads(text)


def _max_steps(cfg: TurnConfig, channel: Channel | None, own: int) -> int:
    """The turn's step bound: ``before_turn``'s, else the channel's, else the agent's (reference order)."""
    if cfg.max_steps is not None:
        return cfg.max_steps
    if channel is not None and channel.max_steps is not None:
        return channel.max_steps
    return own
