"""An MCP server's tool as a ``Tool`` of the agent: prefixed name, the server's schema, a call through the session.

The tool is an ordinary ``Tool`` with an executor, so the turn treats it as any other: ``before_tool_call`` may
allow it, change its input, block or substitute it, ``after_tool_call`` sees its result, ``needs_approval`` gates
it and the effect ledger records it before it runs. Its input is checked only as a JSON object (the server
validates it against its own schema and says what is wrong). A tool the server annotates ``readOnlyHint`` or
``idempotentHint`` is idempotent: crash recovery may re-run a call of it whose outcome is unknown.

A listed tool is plain data (``ListedTool``), not the SDK's model, so a listing crosses actors and an agent whose
server connection lives in a shared actor never imports the SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..tools import Tool, ToolContext
from .config import McpServerConfig

__all__ = ["ListedTool", "McpCaller", "mcp_tool", "tool_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # the OpenAI tools wire's limit


@dataclass(frozen=True, kw_only=True, slots=True)
class ListedTool:
    """One tool of a server's ``tools/list``: what the agent needs of it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    read_only: bool = False
    idempotent: bool = False


class McpCaller(Protocol):
    """What runs a server's tool: a connection in this process, or the proxy of a shared one on Ray."""

    async def run(self, tool_name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's output (see ``results``); raises ``McpToolError`` with the message the model sees."""
        ...


def tool_name(config: McpServerConfig, name: str) -> str:
    """The name the model calls the server's tool ``name`` by: prefixed, ``[A-Za-z0-9_-]``, at most 64 long."""
    return _UNSAFE.sub("_", config.tool_prefix + name)[:_MAX_NAME]


def _schema(tool: ListedTool) -> dict[str, Any]:
    schema = dict(tool.input_schema)
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def mcp_tool(config: McpServerConfig, tool: ListedTool, caller: McpCaller) -> Tool:
    """The agent's ``Tool`` for the server's ``tool``, run through ``caller``."""
    server_name = tool.name

    async def execute(value: Any, context: ToolContext) -> Any:
        return await caller.run(server_name, value if isinstance(value, dict) else dict(value))

    return Tool(
        tool_name(config, server_name),
        tool.description or server_name,
        _schema(tool),
        executor=execute,
        needs_approval=config.tool_needs_approval(server_name),
        idempotent=tool.read_only or tool.idempotent,
    )
