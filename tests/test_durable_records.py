"""The durable records beside the messages (submissions, turn records, chunk log, effect ledger), run against
every store, plus what only SQLiteStore has: the schema, migration from version 1, and two connections racing
on one file."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgpack
import pytest

from think_actors.errors import ConfigurationError, StoreError, StoreFencedError
from think_actors.messages import TextPart, UIMessage, user_message
from think_actors.schedule.sqlite import SQLiteScheduleStore
from think_actors.store import (
    EffectRecord,
    MemoryStore,
    PostgresStore,
    SQLiteStore,
    Store,
    SubmissionRecord,
    TurnRecord,
)
from think_actors.store.sqlite import SCHEMA_VERSION

AnyStore = MemoryStore | SQLiteStore | PostgresStore
# The `store` fixture (conftest) runs each contract test against every kind in helpers.STORE_KINDS.


def submission(
    sid: str,
    *,
    key: str | None = None,
    created_at: float = 100.0,
    status: str = "pending",
    text: str = "hi",
    **fields: Any,
) -> SubmissionRecord:
    return SubmissionRecord(
        submission_id=sid,
        request_id=sid,
        status=status,
        # A fixed created_at: records built twice compare equal.
        messages=[UIMessage(id=f"{sid}-m", role="user", parts=(TextPart(text=text),), created_at=1.0)],
        created_at=created_at,
        idempotency_key=key,
        **fields,
    )


def turn(request_id: str, *, started_at: float = 10.0, status: str = "running", **fields: Any) -> TurnRecord:
    return TurnRecord(
        request_id=request_id, trigger="chat", status=status, started_at=started_at, updated_at=started_at, **fields
    )


def effect(call: str, *, request_id: str = "r1", started_at: float = 20.0, **fields: Any) -> EffectRecord:
    return EffectRecord(
        key=f"lead/{request_id}/{call}",
        request_id=request_id,
        tool_call_id=call,
        tool_name="search",
        status="started",
        started_at=started_at,
        **fields,
    )


async def submission_ids(store: AnyStore, **options: Any) -> list[str]:
    return [r.submission_id for r in await store.list_submissions(**options)]


async def test_store_satisfies_protocol(store: AnyStore) -> None:
    assert isinstance(store, Store)


# --- submissions --------------------------------------------------------------------------------------------------


async def test_insert_submission_assigns_seq_and_round_trips(store: AnyStore) -> None:
    record = SubmissionRecord(
        submission_id="s1",
        request_id="s1",
        status="pending",
        messages=[
            UIMessage(id="m1", role="user", parts=(TextPart(text="one"),), metadata={"channel": "api"}),
            user_message("two", id="m2"),
        ],
        created_at=100,
        idempotency_key="k1",
        metadata={"source": "cron", "tags": ["a", "b"], "n": None},
        error=None,
        started_at=None,
        completed_at=None,
        messages_applied_at=None,
        traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    )
    stored, created = await store.insert_submission(record)
    expected = dataclasses.replace(record, created_at=100.0, seq=1)
    assert (stored, created) == (expected, True)
    assert type(stored.created_at) is float  # SQLite's REAL, in both stores
    assert record.seq == 0  # the caller's record is not touched
    assert await store.get_submission("s1") == expected
    assert await store.get_submission("nope") is None


async def test_submissions_without_a_key_never_collide(store: AnyStore) -> None:
    results = [await store.insert_submission(submission(f"s{i}")) for i in range(3)]
    assert [(r.submission_id, r.seq, created) for r, created in results] == [
        ("s0", 1, True),
        ("s1", 2, True),
        ("s2", 3, True),
    ]


async def test_retry_returns_the_existing_row_without_comparing_payload(store: AnyStore) -> None:
    first, _ = await store.insert_submission(submission("s1", key="k1", text="original"))
    keyless, _ = await store.insert_submission(submission("s2", text="keyless"))
    retries = [
        submission("s1", key="k1", text="changed", metadata={"x": 1}),  # same id and key
        submission("s1", text="changed"),  # the id alone
        submission("s2", key="k2", text="changed"),  # the id of a row without a key, with a key
    ]
    assert [await store.insert_submission(r) for r in retries] == [(first, False), (first, False), (keyless, False)]
    # The keyless row did not take the key it was retried with.
    assert await store.insert_submission(submission("s3", key="k2")) == (submission("s3", key="k2", seq=3), True)
    assert await submission_ids(store) == ["s1", "s2", "s3"]


@pytest.mark.parametrize(
    ("attempt", "detail"),
    [
        (submission("s9", key="k1"), "key 'k1' belongs to submission 's1', not 's9'"),
        (submission("s1", key="k2"), "key 'k2' belongs to submission 's2', not 's1'"),
        (submission("s1", key="k9"), "submission 's1' has key 'k1', not 'k9'"),
    ],
    ids=["key-row-has-another-id", "id-and-key-name-two-rows", "id-row-has-another-key"],
)
async def test_conflicting_id_and_key_raise(store: AnyStore, attempt: SubmissionRecord, detail: str) -> None:
    await store.insert_submission(submission("s1", key="k1"))
    await store.insert_submission(submission("s2", key="k2"))
    with pytest.raises(ConfigurationError) as raised:
        await store.insert_submission(attempt)
    assert raised.value.message == f"submission_id and idempotency_key refer to different submissions: {detail}"
    assert await submission_ids(store) == ["s1", "s2"]


@pytest.mark.parametrize(
    "bad",
    [{"metadata": {"x": object()}}, {"created_at": None}, {"status": 5}, {"messages": ["not a message"]}],
    ids=["unencodable-metadata", "missing-created-at", "non-str-status", "non-message"],
)
async def test_unstorable_submission_writes_nothing(store: AnyStore, bad: dict[str, Any]) -> None:
    with pytest.raises(StoreError):
        await store.insert_submission(dataclasses.replace(submission("s1", key="k1"), **bad))
    assert await store.list_submissions() == []
    # Neither the id, the key nor a seq was used up.
    stored, created = await store.insert_submission(submission("s1", key="k1"))
    assert (stored.seq, created) == (1, True)


async def test_concurrent_inserts_with_one_key_make_one_row(store: AnyStore) -> None:
    results = await asyncio.gather(*(store.insert_submission(submission("s1", key="k1")) for _ in range(50)))
    assert sorted(created for _, created in results) == [False] * 49 + [True]
    assert {(r.submission_id, r.seq) for r, _ in results} == {("s1", 1)}
    assert await submission_ids(store) == ["s1"]


async def test_update_submission_is_conditional_on_status(store: AnyStore) -> None:
    await store.insert_submission(submission("s1"))
    assert await store.update_submission("s1", expect_status=("running",), status="completed") is False
    assert await store.update_submission("s1", expect_status=["pending"], status="running", started_at=7) is True
    assert await store.update_submission("s1", expect_status="running", messages_applied_at=8.0) is True
    assert await store.update_submission("s1", expect_status=(), status="error") is False
    assert await store.update_submission("ghost", status="error") is False
    assert await store.update_submission("s1", status="completed", error="late", completed_at=9.5) is True
    assert await store.update_submission("s1", started_at=None) is True
    assert await store.get_submission("s1") == submission(
        "s1", status="completed", error="late", completed_at=9.5, messages_applied_at=8.0, seq=1
    )


async def test_update_submission_without_fields_reports_whether_it_matches(store: AnyStore) -> None:
    await store.insert_submission(submission("s1"))
    assert await store.update_submission("s1", expect_status=("pending",)) is True
    assert await store.update_submission("s1", expect_status=("running",)) is False
    assert await store.update_submission("ghost") is False


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bogus": 1}, "update_submission cannot set 'bogus': SubmissionRecord has no such field"),
        ({"status": "running", "seq": 5}, "update_submission cannot set 'seq': the store assigns it"),
    ],
)
async def test_update_submission_refuses_fields_it_cannot_set(
    store: AnyStore, fields: dict[str, Any], message: str
) -> None:
    await store.insert_submission(submission("s1"))
    with pytest.raises(ConfigurationError) as raised:
        await store.update_submission("s1", **fields)
    assert raised.value.message == message
    assert await store.get_submission("s1") == submission("s1", seq=1)


async def test_update_submission_with_unstorable_value_changes_nothing(store: AnyStore) -> None:
    await store.insert_submission(submission("s1", metadata={"ok": True}))
    with pytest.raises(StoreError):
        await store.update_submission("s1", status="error", metadata={"bad": object()})
    with pytest.raises(StoreError):
        await store.update_submission("s1", status=None)
    assert await store.get_submission("s1") == submission("s1", metadata={"ok": True}, seq=1)


async def test_update_submission_keeps_idempotency_keys_unique(store: AnyStore) -> None:
    await store.insert_submission(submission("s1", key="k1"))
    await store.insert_submission(submission("s2", key="k2"))
    with pytest.raises(StoreError):
        await store.update_submission("s2", idempotency_key="k1")
    assert await store.update_submission("s2", idempotency_key="k3") is True
    # k2 is free again; k3 now finds s2.
    assert (await store.insert_submission(submission("s4", key="k2")))[1] is True
    assert await store.insert_submission(submission("s2", key="k3")) == (submission("s2", key="k3", seq=2), False)


async def test_list_submissions_orders_filters_then_limits(store: AnyStore) -> None:
    for sid, created_at, status in [
        ("a", 2.0, "pending"),
        ("b", 1.0, "completed"),
        ("c", 2.0, "pending"),
        ("d", 3.0, "pending"),
        ("e", 1.0, "running"),
    ]:
        await store.insert_submission(submission(sid, created_at=created_at, status=status))
    assert await submission_ids(store) == ["b", "e", "a", "c", "d"]
    assert await submission_ids(store, newest_first=True) == ["d", "c", "a", "e", "b"]
    # The filter comes first: the two oldest pending rows, not the pending ones among the two oldest rows.
    assert await submission_ids(store, statuses=["pending"], limit=2) == ["a", "c"]
    assert await submission_ids(store, statuses=("pending", "running"), newest_first=True, limit=3) == ["d", "c", "a"]
    assert await submission_ids(store, statuses="completed") == ["b"]
    assert await submission_ids(store, statuses=[]) == []
    assert await submission_ids(store, limit=0) == []
    with pytest.raises(ConfigurationError):
        await store.list_submissions(limit=-1)


async def test_newest_first_breaks_ties_by_submission_id_descending(store: AnyStore) -> None:
    # Think's listing order: created_at, then submission_id, both descending (not the order rows went in).
    for sid in ("b", "a", "c"):
        await store.insert_submission(submission(sid, created_at=5.0))
    await store.insert_submission(submission("z", created_at=4.0))
    assert await submission_ids(store, newest_first=True) == ["c", "b", "a", "z"]
    assert await submission_ids(store, newest_first=True, limit=2) == ["c", "b"]
    assert await submission_ids(store) == ["z", "b", "a", "c"]  # the drain's FIFO: acceptance order among ties


async def test_delete_submission_frees_its_id_and_key(store: AnyStore) -> None:
    await store.insert_submission(submission("s1", key="k1"))
    await store.insert_submission(submission("s2"))
    assert await store.delete_submission("s1") is True
    assert await store.delete_submission("s1") is False
    assert await store.get_submission("s1") is None
    # seq is never reused, so FIFO order among equal created_at survives deletes.
    assert await store.insert_submission(submission("s3", key="k1")) == (submission("s3", key="k1", seq=3), True)
    assert await submission_ids(store) == ["s2", "s3"]


# --- turn records and the chunk log -------------------------------------------------------------------------------


async def test_turn_round_trips_every_field(store: AnyStore) -> None:
    record = TurnRecord(
        request_id="r1",
        trigger="submission",
        status="running",
        started_at=10,
        updated_at=11.5,
        continuation=True,
        input_ids=["m1", "m2"],
        message_id="a1",
        attempts=2,
        progress=7,
        submission_id="s1",
        data={"body": {"temperature": 0.2}, "output_type": None, "raw": b"\x00"},
    )
    await store.put_turn(record)
    assert await store.get_turn("r1") == dataclasses.replace(record, started_at=10.0)
    assert await store.get_turn("nope") is None


async def test_put_turn_replaces_and_list_turns_orders_by_start(store: AnyStore) -> None:
    await store.put_turn(turn("late", started_at=30.0))
    await store.put_turn(turn("tie-1", started_at=20.0))
    await store.put_turn(turn("tie-2", started_at=20.0, status="recovering"))
    await store.put_turn(turn("early", started_at=5.0))
    # A replaced record keeps its place among equal started_at.
    await store.put_turn(turn("tie-1", started_at=20.0, attempts=1))
    assert [t.request_id for t in await store.list_turns()] == ["early", "tie-1", "tie-2", "late"]
    assert await store.get_turn("tie-1") == turn("tie-1", started_at=20.0, attempts=1)
    assert [t.request_id for t in await store.list_turns(statuses=["recovering"])] == ["tie-2"]
    assert await store.list_turns(statuses=[]) == []


async def test_unstorable_turn_writes_nothing(store: AnyStore) -> None:
    await store.put_turn(turn("r1"))
    with pytest.raises(StoreError):
        await store.put_turn(turn("r1", data={"x": object()}))
    with pytest.raises(StoreError):
        await store.put_turn(turn("r2", input_ids="m1"))
    assert await store.list_turns() == [turn("r1")]


async def test_chunk_log_appends_batches_in_order(store: AnyStore) -> None:
    assert await store.load_chunks("r1") == []
    await store.append_chunks("r1", [{"type": "start"}, {"type": "text-start", "id": "t1"}])
    await store.append_chunks("r2", [{"type": "start"}])
    await store.append_chunks("r1", [])
    await store.append_chunks("r1", [{"type": "text-delta", "id": "t1", "delta": "hé"}, {"type": "finish"}])
    assert await store.load_chunks("r1") == [
        {"type": "start"},
        {"type": "text-start", "id": "t1"},
        {"type": "text-delta", "id": "t1", "delta": "hé"},
        {"type": "finish"},
    ]
    assert await store.load_chunks("r2") == [{"type": "start"}]


async def test_chunk_batch_with_an_unstorable_chunk_appends_none_of_it(store: AnyStore) -> None:
    await store.append_chunks("r1", [{"type": "start"}])
    with pytest.raises(StoreError):
        await store.append_chunks("r1", [{"type": "text-delta", "delta": "a"}, {"type": "data-x", "data": object()}])
    assert await store.load_chunks("r1") == [{"type": "start"}]


async def test_delete_turn_removes_its_chunk_log_and_effects_only(store: AnyStore) -> None:
    await store.put_turn(turn("r1"))
    await store.put_turn(turn("r2"))
    await store.append_chunks("r1", [{"type": "start"}])
    await store.append_chunks("r2", [{"type": "start"}, {"type": "finish"}])
    await store.start_effect(effect("c1", request_id="r1"))
    await store.delete_turn("r1")
    await store.delete_turn("never-there")
    assert [t.request_id for t in await store.list_turns()] == ["r2"]
    assert await store.load_chunks("r1") == []
    assert await store.load_chunks("r2") == [{"type": "start"}, {"type": "finish"}]
    assert await store.list_effects("r1") == []
    # A new log for the same request starts empty.
    await store.append_chunks("r1", [{"type": "finish"}])
    assert await store.load_chunks("r1") == [{"type": "finish"}]


async def test_begin_turn_puts_the_record_and_appends_the_input_under_the_latest_leaf(store: AnyStore) -> None:
    await store.append_message(user_message("earlier", id="m0"))
    first, second = user_message("one", id="m1"), user_message("two", id="m2")
    appended = await store.begin_turn(turn("r1"), [first, user_message("x", id="m0"), second])
    assert appended == [True, False, True]
    assert [t.request_id for t in await store.list_turns()] == ["r1"]
    # The existing id is left alone (False), the new ones chain under the latest leaf, in order.
    assert await store.begin_turn(turn("r2"), [user_message("x", id="m0")]) == [False]
    assert [m.id for m in await store.load_messages()] == ["m0", "m1", "m2"]
    assert await store.begin_turn(turn("r3"), []) == []
    assert [t.request_id for t in await store.list_turns()] == ["r1", "r2", "r3"]


async def test_begin_turn_with_an_unstorable_part_writes_nothing(store: AnyStore) -> None:
    bad = UIMessage(id="m2", role="user", parts=(TextPart(text="b"),), metadata={"x": 2**70})  # too big for msgpack
    with pytest.raises(StoreError):
        await store.begin_turn(turn("r1"), [user_message("a", id="m1"), bad])
    with pytest.raises(StoreError):
        await store.begin_turn(turn("r1", data={"x": object()}), [user_message("a", id="m1")])
    assert await store.list_turns() == []
    assert await store.load_messages() == []


async def test_end_turn_upserts_the_reply_and_removes_the_turn_state(store: AnyStore) -> None:
    await store.begin_turn(turn("r1"), [user_message("q", id="m1")])
    await store.put_turn(turn("r2"))
    await store.append_chunks("r1", [{"type": "start"}])
    await store.start_effect(effect("c1", request_id="r1"))
    reply = UIMessage(id="a1", role="assistant", parts=(TextPart(text="answer"),))
    await store.end_turn("r1", reply)
    assert [(m.id, m.text) for m in await store.load_messages()] == [("m1", "q"), ("a1", "answer")]
    assert [t.request_id for t in await store.list_turns()] == ["r2"]
    assert await store.load_chunks("r1") == []
    assert await store.list_effects("r1") == []
    # An existing reply is updated in place (the latest leaf stays where it was); no reply only removes the record.
    await store.append_message(user_message("next", id="m2"))
    await store.end_turn("r2", reply.model_copy(update={"parts": (TextPart(text="better"),)}))
    assert [(m.id, m.text) for m in await store.load_messages()] == [("m1", "q"), ("a1", "better"), ("m2", "next")]
    await store.put_turn(turn("r3"))
    await store.end_turn("r3")
    assert await store.list_turns() == []


async def test_end_turn_with_an_unstorable_reply_keeps_the_turn(store: AnyStore) -> None:
    await store.put_turn(turn("r1"))
    bad = UIMessage(
        id="a1", role="assistant", parts=(TextPart(text="b"),), metadata={"x": 2**70}
    )  # too big for msgpack
    with pytest.raises(StoreError):
        await store.end_turn("r1", bad)
    assert [t.request_id for t in await store.list_turns()] == ["r1"]
    assert await store.load_messages() == []


# --- the effect ledger --------------------------------------------------------------------------------------------


async def test_start_effect_keeps_the_first_record(store: AnyStore) -> None:
    first = effect("c1", input={"q": "ray", "n": [1, 2]})
    assert await store.start_effect(first) == first
    # A second start (a replayed turn) gets the stored record, not its own.
    assert await store.start_effect(effect("c1", input={"q": "other"}, started_at=99.0)) == first
    assert await store.get_effect(first.key) == first
    assert await store.get_effect("lead/r1/nope") is None


async def test_finish_effect_records_output_or_error(store: AnyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    await store.start_effect(effect("c1", input={"q": "ray"}))
    await store.start_effect(effect("c2"))
    monkeypatch.setattr(time, "time", lambda: 1234.5)
    await store.finish_effect("lead/r1/c1", output={"hits": ["docs.ray.io"]})
    await store.finish_effect("lead/r1/c2", error="timeout")
    assert await store.list_effects("r1") == [
        dataclasses.replace(
            effect("c1", input={"q": "ray"}), status="finished", output={"hits": ["docs.ray.io"]}, finished_at=1234.5
        ),
        dataclasses.replace(effect("c2"), status="finished", error="timeout", finished_at=1234.5),
    ]


async def test_finish_effect_refuses_unknown_keys_and_unstorable_output(store: AnyStore) -> None:
    with pytest.raises(StoreError) as raised:
        await store.finish_effect("lead/r1/ghost", output=1)
    assert raised.value.message == "cannot finish effect 'lead/r1/ghost': it was never started"
    await store.start_effect(effect("c1"))
    with pytest.raises(StoreError):
        await store.finish_effect("lead/r1/c1", output=object())
    assert await store.get_effect("lead/r1/c1") == effect("c1")


async def test_unstorable_effect_writes_nothing(store: AnyStore) -> None:
    with pytest.raises(StoreError):
        await store.start_effect(effect("c1", input={"file": object()}))
    assert await store.get_effect("lead/r1/c1") is None


async def test_effect_writes_carry_the_chunk_log_in_order(store: AnyStore) -> None:
    # The turn engine logs a call's input with its effect's start and its result with its end: one write each.
    await store.append_chunks("r1", [{"type": "start-step"}])
    call_input = {"type": "tool-input-available", "tool_call_id": "c1", "input": {"q": "ray"}}
    assert await store.start_effect(effect("c1"), chunks=[{"type": "tool-input-start"}, call_input]) == effect("c1")
    # The chunks of a finish go to the log of the effect's own request.
    await store.start_effect(effect("x1", request_id="r2"))
    result = {"type": "tool-output-available", "tool_call_id": "c1", "output": [1, 2]}
    await store.finish_effect("lead/r1/c1", output=[1, 2], chunks=[result])
    await store.finish_effect("lead/r2/x1", output="ok", chunks=[{"type": "data-note", "data": "r2"}])
    assert await store.load_chunks("r1") == [{"type": "start-step"}, {"type": "tool-input-start"}, call_input, result]
    assert await store.load_chunks("r2") == [{"type": "data-note", "data": "r2"}]
    assert [(e.tool_call_id, e.status, e.output) for e in await store.list_effects("r1")] == [
        ("c1", "finished", [1, 2])
    ]
    # An existing effect's start still appends the chunks (a recovered turn's new log) and returns the stored record.
    again = await store.start_effect(effect("c1", started_at=99.0), chunks=[{"type": "start-step"}])
    assert again.status == "finished"
    assert (await store.load_chunks("r1"))[-1] == {"type": "start-step"}


async def test_effect_writes_with_chunks_are_all_or_nothing(store: AnyStore) -> None:
    await store.append_chunks("r1", [{"type": "start-step"}])
    with pytest.raises(StoreError):
        await store.start_effect(effect("c1"), chunks=[{"type": "data-x", "data": object()}])
    assert await store.get_effect("lead/r1/c1") is None
    with pytest.raises(StoreError):  # an unstorable input: the chunks before it are not written either
        await store.start_effect(effect("c1", input={"file": object()}), chunks=[{"type": "tool-input-start"}])
    assert await store.load_chunks("r1") == [{"type": "start-step"}]
    await store.start_effect(effect("c1"))
    with pytest.raises(StoreError):
        await store.finish_effect("lead/r1/c1", output=1, chunks=[{"type": "data-x", "data": object()}])
    with pytest.raises(StoreError) as raised:
        await store.finish_effect("lead/r1/ghost", output=1, chunks=[{"type": "tool-output-available"}])
    assert raised.value.message == "cannot finish effect 'lead/r1/ghost': it was never started"
    assert await store.get_effect("lead/r1/c1") == effect("c1")
    assert await store.load_chunks("r1") == [{"type": "start-step"}]


async def test_list_effects_in_start_order_per_request(store: AnyStore) -> None:
    # started_at runs backwards to show the order is the order of start_effect calls.
    await store.start_effect(effect("c1", started_at=30.0))
    await store.start_effect(effect("x1", request_id="r2"))
    await store.start_effect(effect("c2", started_at=20.0))
    await store.start_effect(effect("c3", started_at=10.0))
    assert [e.tool_call_id for e in await store.list_effects("r1")] == ["c1", "c2", "c3"]
    assert [e.tool_call_id for e in await store.list_effects("r2")] == ["x1"]
    assert await store.list_effects("r3") == []


async def test_clear_turn_state_keeps_submissions_and_messages(store: AnyStore) -> None:
    await store.append_message(user_message("hi", id="u1"))
    await store.set_kv("k", 1)
    await store.insert_submission(submission("s1"))
    await store.put_turn(turn("r1"))
    await store.append_chunks("r1", [{"type": "start"}])
    await store.start_effect(effect("c1"))
    await store.clear_turn_state()
    assert await store.list_turns() == []
    assert await store.load_chunks("r1") == []
    assert await store.list_effects("r1") == []
    assert await store.get_effect("lead/r1/c1") is None
    assert await submission_ids(store) == ["s1"]
    assert [m.id for m in await store.load_messages()] == ["u1"]
    assert await store.get_kv("k") == 1


# --- copies and closing -------------------------------------------------------------------------------------------


async def test_records_are_copies_both_ways(store: AnyStore) -> None:
    sub = submission("s1", metadata={"tags": ["a"]})
    stored, _ = await store.insert_submission(sub)
    sub.metadata["tags"].append("from caller")  # type: ignore[index]
    sub.messages.clear()
    assert stored.metadata is not None
    stored.metadata["tags"].append("from reader")
    stored.messages.clear()
    assert await store.get_submission("s1") == submission("s1", metadata={"tags": ["a"]}, seq=1)

    record = turn("r1", input_ids=["m1"], data={"body": {"k": 1}})
    await store.put_turn(record)
    record.data["body"]["k"] = 2
    record.input_ids.append("m2")
    read = await store.get_turn("r1")
    assert read is not None
    read.data["body"]["k"] = 3
    (await store.list_turns())[0].input_ids.append("m3")
    assert await store.get_turn("r1") == turn("r1", input_ids=["m1"], data={"body": {"k": 1}})

    chunk: dict[str, Any] = {"type": "text-delta", "delta": "a", "meta": {"n": 1}}
    await store.append_chunks("r1", [chunk])
    chunk["meta"]["n"] = 2
    (await store.load_chunks("r1"))[0]["meta"]["n"] = 3
    assert await store.load_chunks("r1") == [{"type": "text-delta", "delta": "a", "meta": {"n": 1}}]

    started = effect("c1", input={"q": ["ray"]})
    returned = await store.start_effect(started)
    started.input["q"].append("caller")
    returned.input["q"].append("reader")
    returned.status = "finished"
    assert await store.get_effect("lead/r1/c1") == effect("c1", input={"q": ["ray"]})


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.insert_submission(submission("s1")),
        lambda s: s.list_submissions(),
        lambda s: s.update_submission("s1", status="error"),
        lambda s: s.put_turn(turn("r1")),
        lambda s: s.begin_turn(turn("r1"), []),
        lambda s: s.end_turn("r1"),
        lambda s: s.append_chunks("r1", []),
        lambda s: s.load_chunks("r1"),
        lambda s: s.start_effect(effect("c1")),
        lambda s: s.list_effects("r1"),
        lambda s: s.clear_turn_state(),
    ],
)
async def test_closed_store_refuses_records(store: AnyStore, call: Callable[[AnyStore], Awaitable[Any]]) -> None:
    await store.close()
    with pytest.raises(StoreError):
        await call(store)


# --- SQLiteStore only ---------------------------------------------------------------------------------------------


async def test_sqlite_records_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    first = SQLiteStore(path)
    await first.insert_submission(submission("s1", key="k1", metadata={"a": 1}))
    await first.put_turn(turn("r1", data={"body": None}))
    await first.append_chunks("r1", [{"type": "start"}, {"type": "finish"}])
    await first.start_effect(effect("c1"))
    await first.close()

    second = SQLiteStore(path)
    try:
        assert await second.list_submissions() == [submission("s1", key="k1", metadata={"a": 1}, seq=1)]
        assert await second.list_turns() == [turn("r1", data={"body": None})]
        assert await second.load_chunks("r1") == [{"type": "start"}, {"type": "finish"}]
        assert await second.list_effects("r1") == [effect("c1")]
    finally:
        await second.close()


async def test_sqlite_schema_tables_and_indexes(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    store = SQLiteStore(path)
    await store.load_messages()
    await store.close()
    conn = sqlite3.connect(path)
    try:
        assert SCHEMA_VERSION == 6
        assert conn.execute("PRAGMA user_version").fetchone() == (6,)
        assert conn.execute("PRAGMA page_size").fetchone() == (1024,)  # a new file's pages
        objects = conn.execute(
            # The message search's index and triggers (schema 5) are test_session_search.py's.
            "SELECT type, name, tbl_name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' "
            "AND name NOT LIKE 'messages_fts%' ORDER BY type, name"
        ).fetchall()
        # chunks and effects hold rows of running turns only: read by scanning, no index to keep on every write.
        assert objects == [
            ("index", "submissions_by_key", "submissions"),
            ("index", "submissions_by_status", "submissions"),
            ("table", "chunks", "chunks"),
            ("table", "effects", "effects"),
            ("table", "kv", "kv"),
            ("table", "lease", "lease"),
            ("table", "messages", "messages"),
            ("table", "submissions", "submissions"),
            ("table", "turns", "turns"),
        ]
        index_columns = {
            name: [row[2] for row in conn.execute(f"PRAGMA index_info({name})")]
            for name in ("submissions_by_key", "submissions_by_status")
        }
        assert index_columns == {
            "submissions_by_key": ["idempotency_key"],
            "submissions_by_status": ["status", "created_at", "seq"],
        }
        unique = {row[1]: row[2] for row in conn.execute("PRAGMA index_list(submissions)")}
        assert (unique["submissions_by_key"], unique["submissions_by_status"]) == (1, 0)
        # A write's chunks are one row: the lone call's effect start carries its input in a single row.
        store = SQLiteStore(path)
        await store.append_chunks("r1", [{"type": "start"}, {"type": "start-step"}])
        await store.start_effect(effect("c1"), chunks=[{"type": "tool-input-available"}])
        await store.append_chunks("r1", [])
        await store.close()
        assert conn.execute("SELECT count(*) FROM chunks").fetchone() == (2,)
    finally:
        conn.close()


async def test_sqlite_migrates_a_version_3_file_its_one_chunk_rows_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    conn = sqlite3.connect(path)  # a file from before 1 KiB pages
    conn.execute("CREATE TABLE kv (key TEXT PRIMARY KEY, value BLOB)")
    conn.close()
    old = SQLiteStore(path)
    await old.put_turn(turn("r1"))
    await old.close()
    conn = sqlite3.connect(path)  # what version 3 wrote: the request indexes, and a row per chunk
    conn.execute("CREATE INDEX chunks_by_request ON chunks (request_id, seq)")
    conn.execute("CREATE INDEX effects_by_request ON effects (request_id, seq)")
    conn.executemany(
        "INSERT INTO chunks (request_id, body) VALUES (?, ?)",
        [("r1", msgpack.packb({"type": "start"})), ("r1", msgpack.packb({"type": "start-step"}))],
    )
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()

    store = SQLiteStore(path)
    try:
        assert await store.load_chunks("r1") == [{"type": "start"}, {"type": "start-step"}]
        await store.append_chunks("r1", [{"type": "text-start", "id": "t"}, {"type": "text-end", "id": "t"}])
        assert await store.load_chunks("r1") == [
            {"type": "start"},
            {"type": "start-step"},
            {"type": "text-start", "id": "t"},
            {"type": "text-end", "id": "t"},
        ]
        await store.delete_turn("r1")
        assert await store.load_chunks("r1") == []
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert conn.execute("SELECT name FROM sqlite_master WHERE name LIKE '%_by_request'").fetchall() == []
        assert conn.execute("PRAGMA page_size").fetchone() == (4096,)  # an existing file keeps its pages
    finally:
        conn.close()


async def test_sqlite_migrates_a_version_1_file_in_place(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    old = SQLiteStore(path)
    await old.append_message(user_message("hi", id="u1"))
    await old.append_message(user_message("again", id="u2"))
    await old.set_kv("cursor", {"step": 4})
    await old.close()
    conn = sqlite3.connect(path)
    for table in ("submissions", "turns", "chunks", "effects", "lease"):
        conn.execute(f"DROP TABLE {table}")
    for trigger in ("messages_fts_insert", "messages_fts_delete", "messages_fts_update"):  # schema 5's search
        conn.execute(f"DROP TRIGGER {trigger}")
    conn.execute("DROP TABLE messages_fts")
    conn.execute("ALTER TABLE messages DROP COLUMN search_text")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").fetchall() == [
        ("kv",),
        ("messages",),
        ("sqlite_sequence",),
    ]
    conn.close()

    store = SQLiteStore(path)
    try:
        assert [m.id for m in await store.load_messages()] == ["u1", "u2"]
        assert await store.get_kv("cursor") == {"step": 4}
        assert await store.insert_submission(submission("s1")) == (submission("s1", seq=1), True)
        await store.append_chunks("r1", [{"type": "start"}])
        assert await store.load_chunks("r1") == [{"type": "start"}]
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        conn.close()


async def test_sqlite_migrates_a_version_5_file_its_submissions_gain_a_traceparent(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    old = SQLiteStore(path)
    await old.insert_submission(submission("s1"))
    await old.close()
    conn = sqlite3.connect(path)  # what version 5 wrote: submissions without the submitter's trace context
    conn.execute("ALTER TABLE submissions DROP COLUMN traceparent")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()

    traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    store = SQLiteStore(path)
    try:
        assert await store.get_submission("s1") == submission("s1", seq=1)  # an older row: no traceparent
        assert await store.insert_submission(submission("s2", traceparent=traced)) == (
            submission("s2", traceparent=traced, seq=2),
            True,
        )
        assert (await store.get_submission("s2")) == submission("s2", traceparent=traced, seq=2)
    finally:
        await store.close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        conn.close()


async def test_sqlite_migrates_a_version_2_file_and_fences_from_then_on(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    old = SQLiteStore(path)
    await old.put_turn(turn("r1"))
    await old.close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE lease")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()

    first, second = SQLiteStore(path), SQLiteStore(path)
    try:
        assert await first.list_turns() == [turn("r1")]
        assert await second.get_turn("r1") == turn("r1")
        assert (first.generation, second.generation) == (1, 2)
        with pytest.raises(StoreFencedError):
            await first.delete_turn("r1")
        await second.delete_turn("r1")
        assert await second.list_turns() == []
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize("kind", ["agent store", "schedule store"])
def test_two_stores_opening_one_new_file_at_the_same_instant_both_open(tmp_path: Path, kind: str) -> None:
    """Switching a new file to WAL returns "database is locked" at once, without SQLite's busy handler, while the
    other opener holds a lock; on the code before ``use_wal`` about half of these pairs failed (CI, stop 26)."""

    async def open_and_close(path: Path) -> None:
        store = SQLiteStore(path) if kind == "agent store" else SQLiteScheduleStore(str(path))
        try:
            await (store.list_turns() if isinstance(store, SQLiteStore) else store.list_tasks("a"))
        finally:
            await store.close()

    def open_at(path: Path, start: threading.Barrier) -> None:
        start.wait()
        asyncio.run(open_and_close(path))

    with ThreadPoolExecutor(2) as pool:
        for i in range(100):
            path, start = tmp_path / f"{i}.db", threading.Barrier(2)
            for future in [pool.submit(open_at, path, start) for _ in range(2)]:
                future.result()
    # Both were opened in WAL mode.
    conn = sqlite3.connect(tmp_path / "99.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_sqlite_two_stores_racing_on_one_file_make_one_row_per_key(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    keys = [f"k{i}" for i in range(200)]
    start = threading.Barrier(2)

    def race(name: str) -> list[bool]:
        async def insert_all() -> list[bool]:
            store = SQLiteStore(path)
            try:
                return [(await store.insert_submission(submission(f"s-{key}", key=key)))[1] for key in keys]
            finally:
                await store.close()

        # Both threads open the new file and insert the same rows at once: the migration races too.
        start.wait()
        return asyncio.run(insert_all())

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(race, ["a", "b"])
    assert [a != b for a, b in zip(first, second, strict=True)] == [True] * len(keys)
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT submission_id, idempotency_key FROM submissions ORDER BY submission_id").fetchall()
    finally:
        conn.close()
    assert rows == sorted((f"s-{key}", key) for key in keys)
