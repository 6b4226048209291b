"""The Store contract, run against every store, plus what only SQLiteStore has: files, reopening, agent paths."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from think_actors.errors import InvalidAgentNameError, StoreError
from think_actors.messages import (
    DataPart,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    UIMessage,
    user_message,
)
from think_actors.store import MemoryStore, PostgresStore, SQLiteStore, Store
from think_actors.store.sqlite import SCHEMA_VERSION

AnyStore = MemoryStore | SQLiteStore | PostgresStore
# The `store` fixture (conftest) runs each contract test against every kind in helpers.STORE_KINDS.


def assistant(text: str, *, id: str) -> UIMessage:
    return UIMessage(id=id, role="assistant", parts=(TextPart(text=text),))


def ids(messages: list[UIMessage]) -> list[str]:
    return [m.id for m in messages]


async def test_store_satisfies_protocol(store: AnyStore) -> None:
    assert isinstance(store, Store)


async def test_empty_store_loads_nothing(store: AnyStore) -> None:
    assert await store.load_messages() == []
    assert await store.get_message("nope") is None


async def test_append_chains_under_latest_leaf(store: AnyStore) -> None:
    assert await store.append_message(user_message("hi", id="u1")) is True
    assert await store.append_message(assistant("hello", id="a1")) is True
    assert await store.append_message(user_message("more", id="u2")) is True
    assert ids(await store.load_messages()) == ["u1", "a1", "u2"]


async def test_append_same_id_twice_is_a_noop(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("hello", id="a1"))
    assert await store.append_message(user_message("changed", id="u1")) is False
    # Not re-parented under a1, not duplicated, content unchanged.
    assert ids(await store.load_messages()) == ["u1", "a1"]
    assert [m.text for m in await store.list_messages()] == ["hi", "hello"]


async def test_append_existing_id_with_unknown_parent_is_still_a_noop(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    assert await store.append_message(user_message("hi", id="u1"), parent_id="ghost") is False


async def test_upsert_updates_in_place_and_keeps_order(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("draft", id="a1"))
    await store.append_message(user_message("next", id="u2"))
    await store.upsert_message(assistant("final", id="a1"))
    loaded = await store.load_messages()
    assert ids(loaded) == ["u1", "a1", "u2"]
    assert [m.text for m in loaded] == ["hi", "final", "next"]
    # The latest leaf did not move to a1: the next append still goes under u2.
    await store.append_message(assistant("reply", id="a2"))
    assert ids(await store.load_messages()) == ["u1", "a1", "u2", "a2"]


async def test_upsert_of_new_id_appends(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.upsert_message(assistant("hello", id="a1"))
    assert ids(await store.load_messages()) == ["u1", "a1"]


async def test_upsert_of_new_id_honours_parent(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("hello", id="a1"))
    await store.upsert_message(assistant("again", id="a2"), parent_id="u1")
    assert ids(await store.load_messages()) == ["u1", "a2"]


async def test_regenerate_branches_and_path_follows_latest(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("first try", id="a1"))
    await store.append_message(assistant("second try", id="a2"), parent_id="u1")
    assert ids(await store.load_messages()) == ["u1", "a2"]
    assert ids(await store.list_messages()) == ["u1", "a1", "a2"]
    await store.append_message(user_message("thanks", id="u2"))
    assert ids(await store.load_messages()) == ["u1", "a2", "u2"]


async def test_branch_from_deep_in_history(store: AnyStore) -> None:
    for i in range(3):
        await store.append_message(user_message(f"q{i}", id=f"u{i}"))
        await store.append_message(assistant(f"a{i}", id=f"a{i}"))
    await store.append_message(user_message("edit", id="u1b"), parent_id="a0")
    await store.append_message(assistant("answer", id="a1b"))
    assert ids(await store.load_messages()) == ["u0", "a0", "u1b", "a1b"]


async def test_none_parent_starts_a_new_root(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("hello", id="a1"))
    await store.append_message(user_message("fresh start", id="r2"), parent_id=None)
    assert ids(await store.load_messages()) == ["r2"]
    assert ids(await store.list_messages()) == ["u1", "a1", "r2"]


async def test_first_message_with_latest_parent_is_a_root(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("hello", id="a1"), parent_id="u1")
    assert ids(await store.load_messages()) == ["u1", "a1"]


async def test_unknown_explicit_parent_raises(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    with pytest.raises(StoreError, match="ghost"):
        await store.append_message(assistant("hello", id="a1"), parent_id="ghost")
    assert await store.get_message("a1") is None
    assert ids(await store.load_messages()) == ["u1"]


async def test_update_message_only_updates(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    assert await store.update_message(user_message("edited", id="u1")) is True
    assert await store.update_message(user_message("new", id="u2")) is False
    assert [m.text for m in await store.load_messages()] == ["edited"]
    assert await store.get_message("u2") is None


async def test_get_message_finds_messages_off_the_active_path(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("first", id="a1"))
    await store.append_message(assistant("second", id="a2"), parent_id="u1")
    found = await store.get_message("a1")
    assert found is not None
    assert found.text == "first"


async def test_clear_removes_all_messages_but_keeps_kv(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.append_message(assistant("hello", id="a1"))
    await store.set_kv("k", 1)
    await store.clear_messages()
    assert await store.load_messages() == []
    assert await store.list_messages() == []
    assert await store.get_message("u1") is None
    assert await store.get_kv("k") == 1
    # A cleared id can be written again, and starts a fresh root.
    assert await store.append_message(user_message("again", id="u1")) is True
    assert ids(await store.load_messages()) == ["u1"]


async def test_kv_round_trip_overwrite_and_delete(store: AnyStore) -> None:
    assert await store.get_kv("missing") is None
    value = {"n": 3, "f": 1.5, "s": "x", "b": b"\x00\xff", "l": [1, None, True], "nested": {"k": [{}]}}
    await store.set_kv("state", value)
    assert await store.get_kv("state") == value
    await store.set_kv("state", [1, 2])
    assert await store.get_kv("state") == [1, 2]
    await store.set_kv("state", None)
    assert await store.get_kv("state") is None
    await store.set_kv("never-set", None)
    assert await store.get_kv("never-set") is None


async def test_kv_stores_a_copy(store: AnyStore) -> None:
    value = {"items": [1]}
    await store.set_kv("k", value)
    value["items"].append(2)
    assert await store.get_kv("k") == {"items": [1]}


async def test_kv_rejects_unencodable_value(store: AnyStore) -> None:
    with pytest.raises(StoreError):
        await store.set_kv("k", object())
    assert await store.get_kv("k") is None


async def test_rich_messages_round_trip_exactly(store: AnyStore) -> None:
    user = UIMessage(
        id="u1", role="user", parts=(TextPart(text="weather in Paris?"),), metadata={"client": {"tz": None}}
    )
    reply = UIMessage(
        id="a1",
        role="assistant",
        created_at=1_700_000_000.123456,
        metadata={"model": "gpt", "usage": {"input": 12, "output": 7}, "tags": ["a", "b"]},
        parts=(
            StepStartPart(),
            ReasoningPart(text="look it up", state="done", provider_metadata={"sig": "abc"}),
            ToolPart(
                type="tool-weather",
                tool_call_id="call-1",
                state="output-available",
                input={"city": "Paris", "units": None, "days": [1, 2]},
                output={"temp_c": 21.5, "ok": True},
                approval=ToolApproval(id="ap-1", approved=True, reason="safe"),
                provider_executed=False,
            ),
            ToolPart(
                type="dynamic-tool",
                tool_name="lookup",
                tool_call_id="call-2",
                state="output-error",
                input="raw",
                error_text="boom",
            ),
            DataPart(type="data-progress", id="p1", data={"pct": 100}),
            TextPart(text="21.5°C ✓", state="done"),
        ),
    )
    await store.append_message(user)
    await store.append_message(reply)
    assert [m.model_dump() for m in await store.load_messages()] == [user.model_dump(), reply.model_dump()]
    fetched = await store.get_message("a1")
    assert fetched == reply


async def test_many_appends_then_load(store: AnyStore) -> None:
    expected = []
    for i in range(2000):
        message = user_message(f"m{i}", id=f"m{i}") if i % 2 == 0 else assistant(f"m{i}", id=f"m{i}")
        assert await store.append_message(message) is True
        expected.append(f"m{i}")
    loaded = await store.load_messages()
    assert ids(loaded) == expected
    assert loaded[-1].text == "m1999"


async def test_closed_store_refuses_use_and_closes_twice(store: AnyStore) -> None:
    await store.close()
    await store.close()
    with pytest.raises(StoreError):
        await store.load_messages()
    with pytest.raises(StoreError):
        await store.set_kv("k", 1)


# --- SQLiteStore only ---------------------------------------------------------------------------------------------


async def test_sqlite_history_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    first = SQLiteStore(path)
    await first.append_message(user_message("hi", id="u1"))
    await first.append_message(assistant("first", id="a1"))
    await first.append_message(assistant("second", id="a2"), parent_id="u1")
    await first.set_kv("cursor", {"step": 4})
    await first.close()

    second = SQLiteStore(path)
    try:
        assert ids(await second.load_messages()) == ["u1", "a2"]
        assert ids(await second.list_messages()) == ["u1", "a1", "a2"]
        assert await second.get_kv("cursor") == {"step": 4}
        await second.append_message(user_message("back", id="u2"))
        assert ids(await second.load_messages()) == ["u1", "a2", "u2"]
    finally:
        await second.close()


async def test_sqlite_file_layout_and_pragmas(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    store = SQLiteStore(path)
    await store.append_message(user_message("hi", id="u1"))
    await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT seq, id, parent_id, role FROM messages").fetchall() == [(1, "u1", None, "user")]
    finally:
        conn.close()


async def test_sqlite_refuses_newer_schema(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="schema version"):
        await store.load_messages()
    await store.close()


async def test_sqlite_wraps_open_errors(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "no-such-dir" / "agent.db")
    with pytest.raises(StoreError, match="open failed"):
        await store.load_messages()
    await store.close()


async def test_sqlite_refuses_a_directory_and_names_for_agent(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path)
    with pytest.raises(StoreError) as raised:
        await store.load_messages()
    assert raised.value.message == (
        f"SQLite store path {tmp_path} is a directory; SQLiteStore takes a database file path. "
        "To keep one file per agent under a data directory, use SQLiteStore.for_agent(data_dir, agent_path)."
    )
    assert raised.value.retryable is False
    await store.close()


async def test_sqlite_two_stores_on_one_file_see_each_other(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    writer, reader = SQLiteStore(path), SQLiteStore(path)
    try:
        await writer.append_message(user_message("hi", id="u1"))
        await reader.append_message(assistant("hello", id="a1"))
        assert ids(await writer.load_messages()) == ["u1", "a1"]
    finally:
        await writer.close()
        await reader.close()


@pytest.mark.parametrize("bad", ["../x", "a/../b", "", "/abs", "a//b", "a/", "..", ".hidden", "a/b\\c", "a/./b"])
def test_for_agent_rejects_unsafe_paths(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidAgentNameError):
        SQLiteStore.for_agent(tmp_path / "data", bad)
    assert not (tmp_path / "data").exists()


async def test_for_agent_builds_nested_paths(tmp_path: Path) -> None:
    store = SQLiteStore.for_agent(tmp_path, "lead/team-1/researcher")
    assert Path(store.path) == tmp_path / "lead" / "team-1" / "researcher.db"
    await store.append_message(user_message("hi", id="u1"))
    await store.close()
    assert (tmp_path / "lead" / "team-1" / "researcher.db").is_file()

    top = SQLiteStore.for_agent(str(tmp_path), "lead")
    assert Path(top.path) == tmp_path / "lead.db"
    await top.close()
