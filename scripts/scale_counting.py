"""Counters for scripts/scale_model.py: what one turn, wake or scheduled fire asks of each component.

Everything here wraps the package from outside; nothing in ``think_actors`` changes:

- ``CountingStore`` wraps an agent's store and counts each coroutine call by name, with the bytes a write hands
  the store (messages, chunks, records and values as the stores encode them: msgpack).
- ``CountedAgent`` is a Think class whose store is wrapped so (in process or in its actor), and whose model answers
  every turn the same way, at once or at a provider's pace (``paced_s`` between tokens).
- ``install_process_counters()`` patches, in the process that calls it: the agent registry's GCS key-value calls and
  its functions, ``ray.get_actor``, actor creations and actor method calls, the Ray items and channel frames an
  agent's stream sends, SQLite statements (a trace callback on each store's connection) and asyncpg statements
  (one per client call: each is a round trip to the server).

Counts go to an in-memory ``Counter`` of this process and, when ``$SCALE_COUNTS_DIR`` is set (the driver sets it
before ``ta.init``; local Ray's workers inherit it), one line per event to ``<dir>/<pid>.jsonl``, so the driver can
add up what every process of a local Ray did. A Ray worker imports this module when it unpickles ``CountedAgent``
(the agent's class travels by module name), and the import installs the counters there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import json
import os
import threading
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgpack

import think_actors as ta
from think_actors.messages import UIMessage
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage
from think_actors.store._codec import chunk_batch, encode_message, pack

COUNTS_ENV = "SCALE_COUNTS_DIR"
TOKENS = 20  # text deltas per answer
TOKEN = "abcd"

_counts: Counter[str] = Counter()
_lock = threading.Lock()
_file: Any = None


def record(key: str, n: int = 1) -> None:
    """Count ``n`` of ``key`` (``kind:name``) in this process, and in its file when ``$SCALE_COUNTS_DIR`` is set."""
    global _file
    with _lock:
        _counts[key] += n
        directory = os.environ.get(COUNTS_ENV)
        if directory:
            if _file is None:
                _file = open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a", buffering=1)  # noqa: SIM115
            _file.write(json.dumps([key, n]) + "\n")


def snapshot() -> Counter[str]:
    """This process's counts so far."""
    with _lock:
        return Counter(_counts)


def read_all(directory: str) -> Counter[str]:
    """Every process's counts so far, from the files under ``directory``."""
    total: Counter[str] = Counter()
    for name in os.listdir(directory):
        if name.endswith(".jsonl"):
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    if line.endswith("\n"):  # a line still being written is read next time
                        key, n = json.loads(line)
                        total[key] += n
    return total


def record_pid(kind: str) -> None:
    record(f"{kind}:{os.getpid()}")


# -- the store ------------------------------------------------------------------------------------------------------

WRITES = frozenset(
    {
        "append_message",
        "upsert_message",
        "update_message",
        "clear_messages",
        "set_kv",
        "insert_submission",
        "update_submission",
        "delete_submission",
        "put_turn",
        "delete_turn",
        "append_chunks",
        "begin_turn",
        "end_turn",
        "start_effect",
        "finish_effect",
        "clear_turn_state",
    }
)


