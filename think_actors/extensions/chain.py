"""The dispatch of an agent's extensions: order, timeout, failure policy, and how their answers merge.

Rules, in the order the turn meets them (the agent's own hook always first, then each extension in list order):

1. ``before_turn``: each extension sees the turn as the hooks before it left it and returns a ``TurnConfig``
   merged on top: a field it sets replaces the value so far, except ``tools`` and ``stop_when`` (added),
   ``headers`` and ``provider_options`` (merged key by key), ``active_tools`` (narrowed: the intersection) and
   ``transform`` (composed: the agent's reads the model's stream, each extension's reads the one before).
   ``instructions`` and ``system`` are one field here.
2. ``before_step``: as 1, for a ``StepConfig``.
3. ``before_tool_call``: the first ``Block`` or ``Substitute`` decides the call and ends the chain;
   ``Allow(input=...)`` changes the input every later hook sees and the tool gets.
4. Observers (``on_chunk``, ``after_tool_call``, ``on_step_finish``, ``on_chat_response``, ``on_chat_error``)
   run in order; their return values are ignored.

Each call has the extension's ``timeout_s``. A failure (raised or timed out) under ``failure="open"`` is logged and
read as None; under ``"closed"`` it raises ``ExtensionError`` where the agent's own hook raising would fail (the
tool call for ``before_tool_call``, else the turn); after the turn it is only logged. ``on_decision`` observers
hear of every decision and failure before it takes effect.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from ..errors import ConfigurationError, ExtensionError, StoreFencedError
from ..hooks import (
    Allow,
    Block,
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    StepConfig,
    StepContext,
    StepResult,
    StreamTransform,
    Substitute,
    ToolCallContext,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)
from ..tools import Tool, class_tools
from .base import Extension, HookDecision

__all__ = [
    "ExtensionChain",
    "add_context_blocks",
    "chain_of",
    "check_extensions",
    "chunk_hook",
    "extension_tools",
]

log = logging.getLogger("think_actors")

HOOKS = (
    "before_turn",
    "before_step",
    "on_chunk",
    "before_tool_call",
    "after_tool_call",
    "on_step_finish",
    "on_chat_response",
    "on_chat_error",
    "on_decision",
)
_ADDED = ("tools", "stop_when")
_MERGED = ("headers", "provider_options")


class ExtensionChain:
    """An agent class's extensions, checked, with the hooks each one overrides."""

    def __init__(self, owner: str, extensions: Sequence[Extension]) -> None:
        if isinstance(extensions, Extension) or not isinstance(extensions, Sequence | tuple | list):
            raise ConfigurationError(f"{owner}.extensions must be a list of Extension instances, got {extensions!r}")
        seen: dict[str, Extension] = {}
        for ext in extensions:
            if isinstance(ext, type) or not isinstance(ext, Extension):
                hint = f" (did you mean {ext.__name__}()?)" if isinstance(ext, type) else ""
                raise ConfigurationError(f"{owner}.extensions holds {ext!r}, not an Extension instance{hint}")
            ext.check()
            if ext.name in seen:
                raise ConfigurationError(
                    f"{owner}.extensions holds two extensions named {ext.name!r}: give one a name of its own "
                    f"({type(ext).__name__}(name=...))"
                )
            seen[ext.name] = ext
        self.extensions = tuple(extensions)
        self._hooked = {
            hook: tuple(e for e in self.extensions if getattr(type(e), hook) is not getattr(Extension, hook))
            for hook in HOOKS
        }
        self.tools: list[tuple[Extension, Tool]] = []
        for ext in self.extensions:
            own = [*class_tools(type(ext)).values(), *ext.tools]
            names = [t.name for t in own]
            if len(set(names)) != len(names):
                raise ConfigurationError(f"extension {ext.name!r} has two tools of one name: {sorted(names)}")
            self.tools.extend((ext, t.bind(ext)) for t in own)

    def hooked(self, hook: str) -> tuple[Extension, ...]:
        """The extensions that override ``hook``, in order."""
        return self._hooked[hook]

    # ------------------------------------------------------------------ one call

    async def call(
        self, ext: Extension, hook: str, agent: Any, *args: Any, request_id: str | None, **facts: Any
    ) -> Any:
        """One hook of one extension under its timeout and failure policy (None for a failure that fails open)."""
        try:
            async with asyncio.timeout(ext.timeout_s):
                return await getattr(ext, hook)(agent, *args)
        except StoreFencedError:  # a newer process owns the agent: the turn ends quietly, as for any hook
            raise
        except Exception as err:
            what = f"timed out after {ext.timeout_s:g} s" if isinstance(err, TimeoutError) else _raised(err)
            if hook != "on_decision":
                await self.decided(
                    agent,
                    HookDecision(
                        request_id=request_id, hook=hook, source=ext.name, error=what, failure=ext.failure, **facts
                    ),
                    skip=ext,
                )
            message = f"extension {ext.name!r} {hook} {what}"
            if ext.failure == "closed" and hook not in ("on_chat_response", "on_chat_error"):
                raise ExtensionError(
                    f"{message} (it fails closed)",
                    request_id=request_id,
                    stage="turn" if hook == "before_turn" else "stream",
                    messages_persisted=True,
                    extension=ext.name,
                    hook=hook,
                ) from err
            why = "it fails open" if ext.failure == "open" else "the turn is over"
            log.warning("%s; ignored (%s)", message, why, exc_info=not isinstance(err, TimeoutError))
            return None

    async def decided(self, agent: Any, decision: HookDecision, *, skip: Extension | None = None) -> None:
        """Tell the ``on_decision`` observers (all but ``skip``) of one decision or failure."""
        for ext in self._hooked["on_decision"]:
            if ext is not skip:
                await self.call(
                    ext, "on_decision", agent, decision, request_id=decision.request_id, **_tool_facts(decision)
                )

    async def observe(self, hook: str, agent: Any, *args: Any, request_id: str | None, **facts: Any) -> None:
        """Run one observation hook of every extension that has it, in order."""
        for ext in self._hooked[hook]:
            await self.call(ext, hook, agent, *args, request_id=request_id, **facts)

    # ------------------------------------------------------------------ the decision hooks

    async def before_turn(self, agent: Any, ctx: TurnContext, cfg: TurnConfig, *, own: bool) -> TurnConfig:
        """The agent's ``before_turn`` config (``own``: it returned one) with each extension's merged on top."""
        if own:
            await self.decided(
                agent, HookDecision(request_id=ctx.request_id, hook="before_turn", source="agent", decision=cfg)
            )
        for ext in self._hooked["before_turn"]:
            seen = _turn_as_left(ctx, cfg)
            got = await self.call(ext, "before_turn", agent, seen, request_id=ctx.request_id)
            if got is None:
                continue
            if not isinstance(got, TurnConfig):
                raise ConfigurationError(
                    f"extension {ext.name!r} before_turn must return a TurnConfig or None, not {type(got).__name__}",
                    request_id=ctx.request_id,
                )
            await self.decided(
                agent, HookDecision(request_id=ctx.request_id, hook="before_turn", source=ext.name, decision=got)
            )
            cfg = merge_turn_config(cfg, got)
        return cfg

    async def before_step(self, agent: Any, ctx: StepContext, cfg: StepConfig, *, own: bool) -> StepConfig:
        """The agent's ``before_step`` config with each extension's on top (rule 2)."""
        if own:
            await self.decided(
                agent, HookDecision(request_id=ctx.request_id, hook="before_step", source="agent", decision=cfg)
            )
        for ext in self._hooked["before_step"]:
            got = await self.call(ext, "before_step", agent, ctx, request_id=ctx.request_id)
            if got is None:
                continue
            if not isinstance(got, StepConfig):
                raise ConfigurationError(
                    f"extension {ext.name!r} before_step must return a StepConfig or None, not {type(got).__name__}",
                    request_id=ctx.request_id,
                )
            await self.decided(
                agent, HookDecision(request_id=ctx.request_id, hook="before_step", source=ext.name, decision=got)
            )
            cfg = _merge(cfg, got)
        return cfg

    async def before_tool_call(self, agent: Any, ctx: ToolCallContext, decision: Any) -> Any:
        """The call's decision: the agent's, then each extension's while none blocked or substituted (rule 3)."""
        facts: dict[str, Any] = {"tool_call_id": ctx.tool_call_id, "tool_name": ctx.tool_name}
        if decision is not None:
            await self.decided(
                agent,
                HookDecision(
                    request_id=ctx.request_id, hook="before_tool_call", source="agent", decision=decision, **facts
                ),
            )
        for ext in self._hooked["before_tool_call"]:
            if isinstance(decision, Block | Substitute):
                break
            seen = dataclasses.replace(ctx, input=decision.input) if _replaces(decision) else ctx
            got = await self.call(ext, "before_tool_call", agent, seen, request_id=ctx.request_id, **facts)
            if got is None:
                continue
            if not isinstance(got, Allow | Block | Substitute):
                raise ConfigurationError(
                    f"extension {ext.name!r} before_tool_call must return Allow, Block, Substitute or None, "
                    f"not {type(got).__name__}"
                )
            await self.decided(
                agent,
                HookDecision(
                    request_id=ctx.request_id, hook="before_tool_call", source=ext.name, decision=got, **facts
                ),
            )
            if isinstance(got, Block | Substitute) or got.replaces_input or decision is None:
                decision = got
        return decision

    # ------------------------------------------------------------------ observers

    async def after_tool_call(self, agent: Any, ctx: ToolCallResultContext) -> None:
        await self.observe(
            "after_tool_call",
            agent,
            ctx,
            request_id=ctx.request_id,
            tool_call_id=ctx.tool_call_id,
            tool_name=ctx.tool_name,
        )

    async def on_step_finish(self, agent: Any, ctx: StepResult, request_id: str) -> None:
        await self.observe("on_step_finish", agent, ctx, request_id=request_id)

    async def on_chat_response(self, agent: Any, ctx: ChatResponseResult) -> None:
        await self.observe("on_chat_response", agent, ctx, request_id=ctx.request_id)

    async def on_chat_error(self, agent: Any, error: BaseException, ctx: ChatErrorContext) -> None:
        await self.observe("on_chat_error", agent, error, ctx, request_id=ctx.request_id)


