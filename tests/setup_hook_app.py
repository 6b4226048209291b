"""An ``--app`` module with a ``setup()``, which ``think-actors serve`` calls once before it serves
(``tests/test_serve_setup.py``); its agent's tool reports what the set-up did in the serving process."""

from __future__ import annotations

import asyncio

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

DONE: list[str] = []


async def setup() -> None:
    """What an application starts before its agents serve: here, a note the tool reads."""
    await asyncio.sleep(0)
    DONE.append("setup ran")


@ta.tool
def set_up() -> list[str]:
    """What ``setup()`` did in this process."""
    return list(DONE)


class Checker(ta.Think):
    model = ScriptedModel([tool_call("set_up", {}, id="c1"), text("checked")])
    tools = [set_up]
