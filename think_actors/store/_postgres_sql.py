"""PostgresStore's statements: every SQL text the store runs, each scoped to one agent path (``$1``).

Kept apart from ``postgres.py`` so the store's module holds its operations and this one the SQL they run.
``fenced`` wraps writes that check the agent's lease generation in the same statement (see ``postgres.py``).
"""

from __future__ import annotations

from ._codec import EFFECT_COLUMNS, SUBMISSION_COLUMNS, TURN_COLUMNS, quoted_names
from ._schema import SCHEMA

_S = SCHEMA


def params(start: int, count: int) -> str:
    return ", ".join(f"${i}" for i in range(start, start + count))


def fenced(*writes: str, count: str = "0") -> str:
    """One statement: lock the agent's lease row (``$1`` path), run ``writes`` (CTEs that join ``lease`` and
    write only while ``lease.generation = $2``), and return the owner's generation and ``count``."""
    ctes = ", ".join(writes)
    return (
        f"WITH lease AS (SELECT generation FROM {_S}.agents WHERE path = $1 FOR SHARE), {ctes} "
        f"SELECT (SELECT generation FROM lease) AS generation, {count} AS n"
    )


# -- messages --------------------------------------------------------------------------------------------------------
# Walk up from the latest leaf; ``m.seq < p.seq`` holds for every parent and bounds the recursion even over a
# hand-edited parent cycle.
LOAD_PATH = f"""
WITH RECURSIVE path(seq, parent_id, body) AS (
    (SELECT seq, parent_id, body FROM {_S}.messages WHERE agent = $1 ORDER BY seq DESC LIMIT 1)
    UNION ALL
    SELECT m.seq, m.parent_id, m.body FROM {_S}.messages AS m
    JOIN path AS p ON m.agent = $1 AND m.id = p.parent_id AND m.seq < p.seq
)
SELECT body FROM path ORDER BY seq
"""
LIST_MESSAGES = f"SELECT body FROM {_S}.messages WHERE agent = $1 ORDER BY seq"
GET_MESSAGE = f"SELECT body FROM {_S}.messages WHERE agent = $1 AND id = $2"
# The tree lock: one agent's appends are serialised (the latest leaf cannot move between reading and appending).
LOCK_TREE = f"SELECT generation FROM {_S}.agents WHERE path = $1 FOR UPDATE"
INSERT_LOOKUP = f"""
SELECT EXISTS (SELECT 1 FROM {_S}.messages WHERE agent = $1 AND id = $2) AS taken,
       (SELECT id FROM {_S}.messages WHERE agent = $1 ORDER BY seq DESC LIMIT 1) AS latest,
       EXISTS (SELECT 1 FROM {_S}.messages WHERE agent = $1 AND id = $3) AS parent_found
"""
INSERT_MESSAGE = (
    f"INSERT INTO {_S}.messages (agent, id, parent_id, role, body, created_at, search_text) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7)"
)
UPDATE_SET = "role = $4, body = $5, created_at = $6, search_text = $7"
UPDATE_MESSAGE_LOCKED = (
    f"UPDATE {_S}.messages SET role = $3, body = $4, created_at = $5, search_text = $6 WHERE agent = $1 AND id = $2"
)
UPDATE_MESSAGE = fenced(
    f"w AS (UPDATE {_S}.messages AS m SET {UPDATE_SET} FROM lease "
    "WHERE lease.generation = $2 AND m.agent = $1 AND m.id = $3 RETURNING 1)",
    count="(SELECT count(*) FROM w)",
)
# Message search (migration 2): ``search_vector`` is generated from ``search_text`` and GIN-indexed. ts_headline
# marks the matched words as the SQLite side's snippet does (``**``); ts_rank is higher for a better match.
SEARCH_MESSAGES = f"""
SELECT m.id, m.role,
       ts_headline('english', m.search_text, q.query, 'StartSel=**, StopSel=**, MaxWords=24, MinWords=8'),
       ts_rank(m.search_vector, q.query), m.created_at
FROM {_S}.messages AS m, websearch_to_tsquery('english', $2) AS q(query)
WHERE m.agent = $1 AND m.search_vector @@ q.query
ORDER BY 4 DESC, m.seq DESC
LIMIT $3
"""
CLEAR_MESSAGES = fenced(
    f"w AS (DELETE FROM {_S}.messages AS m USING lease WHERE lease.generation = $2 AND m.agent = $1 RETURNING 1)"
)

# -- kv ----------------------------------------------------------------------------------------------------------------
GET_KV = f"SELECT value FROM {_S}.kv WHERE agent = $1 AND key = $2"
SET_KV = fenced(
    f"w AS (INSERT INTO {_S}.kv (agent, key, value) SELECT $1, $3, $4 FROM lease WHERE lease.generation = $2 "
    "ON CONFLICT (agent, key) DO UPDATE SET value = excluded.value RETURNING 1)"
)
DELETE_KV = fenced(
    f"w AS (DELETE FROM {_S}.kv AS k USING lease WHERE lease.generation = $2 AND k.agent = $1 AND k.key = $3 "
    "RETURNING 1)"
)