# ---------------------------------------------------------------------- an agent's chain

# Per agent class: (the ``extensions`` sequence it was built from, the chain); rebuilt when the attribute changes.
_CHAINS: weakref.WeakKeyDictionary[type, tuple[Any, ExtensionChain]] = weakref.WeakKeyDictionary()


def chain_of(agent: Any) -> ExtensionChain:
    """The agent's extension chain (checked once per class and ``extensions`` value)."""
    declared = agent.extensions
    cached = _CHAINS.get(type(agent))
    if cached is not None and cached[0] is declared:
        return cached[1]
    chain = ExtensionChain(type(agent).__name__, declared)
    _CHAINS[type(agent)] = (declared, chain)
    return chain


def check_extensions(agent: Any, tools: Sequence[Tool]) -> None:
    """Check the agent's extensions and that no extension tool shares a name with a tool of the agent."""
    chain = chain_of(agent)
    if chain.tools:
        add_tools(chain, {**class_tools(type(agent)), **{t.name: t for t in tools}}, type(agent).__name__)


def add_tools(chain: ExtensionChain, tools: dict[str, Tool], owner: str) -> None:
    """Add the extensions' tools to ``tools``; a name taken already is a ``ConfigurationError`` naming both."""
    for ext, t in chain.tools:
        if t.name in tools:
            other = next((e.name for e, o in chain.tools if o.name == t.name and e is not ext), None)
            holder = f"extension {other!r}" if other is not None else f"{owner} itself"
            raise ConfigurationError(
                f"extension {ext.name!r} offers a tool named {t.name!r}, and {holder} has one of that name: "
                "rename one (@ta.tool(name=...)) or drop one"
            )
        tools[t.name] = t


