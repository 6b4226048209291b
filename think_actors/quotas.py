"""Per-user quotas at the gateway: turns per minute, sockets open at once, model tokens per day.

``Quotas`` says the limits (one set for every principal); ``QuotaBook`` is the arithmetic, kept by whoever every
gateway of a deployment asks: the gateway itself when it is the only one (saved in a store, so a restart keeps the
counts), the cluster's quotas actor on Ray. A refusal is ``QuotaExceeded``: which quota, and when to try again.

What counts: a turn when the gateway accepts a chat request, an MCP tool call, or a tool answer that asks for a
continuation, before it stores or applies anything, so a refused request loses nothing and an accepted one is never
refused later; tokens when the turn ends, from the model's reported usage (the turn and every agent it started);
a socket while it is open. Tokens are checked at a
turn's start: a turn that starts under the day's budget runs to its end, so the day's total may pass the budget by
what the turns running at that moment use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["QuotaBook", "QuotaExceeded", "Quotas"]

_DAY_S = 86_400


class Quotas(BaseModel):
    """What each principal may use; None means no limit.

    Attributes:
        turns_per_minute: chat requests (and MCP tool calls) accepted in any 60 seconds.
        sockets: WebSockets open at once, over every agent and every gateway.
        tokens_per_day: model tokens (input and output, every agent a turn started included) per UTC day.
        exempt_roles: principals with one of these roles have no quotas (default: ``admin``).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    turns_per_minute: int | None = Field(default=None, ge=1)
    sockets: int | None = Field(default=None, ge=1)
    tokens_per_day: int | None = Field(default=None, ge=1)
    exempt_roles: frozenset[str] = frozenset({"admin"})


class QuotaExceeded(Exception):
    """A principal is over a quota: ``quota`` names it, ``retry_after_s`` says when it frees (an HTTP 429)."""

    def __init__(self, quota: str, message: str, retry_after_s: int):
        super().__init__(message)
        self.quota = quota
        self.message = message
        self.retry_after_s = max(1, retry_after_s)

    def __reduce__(self) -> Any:
        return (QuotaExceeded, (self.quota, self.message, self.retry_after_s))


@dataclass(slots=True)
class _Usage:
    turns: list[float] = field(default_factory=list)  # acceptance times within the last minute, oldest first
    day: int = 0
    tokens: int = 0
    sockets: dict[str, int] = field(default_factory=dict)  # per gateway


class QuotaBook:
    """The counts of every principal. Synchronous: its keeper serializes the calls, so a check and its count are
    one step."""

    def __init__(self, quotas: Quotas, *, clock: Any = time.time):
        self.quotas = quotas
        self._clock = clock
        self._users: dict[str, _Usage] = {}

    def _usage(self, principal_id: str, now: float) -> _Usage:
        usage = self._users.setdefault(principal_id, _Usage())
        day = int(now // _DAY_S)
        if usage.day != day:
            usage.day, usage.tokens = day, 0
        while usage.turns and usage.turns[0] <= now - 60:
            usage.turns.pop(0)
        return usage

    def start_turn(self, principal_id: str) -> None:
        """Count a turn, or raise ``QuotaExceeded`` (and count nothing)."""
        quotas, now = self.quotas, self._clock()
        usage = self._usage(principal_id, now)
        if quotas.tokens_per_day is not None and usage.tokens >= quotas.tokens_per_day:
            retry = int((usage.day + 1) * _DAY_S - now) + 1
            raise QuotaExceeded(
                "tokens_per_day",
                f"{principal_id!r} used its {quotas.tokens_per_day} model tokens of today (UTC): try again in "
                f"{retry} s, after midnight UTC",
                retry,
            )
        if quotas.turns_per_minute is not None and len(usage.turns) >= quotas.turns_per_minute:
            retry = int(usage.turns[0] + 60 - now) + 1
            raise QuotaExceeded(
                "turns_per_minute",
                f"{principal_id!r} sent {quotas.turns_per_minute} chat requests in the last minute: try again in "
                f"{retry} s",
                retry,
            )
        usage.turns.append(now)

    def add_tokens(self, principal_id: str, tokens: int) -> None:
        if tokens > 0:
            self._usage(principal_id, self._clock()).tokens += tokens

    def open_socket(self, principal_id: str, gateway: str) -> None:
        """Count a socket of ``gateway``, or raise ``QuotaExceeded``."""
        allowed = self.quotas.sockets
        usage = self._usage(principal_id, self._clock())
        if allowed is not None and sum(usage.sockets.values()) >= allowed:
            raise QuotaExceeded(
                "sockets",
                f"{principal_id!r} has {allowed} sockets open already: close one (another tab) and connect again",
                5,
            )
        usage.sockets[gateway] = usage.sockets.get(gateway, 0) + 1

    def close_socket(self, principal_id: str, gateway: str) -> None:
        usage = self._users.get(principal_id)
        if usage is None:
            return
        left = usage.sockets.get(gateway, 0) - 1
        if left > 0:
            usage.sockets[gateway] = left
        else:
            usage.sockets.pop(gateway, None)

    def forget_gateway(self, gateway: str) -> None:
        """Drop the sockets a gateway counted (it stopped, or stopped answering)."""
        for usage in self._users.values():
            usage.sockets.pop(gateway, None)

    def used(self, principal_id: str) -> dict[str, int]:
        """What the principal uses now: turns in the last minute, tokens today, sockets open."""
        usage = self._usage(principal_id, self._clock())
        return {"turns": len(usage.turns), "tokens": usage.tokens, "sockets": sum(usage.sockets.values())}

    def state(self) -> dict[str, Any]:
        """What survives a restart of its keeper: the turns of the last minute and the tokens of the day."""
        return {pid: {"turns": list(u.turns), "day": u.day, "tokens": u.tokens} for pid, u in self._users.items()}

    def restore(self, state: dict[str, Any]) -> None:
        for pid, saved in state.items():
            usage = self._users.setdefault(pid, _Usage())
            usage.turns = [float(t) for t in saved.get("turns", ())]
            usage.day, usage.tokens = int(saved.get("day", 0)), int(saved.get("tokens", 0))
