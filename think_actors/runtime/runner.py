"""Burst runners: a few actors per node that run the scheduled turns of agents that have no actor of their own.

Waking an agent for its scheduled prompt starts its actor, and that is a worker process booting (about 1.5 per
second on 2 cores): 10,000 prompts due in one minute took about two hours. A runner is a long-lived actor that
hosts many agents, each for a moment, in its one process. The cluster's scheduler sends it the due occurrences of
agents that have no resident actor:

1. Which runner: a stable hash of the agent path over every node's runners (``RunnerPool.runner_for``), so one
   agent's fires go to one runner; in a runner, one instance per agent path at a time, shared by the fires that
   arrive while it runs.
2. The agent is built and loaded as its own actor does it (``host.build_agent``, ``host.load_agent``: its class,
   its options, ``_ActorRuntime``, its MCP servers; loading recovers whatever an earlier run left). Its class's
   schedules are not synced again (the scheduler checks a class row against the class's declaration when it fires);
   its schedule binding is the runner's one schedule store, so ``self.schedule`` inside a turn opens nothing.
3. The fire is delivered with ``deliver_to``: a prompt becomes a durable submission with the occurrence's
   idempotency key, so it runs once. The runner waits until that submission is final and the agent has no more
   work (``resident_reason``), then closes it (its store released). It writes nothing to the registry: the agent
   is not resident (no actor of it runs), and ``ta.list_agents`` says so.
4. Handing over: an agent whose actor runs is never run here; the fire goes through its handle. An agent still
   busy ``linger_s`` after its submission ended (an auto-continuation, a recovery, more submissions) is woken in its
   own actor, whose start recovers everything from the store; the runner lets go once that actor holds the agent.
5. Fencing: the agent's actor may be woken by a user's call while a runner runs the agent's turn. Its store's
   lease fences the runner (``store/_lease.py``): the runner's turn writes nothing more, its drain settles no
   submission, and the actor's start resumes or re-runs the turn. The runner sees it has lost the lease and leaves.
6. A runner that dies mid-turn: the scheduler's call fails, the occurrence is tried again (its ``RetryPolicy``),
   the restarted runner's load recovers the interrupted turn, and the same idempotency key finds the submission
   instead of adding one. Without a retry left, the agent's own next start recovers it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import registry
from ..agent import Think
from ..errors import AgentUnavailableError
from ..schedule.client import AgentSchedules
from ..schedule.scheduler import deliver_to
from ..schedule.store import ScheduleStore, open_schedule_store
from ..schedule.tasks import FireRecord
from ..store import holds_lease
from ..submissions import Submission
from .calls import _call
from .class_schedules import schedule_store_location
from .config import RuntimeConfig
from .handles import AgentHandle, _ActorRuntime
from .host import _process_setup, build_agent, hosted_options, load_agent

__all__ = ["AgentRunner", "RunnerPool"]

log = logging.getLogger("think_actors")

_CHECK_S = 1.0  # how often a runner waiting for a submission checks that it still holds the agent's lease


@dataclass(slots=True, eq=False)
class _Visit:
    """One agent hosted by a runner for as long as fires for it are in progress."""

    agent: Think
    loaded: asyncio.Task[bool]
    users: int = 0
    hand_over: bool = False  # still busy when its fires were done: its own actor takes it
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once it is closed


def _actor_of(path: str, namespace: str) -> Any:
    try:
        return ray.get_actor(path, namespace=namespace)
    except ValueError:
        return None


@ray.remote(num_cpus=0, max_concurrency=1000)  # type: ignore[call-overload]
class AgentRunner:
    """Runs the due occurrences of agents without an actor, many agents in this one process (module docstring)."""

    def __init__(self, config: RuntimeConfig, linger_s: float = 5.0) -> None:
        _process_setup(config)
        self.config = config
        self.linger_s = linger_s
        self._visits: dict[str, _Visit] = {}
        self._leaving: dict[str, _Visit] = {}  # visits being closed: the next visit of that agent waits for them
        self._schedule_stores: dict[tuple[str | None, str | None], ScheduleStore] = {}
        self.ran = 0
        self.handed_over = 0
        self.hosted_at_once = 0

    async def run_fire(self, fire: FireRecord) -> str:
        """Run one due occurrence to its end; returns ``"ran"``, or ``"actor"`` when the agent's own actor has it."""
        path = fire.agent_path
        visit = self._visits.get(path)
        if visit is None:
            if _actor_of(path, self.config.namespace) is not None:
                return await self._through_actor(fire)
            visit = self._visit(path, fire)
        visit.users += 1
        try:
            if not await asyncio.shield(visit.loaded):
                raise AgentUnavailableError(
                    f"agent {path!r} could not be loaded in a runner", agent=path, retryable=True
                )
            actor = _actor_of(path, self.config.namespace)
            if actor is not None:  # woken while this runner loaded it: whichever opened its store last owns it
                await self._yield_to(visit, AgentHandle(actor, path, fire.task.agent_class))
                return await self._through_actor(fire)
            result = await deliver_to(visit.agent, fire)
            if isinstance(result, Submission) and not await self._until_final(visit, result.submission_id):
                self.handed_over += 1
                return "actor"  # fenced: the agent's actor, woken meanwhile, recovered the submission
            if not await self._until_idle(visit):
                visit.hand_over = True
            self.ran += 1
            return "ran"
        finally:
            visit.users -= 1
            if visit.users == 0:
                await self._leave(path, visit, fire.task.agent_class)

    def _visit(self, path: str, fire: FireRecord) -> _Visit:
        """Build the agent now (synchronously: a second fire for it finds it) and load it in the background."""
        args = registry.spawn_args(self.config.namespace, path)
        if args is None:
            raise AgentUnavailableError(f"no agent {path!r} was ever started or provisioned here", agent=path)
        agent_class, name, options = args
        options = hosted_options(options, self.config)
        agent = build_agent(agent_class, name, path, options, self.config, _ActorRuntime)
        location = schedule_store_location(agent_class, options, self.config)
        store = self._schedule_stores.get(location)
        if store is None:
            store = self._schedule_stores[location] = open_schedule_store(*location)
        agent.attach_schedules(
            AgentSchedules(store, path, agent_class.__name__, default_timezone=agent.default_timezone)
        )
        loaded = asyncio.get_running_loop().create_task(self._load(agent, self._leaving.get(path)))
        visit = self._visits[path] = _Visit(agent, loaded)
        self.hosted_at_once = max(self.hosted_at_once, len(self._visits))
        return visit

    @staticmethod
    async def _load(agent: Think, previous: _Visit | None) -> bool:
        if previous is not None:
            await previous.done.wait()  # one instance of an agent at a time in a runner: the last one has closed
        return await load_agent(agent)

    async def _until_final(self, visit: _Visit, submission_id: str) -> bool:
        """Wait until the submission is final; False when this runner lost the agent's lease first."""
        while True:
            try:
                await visit.agent.wait_for_submission(submission_id, timeout_s=_CHECK_S)
                return True
            except TimeoutError:
                if not await holds_lease(visit.agent._engine.store):
                    return False

    async def _until_idle(self, visit: _Visit) -> bool:
        """Wait until the agent has no more work (as ``AgentHost._watch_idle`` decides); False after ``linger_s``."""
        engine = visit.agent._engine
        deadline = time.monotonic() + self.linger_s
        pause = 0.01
        while engine.resident_reason() is not None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)
        return True

    async def _leave(self, path: str, visit: _Visit, class_name: str) -> None:
        """The last fire for the agent is done: hand it to its own actor if it is still busy, then close it."""
        if self._visits.get(path) is visit:
            del self._visits[path]
        self._leaving[path] = visit
        try:
            if visit.hand_over and await holds_lease(visit.agent._engine.store):
                log.info("agent %s is still busy after its scheduled work: handed to its own actor", path)
                self.handed_over += 1
                # Woken first: its start fences this copy, so closing it (which aborts its turns) writes nothing.
                await AgentHandle(None, path, class_name).info()
        except Exception:
            log.exception("agent %s could not be handed to its own actor; its next start recovers it", path)
        finally:
            try:
                await visit.agent.close()
            except Exception:
                log.exception("closing agent %s in a runner failed", path)
            visit.done.set()
            if self._leaving.get(path) is visit:
                del self._leaving[path]

    async def _yield_to(self, visit: _Visit, handle: AgentHandle) -> None:
        """The agent's actor appeared while this runner loaded it. When this runner's open came after the actor's,
        the actor is the fenced one: restart it, so it opens the store again and takes the agent over."""
        await handle.info()  # its start has opened the agent's store
        if await holds_lease(visit.agent._engine.store):
            log.warning("agent %s: its actor was fenced by a runner's load; restarting it", handle.path)
            await handle.kill(restart=True)
            for _ in range(50):
                try:
                    await handle.info()
                    break
                except AgentUnavailableError:
                    await asyncio.sleep(0.2)

    async def _through_actor(self, fire: FireRecord) -> str:
        actor = _actor_of(fire.agent_path, self.config.namespace)
        await deliver_to(AgentHandle(actor, fire.agent_path, fire.task.agent_class), fire)
        return "actor"

    async def status(self) -> dict[str, Any]:
        """This runner's process and what it has run since it started."""
        return {
            "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "ran": self.ran,
            "handed_over": self.handed_over,
            "hosting": len(self._visits),
            "hosted_at_once": self.hosted_at_once,
        }


