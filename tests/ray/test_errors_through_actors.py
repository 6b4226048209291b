"""on_chat_error through actors: what the hook returns is what the handle's caller sees, at every stage."""

from __future__ import annotations

from typing import Any

import pytest
from ray_agents import FriendlyErrors

import think_actors as ta
from think_actors.testing import ScriptedModel, error, text


async def test_on_chat_error_decides_what_callers_of_an_actor_see(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel(
        [error(ta.ProviderError("raw provider text"), after=text("partial")), error(ta.RateLimitError("raw 429"))]
    )
    agent = await ta.spawn(FriendlyErrors, unique, model=model)

    chunks = await agent.chat("hi").collect()
    result = await agent.save_messages("again")
    with pytest.raises(RuntimeError, match=r"^friendly \(turn\)$"):
        await agent.save_messages("refused", body={"refuse": True})
    refused = await agent.chat("refused too", body={"refuse": True}).collect()

    assert (chunks[-1].type, chunks[-1].error_text) == ("error", "friendly (stream)")
    assert all("raw" not in str(c) for c in chunks)
    assert (result.status, result.error) == ("error", "friendly (stream)")
    assert [(c.type, c.error_text) for c in refused] == [("error", "friendly (turn)")]
    messages = await agent.get_messages()
    assert [m.text for m in messages] == ["hi", "partial", "again", "refused", "refused too"]
