"""A first agent: one tool, streamed text, in this process (no Ray).

An agent is a subclass of ``ta.Think``: class attributes configure it, ``@ta.tool`` methods are its tools. A turn
is one user message and everything the agent does to answer it (model calls, tool calls); ``chat()`` streams the
turn as it happens, as UI message chunks (``text-delta``, ``tool-input-available``, ...).

The model here is a ``ScriptedModel``: it plays the answers written below instead of calling a provider, so this
runs without a key. Swap in any litellm model id (``model = "openai/gpt-4o-mini"``) for a real one.

Run it:  python examples/01_first_agent.py
"""

import asyncio

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call


class Researcher(ta.Think):
    instructions = "You answer one question, looking things up first."

    @ta.tool
    async def search(self, query: str) -> list[str]:
        """Search the notes.

        Args:
            query: Words to look for.
        """
        return [f"Ray actors are stateful workers ({query})"]


async def main() -> None:
    # Two model answers: first a call of the search tool, then the reply, streamed four characters at a time.
    model = ScriptedModel(
        [
            tool_call("search", {"query": "ray actors"}),
            text("A Ray actor is a stateful worker process.", chunk_size=4),
        ]
    )
    agent = Researcher("first", model=model, store=ta.MemoryStore())  # MemoryStore: nothing written to disk

    async for chunk in agent.chat("What is a Ray actor?"):
        if isinstance(chunk, ta.TextDeltaChunk):
            print(chunk.delta, end="", flush=True)  # the text, as it arrives
        elif isinstance(chunk, ta.ToolInputAvailableChunk):
            print(f"[tool] {chunk.tool_name}({chunk.input})")
        elif isinstance(chunk, ta.ToolOutputAvailableChunk):
            print(f"[tool result] {chunk.output}")
    print()

    # The agent keeps the conversation: the user's message and the assistant's reply (with its tool call).
    for message in agent.get_messages():
        print(f"{message.role}: {message.text}")


if __name__ == "__main__":
    asyncio.run(main())