def payload_bytes(value: Any) -> int:
    """The bytes of a write's payload as the stores encode it (msgpack); keys and SQL are not counted."""
    if isinstance(value, UIMessage):
        return len(encode_message(value))
    if isinstance(value, bytes | str):
        return len(value)
    if isinstance(value, dict):
        return len(pack(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return len(msgpack.packb(dataclasses.asdict(value), default=str))
    if isinstance(value, Sequence):
        if value and all(isinstance(v, dict) for v in value):
            return len(chunk_batch(list(value)))  # a batch of chunks: one row
        return sum(payload_bytes(v) for v in value)
    if value is None or isinstance(value, bool | int | float):
        return 0
    return len(pack(value))


class CountingStore:
    """Wraps a Store: counts every coroutine call (``store:<method>``) and the bytes each write is handed
    (``store_bytes:<method>``); everything else is the wrapped store's."""

    def __init__(self, inner: Any, prefix: str = "store") -> None:
        self._inner = inner
        self._prefix = prefix
        _trace_sqlite(inner)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        async def counted(*args: Any, **kwargs: Any) -> Any:
            record(f"{self._prefix}:{name}")
            if name in WRITES:
                size = sum(payload_bytes(a) for a in args) + sum(payload_bytes(v) for v in kwargs.values())
                record(f"{self._prefix}_bytes:{name}", size)
            return await attr(*args, **kwargs)

        return counted


def _trace_sqlite(store: Any) -> None:
    """Count the SQL statements a SQLiteStore runs once open (``sql:sqlite``): each ``execute`` on its connection.
    Opening (pragmas, migration check, the lease claim) is not counted."""
    from think_actors.store.sqlite import SQLiteStore

    if not isinstance(store, SQLiteStore):
        return
    connect = store._connect

    def counted_connect() -> Any:
        conn: Any = connect()
        if not isinstance(conn, _CountingConnection):
            conn = _CountingConnection(conn)
            setattr(store, "_conn", conn)  # noqa: B010 (the store's own type says sqlite3.Connection)
        return conn

    store._connect = counted_connect  # type: ignore[method-assign]


class _CountingConnection:
    """A sqlite3 connection whose ``execute`` calls are counted; the rest is the connection's."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, *args: Any) -> Any:
        record("sql:sqlite")
        return self._conn.execute(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


# -- the agent ------------------------------------------------------------------------------------------------------


class SteadyModel:
    """Answers every request with ``TOKENS`` text deltas, at once or ``paced_s`` apart (a provider's pace); no script
    position, so any number of turns and any restarted actor get the same answer."""

    model_id = "steady"

    def __init__(self, paced_s: float = 0.0) -> None:
        self.paced_s = paced_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        for _ in range(TOKENS):
            if self.paced_s:
                await asyncio.sleep(self.paced_s)
            yield TextDelta(TOKEN)
        yield FinishEvent("stop", Usage(input_tokens=10, output_tokens=TOKENS))


class CountedAgent(ta.Think):
    """An agent whose store is counted (``CountingStore``) and whose construction is counted per process."""

    model = SteadyModel()
    metrics = False

    def __init__(self, name: str, *, paced_s: float = 0.0, **options: Any) -> None:
        super().__init__(name, **options)
        if paced_s:
            self.model = SteadyModel(paced_s)
        self._engine._store = CountingStore(self._engine.store)
        record_pid("agent_built")


class NappingAgent(CountedAgent):
    """A ``CountedAgent`` that hibernates one second after its last call."""

    idle_timeout_s = 1.0


class ScheduledAgent(CountedAgent):
    """A ``CountedAgent`` with one class schedule: a prompt every hour."""

    schedules = [ta.every("every 1 hours", "hourly check")]


# -- the process's other components ---------------------------------------------------------------------------------

_installed = False


class _CountingKV:
    """Stands in for ``ray.experimental.internal_kv`` inside ``think_actors.registry`` only: each GCS key-value call
    of the registry is counted (``gcs_kv:<op>``, ``gcs_kv_bytes:put``)."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def _internal_kv_put(self, key: bytes, value: bytes, *args: Any, **kwargs: Any) -> Any:
        record("gcs_kv:put")
        record("gcs_kv_bytes:put", len(key) + len(value))
        return self._real._internal_kv_put(key, value, *args, **kwargs)

    def _internal_kv_get(self, *args: Any, **kwargs: Any) -> Any:
        record("gcs_kv:get")
        return self._real._internal_kv_get(*args, **kwargs)

    def _internal_kv_exists(self, *args: Any, **kwargs: Any) -> Any:
        record("gcs_kv:exists")
        return self._real._internal_kv_exists(*args, **kwargs)

    def _internal_kv_list(self, *args: Any, **kwargs: Any) -> Any:
        record("gcs_kv:list")
        return self._real._internal_kv_list(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _wrap_function(module: Any, name: str, key: str) -> None:
    original = getattr(module, name)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        record(key)
        return original(*args, **kwargs)

    setattr(module, name, counted)


def install_process_counters() -> None:
    """Install this module's counters in this process (once): registry, Ray and PostgreSQL statements."""
    global _installed
    if _installed:
        return
    _installed = True
    import importlib

    import ray
    import ray.actor

    from think_actors.runtime import channel

    registry: Any = importlib.import_module("think_actors.registry")
    host: Any = importlib.import_module("think_actors.runtime.host")
    spawn: Any = importlib.import_module("think_actors.runtime.spawn")

    registry.internal_kv = _CountingKV(registry.internal_kv)
    for name in ("record_resident", "record_provisioned", "mark_hibernated", "lookup", "spawn_args", "list_records"):
        _wrap_function(registry, name, f"registry:{name}")
    _wrap_function(ray, "get_actor", "ray:get_actor")
    # What spawn and provision write to the schedule store: the class's declaration, the agent's class rows.
    _wrap_function(spawn, "register_agent", "schedule_store:register_agent")
    declare = spawn.declare_class

    @functools.wraps(declare)
    async def counted_declare(*args: Any, **kwargs: Any) -> Any:
        record("schedule_store:declare_class")
        return await declare(*args, **kwargs)

    spawn.declare_class = counted_declare

    method_remote = ray.actor.ActorMethod._remote

    @functools.wraps(method_remote)
    def actor_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        record(f"actor_call:{self._method_name}")
        return method_remote(self, *args, **kwargs)

    ray.actor.ActorMethod._remote = actor_call  # type: ignore[method-assign]

    class_remote = ray.actor.ActorClass._remote

    @functools.wraps(class_remote)
    def actor_create(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = self.__ray_metadata__.class_name if hasattr(self, "__ray_metadata__") else "?"
        record(f"actor_create:{name}")
        return class_remote(self, *args, **kwargs)

    ray.actor.ActorClass._remote = actor_create  # type: ignore[method-assign]

    deliver = host.deliver

    async def counted_deliver(*args: Any, **kwargs: Any) -> AsyncIterator[bytes]:
        async for item in deliver(*args, **kwargs):
            record("stream:ray_item")
            yield item

    host.deliver = counted_deliver

    write = channel._Connection.write  # every frame is one write (``send`` writes, then waits for a slow reader)

    def counted_write(self: Any, stream: int, frame: bytes) -> None:
        record("stream:channel_frame")
        write(self, stream, frame)

    channel._Connection.write = counted_write  # type: ignore[method-assign]
    install_postgres_counter()


def install_postgres_counter() -> None:
    """Count asyncpg's client calls (``sql:postgres``): each is one round trip to the server (a transaction's BEGIN
    and COMMIT are calls of their own)."""
    try:
        import asyncpg.connection
    except ImportError:
        return
    cls = asyncpg.connection.Connection
    if getattr(cls, "_scale_counted", False):
        return
    for name in ("execute", "executemany", "fetch", "fetchrow", "fetchval"):
        original = getattr(cls, name)

        def make(original: Any) -> Any:
            @functools.wraps(original)
            async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
                record("sql:postgres")
                return await original(self, *args, **kwargs)

            return counted

        setattr(cls, name, make(original))
    cls._scale_counted = True


if os.environ.get(COUNTS_ENV):  # a Ray worker importing the agent's class: count here too
    install_process_counters()
