"""TurnRun: everything one turn needs after ``before_turn`` has had its say."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..hooks import ContextOverflowConfig, StepResult, StopCondition
from ..models import ModelClient, Usage
from ..tools import Tool
from .abort import AbortSignal


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

    @property
    def agent(self) -> Any:
        return self.engine.agent
