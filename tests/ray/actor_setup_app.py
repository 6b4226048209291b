"""An ``--app`` module whose ``setup()`` starts the actor its agent's ``actor_tool`` calls
(``tests/ray/test_serve_setup_on_ray.py``)."""

from __future__ import annotations

from ray_agents import Counter

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

ADDER = "actor-setup-app/adder"


def setup() -> None:
    """Start the adder, named, in the runtime's namespace (the serving process's own), where the tool looks."""
    Counter.options(name=ADDER, lifetime="detached", get_if_exists=True).remote()  # type: ignore[attr-defined]


class AddingAgent(ta.Think):
    model = ScriptedModel([tool_call("add", {"a": 2, "b": 3}, id="c1"), text("5")])
    tools = [ta.actor_tool(ADDER, "add", actor_class=Counter)]
