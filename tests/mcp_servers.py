"""An MCP server written with the official ``mcp`` SDK, run by the MCP tests as a subprocess.

``python tests/mcp_servers.py stdio`` speaks on stdin/stdout; ``python tests/mcp_servers.py http PORT`` serves
streamable HTTP on 127.0.0.1:PORT/mcp. ``MCP_TEST_LOG`` names a file each tool call appends a line to
(``<tool> <argument>``), so a test can see what ran on the server, how often, and when a call began;
``MCP_TEST_STARTS`` one each process appends its pid to when it starts.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents, ToolAnnotations
from pydantic import BaseModel

# A 1x1 transparent PNG.
PIXEL = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5f0000000049454e44ae426082"
    )
).decode()

server = MCPServer("think-actors-tests")


def _log(line: str) -> None:
    path = os.environ.get("MCP_TEST_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class Sum(BaseModel):
    total: int
    terms: list[int]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> Sum:
    """Add two integers (structured result)."""
    _log(f"add {a} {b}")
    return Sum(total=a + b, terms=[a, b])


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    _log(f"echo {text}")
    return text


@server.tool()
def pixel() -> list[ImageContent | TextContent]:
    """A tiny image and a caption."""
    _log("pixel -")
    return [ImageContent(type="image", data=PIXEL, mime_type="image/png"), TextContent(type="text", text="a pixel")]


@server.tool()
def document() -> EmbeddedResource:
    """An embedded text resource."""
    _log("document -")
    return EmbeddedResource(
        type="resource",
        resource=TextResourceContents(uri="memo://notes/1", mime_type="text/plain", text="remember the milk"),
    )


@server.tool()
def refuse(reason: str) -> str:
    """Always fails with the reason (an isError result)."""
    _log(f"refuse {reason}")
    raise ToolError(f"refused: {reason}")


@server.tool()
async def sleep(seconds: float) -> str:
    """Answer after ``seconds``."""
    _log(f"sleep {seconds}")
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def broken() -> Sum:
    """Answers with structured content its own output schema refuses (the client must not accept it)."""
    _log("broken -")
    return CallToolResult(content=[TextContent(type="text", text="oops")], structured_content={"total": "many"})  # type: ignore[return-value]


# This server breaks the protocol on purpose: it advertises broken's output schema but never checks its results.
server._tool_manager.get_tool("broken").fn_metadata.output_model = None  # type: ignore[union-attr]


@server.tool()
def crash(note: str) -> str:
    """The server process dies in the middle of the call."""
    _log(f"crash {note}")
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def lookup(key: str) -> str:
    """A read-only lookup that takes its time (``MCP_TEST_HOLD_S`` seconds)."""
    _log(f"lookup {key}")
    await asyncio.sleep(float(os.environ.get("MCP_TEST_HOLD_S", "0")))
    return f"value of {key}"


@server.tool()
async def pay(amount: int) -> str:
    """A payment: not idempotent; takes ``MCP_TEST_HOLD_S`` seconds."""
    _log(f"pay {amount}")
    await asyncio.sleep(float(os.environ.get("MCP_TEST_HOLD_S", "0")))
    return f"paid {amount}"


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of the HTTP request header ``name`` ("" without one)."""
    _log(f"header {name}")
    headers = ctx.headers or {}
    return next((v for k, v in headers.items() if k.lower() == name.lower()), "")


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool named ``name`` to this server and tell the client its tool list changed."""
    _log(f"grow {name}")

    def added() -> str:
        return f"{name} was added"

    server.add_tool(added, name=name, description=f"Added at run time ({name}).")
    await ctx.session.send_tool_list_changed()
    return f"added {name}"


if __name__ == "__main__":
    starts = os.environ.get("MCP_TEST_STARTS")
    if starts:  # one line per server process: how many processes the agents started
        with open(starts, "a") as f:
            f.write(f"{os.getpid()}\n")
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
