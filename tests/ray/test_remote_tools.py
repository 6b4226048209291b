"""Tools that run elsewhere: actor tools (by name and by handle) and resource-tagged task tools, under the hooks."""

from __future__ import annotations

from typing import Any

import pytest
import ray
from ray_agents import Counter, ToolUser

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text, tool_call


def calls(counter: str, namespace: str, turn: int) -> Any:
    """One step calling all three remote tools (ids unique per turn, as providers make them)."""
    return step(
        tool_call("add_by_name", {"a": 2, "b": 3}, id=f"by-name{turn}"),
        tool_call("add_by_handle", {"a": 4, "b": 3}, id=f"by-handle{turn}"),
        tool_call("process_id", {"counter": counter, "namespace": namespace}, id=f"task{turn}"),
    )


def outputs(chunks: list[Any]) -> dict[str, Any]:
    return {c.tool_call_id: c.output for c in chunks if c.type == "tool-output-available" and not c.preliminary}


@pytest.mark.timeout(60)
async def test_actor_and_task_tools_run_remotely_unless_a_hook_answers_for_them(ray_runtime: Any, unique: str) -> None:
    namespace = ray_runtime.namespace
    counter_name = f"counter/{unique}"
    counter = Counter.options(name=counter_name, namespace=namespace, lifetime="detached").remote()
    script = [
        calls(counter_name, namespace, 1),
        text("short-circuited"),
        calls(counter_name, namespace, 2),
        text("ran"),
    ]
    agent = await ta.spawn(ToolUser, unique, model=ScriptedModel(script), counter=counter_name, namespace=namespace)

    decide = {"add_by_name": "block", "add_by_handle": "substitute", "process_id": "substitute"}
    answered = await agent.chat("use the tools", body={"decide": decide}).collect()

    assert outputs(answered) == {
        "by-name1": "add_by_name blocked by the test",
        "by-handle1": {"substituted": "add_by_handle"},
        "task1": {"substituted": "process_id"},
    }
    assert await counter.count.remote() == 0  # neither the actor nor the task was ever called

    ran = await agent.chat("use them for real").collect()

    results = outputs(ran)
    assert (results["by-name2"], results["by-handle2"]) == (5, 7)
    agent_pid = (await agent.info())["pid"]
    assert isinstance(results["task2"], int) and results["task2"] != agent_pid  # the task ran in another process
    assert await counter.count.remote() == 3
    assert [c.type for c in ran][-1] == "finish"
    ray.kill(counter)
