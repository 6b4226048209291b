"""Stream channels through real actors: a paced turn's chunks reach a handle over the channel, the same as Ray
items would bring them, and an agent's stream to its parent uses one too."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from ray_agents import EntryAgent

import think_actors as ta
from think_actors.runtime import channel
from think_actors.runtime import config as runtime_config
from think_actors.testing import ScriptedModel, delay, step, text

WORDS = [f"w{i} " for i in range(30)]


def paced_model() -> ScriptedModel:
    """One answer of 30 words, 5 ms apart: each word crosses the actor boundary in a batch of its own."""
    parts = []
    for word in WORDS:
        parts += [text(word), delay(0.005)]
    return ScriptedModel([step(*parts)] * 3)


def shape(chunks: list[Any]) -> list[tuple[str, str | None]]:
    return [(c.type, getattr(c, "delta", None)) for c in chunks]


def inbox_frames() -> int:
    inbox = channel._inboxes.get(asyncio.get_running_loop())
    return inbox.frames if inbox is not None else 0


async def test_a_paced_turn_reaches_a_handle_over_the_channel_as_ray_items_would_bring_it(
    ray_runtime: Any, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = await ta.spawn(EntryAgent, unique, model=paced_model())
    await agent.chat("start this loop's inbox").collect()  # a loop's first stream comes as Ray items
    await asyncio.sleep(0.2)

    before = inbox_frames()
    on_channel = await agent.chat("again").collect()
    assert "".join(c.delta for c in on_channel if c.type == "text-delta") == "".join(WORDS)
    assert inbox_frames() - before >= 10  # the words came as frames, not Ray items

    config = runtime_config.current_config()
    assert config is not None and config.stream_channels
    monkeypatch.setattr(runtime_config, "_config", dataclasses.replace(config, stream_channels=False))
    before = inbox_frames()
    as_ray_items = await agent.chat("and again").collect()
    assert inbox_frames() == before
    assert shape(as_ray_items) == shape(on_channel)
