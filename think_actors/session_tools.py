"""The model's context tools, built from a session's blocks: ``set_context``, ``load_context`` / ``unload_context``
and ``search_context`` (Think's, by the kinds of block there are; see ``context_providers``).

A tool's error (an unknown block or key, a write past the budget, a provider that raises) becomes a tool error the
model sees; the turn goes on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from .session_parts import Block, KeyedInput, SearchContextInput, SetContextInput
from .tools import Tool, ToolContext

__all__ = ["ContextOperations", "context_tools"]


class ContextOperations(Protocol):
    """What the tools call: the session's own methods of the same names."""

    async def set_context(
        self, label: str, content: str, *, action: Any = ..., key: str | None = ..., description: str | None = ...
    ) -> str: ...

    async def load_context(self, label: str, key: str) -> str: ...

    async def unload_context(self, label: str, key: str) -> str: ...

    async def search_context(self, label: str, query: str) -> str: ...


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _tool(
    name: str, description: str, schema: dict[str, Any], model: Any, run: Callable[[Any], Awaitable[str]]
) -> Tool:
    async def execute(value: Any, context: ToolContext) -> str:
        # before_tool_call's Allow(input=...) hands over a plain dict instead of the validated model.
        return await run(value if isinstance(value, model) else model.model_validate(value))

    return Tool(name, description, schema, validator=model, executor=execute)


def context_tools(ops: ContextOperations, blocks: Iterable[Block], loaded: Iterable[str]) -> list[Tool]:
    """The tools ``blocks`` call for; ``loaded`` (``label:key``) goes into ``unload_context``'s description."""
    blocks = list(blocks)
    tools: list[Tool] = []
    writable = [b for b in blocks if b.writable]
    if writable:
        tools.append(_set_context(ops, writable))
    skills = [b.label for b in blocks if b.kind == "skill"]
    if skills:
        tools.extend(_skill_tools(ops, skills, sorted(loaded)))
    searchable = [b.label for b in blocks if b.kind == "search"]
    if searchable:
        description = (
            "Search a searchable context block; returns the best matches (at most 10). Only these blocks are "
            "searchable: " + ", ".join(searchable) + "."
        )
        schema = _schema(
            {
                "label": {"type": "string", "enum": searchable, "description": "The block to search"},
                "query": {"type": "string", "description": "Words to look for"},
            },
            ["label", "query"],
        )

        async def search(args: SearchContextInput) -> str:
            return await ops.search_context(args.label, args.query)

        tools.append(_tool("search_context", description, schema, SearchContextInput, search))
    return tools


def _set_context(ops: ContextOperations, writable: list[Block]) -> Tool:
    lines = []
    for b in writable:
        kind = {"skill": " (skills, keyed entries)", "search": " (searchable, keyed entries)"}.get(b.kind, "")
        limit = f" (at most {b.max_tokens} tokens)" if b.max_tokens is not None and not b.keyed else ""
        lines.append(f"- {b.label}{kind}: {b.description or 'no description'}{limit}")
    keyed = [b.label for b in writable if b.keyed]
    description = (
        "Write to a context block of your system prompt. Writes are durable; the system prompt shows them "
        "from its next refresh. Blocks:\n" + "\n".join(lines)
    )
    properties: dict[str, Any] = {
        "label": {"type": "string", "enum": [b.label for b in writable], "description": "The block to write"},
        "content": {"type": "string", "description": "The text to write"},
        "action": {
            "type": "string",
            "enum": ["replace", "append"],
            "default": "replace",
            "description": "replace the block's text (default) or append to it",
        },
    }
    if keyed:
        description += (
            "\n\nKeyed blocks (" + ", ".join(keyed) + ") hold entries: give a short `key` to write one (the same "
            "key replaces it; without a key, one is made from the content) and, for skills, a one-line "
            "`description` shown in the system prompt."
        )
        properties["key"] = {"type": "string", "description": "Keyed blocks: the entry's key"}
        properties["description"] = {"type": "string", "description": "Skill blocks: the entry's description"}

    async def write(args: SetContextInput) -> str:
        return await ops.set_context(
            args.label, args.content, action=args.action, key=args.key, description=args.description
        )

    return _tool("set_context", description, _schema(properties, ["label", "content"]), SetContextInput, write)


def _skill_tools(ops: ContextOperations, labels: list[str], loaded: list[str]) -> list[Tool]:
    schema = _schema(
        {
            "label": {"type": "string", "enum": labels, "description": "The skill block"},
            "key": {"type": "string", "description": "The skill's key, as the system prompt lists it"},
        },
        ["label", "key"],
    )
    load_description = (
        "Load a skill's full content by key from a skill block (" + ", ".join(labels) + "); the system prompt "
        "lists the keys. Unload it with unload_context when done, to free the context it takes."
    )
    now = " Currently loaded: " + ", ".join(loaded) + "." if loaded else " No skill is loaded now."
    unload_description = (
        "Unload a loaded skill: its content leaves the conversation (the load's result becomes a marker); it can "
        "be loaded again." + now
    )

    async def load(args: KeyedInput) -> str:
        return await ops.load_context(args.label, args.key)

    async def unload(args: KeyedInput) -> str:
        return await ops.unload_context(args.label, args.key)

    return [
        _tool("load_context", load_description, schema, KeyedInput, load),
        _tool("unload_context", unload_description, schema, KeyedInput, unload),
    ]
