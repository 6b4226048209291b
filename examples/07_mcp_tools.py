"""MCP tools: an agent uses the tools of a Model Context Protocol server.

``mcp_servers = [ta.mcp.stdio(command, *args)]`` starts a server as a subprocess (``ta.mcp.http(url)`` reaches
one over HTTP); its tools join every turn as ``<server name>_<tool>`` and go through every tool hook, like the
agent's own tools. This file is both sides: run with ``--server`` it is a small MCP server written with the
official ``mcp`` SDK, and the agent starts it that way.

Run it:  python examples/07_mcp_tools.py
"""

import asyncio
import sys

from mcp.server.mcpserver import MCPServer

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

# ------------------------------------------------------------------ the MCP server (python 07_mcp_tools.py --server)

server = MCPServer("units")


@server.tool()
def to_fahrenheit(celsius: float) -> float:
    """Convert a temperature from Celsius to Fahrenheit.

    Args:
        celsius: The temperature in degrees Celsius.
    """
    return celsius * 9 / 5 + 32


# ------------------------------------------------------------------ the agent


class Assistant(ta.Think):
    instructions = "You convert units with the tools you have."
    mcp_servers = [ta.mcp.stdio(sys.executable, __file__, "--server", name="units")]

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> ta.Block | None:
        print(f"[before_tool_call] {ctx.tool_name}({ctx.input})")  # the hooks see MCP tools like any other
        return None


async def main() -> None:
    model = ScriptedModel([tool_call("units_to_fahrenheit", {"celsius": 21}), text("21 °C is 69.8 °F.")])
    agent = Assistant("converter", model=model, store=ta.MemoryStore())
    servers = await agent.wait_for_mcp_connections(timeout_s=30)  # connect before the first turn
    units = servers["units"]
    print(f"server {units.name!r}: {units.state}, tools {list(units.tools)}")

    async for chunk in agent.chat("What is 21 °C in Fahrenheit?"):
        if isinstance(chunk, ta.ToolOutputAvailableChunk):
            print(f"[tool result] {chunk.output}")  # an MCP result: {"content": [...], "structuredContent": ...}
        elif isinstance(chunk, ta.TextDeltaChunk):
            print(chunk.delta, end="", flush=True)
    print()
    await agent.close()  # stops the server's process


if __name__ == "__main__":
    if sys.argv[1:] == ["--server"]:
        server.run("stdio")
    else:
        asyncio.run(main())