def extension_tools(agent: Any, tools: dict[str, Tool]) -> None:
    """Add the agent's extension tools to a turn's ``tools`` (see ``add_tools``)."""
    chain = chain_of(agent)
    if chain.tools:
        add_tools(chain, tools, type(agent).__name__)


def chunk_hook(agent: Any, own: bool) -> Callable[[ChunkContext], Any] | None:
    """The turn's ``on_chunk``: None when neither the agent (``own``) nor an extension overrides it."""
    chain = chain_of(agent)
    hooked = chain.hooked("on_chunk")
    if not hooked:
        return agent.on_chunk if own else None
    first = agent.on_chunk if own else None

    async def on_chunk(ctx: ChunkContext) -> None:
        if first is not None:
            await first(ctx)
        for ext in hooked:
            await chain.call(ext, "on_chunk", agent, ctx, request_id=ctx.request_id)

    return on_chunk


# ---------------------------------------------------------------------- merging


def merge_turn_config(base: TurnConfig, top: TurnConfig) -> TurnConfig:
    """``top`` merged onto ``base`` by rule 1."""
    merged: TurnConfig = _merge(base, top)
    changes: dict[str, Any] = {}
    for name in _ADDED:
        if getattr(base, name) and getattr(top, name):
            changes[name] = (*getattr(base, name), *getattr(top, name))
    if base.active_tools is not None and top.active_tools is not None:
        changes["active_tools"] = [n for n in base.active_tools if n in set(top.active_tools)]
    if base.transform is not None and top.transform is not None:
        changes["transform"] = compose(base.transform, top.transform)
    return dataclasses.replace(merged, **changes) if changes else merged


