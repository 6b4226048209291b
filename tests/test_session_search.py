"""Message search (issue 21; reference §5, Session ``search``): every store kind finds stemmed words over the whole
stored history, the query language has no syntax errors, bad input is refused with a message, the index follows
every write, an existing SQLite file is migrated, and an agent finds what a compaction hid from its model."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import think_actors as ta
from think_actors.compaction import CompactionResult
from think_actors.errors import ConfigurationError
from think_actors.messages import TextPart, UIMessage, user_message
from think_actors.store import MessageHit, TurnRecord
from think_actors.store._codec import encode_message
from think_actors.store._search import fts5_query
from think_actors.store.sqlite import SCHEMA_VERSION
from think_actors.testing import ScriptedModel, text


def said(mid: str, role: Any, words: str, at: float = 100.0) -> UIMessage:
    return UIMessage(id=mid, role=role, parts=(TextPart(text=words),), created_at=at)


async def ids(store: ta.Store, query: str, **options: Any) -> list[str]:
    return [hit.message_id for hit in await store.search_messages(query, **options)]


async def fill(store: ta.Store) -> None:
    await store.append_message(said("u1", "user", "The dog runs in the park every morning", 1.0))
    await store.append_message(said("a1", "assistant", "Running daily is good for dogs and people", 2.0))
    await store.append_message(said("u2", "user", "What about swimming in the lake?", 3.0))
    await store.append_message(said("a2", "assistant", "Swimming is gentle on the knees", 4.0))


# --- every store kind ------------------------------------------------------------------------------------------------


async def test_stemming_finds_other_forms_of_a_word(store: ta.Store) -> None:
    await fill(store)
    assert sorted(await ids(store, "running")) == ["a1", "u1"]  # "runs" and "Running"
    assert sorted(await ids(store, "swims")) == ["a2", "u2"]
    assert await ids(store, "dogs park") == ["u1"]  # every word required
    assert await ids(store, "cats") == []


async def test_a_hit_carries_id_role_snippet_rank_and_time(store: ta.Store) -> None:
    await fill(store)
    [hit] = await store.search_messages("knees")
    assert isinstance(hit, MessageHit)
    assert (hit.message_id, hit.role, hit.created_at) == ("a2", "assistant", 4.0)
    assert "**knees**" in hit.snippet and "Swimming" in hit.snippet
    assert hit.rank > 0
    # Best first: the message that says "swim" twice ranks above the ones that say it once.
    await store.append_message(said("u3", "user", "swimming, swimming and more swimming", 5.0))
    assert (await ids(store, "swimming"))[0] == "u3"
    assert await ids(store, "swimming", limit=1) == ["u3"]


async def test_phrases_or_and_exclusion(store: ta.Store) -> None:
    await fill(store)
    assert await ids(store, '"gentle on the knees"') == ["a2"]
    assert await ids(store, '"knees gentle"') == []  # a phrase keeps its order
    assert sorted(await ids(store, "lake or park")) == ["u1", "u2"]
    assert sorted(await ids(store, "swimming -lake")) == ["a2"]


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "NEAR(dog run)", "dog*", "AND OR NOT", "(dog", "col:dog", "^dog", "dog + + run", "'; DROP --"],
)
async def test_fts_syntax_in_a_query_is_only_words(store: ta.Store, query: str) -> None:
    await fill(store)
    found = await store.search_messages(query)  # never an error
    assert all(isinstance(hit, MessageHit) for hit in found)
    assert await store.search_messages("!!! ... ???") == []  # no word: nothing to find


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("park\x00", ["u1"]),
        ("\x00park", ["u1"]),
        ("morning\x00park", ["u1"]),  # a control character separates words like a space
        ("park\udfff", ["u1"]),  # a lone surrogate (a str may hold one; no store can encode it)
        ("\ud800 knees", ["a2"]),
        ("\x1bpark\x1b", ["u1"]),  # an escape character, as a pasted terminal line carries
        ("morning\x7f\x85park", ["u1"]),  # DEL and a C1 control
        ('"gentle\x00on the knees"', ["a2"]),
    ],
)
async def test_control_characters_and_lone_surrogates_separate_words(
    store: ta.Store, query: str, expected: list[str]
) -> None:
    # Queries come straight from search boxes: a NUL or a broken surrogate pair must neither crash nor reach the
    # database (SQLite's FTS, PostgreSQL's UTF-8 and Python's encoder all refuse them).
    await fill(store)
    assert await ids(store, query) == expected


@pytest.mark.parametrize("query", ["\x00", "\ud800", "\x00 \udfff\x1f"])
async def test_a_query_of_only_control_characters_is_refused_with_a_message(store: ta.Store, query: str) -> None:
    with pytest.raises(ConfigurationError, match="only control characters or lone surrogates"):
        await store.search_messages(query)


async def test_blank_queries_and_bad_limits_are_refused_with_a_message(store: ta.Store) -> None:
    with pytest.raises(ConfigurationError, match="the search query is empty"):
        await store.search_messages("   ")
    with pytest.raises(ConfigurationError, match="a search query is a str"):
        await store.search_messages(None)  # type: ignore[arg-type]
    for limit in (0, -1, 1001, True, 2.5):
        with pytest.raises(ConfigurationError, match="a search limit is an int from 1 to 1000"):
            await store.search_messages("dog", limit=limit)  # type: ignore[arg-type]


async def test_the_index_follows_updates_branches_turn_writes_and_clear(store: ta.Store) -> None:
    await fill(store)
    await store.update_message(said("a2", "assistant", "Cycling is gentle too", 4.0))
    assert await ids(store, "swimming") == ["u2"]
    assert await ids(store, "cycling") == ["a2"]
    await store.upsert_message(said("a3", "assistant", "A branch about climbing", 6.0), parent_id="u2")
    await store.append_message(said("a4", "assistant", "Another branch about hiking", 7.0), parent_id="u2")
    assert await ids(store, "climbing") == ["a3"]  # off the active path, still found
    record = TurnRecord(request_id="r1", trigger="save", status="running", started_at=1.0, updated_at=1.0)
    await store.begin_turn(record, [said("u5", "user", "tell me about rowing", 8.0)])
    await store.end_turn("r1", said("a5", "assistant", "Rowing works the back", 9.0))
    assert sorted(await ids(store, "rowing")) == ["a5", "u5"]
    await store.end_turn("r1", said("a5", "assistant", "Kayaking works the arms", 9.0))  # the reply upserted
    assert await ids(store, "rowing") == ["u5"]
    await store.clear_messages()
    assert await ids(store, "rowing kayaking or cycling") == []
    assert await ids(store, "cycling") == []


async def test_messages_without_text_are_stored_and_never_found(store: ta.Store) -> None:
    await store.append_message(UIMessage(id="e1", role="assistant", parts=(), created_at=1.0))
    await store.append_message(user_message("only words here", id="u1"))
    assert await ids(store, "words") == ["u1"]


# --- the query translation -------------------------------------------------------------------------------------------


def test_the_websearch_query_becomes_quoted_fts5_terms() -> None:
    assert fts5_query("dog run") == '"dog" "run"'
    assert fts5_query('"gentle on" knees') == '"gentle on" "knees"'
    assert fts5_query("lake OR park") == '"lake" OR "park"'
    assert fts5_query("a -b c") == '"a" NOT "b" "c"'
    assert fts5_query("-b a") == '"a" NOT "b"'  # FTS5's NOT needs a term before it
    assert fts5_query("-b") is None  # nothing required: nothing websearch would find by FTS5 alone
    assert fts5_query('say "hi""') == '"say" "hi"'
    assert fts5_query('x"y') == '"x""y"'  # a quote inside a word is escaped, not syntax
    assert fts5_query("or or") is None
    assert fts5_query("... !!!") is None


# --- SQLite: the index in the file and its migration -----------------------------------------------------------------


async def test_a_schema_4_sqlite_file_is_migrated_and_its_old_messages_found(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    conn = sqlite3.connect(path)  # what schema 4 wrote: messages without search_text, no index
    conn.execute(
        "CREATE TABLE messages (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL, parent_id TEXT, "
        "role TEXT, body BLOB NOT NULL, created_at REAL)"
    )
    old = [said("u1", "user", "The dog runs", 1.0), said("a1", "assistant", "Dogs like running", 2.0)]
    parent = None
    for message in old:
        conn.execute(
            "INSERT INTO messages (id, parent_id, role, body, created_at) VALUES (?, ?, ?, ?, ?)",
            (message.id, parent, message.role, encode_message(message), message.created_at),
        )
        parent = message.id
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()

    store = ta.SQLiteStore(path)
    try:
        assert [m.id for m in await store.load_messages()] == ["u1", "a1"]
        assert sorted(await ids(store, "run")) == ["a1", "u1"]
        await store.append_message(said("u2", "user", "and swimming?", 3.0))  # the triggers work from here on
        await store.update_message(said("u1", "user", "The cat sleeps", 1.0))
        assert await ids(store, "run") == ["a1"]
        assert await ids(store, "sleeping swim or cat") == ["u1"]
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT id, search_text FROM messages ORDER BY seq").fetchall() == [
            ("u1", "The cat sleeps"),
            ("a1", "Dogs like running"),
            ("u2", "and swimming?"),
        ]
        assert conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')").rowcount != 0
        triggers = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name").fetchall()
        assert triggers == [("messages_fts_delete",), ("messages_fts_insert",), ("messages_fts_update",)]
    finally:
        conn.close()


async def test_a_second_store_on_the_file_sees_the_first_ones_writes(tmp_path: Path) -> None:
    first, second = ta.SQLiteStore(tmp_path / "a.db"), ta.SQLiteStore(tmp_path / "a.db")
    try:
        await first.append_message(said("u1", "user", "searching across connections", 1.0))
        assert await ids(second, "search") == ["u1"]
    finally:
        await first.close()
        await second.close()


# --- through an agent ---------------------------------------------------------------------------------------------


class Compacting(ta.Think):
    instructions = "Be brief."

    async def configure_session(self, session: ta.Session) -> ta.Session:
        async def compact(history: list[ta.UIMessage], ctx: Any) -> CompactionResult | None:
            return CompactionResult("They talked about pets.", history[0].id, history[-2].id)

        return session.on_compaction(compact)


async def test_search_finds_what_a_compaction_hid_from_the_model(tmp_path: Path) -> None:
    model = ScriptedModel([text("Parrots mimic speech."), text("ok"), text("noted")])
    agent = Compacting(model=model, store=ta.SQLiteStore(tmp_path / "a.db"))
    await agent.save_messages("Tell me about parrots talking")
    await agent.save_messages("And cats?")
    assert agent.session is not None
    assert await agent.session.compact(agent.get_messages()) is not None
    await agent.save_messages("Summarise")
    sent = " ".join(str(m["content"]) for m in model.requests[-1].messages)
    assert "parrots" not in sent.lower() and "They talked about pets." in sent  # hidden from the model
    hits = await agent.search_messages("parrot talks")
    assert [(h.role, h.snippet) for h in hits] == [("user", "Tell me about **parrots** **talking**")]
    assert [h.message_id for h in await agent.search_messages("speeches")] == [agent.get_messages()[1].id]
    assert await agent.session.search("parrots talk", limit=1) == hits
    model.assert_complete()


async def test_a_store_without_search_says_so() -> None:
    class Plain:  # a store of the user's own, written before search existed
        async def load_messages(self) -> list[UIMessage]:
            return []

    session = ta.Session("lead/a", Plain())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="cannot search messages"):
        await session.search("dog")
