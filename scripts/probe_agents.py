"""Agents for scripts/probe_wake.py (Ray workers import them by module name, so they live here)."""

from __future__ import annotations

import time
from typing import Any

from probe_facts import process_facts
from scale_agents import PacedModel

import think_actors as ta
from think_actors.chunks import DataChunk


class ProbeNapper(ta.Think):
    """The wake benchmark's agent (200 ms model, hibernates 2 s after its turn) that reports its process's times."""

    model = PacedModel()
    idle_timeout_s = 2.0

    def __init__(self, *args: Any, **kwargs: Any):
        self._constructed_at = time.time()
        super().__init__(*args, **kwargs)
        self._constructed_end = time.time()

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        facts = process_facts()
        facts.update(init=self._constructed_at, init_end=self._constructed_end, turn=time.time())
        self.emit(DataChunk(type="data-probe", data=facts, transient=True))
        return None