def _merge(base: Any, top: Any) -> Any:
    """Every field ``top`` sets replaces ``base``'s; headers and provider options merge key by key."""
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(top):
        value = getattr(top, field.name)
        if value is None:
            continue
        if field.name in _MERGED and getattr(base, field.name):
            value = {**getattr(base, field.name), **value}
        changes[field.name] = value
    if "instructions" in changes or "system" in changes:  # one prompt: the latest set wins, whichever name it used
        changes["instructions"] = changes.pop("instructions", None) or changes.get("system")
        changes["system"] = None
    return dataclasses.replace(base, **changes) if changes else base


def compose(inner: StreamTransform, outer: StreamTransform) -> StreamTransform:
    """``outer`` reading what ``inner`` makes of the model's stream; closing the result closes both."""

    async def composed(events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        first = inner(events)
        second = outer(first)
        try:
            async for event in second:
                yield event
        finally:
            for stream in (second, first):
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()

    return composed


def _turn_as_left(ctx: TurnContext, cfg: TurnConfig) -> TurnContext:
    """The turn context an extension's ``before_turn`` sees: the prompt, messages and tools as set so far."""
    changes: dict[str, Any] = {}
    prompt = cfg.instructions if cfg.instructions is not None else cfg.system
    if prompt is not None:
        changes["system"] = prompt
    if cfg.messages is not None:
        changes["messages"] = cfg.messages
    if cfg.tools:
        changes["tools"] = {**ctx.tools, **{t.name: t for t in cfg.tools}}
    return dataclasses.replace(ctx, **changes) if changes else ctx


def _replaces(decision: Any) -> bool:
    return isinstance(decision, Allow) and decision.replaces_input


def _tool_facts(decision: HookDecision) -> dict[str, Any]:
    return {"tool_call_id": decision.tool_call_id, "tool_name": decision.tool_name}


def _raised(err: BaseException) -> str:
    text = str(err)
    return f"raised {type(err).__name__}: {text}" if text else f"raised {type(err).__name__}"


def add_context_blocks(agent: Any, session: Any) -> None:
    """Add the extensions' context blocks to the agent's session (at its start, before the session loads)."""
    for ext in chain_of(agent).extensions:
        for label, given in ext.context_providers.items():
            if given is None:
                options: dict[str, Any] = {}
            elif isinstance(given, str):
                options = {"content": given}
            else:
                options = {"provider": given}
            try:
                session.with_context(label, **options)
            except ConfigurationError as err:
                raise ConfigurationError(f"extension {ext.name!r}, context block {label!r}: {err}") from None
