"""Agents and actors for scripts/bench_scale.py (Ray workers import them by module name, so they live here)."""

from __future__ import annotations

import asyncio
import cProfile
import os
from collections.abc import AsyncIterator
from typing import Any

import ray

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage

PROFILE_ENV = "BENCH_SCALE_PROFILE_DIR"
PROFILE_TURNS_ENV = "BENCH_SCALE_PROFILE_TURNS"


class PacedModel:
    """A provider that takes 200 ms per step, then answers in 20 chunks; it keeps no script position, so any
    number of turns (and a restarted actor) get the same answer."""

    model_id = "paced"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        await asyncio.sleep(0.2)
        for _ in range(20):
            yield TextDelta("abcd")
        yield FinishEvent("stop", Usage(input_tokens=10, output_tokens=20))


class Worker(ta.Think):
    """The throughput benchmark's agent: resident, one step of 200 ms per turn."""

    model = PacedModel()


class SharedWorker(Worker):
    """The throughput benchmark's agent hosted many to a process (``hosting = "shared"``)."""

    hosting = "shared"


class ProfiledWorker(Worker):
    """A ``Worker`` that profiles its event loop's thread (cProfile) over its first ``$BENCH_SCALE_PROFILE_TURNS``
    turns, from the first ``before_turn`` to the last ``on_chat_response``, and writes the stats to
    ``$BENCH_SCALE_PROFILE_DIR/<pid>.prof``."""

    _profile: cProfile.Profile | None = None
    _turns = 0

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if self._profile is None and self._turns == 0 and os.environ.get(PROFILE_ENV):
            self._profile = cProfile.Profile()
            self._profile.enable()  # this thread: the actor's event loop, where the whole turn runs
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self._turns += 1
        if self._profile is not None and self._turns >= int(os.environ.get(PROFILE_TURNS_ENV, "5")):
            self._profile.disable()
            self._profile.dump_stats(os.path.join(os.environ[PROFILE_ENV], f"{os.getpid()}.prof"))
            self._profile = None


class Napper(ta.Think):
    """The scale benchmark's agent: hibernates 2 s after its last turn."""

    model = PacedModel()
    idle_timeout_s = 2.0


class SharedNapper(Napper):
    """``Napper`` hosted many to a process: its wake loads it into a running shared host."""

    hosting = "shared"


@ray.remote(num_cpus=0, max_concurrency=1000)
class BareTurn:
    """The throughput baseline: a bare async actor answering a streamed call of a turn's shape (200 ms wait, then
    the 20 chunks in one batch), nothing of think_actors imported."""

    async def pid(self) -> int:
        return os.getpid()

    async def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def turn(self, message: str) -> AsyncIterator[list[str]]:
        await asyncio.sleep(0.2)
        yield ["abcd"] * 20


class Roamer(ta.Think):
    """The gateway scale benchmark's agent (scripts/bench_gateway_scale.py): one step of 200 ms per turn; it
    hibernates after the runtime's ``idle_timeout_s`` (``ta.init``), as it sets none of its own."""

    model = PacedModel()


class SharedRoamer(Roamer):
    """``Roamer`` hosted many to a process (``bench_gateway_scale.py --shared``)."""

    hosting = "shared"
