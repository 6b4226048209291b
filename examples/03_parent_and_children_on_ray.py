"""A parent agent with two children, every agent a Ray actor.

``ta.agent_tool(ChildClass, ...)`` makes a child agent a tool of the parent: when the model calls it, the child
runs a turn of its own (its own actor, history and model) and its answer is the tool's result. The lead below
calls both children in one step, so they run in parallel; their chunks reach the lead's stream as
``agent-tool-event`` chunks tagged with the child's path.

``ta.init()`` starts a local Ray (``ta.init(address="auto")`` joins a cluster); ``ta.spawn`` starts an agent
actor and returns its handle, which answers the same calls as an agent in process (``chat``, ``save_messages``,
``get_messages``), each awaited. Agents keep their history in SQLite under ``data_dir``: a temporary directory
here. The first run takes a few seconds while Ray starts.

Run it:  python examples/03_parent_and_children_on_ray.py
"""

import asyncio
import tempfile

import think_actors as ta
from think_actors.testing import ScriptedModel, step, text, tool_call


class Optimist(ta.Think):
    instructions = "You argue for the idea in one sentence."
    # A class-level model: each child actor gets its own copy, starting from the first step.
    model = ScriptedModel([text("Actors keep each agent's state in one place.", chunk_size=8)])


class Skeptic(ta.Think):
    instructions = "You argue against the idea in one sentence."
    model = ScriptedModel([text("A process per agent costs memory.", chunk_size=8)])


class Lead(ta.Think):
    instructions = "Ask the optimist and the skeptic, in parallel, then weigh their answers."
    tools = [
        ta.agent_tool(Optimist, description="Argue for an idea."),
        ta.agent_tool(Skeptic, description="Argue against an idea."),
    ]
    model = ScriptedModel(
        [
            step(  # one step holding two tool calls: the children run side by side
                tool_call("optimist", {"input": "Should every agent be an actor?"}),
                tool_call("skeptic", {"input": "Should every agent be an actor?"}),
            ),
            text("Both are right: actors for isolation, shared hosts when memory is tight.", chunk_size=8),
        ]
    )


async def main() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(data_dir=data_dir)  # local Ray
        try:
            lead = await ta.spawn(Lead, "team-1")
            replies: dict[str, str] = {}  # each child's text, printed when the child finishes
            async for chunk in lead.chat("Should every agent be an actor?"):
                if isinstance(chunk, ta.AgentToolEventChunk):  # something a child did
                    child = chunk.agent.split("/")[2]  # the child's path: lead/team-1/<class>/<run id>
                    if chunk.kind == "started":
                        print(f"[lead] asks the {child}")
                    elif isinstance(chunk.chunk, ta.TextDeltaChunk):
                        replies[child] = replies.get(child, "") + chunk.chunk.delta
                    elif chunk.kind == "finished":
                        print(f"  [{child}] {replies[child]}")
                elif isinstance(chunk, ta.TextDeltaChunk):
                    print(chunk.delta, end="", flush=True)  # the lead's own text, as it arrives
            print()

            messages = await lead.get_messages()
            print("lead's reply:", messages[-1].text)
        finally:
            ta.shutdown()  # stops the local Ray and every actor in it


if __name__ == "__main__":
    asyncio.run(main())
