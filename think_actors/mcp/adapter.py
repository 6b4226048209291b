"""An MCP server's tool as a ``Tool`` of the agent: prefixed name, the server's schema, a call through the session.

The tool is an ordinary ``Tool`` with an executor, so the turn treats it as any other: ``before_tool_call`` may
allow it, change its input, block or substitute it, ``after_tool_call`` sees its result, ``needs_approval`` gates
it and the effect ledger records it before it runs. Its input is checked only as a JSON object (the server
validates it against its own schema and says what is wrong). A tool the server annotates ``readOnlyHint`` or
``idempotentHint`` is idempotent: crash recovery may re-run a call of it whose outcome is unknown.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Protocol

from ..tools import Tool, ToolContext
from .config import McpServerConfig
from .results import to_output

if TYPE_CHECKING:  # the SDK costs a second or more to import: only processes that connect a server load it
    from mcp import types

__all__ = ["McpCaller", "mcp_tool"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME = 64  # the OpenAI tools wire's limit


class McpCaller(Protocol):
    """What calls a server's tool: a connection in this process, or the handle of a shared one on Ray."""

    async def call(self, tool_name: str, arguments: dict[str, Any]) -> types.CallToolResult: ...


def tool_name(config: McpServerConfig, name: str) -> str:
    """The name the model calls the server's tool ``name`` by: prefixed, ``[A-Za-z0-9_-]``, at most 64 long."""
    return _UNSAFE.sub("_", config.tool_prefix + name)[:_MAX_NAME]


def _schema(tool: types.Tool) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def _description(tool: types.Tool) -> str:
    title = tool.title or (tool.annotations.title if tool.annotations else None)
    text = tool.description or ""
    return f"{title}: {text}" if title and text and title not in text else text or title or tool.name


def mcp_tool(config: McpServerConfig, tool: types.Tool, caller: McpCaller) -> Tool:
    """The agent's ``Tool`` for the server's ``tool``, called through ``caller``."""
    hints = tool.annotations
    idempotent = bool(hints is not None and (hints.read_only_hint or hints.idempotent_hint))
    server_name = tool.name

    async def execute(value: Any, context: ToolContext) -> Any:
        arguments = value if isinstance(value, dict) else dict(value)
        return to_output(await caller.call(server_name, arguments))

    return Tool(
        tool_name(config, server_name),
        _description(tool),
        _schema(tool),
        executor=execute,
        needs_approval=config.tool_needs_approval(server_name),
        idempotent=idempotent,
    )
