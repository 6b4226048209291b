"""Tools that run elsewhere on Ray: a method of another actor, and a function run as a Ray task.

- ``ta.actor_tool(handle, "method")`` makes a method of any Ray actor a tool: the schema comes from the method's
  signature, the description from its docstring. Use it for state shared by many agents (an inventory, a cache).
- ``@ta.tool(num_cpus=1)`` on a module-level function makes a task tool: on Ray each call runs as a Ray task with
  those resources, in another process, so CPU-heavy work never blocks the agent.

Every hook (``before_tool_call`` ...) wraps these tools as it wraps any other.

Run it:  python examples/04_actor_and_task_tools.py
"""

import asyncio
import hashlib
import os
import tempfile

import ray

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text, tool_call


class Inventory:
    """Stock counts that every agent shares: run as a Ray actor (``ray.remote(Inventory)``)."""

    def __init__(self) -> None:
        self.stock = {"widget": 12, "gadget": 0}

    async def count(self, item: str) -> int:
        """How many of an item are in stock.

        Args:
            item: The item's name.
        """
        return self.stock.get(item, 0)


@ta.tool(num_cpus=1)
def fingerprint(text: str) -> dict[str, object]:
    """Hash a text (CPU work: it runs as a Ray task, in its own process).

    Args:
        text: What to hash.
    """
    return {"sha256": hashlib.sha256(text.encode()).hexdigest()[:16], "pid": os.getpid()}


class Clerk(ta.Think):
    instructions = "You answer questions about stock."


async def main() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(data_dir=data_dir)
        try:
            inventory = ray.remote(Inventory).remote()  # a plain Ray actor, not an agent
            model = ScriptedModel(
                [
                    step(
                        tool_call("count", {"item": "widget"}),
                        tool_call("fingerprint", {"text": "order 1234"}),
                    ),
                    text("12 widgets in stock; order 1234 is recorded."),
                ]
            )
            clerk = await ta.spawn(Clerk, "shop", model=model, tools=[ta.actor_tool(inventory, "count"), fingerprint])
            print("agent process:", (await clerk.info())["pid"])
            async for chunk in clerk.chat("How many widgets are there? Also record order 1234."):
                if isinstance(chunk, ta.ToolInputAvailableChunk):
                    print(f"[tool] {chunk.tool_name}({chunk.input})")
                elif isinstance(chunk, ta.ToolOutputAvailableChunk):
                    print(f"[tool result] {chunk.output}")
                elif isinstance(chunk, ta.TextDeltaChunk):
                    print(chunk.delta, end="", flush=True)
            print()
        finally:
            ta.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
