"""TurnRun: everything one turn needs after ``before_turn`` has had its say; TurnStats: what the turn did."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..hooks import ContextOverflowConfig, StepResult, StopCondition, StreamTransform
from ..limits import RunUsage
from ..models import ModelClient, Usage
from ..run_account import RunTicket
from ..tools import Tool
from .abort import AbortSignal


@dataclass(slots=True)
class TurnStats:
    """What one turn did across all its attempts (each attempt is a TurnRun), for ``chat:turn:finish``.

    Updated once per step and once per tool call, never per chunk: metrics read it from the event.
    """

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    first_chunk_at: float | None = None  # time.monotonic() of the model's first stream event in this turn
    tool_calls: dict[str, dict[str, int]] = field(default_factory=dict)  # tool name -> outcome -> count
    children: RunUsage = field(default_factory=RunUsage)  # what the child agents it started used, theirs included

    def tree_usage(self) -> RunUsage:
        """What the turn and every agent it started used together."""
        own = RunUsage(
            requests=self.steps,
            tool_calls=sum(sum(counts.values()) for counts in self.tool_calls.values()),
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cost_usd=self.cost_usd or 0.0,
        )
        return own + self.children

    def add_step(self, usage: Usage, cost_usd: float | None) -> None:
        self.steps += 1
        self.input_tokens += usage.input_tokens or 0
        self.output_tokens += usage.output_tokens or 0
        if cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + cost_usd

    def add_tool_call(self, tool_name: str, outcome: str) -> None:
        """Count one call by outcome: ``ok``, ``error`` (the tool raised, or its input was invalid), ``blocked``."""
        by_outcome = self.tool_calls.setdefault(tool_name, {})
        by_outcome[outcome] = by_outcome.get(outcome, 0) + 1

    def payload(self, started: float) -> dict[str, Any]:
        """The turn's facts for ``chat:turn:finish``; ``started`` is the monotonic time the turn began."""
        facts: dict[str, Any] = {
            "steps": self.steps,
            "usage": {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens},
        }
        if self.cost_usd is not None:
            facts["costUsd"] = self.cost_usd
        if self.first_chunk_at is not None:
            facts["firstChunkMs"] = round((self.first_chunk_at - started) * 1000, 3)
        if self.tool_calls:
            facts["toolCalls"] = {name: dict(counts) for name, counts in self.tool_calls.items()}
        return facts


@dataclass(slots=True)
class TurnRun:
    engine: Any
    request_id: str
    signal: AbortSignal
    model: str | ModelClient
    system: str
    messages: list[dict[str, Any]]
    tools: dict[str, Tool]
    active_tools: Sequence[str] | None
    tool_choice: Any
    max_steps: int
    stop_when: Sequence[StopCondition]
    send_reasoning: bool
    params: dict[str, Any]
    response_format: dict[str, Any] | None
    output_type: Any
    headers: dict[str, str] | None
    timeout_s: float | None
    max_retries: int | None
    provider_options: dict[str, Any]
    repair_tool_call: Callable[[Any], Awaitable[Any]] | None
    continuation: bool
    on_chunk: Callable[[Any], Awaitable[None]] | None
    tool_call_ids: set[str] = field(default_factory=set)  # every id in the transcript and this turn
    context_overflow: ContextOverflowConfig | None = None
    baseline: int = 0  # how many of ``messages`` are history (the rest are this turn's steps)
    compactions: int = 0  # proactive compaction attempts in this turn
    context_window: int | None = None  # the model's input limit once looked up (0: unknown)
    stall_timeout_s: float | None = None  # the stream watchdog (None or 0: off)
    steps: list[StepResult] = field(default_factory=list)
    step_number: int = 0
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    cost_usd: float | None = None
    stats: TurnStats = field(default_factory=TurnStats)  # shared by the turn's attempts
    journal: Any = None  # the attempt's TurnJournal while its stream runs (tool calls write the log with effects)
    transform: StreamTransform | None = None  # TurnConfig.transform: rewrites each step's model stream
    ticket: RunTicket | None = None  # the run's limits and account (RunLimits), when it has some
    final_answer: str | None = None  # the final-answer tool whose input is the output (a workflow prompt's)

    @property
    def agent(self) -> Any:
        return self.engine.agent
