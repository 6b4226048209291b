"""A tool actor: a small searchable library served by one Ray actor that every researcher shares."""

from __future__ import annotations

import re

import ray

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
]


@ray.remote(num_cpus=0)
class LibraryService:
    """Searches a fixed corpus; one actor serves all researchers."""

    def __init__(self) -> None:
        self.searches = 0

    def search(self, query: str, limit: int = 3) -> list[dict[str, str]]:
        """Search the library for passages about a topic.

        Args:
            query: Words to look for.
            limit: How many passages to return at most.
        """
        self.searches += 1
        words = {w for w in re.findall(r"[a-z0-9]+", query.lower()) if len(w) > 2}
        scored = []
        for doc_id, passage in DOCUMENTS:
            text = (doc_id + " " + passage).lower()
            score = sum(text.count(w) for w in words)
            if score:
                scored.append((score, doc_id, passage))
        scored.sort(reverse=True)
        return [{"id": doc_id, "passage": passage} for _, doc_id, passage in scored[:limit]]

    def stats(self) -> dict[str, int]:
        return {"searches": self.searches}
