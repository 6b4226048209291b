"""An MCP server's tool as a ``Tool`` of the agent: prefixed name, the server's schema, a call through the session.

The tool is an ordinary ``Tool`` with an executor, so the turn treats it as any other: ``before_tool_call`` may
allow it, change its input, block or substitute it, ``after_tool_call`` sees its result, ``needs_approval`` gates
it and the effect ledger records it before it runs. Its input is checked only as a JSON object (the server
validates it against its own schema and says what is wrong). A tool the server annotates ``readOnlyHint`` or
``idempotentHint`` is idempotent: crash recovery may re-run a call of it whose outcome is unknown.

A server's progress notifications for a running call reach the turn's stream as transient ``data-mcp-progress``
chunks (``{toolCallId, progress, total, message}``), live, never stored.

A listed tool is plain data (``ListedTool``), not the SDK's model, so a listing crosses actors and an agent whose
server connection lives in a shared actor never imports the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..chunks import DataChunk
from ..tools import Tool, ToolContext
from .config import McpServerConfig

__all__ = ["ListedTool", "McpCaller", "Progress", "mcp_tool", "tool_name"]

Progress = Callable[[float, float | None, str | None], None]
"""Called with ``(progress, total, message)`` for each progress notification of a running call."""

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

    async def run(
        self, tool_name: str, arguments: dict[str, Any], on_progress: Progress | None = None
    ) -> dict[str, Any]:
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
        emit = context.emit

        def progress(done: float, total: float | None, message: str | None) -> None:
            # Transient: a live reader (a UI) shows it; the stored reply keeps only the result.
            data = {"toolCallId": context.tool_call_id, "progress": done, "total": total, "message": message}
            if emit is not None:
                emit(DataChunk(type="data-mcp-progress", id=context.tool_call_id, data=data, transient=True))

        arguments = value if isinstance(value, dict) else dict(value)
        return await caller.run(server_name, arguments, progress if emit is not None else None)

    return Tool(
        tool_name(config, server_name),
        tool.description or server_name,
        _schema(tool),
        executor=execute,
        needs_approval=config.tool_needs_approval(server_name),
        idempotent=tool.read_only or tool.idempotent,
    )
