"""What an MCP tool call's result becomes: the tool's output, or a tool error the model sees.

The output has the shape the AI SDK's MCP client gives its tools' results (and so what ``useChat`` front ends
already render): the server's ``CallToolResult`` in its wire form, ``{"content": [...], "structuredContent": ...}``,
where each content block keeps its MCP type — ``text``, ``image`` / ``audio`` (base64 ``data`` and ``mimeType``),
``resource`` (an embedded resource with ``text`` or ``blob``) and ``resource_link``. ``_meta`` is left out: it is
for the client, not the model. A result the server marks ``isError`` is a tool error whose text is the result's
text content, as a thrown error is in a local tool.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the SDK costs a second or more to import: only processes that connect a server load it
    from mcp import types

__all__ = ["McpToolError", "to_output"]


class McpToolError(Exception):
    """An MCP tool call failed: the server said so (``isError``), timed out, crashed or answered nonsense.

    Its message is what the model sees as the tool's error.
    """


def _error_text(result: types.CallToolResult) -> str:
    texts = [block.text for block in result.content if block.type == "text"]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, default=str)
    return "the MCP tool reported an error without a message"


def to_output(result: types.CallToolResult) -> dict[str, Any]:
    """The tool's output for ``result``; raise ``McpToolError`` when the server marked it ``isError``."""
    if result.is_error:
        raise McpToolError(_error_text(result))
    output: dict[str, Any] = {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"meta"})
            for block in result.content
        ]
    }
    if result.structured_content is not None:
        output["structuredContent"] = result.structured_content
    return output