class RunnerPool:
    """The runners of every live node, got or started on demand (as the model-server pool is), and which runs
    an agent's fires: a stable hash of its path (module docstring, rule 1)."""

    _REFRESH_S = 30.0  # how often the pool looks at the nodes again

    def __init__(self, config: RuntimeConfig, per_node: int | None = None, linger_s: float = 5.0) -> None:
        self.config = config
        self.per_node = per_node
        self.linger_s = linger_s
        self._runners: list[Any] = []
        self._seen_at = -self._REFRESH_S

    def runners(self) -> list[Any]:
        """Handles to every runner (``per_node`` per node; default one per CPU of the node)."""
        if not self._runners or time.monotonic() - self._seen_at >= self._REFRESH_S:
            live = sorted((n for n in ray.nodes() if n.get("Alive")), key=lambda n: n["NodeID"])  # type: ignore[no-untyped-call]
            runners: list[Any] = []
            for node in live:
                count = self.per_node or max(1, int(node.get("Resources", {}).get("CPU", 1)))
                runners.extend(self._runner(node["NodeID"], i) for i in range(count))
            self._runners = runners
            self._seen_at = time.monotonic()
        return self._runners

    def _runner(self, node: str, index: int) -> Any:
        return AgentRunner.options(  # type: ignore[attr-defined]
            name=f"think_actors/runner/{node}/{index}",
            namespace=self.config.namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,  # a dead runner comes back; the scheduler retries what it was running
            max_task_retries=0,
            memory=1,  # without a resource request Ray ignores soft node affinity (see runtime.placement)
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
        ).remote(self.config, self.linger_s)

    def runner_for(self, path: str) -> Any:
        runners = self.runners()
        return runners[zlib.crc32(path.encode()) % len(runners)]

    async def run(self, fire: FireRecord) -> str:
        """Run ``fire`` on its agent's runner; raises what the runner raised (the scheduler retries it)."""
        outcome: str = await _call(self.runner_for(fire.agent_path).run_fire.remote(fire))
        return outcome
