"""The agents of tests/ray/test_prompt_caching_on_ray.py (Ray workers import them by name): a model that answers
with the prompt-caching switch its request carried, and two agent classes that set the switch."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import think_actors as ta
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage


class SwitchEcho:
    """Answers ``prompt_caching=<the request's switch>`` and reports a cache hit, as a Claude request would."""

    model_id = "switch-echo"

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        yield TextDelta(f"prompt_caching={request.prompt_caching}")
        yield FinishEvent(
            "stop", Usage(input_tokens=2000, output_tokens=5, cached_input_tokens=1800, cache_write_input_tokens=150)
        )


class Cached(ta.Think):
    model = SwitchEcho()
    prompt_caching = True


class Uncached(ta.Think):
    model = SwitchEcho()
    prompt_caching = False
