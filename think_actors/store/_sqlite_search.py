"""SQLiteStore's message search: an FTS5 index kept in step with ``messages`` by triggers, and its migration.

``messages.search_text`` holds each message's searchable text (``_search.search_text``, written with the row);
``messages_fts`` is an external-content FTS5 table over it (``porter`` stemming over ``unicode61``), so the text is
stored once and the index holds only tokens. Three triggers mirror every insert, update and delete of a message
(``clear_messages`` included) into the index, so no write path of the store can leave it behind.

A file from before schema 5 gets the column, its text computed from every stored message (a Python step: the
bodies are msgpack), then the index built from it (``rebuild``) and only then the triggers, all in the opening
migration's transaction.
"""

from __future__ import annotations

import sqlite3

from ..errors import StoreError
from ._codec import decode_message
from ._search import search_text

__all__ = ["add_search"]

_INDEX = (
    "CREATE VIRTUAL TABLE messages_fts USING fts5("
    "search_text, content='messages', content_rowid='seq', tokenize='porter unicode61')"
)
# An external-content index must be told the old text to remove a row, exactly as it was indexed: the column's.
_TRIGGERS = (
    """CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, search_text) VALUES (new.seq, new.search_text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, search_text) VALUES ('delete', old.seq, old.search_text);
    END""",
    """CREATE TRIGGER IF NOT EXISTS messages_fts_update AFTER UPDATE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, search_text) VALUES ('delete', old.seq, old.search_text);
        INSERT INTO messages_fts (rowid, search_text) VALUES (new.seq, new.search_text);
    END""",
)


def add_search(conn: sqlite3.Connection) -> None:
    """Give a file the search column, index and triggers it lacks (inside the caller's write transaction)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(messages)")}
    if "search_text" not in columns:
        conn.execute("ALTER TABLE messages ADD COLUMN search_text TEXT")
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'messages_fts'").fetchone()
    if exists is None:
        # No trigger exists yet (they come last), so these updates do not touch an index.
        for trigger in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):
            conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
        _backfill(conn)
        try:
            conn.execute(_INDEX)
        except sqlite3.OperationalError as exc:
            raise StoreError(
                f"this SQLite ({sqlite3.sqlite_version}) has no FTS5, which message search needs: {exc}. "
                "Use a Python whose sqlite3 is built with FTS5 (the python.org and distribution builds are)."
            ) from exc
        conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')")
    for statement in _TRIGGERS:
        conn.execute(statement)


def _backfill(conn: sqlite3.Connection) -> None:
    rows = conn.execute("SELECT seq, body FROM messages WHERE search_text IS NULL").fetchall()
    for seq, body in rows:
        try:
            text = search_text(decode_message(body))
        except StoreError:
            text = ""  # a row no reader can decode has nothing to find; it must not make the file unopenable
        conn.execute("UPDATE messages SET search_text = ? WHERE seq = ?", (text, seq))