# -- submissions (not fenced: see _lease) ------------------------------------------------------------------------------
SUBMISSION_SELECT = f"SELECT {quoted_names(SUBMISSION_COLUMNS)} FROM {_S}.submissions"
SUBMISSION_LOOKUP = f"{SUBMISSION_SELECT} WHERE agent = $1 AND (submission_id = $2 OR idempotency_key = $3)"
# The agent's counter, not a sequence: a sequence would spend a number on every insert that loses a race, and seq
# (the FIFO tiebreak) is never reused, as SQLite's AUTOINCREMENT.
NEXT_SUBMISSION_SEQ = (
    f"UPDATE {_S}.agents SET submission_seq = submission_seq + 1 WHERE path = $1 RETURNING submission_seq"
)
INSERT_SUBMISSION = (
    f"INSERT INTO {_S}.submissions (agent, {quoted_names(SUBMISSION_COLUMNS)}) "
    f"VALUES ($1, {params(2, len(SUBMISSION_COLUMNS))}) ON CONFLICT DO NOTHING RETURNING seq"
)

# -- turns, chunks, effects --------------------------------------------------------------------------------------------
TURN_SELECT = f"SELECT {quoted_names(TURN_COLUMNS)} FROM {_S}.turns"
# ON CONFLICT DO UPDATE keeps the row's seq, the tiebreak of list_turns.
PUT_TURN = fenced(
    f"w AS (INSERT INTO {_S}.turns (agent, {quoted_names(TURN_COLUMNS)}) "
    f"SELECT $1, {params(3, len(TURN_COLUMNS))} FROM lease WHERE lease.generation = $2 "
    "ON CONFLICT (agent, request_id) DO UPDATE SET "
    + ", ".join(f'"{c}" = excluded."{c}"' for c in TURN_COLUMNS[1:])
    + " RETURNING 1)",
    count="(SELECT count(*) FROM w)",
)
DELETE_TURN = fenced(
    *(
        f"d_{table} AS (DELETE FROM {_S}.{table} AS t USING lease "
        "WHERE lease.generation = $2 AND t.agent = $1 AND t.request_id = $3 RETURNING 1)"
        for table in ("turns", "chunks", "effects")
    )
)
CLEAR_TURN_STATE = fenced(
    *(
        f"d_{table} AS (DELETE FROM {_S}.{table} AS t USING lease WHERE lease.generation = $2 AND t.agent = $1 "
        "RETURNING 1)"
        for table in ("turns", "chunks", "effects")
    )
)
# One row per batch (its chunks as one msgpack array): a batch costs one row, whatever its length.
APPEND_CHUNKS = fenced(
    f"w AS (INSERT INTO {_S}.chunks (agent, request_id, body) SELECT $1, $3, $4 FROM lease "
    "WHERE lease.generation = $2 RETURNING 1)"
)
# A turn's two transactions, each one round trip: migration 4's functions (their arguments: the agent, the
# generation, then the turn's columns in TURN_COLUMNS' order and the messages as arrays; or the request id and the
# reply, NULLs for none).
BEGIN_TURN = f"SELECT lease_owner, appended FROM {_S}.begin_turn({params(1, 2 + len(TURN_COLUMNS) + 5)})"
END_TURN = f"SELECT lease_owner FROM {_S}.end_turn({params(1, 8)})"
LOAD_CHUNKS = f"SELECT body FROM {_S}.chunks WHERE agent = $1 AND request_id = $2 ORDER BY seq"
EFFECT_SELECT = f"SELECT {quoted_names(EFFECT_COLUMNS)} FROM {_S}.effects"
# The effect writes, as CTEs: alone, or with a batch of the request's chunk log in the same statement.
N_EFFECT = len(EFFECT_COLUMNS)
INSERT_EFFECT = (
    f"w AS (INSERT INTO {_S}.effects (agent, {quoted_names(EFFECT_COLUMNS)}) "
    f"SELECT $1, {params(3, N_EFFECT)} FROM lease WHERE lease.generation = $2 "
    "ON CONFLICT (agent, key) DO NOTHING RETURNING 1)"
)
UPDATE_EFFECT = (
    f"w AS (UPDATE {_S}.effects AS e SET status = $4, output = $5, error = $6, finished_at = $7 FROM lease "
    "WHERE lease.generation = $2 AND e.agent = $1 AND e.key = $3 RETURNING e.request_id)"
)
START_EFFECT = fenced(INSERT_EFFECT, count="(SELECT count(*) FROM w)")
START_EFFECT_LOGGED = fenced(  # the chunks' request id and body follow the effect's columns
    f"c AS (INSERT INTO {_S}.chunks (agent, request_id, body) SELECT $1, ${3 + N_EFFECT}, ${4 + N_EFFECT} "
    "FROM lease WHERE lease.generation = $2)",
    INSERT_EFFECT,
    count="(SELECT count(*) FROM w)",
)
FINISH_EFFECT = fenced(UPDATE_EFFECT, count="(SELECT count(*) FROM w)")
FINISH_EFFECT_LOGGED = fenced(  # the chunks go under the request of the effect the update found
    UPDATE_EFFECT,
    f"c AS (INSERT INTO {_S}.chunks (agent, request_id, body) SELECT $1, w.request_id, $8 FROM w)",
    count="(SELECT count(*) FROM w)",
)

CLAIM = (
    f"INSERT INTO {_S}.agents (path, generation) VALUES ($1, 1) "
    "ON CONFLICT (path) DO UPDATE SET generation = agents.generation + 1, claimed_at = now() RETURNING generation"
)

EXISTS = f"SELECT EXISTS (SELECT 1 FROM {_S}.agents WHERE path = $1)"
LEASE_OWNER = f"SELECT generation FROM {_S}.agents WHERE path = $1"
