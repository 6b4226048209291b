"""Where agent actors go: spread by default, or softly on the node a spawn asks for (one node here; the spread
over several nodes, and a restart away from a dead one, are tests/test_multinode.py's)."""

from __future__ import annotations

from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ray_agents import Survivor

import think_actors as ta
from think_actors.runtime import _actor_options


def test_agents_are_spread_unless_a_node_is_asked_for(ray_runtime: Any) -> None:
    spread = _actor_options(ray_runtime, "survivor/a")
    assert (spread["scheduling_strategy"], spread["memory"], spread["num_cpus"]) == ("SPREAD", 1, 0)
    pinned = _actor_options(ray_runtime, "survivor/a", "ab" * 28)["scheduling_strategy"]
    assert isinstance(pinned, NodeAffinitySchedulingStrategy)
    assert (pinned.node_id, pinned.soft) == ("ab" * 28, True)


async def test_spawn_on_a_node_runs_there_and_elsewhere_when_that_node_is_unknown(
    ray_runtime: Any, unique: str
) -> None:
    node = ray.get_runtime_context().get_node_id()
    here = await ta.spawn(Survivor, f"{unique}-here", node_id=node)
    gone = await ta.spawn(Survivor, f"{unique}-gone", node_id="ab" * 28)  # no such node: soft, so placed anyway
    try:
        assert (await here.info())["node_id"] == node
        assert (await gone.info())["node_id"] == node
        result = await gone.save_messages("still answers")
        assert result.message is not None and result.message.text == "echo: still answers"
    finally:
        await here.kill(restart=False)
        await gone.kill(restart=False)
