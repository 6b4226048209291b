"""Message search shared by the stores: what a message's searchable text is, the query language, and a hit.

Every store searches the whole stored history (all branches, and messages a compaction hides from the model):
SQLite and the in-memory store through SQLite FTS5 with the ``porter`` stemmer over ``unicode61`` (as Think's
Session), PostgreSQL through its full-text search with the ``english`` configuration (also a Porter-family
stemmer), so "running" finds "runs" on each.

The query language is PostgreSQL's ``websearch_to_tsquery``, which the SQLite side translates (``fts5_query``):
words are all required, ``"a phrase"`` matches the words in order, ``or`` (any case) between two terms accepts
either, ``-word`` excludes. Nothing in a query is FTS syntax, so no query is a syntax error: punctuation only
separates words, and a query with no word matches nothing. Control characters (NUL included) and lone surrogates,
which no store can take and no search box means, separate words too. A query blank once they are gone is refused
(``check_search``).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from ..errors import ConfigurationError
from ..messages import TextPart, UIMessage

__all__ = [
    "FTS_HIT",
    "MAX_SEARCH_LIMIT",
    "SNIPPET_MARK",
    "MessageHit",
    "check_search",
    "fts5_query",
    "hits",
    "memory_search",
    "search_text",
]

MAX_SEARCH_LIMIT = 1000
SNIPPET_MARK = "**"
"""Put around each matched word in a snippet (markdown bold, on every store)."""

_TERM = re.compile(r'(-?)"([^"]*)"?|(\S+)')
# C0 and C1 controls, DEL and the surrogate range (a str may hold a lone one, which no UTF-8 store can encode).
_UNSEARCHABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_WORD = re.compile(r"\w", re.UNICODE)

# Shared by SQLite (over ``messages`` and ``messages_fts``) and the in-memory search (over the same two names).
# bm25 is lower for a better match; the hit's rank is its negation, so on every store a higher rank is better.
FTS_HIT = """
SELECT m.id, m.role, snippet(messages_fts, 0, '**', '**', '…', 16), -bm25(messages_fts), m.created_at
FROM messages_fts JOIN messages AS m ON m.seq = messages_fts.rowid
WHERE messages_fts MATCH ?
ORDER BY bm25(messages_fts), m.seq DESC
LIMIT ?
"""


class MessageHit(BaseModel):
    """One message found by a search: its id and role, a snippet with the matched words in ``**``, the rank
    (higher is a better match; comparable only within one search) and the message's creation time."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    message_id: str
    role: str
    snippet: str
    rank: float
    created_at: float | None = None


def search_text(message: UIMessage) -> str:
    """The text a search sees of a message: its text parts, one per line (as Think indexes them)."""
    return "\n".join(p.text for p in message.parts if isinstance(p, TextPart) and p.text)


def check_search(query: object, limit: object) -> tuple[str, int]:
    """The query to run, its control characters and lone surrogates made spaces; refuses a query that is not a str
    or is blank without them, or a limit that is not an int in 1..1000, saying so."""
    if not isinstance(query, str):
        raise ConfigurationError(f"a search query is a str, got {type(query).__name__} {query!r}")
    if not query.strip():
        raise ConfigurationError("the search query is empty: give one or more words to look for")
    query = _UNSEARCHABLE.sub(" ", query)
    if not query.strip():
        raise ConfigurationError(
            "the search query holds only control characters or lone surrogates, which a search ignores: "
            "give one or more words to look for"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ConfigurationError(f"a search limit is an int from 1 to {MAX_SEARCH_LIMIT}, got {limit!r}")
    return query, limit


def fts5_query(query: str) -> str | None:
    """The FTS5 MATCH expression for a ``websearch_to_tsquery``-style query, or None when it has no word.

    Every term is quoted (an FTS5 string, tokenised as the index is), so no input is FTS syntax. Terms of one
    group are ANDed; ``or`` starts a new group, and groups are ORed (FTS5 binds AND tighter than OR, as tsquery
    binds ``&`` tighter than ``|``). A ``-term`` becomes ``NOT term`` after the group's first required term
    (FTS5's NOT is binary); a group with no required term is dropped.
    """
    groups: list[tuple[list[str], list[str]]] = [([], [])]
    for match in _TERM.finditer(query):
        negated, phrase, word = match.group(1), match.group(2), match.group(3)
        if word is not None and word.lower() == "or":
            if groups[-1][0] or groups[-1][1]:
                groups.append(([], []))
            continue
        if word is not None and word.startswith("-") and len(word) > 1:
            negated, word = "-", word[1:]
        text = phrase if phrase is not None else word or ""
        if not _WORD.search(text):
            continue
        quoted = '"' + text.replace('"', '""') + '"'
        groups[-1][1 if negated else 0].append(quoted)
    expressions = []
    for required, excluded in groups:
        if required:
            expressions.append(" ".join([required[0], *(f"NOT {term}" for term in excluded), *required[1:]]))
    return " OR ".join(expressions) or None


def memory_search(messages: Iterable[UIMessage], query: str, limit: int) -> list[MessageHit]:
    """Search ``messages`` (in write order) as SQLiteStore searches its file: an FTS5 index built for this call
    in a private in-memory database, with the same tokenizer, query and ranking."""
    match = fts5_query(query)
    if match is None:
        return []
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE TABLE messages (seq INTEGER PRIMARY KEY, id TEXT, role TEXT, created_at REAL)")
        conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(search_text, tokenize='porter unicode61')")
        for seq, message in enumerate(messages, start=1):
            text = search_text(message)
            conn.execute(
                "INSERT INTO messages VALUES (?, ?, ?, ?)", (seq, message.id, message.role, message.created_at)
            )
            if text:
                conn.execute("INSERT INTO messages_fts (rowid, search_text) VALUES (?, ?)", (seq, text))
        rows = conn.execute(FTS_HIT, (match, limit)).fetchall()
    finally:
        conn.close()
    return hits(rows)


def hits(rows: Iterable[tuple[object, ...]]) -> list[MessageHit]:
    return [
        MessageHit(
            message_id=str(mid),
            role=str(role),
            snippet=str(snippet),
            rank=float(rank),  # type: ignore[arg-type]
            created_at=None if created is None else float(created),  # type: ignore[arg-type]
        )
        for mid, role, snippet, rank, created in rows
    ]
