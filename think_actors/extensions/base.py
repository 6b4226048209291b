"""``Extension``: tools, context blocks and lifecycle hooks packaged as one object an agent class lists.

An extension's hooks have the names and contexts of the agent's own (``think_actors.lifecycle``) plus the agent as
their first argument, since one extension instance serves every agent of its class in a process. They run after
the agent's own hook, in list order; ``chain.py`` holds the dispatch and the merge rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from ..errors import ConfigurationError
from ..hooks import (
    ChatErrorContext,
    ChatResponseResult,
    ChunkContext,
    StepConfig,
    StepContext,
    StepResult,
    ToolCallContext,
    ToolCallDecision,
    ToolCallResultContext,
    TurnConfig,
    TurnContext,
)
from ..tools import Tool

__all__ = ["Extension", "FailurePolicy", "HookDecision"]

FailurePolicy = Literal["open", "closed"]


@dataclass(frozen=True, kw_only=True, slots=True)
class HookDecision:
    """A hook's decision, or an extension hook's failure, as ``Extension.on_decision`` sees it.

    ``source`` is ``"agent"`` for the agent class's own hook, else the extension's name. ``decision`` is what the
    hook returned (a ``TurnConfig``, ``StepConfig``, or ``Allow`` / ``Block`` / ``Substitute``); None when
    ``error`` says the hook failed (``"timed out after 5 s"``, ``"raised ..."``), and then ``failure`` is the
    extension's policy (``"open"``: ignored; ``"closed"``: the call or turn fails).
    """

    request_id: str | None
    hook: str
    source: str
    decision: Any = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    error: str | None = None
    failure: FailurePolicy | None = None


class Extension:
    """Tools, context blocks and hooks for any agent class: ``extensions = [RedactPII(), AuditLog()]``.

    Attributes:
        name: What logs, errors and audit records call it (default: the class name). Unique per agent class.
        tools: Tools the agent offers with its own; ``@ta.tool`` methods of the extension class join them (their
            ``self`` is the extension; ``ToolContext.agent`` is the agent). A name an agent tool has too is a
            ``ConfigurationError`` naming both.
        context_providers: Context blocks added to the agent's session when it starts, by label: a provider
            (see ``think_actors.context_providers``), a ``str`` (static text) or None (a writable block kept in
            the agent's store).
        timeout_s: How long each of its hook calls may take (Think's ``hookTimeout``, 5 s).
        failure: What a hook that raises or times out does. ``"open"``: it is logged and ignored, as if it had
            returned None. ``"closed"``: it fails what the agent's own hook raising would fail, with an
            ``ExtensionError`` naming the extension and the hook: the tool call (``before_tool_call``; the model
            sees the error), else the turn. After the turn (``on_chat_response``, ``on_chat_error``) a failure
            is only logged.

    Override only the hooks you need: one not overridden is never called (``on_chunk`` costs nothing then).
    """

    name: str = ""
    tools: Sequence[Tool] = ()
    context_providers: Mapping[str, Any] = MappingProxyType({})
    timeout_s: float = 5.0
    failure: FailurePolicy = "open"

    def __init__(
        self, *, name: str | None = None, timeout_s: float | None = None, failure: FailurePolicy | None = None
    ) -> None:
        if name is not None:
            self.name = name
        if timeout_s is not None:
            self.timeout_s = timeout_s
        if failure is not None:
            self.failure = failure
        self.check()

    def check(self) -> None:
        """Raise ``ConfigurationError`` for a bad name, timeout or failure policy (also run by the agent)."""
        kind = type(self).__name__
        if not self.name:
            self.name = kind
        if not isinstance(self.name, str):
            raise ConfigurationError(f"{kind}.name must be a str, got {self.name!r}")
        timeout = self.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigurationError(f"extension {self.name!r}: timeout_s must be a positive number, got {timeout!r}")
        if self.failure not in ("open", "closed"):
            raise ConfigurationError(
                f"extension {self.name!r}: failure must be 'open' or 'closed', got {self.failure!r}"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, failure={self.failure!r}, timeout_s={self.timeout_s!r})"

    async def before_turn(self, agent: Any, ctx: TurnContext) -> TurnConfig | None:
        """Change the turn, after the agent's ``before_turn`` and the extensions before this one.

        ``ctx`` shows the turn as they left it (``system``, ``messages``, ``tools``). Return a TurnConfig (merged
        on top: see the extensions guide) or None. Turn lock held.
        """
        return None

    async def before_step(self, agent: Any, ctx: StepContext) -> StepConfig | None:
        """Change one step, after the agent's ``before_step``: fields set here replace theirs (provider options
        merge key by key). Turn lock held."""
        return None

    async def on_chunk(self, agent: Any, ctx: ChunkContext) -> None:
        """Observe a model-level stream part, after the agent's ``on_chunk``. Called per delta: keep it cheap.
        To change the text, return a ``transform`` from ``before_turn`` instead."""

    async def before_tool_call(self, agent: Any, ctx: ToolCallContext) -> ToolCallDecision | None:
        """Decide a tool call the agent's hook and earlier extensions let through (``ctx.input`` is the input
        they chose). ``Block`` / ``Substitute`` decide it (no later hook runs); ``Allow(input=...)`` changes the
        input; None keeps the decision so far. Turn lock held."""
        return None

    async def after_tool_call(self, agent: Any, ctx: ToolCallResultContext) -> None:
        """Observe a finished tool call, after the agent's ``after_tool_call``. Turn lock held."""

    async def on_step_finish(self, agent: Any, ctx: StepResult) -> None:
        """Observe a finished step, after the agent's ``on_step_finish``. Turn lock held."""

    async def on_chat_response(self, agent: Any, ctx: ChatResponseResult) -> None:
        """Observe a finished turn, after the agent's ``on_chat_response``. Lock released; failures are logged."""

    async def on_chat_error(self, agent: Any, error: BaseException, ctx: ChatErrorContext) -> None:
        """Observe a failed turn's error (the one the turn failed with, before the agent's ``on_chat_error``
        chose what to report), after the agent's hook. The return value is ignored; failures are logged."""

    async def on_decision(self, agent: Any, ctx: HookDecision) -> None:
        """Observe every decision a hook returned (``before_turn``, ``before_step``, ``before_tool_call``; the
        agent's and each extension's, None returns excepted) and every extension hook that failed, as it happens.
        Runs before the decision takes effect: under ``failure="closed"`` a failure here fails the tool call or turn
        being decided."""
