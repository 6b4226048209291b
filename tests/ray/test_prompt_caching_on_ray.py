"""Prompt caching on Ray: the class switch reaches the model request in the agent's actor, and the cache tokens
the provider reports come back in the turn's usage, the same as in process."""

from __future__ import annotations

from typing import Any

from caching_agents import Cached, Uncached

import think_actors as ta


async def test_the_switch_crosses_to_the_actor_and_cached_tokens_come_back(ray_runtime: Any, unique: str) -> None:
    seen = []
    for cls in (Cached, Uncached):
        for agent in (cls(unique, store=ta.MemoryStore()), await ta.spawn(cls, unique)):
            result = await agent.save_messages("hello")
            assert result.message is not None and result.usage is not None
            seen.append(
                (
                    cls.__name__,
                    result.message.text,
                    result.usage.cached_input_tokens,
                    result.usage.cache_write_input_tokens,
                )
            )
    assert seen == [
        ("Cached", "prompt_caching=True", 1800, 150),
        ("Cached", "prompt_caching=True", 1800, 150),
        ("Uncached", "prompt_caching=False", 1800, 150),
        ("Uncached", "prompt_caching=False", 1800, 150),
    ]
