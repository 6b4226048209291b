"""Limits for a run of agents: one budget, one deadline and one set of caps for a turn and every agent it starts.

A *run* is a turn started with ``RunLimits`` (``chat(..., limits=...)``, ``save_messages``, ``submit_messages``, a
scheduled prompt, or the class attribute ``run_limits``) together with every turn it causes below it: agent tools,
their own agent tools, on any node. Here are what a run may use (``RunLimits``), what it used (``RunUsage``) and
the errors of a limit reached; ``run_account`` keeps the account every agent of the run asks and charges.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigurationError, RunLimitError

__all__ = [
    "RunLimits",
    "RunUsage",
    "child_refusal",
    "counts_children",
    "limit_error",
    "past_deadline",
    "prepays",
]


class RunLimits(BaseModel):
    """What one run of agents may use, all of it together: the turn that starts the run and every agent it starts,
    on any node. ``None`` (the default of each) means no limit.

    - ``max_input_tokens``, ``max_output_tokens``, ``max_total_tokens``: tokens the model requests of the whole run
      used, as their providers reported them.
    - ``max_cost_usd``: what those requests cost, from the provider's reported cost or litellm's price table (a
      request whose price is unknown counts as 0).
    - ``max_requests``: model requests (one per step). ``max_tool_calls``: tool calls that run (agent tools count).
    - ``max_depth``: how deep agents may nest below the run's first agent: 0 lets it start no child agent, 1 lets
      its children start none, and so on.
    - ``timeout_s``: wall-clock seconds from the run's start; at that moment every turn of the run still going stops.
    - ``max_agents_in_flight``: child agents running at once in the whole run; ``max_concurrent_agent_tools``:
      child agents running at once under any one agent of the run (the class attribute of the same name caps an
      agent whatever the run).

    A run that reaches a budget (tokens, cost, requests, tool calls, the deadline) stops everywhere: the turn that
    reached it ends with ``RunLimitError``, no new step, tool call or child starts in the run, and a parent
    whose child ended that way gets a tool error. A child refused for depth or concurrency is a tool error the
    parent's model can answer, and the run goes on.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_input_tokens: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_total_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_requests: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=0)
    max_depth: int | None = Field(default=None, ge=0)
    timeout_s: float | None = Field(default=None, gt=0)
    max_agents_in_flight: int | None = Field(default=None, ge=1)
    max_concurrent_agent_tools: int | None = Field(default=None, ge=1)

    def tightened(self, other: RunLimits | None) -> RunLimits:
        """These limits, each no looser than ``other``'s (field by field, the smaller of the two that are set)."""
        if other is None:
            return self
        merged: dict[str, Any] = {}
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            merged[name] = theirs if mine is None else mine if theirs is None else min(mine, theirs)
        return type(self)(**merged)

    @classmethod
    def of(cls, value: Any) -> RunLimits | None:
        """``value`` as RunLimits: an instance, a dict of its fields, or None."""
        if value is None or isinstance(value, RunLimits):
            return value
        if isinstance(value, dict):
            try:
                return cls.model_validate(value)
            except ValidationError as err:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'limits'}: {e['msg']}" for e in err.errors())
                raise ConfigurationError(
                    f"limits: {problems}. The fields are {', '.join(cls.model_fields)}; leave one out (or None) "
                    "for no limit"
                ) from None
        raise ConfigurationError(
            f"limits takes ta.RunLimits(...) or a dict of its fields (max_total_tokens=..., timeout_s=...), "
            f"not {type(value).__name__}"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RunUsage:
    """What a run (or one agent's part of it, with the agents it started) used."""

    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    agents: int = 0  # child agents started

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: RunUsage) -> RunUsage:
        return RunUsage(
            requests=self.requests + other.requests,
            tool_calls=self.tool_calls + other.tool_calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=self.cost_usd + other.cost_usd,
            agents=self.agents + other.agents,
        )

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON data (a tool result's metadata, a stored record)."""
        return {
            "requests": self.requests,
            "toolCalls": self.tool_calls,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "costUsd": self.cost_usd,
            "agents": self.agents,
        }

    @classmethod
    def from_dict(cls, data: Any) -> RunUsage:
        if not isinstance(data, dict):
            return cls()
        return cls(
            requests=int(data.get("requests", 0)),
            tool_calls=int(data.get("toolCalls", 0)),
            input_tokens=int(data.get("inputTokens", 0)),
            output_tokens=int(data.get("outputTokens", 0)),
            cost_usd=float(data.get("costUsd", 0.0)),
            agents=int(data.get("agents", 0)),
        )


def prepays(limits: RunLimits) -> bool:
    """Whether a run with ``limits`` admits requests before they are made (without ``max_requests``)."""
    return limits.max_requests is None


def counts_children(limits: RunLimits) -> bool:
    """Whether a run with ``limits`` keeps count of its running children (it caps them)."""
    return limits.max_agents_in_flight is not None or limits.max_concurrent_agent_tools is not None


def limit_error(run_id: str, limit: str, used: float, allowed: float, what: str) -> RunLimitError:
    return RunLimitError(
        f"the run {run_id!r} reached its {limit} limit ({allowed:g}): {what}. Raise the limit in RunLimits, or give "
        "the agent less to do",
        limit=limit,
        used=used,
        allowed=allowed,
        run_id=run_id,
        stage="stream",
        messages_persisted=True,
    )


def past_deadline(run_id: str, started_at: float, timeout_s: float | None) -> RunLimitError | None:
    """The run's ``timeout_s`` error once its deadline has passed, else None."""
    if timeout_s is None or time.time() < started_at + timeout_s:
        return None
    elapsed = time.time() - started_at
    return limit_error(run_id, "timeout_s", elapsed, timeout_s, f"{elapsed:.1f} s since it started")


def child_refusal(cap: int) -> str:
    """The error of a child agent refused by a concurrency cap, in Think's words."""
    return f"maxConcurrentAgentTools ({cap}) exceeded"
