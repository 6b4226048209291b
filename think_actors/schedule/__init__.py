"""Scheduled prompts and handler tasks (Think's ``getScheduledTasks()`` and ``schedule()``, reference §1.10).

Layout: ``spec.py`` (the schedule language, cron, occurrences and the DST rules), ``tasks.py`` (declarations,
records, the handler's context), ``store.py`` / ``sqlite.py`` / ``postgres.py`` (the tasks and fires of every
agent), ``clock.py``, ``client.py`` (an agent's side), ``scheduler.py`` (claim and deliver; ``LocalScheduler``
in process). The cluster's scheduler actor is ``runtime/scheduler_actor.py`` and the driver's registration of a
class's schedules ``runtime/class_schedules.py``: nothing here imports ray, so this package loads without Ray.
"""

from .client import AgentSchedules, run_handler
from .clock import Clock, ManualClock, SystemClock
from .scheduler import LocalScheduler, Scheduler, deliver_to
from .spec import Schedule, parse_schedule
from .store import MemoryScheduleStore, ScheduleStore, open_schedule_store
from .tasks import (
    ClassDeclaration,
    FireRecord,
    RetryPolicy,
    ScheduledTask,
    ScheduledTaskContext,
    TaskInfo,
    TaskRecord,
    cron,
    every,
    occurrence_key,
)

__all__ = [
    "AgentSchedules",
    "ClassDeclaration",
    "Clock",
    "FireRecord",
    "LocalScheduler",
    "ManualClock",
    "MemoryScheduleStore",
    "RetryPolicy",
    "Schedule",
    "ScheduleStore",
    "ScheduledTask",
    "ScheduledTaskContext",
    "Scheduler",
    "SystemClock",
    "TaskInfo",
    "TaskRecord",
    "cron",
    "deliver_to",
    "every",
    "occurrence_key",
    "open_schedule_store",
    "parse_schedule",
    "run_handler",
]
