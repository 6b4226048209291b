"""SQLiteStore's schema: the tables, the statements the store runs, and the migration of an older file.

Kept apart from ``sqlite.py`` so the store's module holds its operations and this one the SQL text they run.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from ..errors import StoreError
from ._codec import EFFECT_COLUMNS, SUBMISSION_COLUMNS, TURN_COLUMNS, quoted_names
from ._sqlite_search import add_search

SCHEMA_VERSION = 6
"""Kept in ``PRAGMA user_version``; a file with a higher number was written by a newer think_actors.

1: messages and kv. 2: adds submissions, turns, chunks and effects (created in place in a version-1 file).
3: adds the lease (the writers' generation, see ``_lease``). 4: drops the request indexes of chunks and effects
(rows of running turns only, a few per turn: a scan is cheaper than keeping an index on every write), and a chunk
row holds a batch (a msgpack list; rows of older versions hold one chunk each and are read as before).
5: message search: ``messages.search_text``, the FTS5 index ``messages_fts`` and its triggers (``_sqlite_search``;
an older file's text is computed from its stored messages when it is first opened).
6: ``submissions.traceparent``, the trace context of the span that submitted it (NULL in older rows).
"""

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT UNIQUE NOT NULL,
        parent_id TEXT,
        role TEXT,
        body BLOB NOT NULL,
        created_at REAL,
        search_text TEXT
    )""",
    "CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value BLOB)",
    # AUTOINCREMENT: seq is the FIFO tiebreak and part of the record, so it is never reused after a delete.
    """CREATE TABLE IF NOT EXISTS submissions (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        submission_id TEXT UNIQUE NOT NULL,
        request_id TEXT NOT NULL,
        status TEXT NOT NULL,
        messages BLOB NOT NULL,
        created_at REAL NOT NULL,
        idempotency_key TEXT,
        metadata BLOB NOT NULL,
        error TEXT,
        started_at REAL,
        completed_at REAL,
        messages_applied_at REAL,
        traceparent TEXT
    )""",
    # A UNIQUE index holds any number of NULLs, so submissions without a key never collide.
    "CREATE UNIQUE INDEX IF NOT EXISTS submissions_by_key ON submissions (idempotency_key)",
    "CREATE INDEX IF NOT EXISTS submissions_by_status ON submissions (status, created_at, seq)",
    """CREATE TABLE IF NOT EXISTS turns (
        request_id TEXT PRIMARY KEY,
        "trigger" TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        continuation INTEGER NOT NULL,
        input_ids BLOB NOT NULL,
        message_id TEXT,
        attempts INTEGER NOT NULL,
        progress INTEGER NOT NULL,
        submission_id TEXT,
        data BLOB NOT NULL
    )""",
    # A plain rowid (no AUTOINCREMENT, one write less per row): a new row's seq is above every stored row's, which
    # is all the order of a request's log needs. A row is one write's batch of chunks.
    """CREATE TABLE IF NOT EXISTS chunks (
        seq INTEGER PRIMARY KEY,
        request_id TEXT NOT NULL,
        body BLOB NOT NULL
    )""",
    "DROP INDEX IF EXISTS chunks_by_request",
    """CREATE TABLE IF NOT EXISTS effects (
        seq INTEGER PRIMARY KEY,
        key TEXT UNIQUE NOT NULL,
        request_id TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        input BLOB NOT NULL,
        output BLOB NOT NULL,
        error TEXT,
        finished_at REAL
    )""",
    "DROP INDEX IF EXISTS effects_by_request",
    # One row: the generation of the newest store that opened this file.
    "CREATE TABLE IF NOT EXISTS lease (id INTEGER PRIMARY KEY CHECK (id = 1), generation INTEGER NOT NULL)",
)


def insert_sql(table: str, columns: Sequence[str]) -> str:
    return f"INSERT INTO {table} ({quoted_names(columns)}) VALUES ({', '.join('?' * len(columns))})"


def placeholders(values: Sequence[str]) -> str:
    return f"({', '.join('?' * len(values))})"


SUBMISSION_SELECT = f"SELECT {quoted_names(SUBMISSION_COLUMNS)} FROM submissions"
SUBMISSION_INSERT = insert_sql("submissions", SUBMISSION_COLUMNS[1:])
TURN_SELECT = f"SELECT {quoted_names(TURN_COLUMNS)} FROM turns"
# ON CONFLICT DO UPDATE, not INSERT OR REPLACE: the row keeps its rowid, the tiebreak of list_turns.
TURN_UPSERT = insert_sql("turns", TURN_COLUMNS) + (
    " ON CONFLICT (request_id) DO UPDATE SET " + ", ".join(f'"{c}" = excluded."{c}"' for c in TURN_COLUMNS[1:])
)
CHUNK_INSERT = "INSERT INTO chunks (request_id, body) VALUES (?, ?)"
# The insert of a lease holder: nothing is written unless the file's newest lease generation is the given one.
CHUNK_INSERT_FENCED = "INSERT INTO chunks (request_id, body) SELECT ?, ? WHERE (SELECT generation FROM lease) IS ?"
EFFECT_SELECT = f"SELECT {quoted_names(EFFECT_COLUMNS)} FROM effects"
EFFECT_INSERT = insert_sql("effects", EFFECT_COLUMNS) + " ON CONFLICT (key) DO NOTHING"

# Walk up from the latest leaf. ``m.seq < p.seq`` always holds (a parent exists before its child), and saying so
# guarantees the recursion ends even in a hand-edited file with a parent cycle.
LOAD_PATH = """
WITH RECURSIVE path(seq, parent_id, body) AS (
    SELECT seq, parent_id, body FROM messages WHERE seq = (SELECT MAX(seq) FROM messages)
    UNION ALL
    SELECT m.seq, m.parent_id, m.body FROM messages AS m JOIN path AS p ON m.id = p.parent_id AND m.seq < p.seq
)
SELECT body FROM path ORDER BY seq
"""

# One autocommitted write statement holds the write lock for its whole run, so two opens never share a generation.
CLAIM = (
    "INSERT INTO lease (id, generation) VALUES (1, 1) "
    "ON CONFLICT (id) DO UPDATE SET generation = generation + 1 RETURNING generation"
)

# The turn's own message writes (begin_turn, end_turn) in one statement each, with the rules of _insert / _update:
# a new row goes under the latest leaf; an existing id is left alone (rowcount 0), or updated in place (its seq and
# parent stay).
APPEND_UNDER_LATEST = (
    "INSERT INTO messages (id, parent_id, role, body, created_at, search_text)"
    " VALUES (?, (SELECT id FROM messages ORDER BY seq DESC LIMIT 1), ?, ?, ?, ?)"
)
APPEND_NEW = APPEND_UNDER_LATEST + " ON CONFLICT (id) DO NOTHING"
UPSERT = APPEND_UNDER_LATEST + (
    " ON CONFLICT (id) DO UPDATE SET role = excluded.role, body = excluded.body, created_at = excluded.created_at,"
    " search_text = excluded.search_text"
)


def use_wal(conn: sqlite3.Connection, busy_timeout_s: float) -> None:
    """Put the file in WAL mode, waiting (as every other statement of the store does) for another opener's lock.

    Switching the journal mode returns SQLITE_BUSY at once, without the busy handler, while another connection
    switches it: two processes opening one new file race here (measured: about half of 2,000 paired opens).
    ``BEGIN IMMEDIATE`` waits for that lock through the busy handler (``busy_timeout``), then the switch is tried
    again; a file already in WAL mode takes no lock, so only the first opens of a new file ever wait.
    """
    deadline = time.monotonic() + busy_timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        conn.execute("BEGIN IMMEDIATE")  # waits in SQLite's busy handler until the other opener's lock is gone
        conn.execute("ROLLBACK")


def migrate(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables a new or older file lacks; refuse a file from a newer schema rather than misread it.

    Every version so far only adds tables and indexes or drops indexes, so ``SCHEMA``'s IF [NOT] EXISTS
    statements migrate; chunk rows of older versions stay readable as they are (``load_chunks``). Versions 5 and
    6 add a column too, which ``add_search`` and ``_add_traceparent`` add where it is missing.
    """
    # Read first without a lock: every open but the first finds the schema current and skips the migration.
    if _schema_version(conn) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _schema_version(conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite store {path} has schema version {version}; this think_actors reads up to "
                f"{SCHEMA_VERSION}. Upgrade think_actors to open it."
            )
        for statement in SCHEMA:
            conn.execute(statement)
        add_search(conn)
        _add_traceparent(conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _schema_version(conn: sqlite3.Connection) -> int:
    version: int = conn.execute("PRAGMA user_version").fetchone()[0]
    return version


def _add_traceparent(conn: sqlite3.Connection) -> None:
    """Version 6's column, in a submissions table an older version created (a new one has it already)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(submissions)")}
    if "traceparent" not in columns:
        conn.execute("ALTER TABLE submissions ADD COLUMN traceparent TEXT")
