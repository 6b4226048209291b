"""``AuditLog``: every hook decision, tool outcome and turn error of an agent, appended to the agent's own store.

Why the store: the records then live as long as the conversation, survive restarts and hibernation, move with the
agent (SQLite file or PostgreSQL rows) and need no second system. The store offers small key-value entries only, so
records are kept in pages of ``page_size`` under ``audit:<name>:<page>``; appending rewrites the last page in one
durable write. Appends of one agent are serialised in its process (concurrent tool calls append in the order they
finished); only one process writes an agent's store at a time (the store's fencing).

With ``failure="closed"`` a record that cannot be written stops what it records: a tool call is not run, a turn
fails; ``"open"`` (the default) logs and goes on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import weakref
from typing import Any

from ..hooks import (
    Allow,
    Block,
    ChatErrorContext,
    ChatResponseResult,
    StepConfig,
    Substitute,
    ToolCallResultContext,
    TurnConfig,
)
from ..store import Store
from .base import Extension, FailurePolicy, HookDecision

__all__ = ["AuditLog"]


class AuditLog(Extension):
    """Append a record of every hook decision to the agent's store; read them with ``await AuditLog.records(agent)``.

    A record is a dict with ``at`` (unix seconds), ``request_id``, ``hook`` and, by hook: ``source`` (``"agent"`` or
    an extension's name) and ``decision`` (what was decided, as plain data) for ``before_turn``,
    ``before_step`` and ``before_tool_call``; ``error`` and ``failure`` for an extension hook
    that failed; ``tool_name``, ``tool_call_id``, ``success``, ``error``, ``duration_ms`` (with ``tool_io``:
    ``input`` and ``output``) for ``after_tool_call``; ``stage`` and ``error`` for ``on_chat_error``; ``status`` and
    ``error`` for ``on_chat_response`` (the turn's end).

    Args:
        name: The log's name (``records(agent, name=...)``); two logs of one agent need two names.
        tool_io: Whether tool inputs and outputs are recorded (as JSON, at most ``max_chars`` characters each).
        page_size: Records per stored page.
    """

    def __init__(
        self,
        *,
        name: str = "audit",
        tool_io: bool = True,
        max_chars: int = 2000,
        page_size: int = 64,
        timeout_s: float | None = None,
        failure: FailurePolicy | None = None,
    ) -> None:
        super().__init__(name=name, timeout_s=timeout_s, failure=failure)
        self.tool_io = tool_io
        self.max_chars = max_chars
        self.page_size = page_size
        self._logs: weakref.WeakKeyDictionary[Any, _Pages] = weakref.WeakKeyDictionary()

    def __getstate__(self) -> dict[str, Any]:  # pickled with the agent class (Ray): no process state goes along
        state = dict(self.__dict__)
        state["_logs"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._logs = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ reading

    @staticmethod
    async def records(agent_or_store: Any, *, name: str = "audit") -> list[dict[str, Any]]:
        """Every record of the log ``name``, oldest first, from an agent (in this process) or its store."""
        store: Store = getattr(agent_or_store, "store", agent_or_store)
        found: list[dict[str, Any]] = []
        page = 0
        while (records := await store.get_kv(_key(name, page))) is not None:
            found.extend(records)
            page += 1
        return found

    # ------------------------------------------------------------------ the hooks

    async def on_decision(self, agent: Any, ctx: HookDecision) -> None:
        record: dict[str, Any] = {"request_id": ctx.request_id, "hook": ctx.hook, "source": ctx.source}
        if ctx.tool_call_id is not None:
            record.update(tool_name=ctx.tool_name, tool_call_id=ctx.tool_call_id)
        if ctx.error is not None:
            record.update(error=ctx.error, failure=ctx.failure)
        else:
            record["decision"] = self._decision(ctx.decision)
        await self._append(agent, record)

    async def after_tool_call(self, agent: Any, ctx: ToolCallResultContext) -> None:
        record: dict[str, Any] = {
            "request_id": ctx.request_id,
            "hook": "after_tool_call",
            "tool_name": ctx.tool_name,
            "tool_call_id": ctx.tool_call_id,
            "success": ctx.success,
            "error": ctx.error,
            "duration_ms": round(ctx.duration_ms, 3),
        }
        if self.tool_io:
            record.update(input=self._plain(ctx.input), output=self._plain(ctx.output))
        await self._append(agent, record)

    async def on_chat_error(self, agent: Any, error: BaseException, ctx: ChatErrorContext) -> None:
        await self._append(
            agent,
            {
                "request_id": ctx.request_id,
                "hook": "on_chat_error",
                "stage": ctx.stage,
                "error": str(error) or type(error).__name__,
                "error_type": type(error).__name__,
            },
        )

    async def on_chat_response(self, agent: Any, ctx: ChatResponseResult) -> None:
        await self._append(
            agent, {"request_id": ctx.request_id, "hook": "on_chat_response", "status": ctx.status, "error": ctx.error}
        )

    # ------------------------------------------------------------------ writing

    async def _append(self, agent: Any, record: dict[str, Any]) -> None:
        pages = self._logs.get(agent)
        if pages is None:
            pages = self._logs[agent] = _Pages(self.name, self.page_size)
        await pages.append(agent.store, {"at": round(time.time(), 6), **record})

    def _decision(self, value: Any) -> Any:
        """A decision as plain data: what a config set, which way a tool call went."""
        if isinstance(value, TurnConfig | StepConfig):
            return {
                f.name: self._summary(f.name, getattr(value, f.name))
                for f in dataclasses.fields(value)
                if getattr(value, f.name) is not None
            }
        if isinstance(value, Block):
            return {"action": "block", "reason": value.reason}
        if isinstance(value, Substitute):
            return {"action": "substitute", "output": self._plain(value.output)}
        if isinstance(value, Allow):
            return {"action": "allow", **({"input": self._plain(value.input)} if value.replaces_input else {})}
        return self._plain(value)

    def _summary(self, field: str, value: Any) -> Any:
        if field == "messages":
            return f"{len(value)} messages"
        if field in ("tools", "stop_when"):
            return [getattr(v, "name", None) or getattr(v, "__qualname__", repr(v)) for v in value]
        if callable(value) and not isinstance(value, type):
            return getattr(value, "__qualname__", repr(value))
        if isinstance(value, type):
            return value.__name__
        return self._plain(value)

    def _plain(self, value: Any) -> Any:
        """``value`` as msgpack-able data: JSON types as they are, anything else (or too long) as JSON text."""
        text = json.dumps(value, default=str, ensure_ascii=False)
        if len(text) > self.max_chars:
            return text[: self.max_chars] + "…"
        return json.loads(text)


class _Pages:
    """One agent's log in this process: the last page as stored, and the lock appends take turns on."""

    def __init__(self, name: str, page_size: int) -> None:
        self.name = name
        self.page_size = page_size
        self.lock = asyncio.Lock()
        self.page: int | None = None
        self.records: list[dict[str, Any]] = []

    async def append(self, store: Store, record: dict[str, Any]) -> None:
        async with self.lock:
            if self.page is None:  # first append in this process: find the last page
                page, records = 0, await store.get_kv(_key(self.name, 0))
                while (following := await store.get_kv(_key(self.name, page + 1))) is not None:
                    page, records = page + 1, following
                self.page, self.records = page, list(records or [])
            if len(self.records) >= self.page_size:
                self.page, self.records = self.page + 1, []
            written = [*self.records, record]
            await store.set_kv(_key(self.name, self.page), written)
            self.records = written  # after the write: a cancelled write leaves the page as stored


def _key(name: str, page: int) -> str:
    return f"audit:{name}:{page}"
