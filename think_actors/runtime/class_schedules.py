"""An agent class's schedules, registered from the driver when one of its agents becomes addressable.

``provision`` makes an agent addressable without starting it, so the agent's own start (``AgentHost`` calls
``sync_schedules``) may never come: the driver writes the agent's class rows into the schedule store the agent
and the cluster's scheduler use, and the scheduler fires them without the agent ever having been resident.
``spawn`` records the class's declaration the same way (its actor's start writes the agent's rows, as before), so
a deployment whose class dropped a schedule is known to the scheduler before any of its old agents wakes.

Cheap for bulk provisioning: a class with schedules writes the agent's rows, built once per declaration, in one
transaction that leaves an unchanged declaration's rows as they are (idempotent: provisioning an agent again
changes nothing); a class without schedules writes no row. Provisioning writes the class's declaration once per
process and store, every spawn writes it again: the latest registration wins. The store is
used from one thread of this process with its own event loop, because ``provision`` is synchronous and may be
called from inside the caller's running loop; it blocks its caller for the write, as the registry's write does.
``ta.shutdown`` closes the thread, its stores and pools.
"""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import replace
from typing import Any

from ..agent import Think
from ..schedule.store import ScheduleStore, open_schedule_store
from ..schedule.tasks import ClassDeclaration, TaskRecord
from .config import RuntimeConfig, at_shutdown

__all__ = ["close", "declare_class", "register_agent", "schedule_store_location"]


def schedule_store_location(
    agent_class: type[Think], options: dict[str, Any], config: RuntimeConfig
) -> tuple[str | None, str | None]:
    """``(store_url, data_dir)`` of the agent's schedule store, as its actor resolves them (``_spawn_path`` fills
    in the cluster's ``data_dir`` and store URL, the constructor lets a ``store=`` URL win over the class's)."""
    store = options.get("store", config.store_url or None)
    store_url = store if isinstance(store, str) else agent_class.store_url
    data_dir = options.get("data_dir", config.data_dir) or agent_class.data_dir
    return store_url, data_dir


Location = tuple[str | None, str | None]  # (store_url, data_dir) of a schedule store


class _Rows:
    """The class rows of one declaration for any agent: built once, and again only when an occurrence they name
    has passed (an interval's rows start at each registration; a wall-clock row's next time is everyone's)."""

    def __init__(self, declaration: ClassDeclaration) -> None:
        self.declaration = declaration
        self._built_at = math.inf
        self._templates: list[TaskRecord] = []

    def for_agent(self, path: str, now: float) -> list[TaskRecord]:
        stale = now < self._built_at or any(
            t.kind != "interval" and (t.next_at is None or t.next_at <= now) for t in self._templates
        )
        if stale:
            self._templates, self._built_at = self.declaration.records("", now), now
        return [
            replace(
                t,
                agent_path=path,
                anchor=now,
                created_at=now,
                next_at=now + (t.next_at - t.anchor) if t.kind == "interval" and t.next_at is not None else t.next_at,
            )
            for t in self._templates
        ]


class _Registrar:
    """This process's thread that writes class schedules, its event loop, and what it has written."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._stores: dict[Location, ScheduleStore] = {}
        self._declared: set[tuple[Location, str, str]] = set()
        self._rows: dict[str, _Rows] = {}
        self._thread = threading.Thread(target=self._loop.run_forever, name="think-actors-schedules", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Close the stores and this loop's PostgreSQL pools, then stop the thread."""

        async def closing() -> None:
            for store in self._stores.values():
                await store.close()
            # The pools are per loop; the module is loaded only where PostgreSQL was used (it brings asyncpg).
            schema = sys.modules.get("think_actors.store._schema")
            if schema is not None:
                await schema.close_pools()

        try:
            self.run(closing()).result(timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            if not self._thread.is_alive():
                self._loop.close()

    def run(self, work: Coroutine[Any, Any, None]) -> Future[None]:
        return asyncio.run_coroutine_threadsafe(work, self._loop)

    def declared(self, location: Location, declaration: ClassDeclaration) -> bool:
        """Whether this process has recorded ``declaration`` in that store."""
        return (location, declaration.agent_class, declaration.body()) in self._declared

    def _store(self, location: Location) -> ScheduleStore:
        store = self._stores.get(location)
        if store is None:
            store = self._stores[location] = open_schedule_store(*location)
        return store

    async def declare(self, location: Location, declaration: ClassDeclaration) -> None:
        await self._store(location).declare_class(declaration)
        self._declared.add((location, declaration.agent_class, declaration.body()))

    async def register(self, location: Location, declaration: ClassDeclaration, path: str) -> None:
        if declaration.tasks:
            rows = self._rows.get(declaration.body())
            if rows is None:
                rows = self._rows[declaration.body()] = _Rows(declaration)
            await self._store(location).sync_class_tasks(path, rows.for_agent(path, time.time()))
        if not self.declared(location, declaration):
            await self.declare(location, declaration)


_registrar: _Registrar | None = None
_lock = threading.Lock()


def _current() -> _Registrar:
    global _registrar
    with _lock:
        if _registrar is None:
            _registrar = _Registrar()
            at_shutdown(close)
        return _registrar


def close() -> None:
    """Close this process's writer of class schedules (``ta.shutdown`` calls it; the next registration opens
    another)."""
    global _registrar
    with _lock:
        registrar, _registrar = _registrar, None
    if registrar is not None:
        registrar.close()


def _declaration(agent_class: type[Think]) -> ClassDeclaration:
    return ClassDeclaration.of(agent_class.__name__, agent_class.schedules, agent_class.default_timezone)


def register_agent(agent_class: type[Think], path: str, options: dict[str, Any], config: RuntimeConfig) -> None:
    """Write the agent's class rows (when its class declares schedules) and the class's declaration; blocks
    until they are in the store. ConfigurationError for a bad ``schedules``; StoreError when the store fails."""
    declaration = _declaration(agent_class)  # a bad declaration fails here, in the caller's thread
    registrar = _current()
    location = schedule_store_location(agent_class, options, config)
    if declaration.tasks or not registrar.declared(location, declaration):
        registrar.run(registrar.register(location, declaration, path)).result()


async def declare_class(agent_class: type[Think], options: dict[str, Any], config: RuntimeConfig) -> None:
    """Record the class's declaration in the agent's schedule store, as the latest."""
    declaration = _declaration(agent_class)
    registrar = _current()
    location = schedule_store_location(agent_class, options, config)
    await asyncio.wrap_future(registrar.run(registrar.declare(location, declaration)))
