"""The team's library: a small searchable corpus served as an MCP server (the official ``mcp`` SDK), over stdio.

``python agents/library.py`` speaks MCP on stdin/stdout; the researchers declare it with ``ta.mcp.stdio(...,
shared=True)``, so one server process per node serves every researcher there, through the node's shared connection
actor (the team's tool actor). Its one tool, ``search``, reaches the model as ``library_search``. Standalone on
purpose: it imports only the SDK, and runs from any working directory.
"""

from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel

DOCUMENTS = [
    (
        "ray-actors",
        "Ray actors are stateful workers: each runs in its own process, keeps state between calls "
        "and handles calls one at a time or concurrently when it is async.",
    ),
    (
        "ray-streaming",
        "Ray generators stream results from a task or actor method; each item crosses processes "
        "as its own object, so batching many small items saves most of the cost.",
    ),
    (
        "ray-scale",
        "A Ray cluster adds nodes to scale out; named actors are found by name from any node and "
        "restart on another node when theirs fails.",
    ),
    (
        "sqlite-wal",
        "SQLite in WAL mode lets readers run while one writer appends; a commit is one small write "
        "to the log, so appending a message costs tens of microseconds.",
    ),
    ("postgres", "PostgreSQL is a networked database server: agents on many nodes can share one store."),
    (
        "asyncio",
        "asyncio runs many coroutines on one thread; a task that blocks the loop stalls every other "
        "task, so slow work belongs in threads, processes or other actors.",
    ),
    ("litellm", "litellm gives one API over many LLM providers and streams their answers as OpenAI chunks."),
    (
        "think-hooks",
        "Think's lifecycle hooks run around every model call: before_turn, before_step, on_chunk, "
        "before_tool_call, after_tool_call, on_step_finish and on_chat_response.",
    ),
    (
        "mcp",
        "The Model Context Protocol lets an agent use the tools of any MCP server, over stdio or streamable "
        "HTTP; this library is one.",
    ),
]


class Passage(BaseModel):
    id: str
    passage: str


class Found(BaseModel):
    passages: list[Passage]


server = MCPServer("library", instructions="A small library about serving many agents. Search it by topic.")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def search(query: str, limit: int = 3) -> Found:
    """Search the library for passages about a topic.

    Args:
        query: Words to look for.
        limit: How many passages to return at most.
    """
    words = {w for w in re.findall(r"[a-z0-9]+", query.lower()) if len(w) > 2}
    scored = []
    for doc_id, passage in DOCUMENTS:
        text = (doc_id + " " + passage).lower()
        score = sum(text.count(w) for w in words)
        if score:
            scored.append((score, doc_id, passage))
    scored.sort(reverse=True)
    return Found(passages=[Passage(id=doc_id, passage=passage) for _, doc_id, passage in scored[: max(limit, 0)]])


if __name__ == "__main__":
    server.run("stdio")
