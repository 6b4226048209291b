"""The durable trace of a running turn: its turn record, the chunk log of its stream, and its effect ledger.

A turn writes its record when it starts and removes it when it ends, so a record left behind means a crash
interrupted the turn. The chunk log holds what the stream produced so far (reference §3.7): settled tool results
and step ends are flushed at once, text in small batches, always before the chunk reaches the caller. Every tool
call records ``started`` before it runs and ``finished`` after (the effect ledger), so recovery can replay a
finished call's result and knows which calls are in doubt.
"""

from __future__ import annotations

import time
from typing import Any

from ..store.records import EffectRecord, TurnRecord
from .engine import Engine

# Chunks that settle something: flushed at once, so a crash never loses a tool result that was reported.
_FLUSH_NOW = frozenset(
    {"tool-input-available", "tool-input-error", "tool-output-available", "tool-output-error", "finish-step"}
)
FLUSH_EVERY = 32  # text and reasoning deltas go in batches of this many ...
FLUSH_AFTER_S = 0.05  # ... or of what arrived within this long
_DELTAS = frozenset({"text-delta", "reasoning-delta"})


def effect_key(path: str, request_id: str, tool_call_id: str) -> str:
    return f"{path}/{request_id}/{tool_call_id}"


class TurnJournal:
    """One turn's record and chunk log. ``None``-safe to use: a turn without a journal skips all of it."""

    __slots__ = ("_buffer", "_count", "_since", "engine", "record", "resume")

    def __init__(self, engine: Engine, record: TurnRecord) -> None:
        self.engine = engine
        self.record = record
        self.resume = False  # the turn stopped to be resumed: its record stays for recovery
        self._buffer: list[dict[str, Any]] = []
        self._count = 0  # chunks since the last flush (merged deltas count one each)
        self._since = 0.0

    @classmethod
    async def begin(
        cls,
        engine: Engine,
        *,
        request_id: str,
        trigger: str,
        continuation: bool,
        input_ids: list[str],
        message_id: str,
        submission_id: str | None,
        data: dict[str, Any],
    ) -> TurnJournal:
        now = time.time()
        record = TurnRecord(
            request_id=request_id,
            trigger=trigger,
            status="running",
            started_at=now,
            updated_at=now,
            continuation=continuation,
            input_ids=input_ids,
            message_id=message_id,
            submission_id=submission_id,
            data=data,
        )
        await engine.store.put_turn(record)
        return cls(engine, record)

    def add(self, chunk: Any) -> bool:
        """Buffer a chunk of the stream; True when the buffer must be flushed before the chunk goes out."""
        kind = chunk.type
        buffer = self._buffer
        if kind in _DELTAS:
            # The hot path: consecutive deltas of one part are logged as one (the rebuilt message is the same).
            last = buffer[-1] if buffer else None
            if last is not None and last["type"] == kind and last["id"] == chunk.id:
                last["delta"] += chunk.delta
            else:
                if last is None:
                    self._since = time.monotonic()
                buffer.append({"type": kind, "id": chunk.id, "delta": chunk.delta})
        elif kind == "agent-tool-event" or (kind.startswith("data-") and chunk.transient):
            return False  # neither is part of the message the log rebuilds
        else:
            if not buffer:
                self._since = time.monotonic()
            buffer.append(chunk.model_dump(mode="json", by_alias=False, exclude_none=True))
        self._count += 1
        return kind in _FLUSH_NOW or self._count >= FLUSH_EVERY or time.monotonic() - self._since >= FLUSH_AFTER_S

    async def flush(self) -> None:
        self._count = 0
        if self._buffer:
            batch, self._buffer = self._buffer, []
            await self.engine.store.append_chunks(self.record.request_id, batch)

    async def restart(self, message_id: str) -> None:
        """A new attempt of the same turn (context-overflow retry): the failed attempt's log is discarded."""
        self._buffer = []
        await self.engine.store.delete_turn(self.record.request_id)
        self.record.message_id = message_id
        self.record.updated_at = time.time()
        await self.engine.store.put_turn(self.record)

    async def end(self) -> None:
        """The turn ended (whatever its status): nothing is left to recover."""
        self._buffer = []
        await self.engine.store.delete_turn(self.record.request_id)


async def effect_started(
    engine: Engine, request_id: str, tool_call_id: str, tool_name: str, input: Any
) -> tuple[str, EffectRecord | None]:
    """Record that a call starts; returns its key, and the stored record when the call already finished."""
    key = effect_key(engine.path, request_id, tool_call_id)
    stored = await engine.store.start_effect(
        EffectRecord(
            key=key,
            request_id=request_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            status="started",
            started_at=time.time(),
            input=input,
        )
    )
    return key, (stored if stored.status == "finished" else None)
