"""Structured output: the reply as a validated pydantic object instead of free text.

``save_messages(..., output=Model)`` asks the model for JSON matching ``Model``'s schema (the provider's
``response_format``) and validates the final answer: the object is ``result.output``. An answer that does not match
fails the turn (``result.status == "error"``, and ``result.error`` says why). ``chat(..., output=Model)`` does the
same for a streamed turn (``stream.outcome.output`` once it has ended), on an agent in process or a Ray handle.

Run it:  python examples/02_structured_output.py
"""

import asyncio

from pydantic import BaseModel

import think_actors as ta
from think_actors.testing import ScriptedModel, text


class Weather(BaseModel):
    city: str
    temperature_c: int
    summary: str


class Forecaster(ta.Think):
    instructions = "You report the weather."


async def main() -> None:
    # A real model would write this JSON because the request carries Weather's JSON schema.
    model = ScriptedModel([text('{"city": "Oslo", "temperature_c": 4, "summary": "light rain"}', chunk_size=12)])
    agent = Forecaster("oslo", model=model, store=ta.MemoryStore())

    result = await agent.save_messages("What's the weather in Oslo?", output=Weather)

    weather = result.output
    assert isinstance(weather, Weather)
    print(result.status)  # completed
    print(repr(weather))
    print(f"{weather.city}: {weather.temperature_c} °C, {weather.summary}")


if __name__ == "__main__":
    asyncio.run(main())
