"""The cluster's scheduler: one named, detached Ray actor for every agent, its state in the schedule store.

``start_scheduler()`` gets or creates it. Ray restarts it without limit, on another node when its node is lost;
it keeps nothing in memory that the store does not hold, so the restarted actor goes on from the store: a task
whose occurrence passed while no scheduler ran fires once (the latest occurrence), a fire whose delivery was
cut short is taken again when its claim runs out. Two schedulers (a second one started by hand, or an old one
not yet gone) race on the store's unique claim and fire each occurrence once.

Delivery: an agent whose actor runs gets its fire through its handle (a prompt is a ``submit_messages``). An
agent without one (hibernated, or provisioned and never started) is run by a burst runner (``runner``): a few
long-lived actors per node that host many agents for a moment each, instead of one worker process booting per
agent; the delivery ends when its turn has. With ``runners=0`` such an agent is woken the way any handle wakes
it (its actor started), as before. The scheduler reads the store every ``poll_s`` seconds, so a task added
anywhere is seen within that.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..schedule.client import AgentSchedules
from ..schedule.scheduler import Scheduler, deliver_to
from ..schedule.store import ScheduleStore, open_schedule_store
from ..schedule.tasks import FireRecord
from .config import RuntimeConfig, _require_config
from .handles import AgentHandle
from .host import _process_setup
from .runner import RunnerPool
from .shared import hosted_shared

__all__ = ["SCHEDULER_NAME", "SchedulerActor", "schedules_of", "start_scheduler"]

SCHEDULER_NAME = "think_actors.scheduler"
log = logging.getLogger("think_actors")


@ray.remote
class SchedulerActor:
    """The scheduler of every agent of a namespace (module docstring)."""

    def __init__(
        self, config: RuntimeConfig, poll_s: float, claim_s: float, runners: int | None = None, concurrency: int = 1000
    ) -> None:
        _process_setup(config)
        self.config = config
        self.store: ScheduleStore = open_schedule_store(config.store_url, config.data_dir)
        self.runners = None if runners == 0 else RunnerPool(config, runners)
        node = ray.get_runtime_context().get_node_id()
        self.scheduler = Scheduler(
            self.store,
            self._deliver,
            owner=f"{node[:12]}-{os.getpid()}",
            poll_s=poll_s,
            claim_s=claim_s,
            # A runner's delivery lasts as long as its turn: many at once, or a burst of due prompts queues here.
            concurrency=concurrency if self.runners is not None else 64,
        )
        # A task on the actor's own loop, never a call to itself (refused while Ray counts it as restarting).
        self._loop = asyncio.get_running_loop().create_task(self.scheduler.run())

    async def _deliver(self, fire: FireRecord) -> None:
        try:
            actor = ray.get_actor(fire.agent_path, namespace=self.config.namespace)
        except ValueError:
            actor = None  # hibernated or never started: a runner runs it, or the handle's first call wakes it
        if actor is None and self.runners is not None and not hosted_shared(self.config.namespace, fire.agent_path):
            await self.runners.run(fire)  # a shared agent's host holds it cheaply: its handle's call loads it there
            return
        await deliver_to(AgentHandle(actor, fire.agent_path, fire.task.agent_class), fire)

    async def status(self) -> dict[str, Any]:
        """Who runs the scheduler, and how much it has delivered since this actor started."""
        return {
            "owner": self.scheduler.owner,
            "node_id": ray.get_runtime_context().get_node_id(),
            "pid": os.getpid(),
            "delivered": self.scheduler.delivered,
            "running": not self._loop.done(),
        }

    async def poke(self) -> None:
        self.scheduler.poke()


async def start_scheduler(
    *,
    poll_s: float = 1.0,
    claim_s: float = 300.0,
    node_id: str | None = None,
    name: str = SCHEDULER_NAME,
    runners: int | None = None,
) -> Any:
    """Get or create the cluster's scheduler actor (call it once from a driver, after ``ta.init``).

    ``poll_s``: how often it reads the store for tasks added since; ``claim_s``: how long a delivery may take before
    another scheduler takes the occurrence over (a handler running longer may run twice). ``node_id`` asks for a
    node, softly (when it is gone, Ray restarts the scheduler elsewhere). ``name`` is for tests that run a second
    scheduler on purpose. ``runners``: burst runners per node for agents without an actor (default one per CPU;
    0 wakes each such agent in its own actor instead). An existing scheduler is returned as it is.
    """
    config = _require_config()
    remote: Any = SchedulerActor
    actor = remote.options(
        name=name,
        namespace=config.namespace,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=0,
        num_cpus=0,
        memory=1,  # as agents: a resource, so that Ray does not place it on a random node whatever it is told
        max_concurrency=1000,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True) if node_id else "DEFAULT",
    ).remote(config, poll_s, claim_s, runners)
    await actor.status.remote()
    return actor


def schedules_of(handle: AgentHandle) -> AgentSchedules:
    """An agent's scheduled tasks, read and written from a driver without waking the agent (``handle.schedule``
    wakes it; this does not): ``await ta.runtime.scheduler_actor.schedules_of(handle).schedule(60, "ping")``."""
    config = _require_config()
    return AgentSchedules(open_schedule_store(config.store_url, config.data_dir), handle.path, handle.class_name)
