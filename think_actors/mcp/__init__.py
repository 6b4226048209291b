"""MCP: an agent uses the tools of Model Context Protocol servers (the official ``mcp`` SDK's client).

Declare servers on the class, ``mcp_servers = [ta.mcp.stdio("npx", "-y", "@modelcontextprotocol/server-everything"),
ta.mcp.http("https://example.com/mcp", headers={...})]``, or add them at run time with
``await agent.add_mcp_server(...)``. Their tools join each turn's tool set under a prefix and go through every
tool hook. Modules: ``config`` (declarations), ``connection`` (one server's session), ``results`` (a result as
the tool's output), ``adapter`` (a server's tool as a ``Tool``), ``manager`` (an agent's servers); ``shared``
(Ray only) hosts one connection per node for many agents.
"""

from typing import Any

from .config import McpServerConfig, http, stdio
from .manager import McpManager, McpServerState
from .results import McpToolError

__all__ = ["McpConnection", "McpManager", "McpServerConfig", "McpServerState", "McpToolError", "http", "stdio"]


def __getattr__(name: str) -> Any:
    # McpConnection loads the SDK (a second or more): only on demand, so `import think_actors` stays light.
    if name == "McpConnection":
        from .connection import McpConnection

        return McpConnection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
