"""The scheduler: finds due occurrences in the store, claims each once, and hands it to its agent.

One pass (``tick``), in this order:

1. Every task whose ``next_at`` has come is claimed for its *latest* due occurrence, and its ``next_at`` moves to
   the first occurrence after now. No backfill (Think's rule): a scheduler that was down while several
   occurrences passed runs one, the latest. The claim is the store's (store.py): of two schedulers racing, one
   wins, and only the winner delivers. A class task is first checked against the latest declaration of its
   agent's class (``ClassDeclaration``, recorded by whoever registered that class last): when the class no longer
   declares it as it is, the agent's class rows are made the declaration's instead (a dropped task's row goes, a
   changed one's is replaced), and nothing fires. No declaration recorded (rows of older versions): it fires.
   Run-time tasks are never checked.
2. Every open fire that is due again (a retry whose delay has passed, or a claim whose scheduler died before it
   finished: ``claim_s`` after it was taken) is taken by this scheduler for its next attempt.
3. Each fire is delivered (``deliver``): a prompt becomes the agent's ``submit_messages`` with the occurrence's
   idempotency key, so a delivery repeated after a crash is accepted once; a handler runs in the agent, at least
   once. A delivery that raises is tried again after the task's ``RetryPolicy`` delay, up to its attempts.

The same class runs in process (``LocalScheduler``, with any clock) and inside the cluster's scheduler actor.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigurationError
from .client import AgentSchedules
from .clock import Clock, SystemClock
from .store import MemoryScheduleStore, ScheduleStore
from .tasks import ClassDeclaration, FireRecord, TaskRecord, occurrence_key

__all__ = ["Deliver", "LocalScheduler", "Scheduler", "deliver_to"]

log = logging.getLogger("think_actors")

Deliver = Callable[[FireRecord], Awaitable[None]]
_Declared = tuple[ClassDeclaration, Callable[[TaskRecord], bool]]  # a class's declaration and its matcher


async def deliver_to(agent: Any, fire: FireRecord) -> Any:
    """Hand ``fire`` to ``agent`` (a Think, or anything with its ``submit_messages`` and ``run_scheduled_task``);
    returns what that call returned (a prompt's ``Submission``, for whoever waits for its turn)."""
    facts = fire.facts()
    task = fire.task
    if task.prompt is not None:
        options: dict[str, Any] = {} if task.limits is None else {"limits": task.limits}
        return await agent.submit_messages(
            task.prompt, idempotency_key=facts["idempotency_key"], metadata={"schedule": facts}, **options
        )
    assert task.handler is not None
    return await agent.run_scheduled_task(task.handler, facts)


class Scheduler:
    """Claims and delivers the due occurrences of every task in ``store`` (module docstring)."""

    def __init__(
        self,
        store: ScheduleStore,
        deliver: Deliver,
        *,
        clock: Clock | None = None,
        owner: str | None = None,
        poll_s: float = 1.0,
        claim_s: float = 300.0,
        batch: int = 500,
        concurrency: int = 64,
    ) -> None:
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.owner = owner or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.poll_s = poll_s
        self.claim_s = claim_s
        self.batch = batch
        self._deliver = deliver
        self._limit = asyncio.Semaphore(concurrency)
        self._wake = asyncio.Event()
        self._running: set[asyncio.Task[None]] = set()
        self.delivered = 0

    def poke(self) -> None:
        """Look at the store now (a task was added or changed)."""
        self._wake.set()

    async def tick(self) -> list[FireRecord]:
        """One pass: claim what is due and deliver it; returns the fires of this pass once they are delivered."""
        fires = await self.claim_due()
        await asyncio.gather(*(self._attempt(f) for f in fires))
        return fires

    async def claim_due(self) -> list[FireRecord]:
        """Steps 1 and 2 of the module docstring: the fires this scheduler now holds, not yet delivered."""
        now = self.clock.now()
        fires: list[FireRecord] = []
        declared: dict[str, _Declared | None] = {}  # per class, read once a pass
        for task in await self.store.due_tasks(now, self.batch):
            if task.source == "class" and not await self._still_declared(task, now, declared):
                continue
            fire = await self._claim(task, now)
            if fire is not None:
                fires.append(fire)
        for open_fire in await self.store.due_fires(now, self.batch):
            taken = await self.store.take_fire(open_fire, self.owner, now + self.claim_s)
            if taken is not None:
                fires.append(taken)
        return fires

    async def _still_declared(self, task: TaskRecord, now: float, declared: dict[str, _Declared | None]) -> bool:
        """Step 1's check of a class task; makes the agent's class rows the declaration's when it fails."""
        if task.agent_class not in declared:
            try:
                declaration = await self.store.class_declaration(task.agent_class)
                declared[task.agent_class] = None if declaration is None else (declaration, declaration.matcher())
            except (ConfigurationError, ValueError, KeyError, TypeError) as exc:  # another version's, or damaged
                log.warning("the schedules declared by %s cannot be read, so not checked: %r", task.agent_class, exc)
                declared[task.agent_class] = None
        found = declared[task.agent_class]
        if found is None or found[1](task):
            return True
        declaration = found[0]
        log.info(
            "schedule %s of %s is not declared by %s as it is now: not fired, the agent's class rows follow the class",
            task.task_id,
            task.agent_path,
            task.agent_class,
        )
        await self.store.sync_class_tasks(task.agent_path, declaration.records(task.agent_path, now))
        return False

    async def _claim(self, task: TaskRecord, now: float) -> FireRecord | None:
        try:
            schedule = task.parsed()
        except ConfigurationError as exc:  # a row written by hand, or by a version that spoke another language
            log.error("schedule %s of %s cannot be read and is removed: %s", task.task_id, task.agent_path, exc)
            await self.store.delete_task(task.agent_path, task.task_id)
            return None
        assert task.next_at is not None
        at = task.next_at if task.kind == "once" else schedule.latest_at_or_before(now, task.anchor) or task.next_at
        at = max(at, task.next_at)
        following = None if task.kind == "once" else schedule.next_after(now, task.anchor)
        fire = FireRecord(
            agent_path=task.agent_path,
            key=occurrence_key(task.task_id, at),
            task=task,
            scheduled_for=at,
            status="claimed",
            attempts=1,
            wake_at=now + self.claim_s,
            owner=self.owner,
        )
        return fire if await self.store.claim(task, fire, following) else None

    async def _attempt(self, fire: FireRecord) -> None:
        async with self._limit:
            try:
                await self._deliver(fire)
            except Exception as exc:
                policy = fire.task.retry
                error = f"{type(exc).__name__}: {exc}"
                if fire.attempts >= policy.max_attempts:
                    log.warning(
                        "scheduled %s of %s failed after %d attempts: %s",
                        fire.key,
                        fire.agent_path,
                        fire.attempts,
                        error,
                    )
                    await self.store.finish_fire(fire, "failed", error=error)
                else:
                    retry_at = self.clock.now() + policy.delay_after(fire.attempts)
                    await self.store.finish_fire(fire, "retry", wake_at=retry_at, error=error)
                    self.poke()
                return
            await self.store.finish_fire(fire, "delivered")
            self.delivered += 1

    async def run(self) -> None:
        """Tick until cancelled: deliveries run in the background, so a slow agent never holds the next tick."""
        while True:
            self._wake.clear()
            try:
                for fire in await self.claim_due():
                    task = asyncio.ensure_future(self._attempt(fire))
                    self._running.add(task)
                    task.add_done_callback(self._running.discard)
                wake_at = await self.store.next_wake_at()
            except Exception:
                log.exception("scheduler pass failed; trying again in %.1f s", self.poll_s)
                wake_at = None
            now = self.clock.now()
            until = now + self.poll_s if wake_at is None else min(wake_at, now + self.poll_s)
            await self.clock.wait(until, self._wake)

    async def drain(self) -> None:
        """Wait for the deliveries ``run`` has started."""
        while self._running:
            await asyncio.gather(*list(self._running), return_exceptions=True)


class LocalScheduler:
    """Scheduled tasks for agents in this process: one ``Scheduler`` whose fires go to the agents attached to it.

    ``clock`` may be a ``ManualClock`` (tests: ``clock.advance(3600); await scheduler.tick()``); ``store`` any
    ScheduleStore (default memory). ``start()`` runs it in the background with real waiting, ``tick()`` runs one
    pass and waits for its deliveries.
    """

    def __init__(self, store: ScheduleStore | None = None, *, clock: Clock | None = None, poll_s: float = 1.0) -> None:
        self.store = store or MemoryScheduleStore()
        self.clock: Clock = clock or SystemClock()
        self._agents: dict[str, Any] = {}
        self.scheduler = Scheduler(self.store, self._to_agent, clock=self.clock, poll_s=poll_s)
        self._loop: asyncio.Task[None] | None = None

    async def attach(self, agent: Any) -> None:
        """Let ``agent`` (a Think) schedule tasks here, and register its class's ``schedules``."""
        binding = AgentSchedules(
            self.store,
            agent.path,
            type(agent).__name__,
            default_timezone=agent.default_timezone,
            clock=self.clock,
            notify=self.scheduler.poke,
        )
        self._agents[agent.path] = agent
        agent.attach_schedules(binding)
        await binding.sync_class(agent.schedules)

    async def tick(self) -> list[FireRecord]:
        return await self.scheduler.tick()

    def start(self) -> None:
        if self._loop is None or self._loop.done():
            self._loop = asyncio.ensure_future(self.scheduler.run())

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        await self.scheduler.drain()

    async def _to_agent(self, fire: FireRecord) -> None:
        agent = self._agents.get(fire.agent_path)
        if agent is None:
            raise ConfigurationError(f"no agent {fire.agent_path!r} is attached to this scheduler")
        await deliver_to(agent, fire)
