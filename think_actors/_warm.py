"""Warm worker pools: a wake binds its agent to a process already booted, with Python, Ray and this package loaded.

Waking an agent is starting a Ray actor, a process of its own. On 2 cores a new process takes ≈1.5-2 s (Python,
``import ray``, the core worker's connection to the raylet, ``import think_actors.runtime``), the agent's own start
≈60 ms (``scripts/README-perf-notes.md``): a burst of 40 wakes took p50 ≈17 s. Ray gives an actor creation an idle
worker of its job and runtime env when one is there, and the raylet boots such workers ahead when asked (its
``PrestartWorkers`` call, with a keep-alive that spares them from the idle-worker reaper; at most its start-up
concurrency, its CPU count, per call). On that:

- ``_worker_setup.setup_worker``, the job's ``worker_process_setup_hook`` (``ta.init`` gives it to a local Ray), makes
  every worker what a wake needs before its first task: the runtime imported, a turn's validators and Ray's
  serialization context built (``prepare_worker``); then it leaves a marker (``mark_ready``): booted.
- ``WarmPool``, one actor per node for the driver's job (``start_pools``, called by ``ta.init``), keeps
  ``warm_workers`` booted processes idle. It looks at the node's processes in ``/proc`` every ``POLL_S`` (every
  ``RESTING_POLL_S`` while full and quiet) and asks the raylet for the missing ones as ``refill_count``'s rules say:
  no refill while wakes are taking processes and some are left (``QUIET_S``), at most half the node's cores booting
  at once, never past ``memory_cap`` (``warm_memory_share`` of the node's available memory; a warning when that
  bites). Processes past the size are ended through Ray's own lease (``_Retiree``), never one a wake was given.

Past the pool's size a wake is a cold start: the raylet boots at most its CPU count of processes at once, and each
then imports the package (the set-up hook), so on 2 cores the cold wakes of a burst end together, seconds later.

What it does not cover: Ray 2.60 has no public call for this; the request goes through Ray's generated gRPC stub
for the raylet and its private worker handle, so a failure is logged once and turns refills off (an agent always
starts, warm or cold). On a cluster joined with ``address=``, the cluster's runtime env has no set-up hook: a warm
process still saves the process start, and imports the package when the actor arrives. Nodes that join after
``ta.init`` get no pool. Idle workers that Ray tasks of the job left (task tools) are not the pool's: Ray gives those
to tasks only, so the pool boots its size besides them (a worker leaves a second marker at its first task,
``watch_tasks``; without the set-up hook, the pool tells them by having seen them leave the idle processes). The pool
reads Linux's ``/proc``:
elsewhere nothing is kept warm. Each idle warm process costs ≈6 ms of CPU a second (Ray's worker polls).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

__all__ = [
    "SETUP_HOOK",
    "PoolView",
    "WarmPool",
    "idle_workers",
    "mark_ready",
    "memory_cap",
    "pool_statuses",
    "prepare_worker",
    "refill_count",
    "start_pools",
    "surplus_count",
    "watch_tasks",
]

log = logging.getLogger(__name__)

SETUP_HOOK = "think_actors._worker_setup.setup_worker"
KEEP_ALIVE_S = 24 * 3600  # a warm worker waits for the next wake for as long as its node lives
POLL_S = 0.2  # how often a pool looks at its node while it refills or sees wakes: a look is ≈1 ms of CPU
RESTING_POLL_S = 1.0  # how often once it is full and no wake took a process for a while (the first take waits)
# A wake on a warm process reaches its first chunk in ≈0.1 s on a quiet node and in under a second at load 10-20
# (a burst of 40 included): a pool that has lost no process for this long has no wake in flight to slow.
QUIET_S = 1.0
PROCESS_MIB = 52  # a warm process's unique memory (USS) until the pool has measured one of its own
_IDLE_TITLE = "ray::IDLE"
_MARKERS = "think_actors_warm"
_lock = threading.Lock()
# The driver's handles to its pools: a pool is not detached, and Ray ends such an actor once no handle to it is left.
_pools: dict[str, Any] = {}
_settings = itertools.count(1)  # numbers the driver's settings: Ray may run an async actor's calls out of order


def _ray_worker() -> Any:
    """Ray's private worker module (the driver's or worker's node and core worker)."""
    return ray._private.worker


def _raylet_pid() -> int | None:
    """This node's raylet: a worker's parent; in a driver, the raylet the driver's own ``ray.init`` started."""
    env = os.environ.get("RAY_RAYLET_PID")
    if env:
        return int(env)
    node = getattr(_ray_worker(), "_global_node", None)
    processes = getattr(node, "all_processes", None) or {}
    raylets = processes.get("raylet") or []
    return raylets[0].process.pid if raylets else None


def _job_of(pid: int) -> str | None:
    """The Ray job a worker process was started for (``RAY_JOB_ID`` in its start-up environment)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for entry in f.read().split(b"\0"):
                if entry.startswith(b"RAY_JOB_ID="):
                    return entry[len(b"RAY_JOB_ID=") :].decode()
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux's ``/proc``: each thread lists the children it started)."""
    found: list[int] = []
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/children") as f:
                found += [int(child) for child in f.read().split()]
        except OSError:
            continue
    return found


def _command(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def _idle(jobs: dict[int, str | None], job: str) -> tuple[set[int], set[int]]:
    """This node's idle worker processes of ``job`` and, of those, the ones titled ``ray::IDLE`` (registered with
    the raylet); the rest are still starting. ``jobs`` caches each pid's job (read once: ``/proc/<pid>/environ``)."""
    raylet = _raylet_pid()
    if raylet is None:
        return set(), set()
    waiting, titled = set(), set()
    children = _children(raylet)
    for child in children:
        command = _command(child)
        registered = command[:1] == [_IDLE_TITLE]
        # A worker titles itself ray::IDLE once registered; before that its command line is the worker script's.
        if not registered and not any(part.endswith("default_worker.py") for part in command):
            continue
        if child not in jobs:
            jobs[child] = _job_of(child)
        if jobs[child] == job:
            waiting.add(child)
            if registered:
                titled.add(child)
    for gone in set(jobs) - set(children):
        del jobs[gone]
    return waiting, titled


def idle_workers(job_id: str | None = None) -> list[int] | None:
    """The pids of this node's idle (or still starting) worker processes started for ``job_id`` (default: ours);
    None where they cannot be counted (no ``/proc``, or a driver that did not start its node's raylet)."""
    raylet = _raylet_pid()
    if raylet is None or not os.path.isdir(f"/proc/{raylet}/task"):
        return None
    waiting, _ = _idle({}, job_id or ray.get_runtime_context().get_job_id())
    return sorted(waiting)


def _marker_dir() -> str:
    """Where booted workers of this node leave their marker (under Ray's session directory)."""
    node = _ray_worker().global_worker.node
    return os.path.join(node.get_session_dir_path(), _MARKERS)


def _started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat``): with the pid, names a process
    even after the pid is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19].decode() if len(fields) > 19 else None


def mark_ready() -> None:
    """Say that this worker process has booted (the set-up hook's last step): its pool counts it as warm whenever it
    is idle, before its first task and after any task it ran, for as long as it lives."""
    directory = _marker_dir()
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, str(os.getpid())), "w") as f:
        f.write(_started(os.getpid()) or "")


def prepare_worker() -> None:
    """Build, in a worker that waits for its first task, what Ray builds at that task: the job's serialization
    context, whose set-up imports pydantic.v1 and starlette for Ray's own serializers: ≈35-40 ms of CPU, most of
    what a wake on a warm process spent before its agent's class had even loaded (measured on 2 cores)."""
    _ray_worker().global_worker.get_serialization_context()


_SERVED = "served-"  # a marker's prefix for a worker that has run a task (``watch_tasks``)


def watch_tasks() -> None:
    """Leave a second marker the first time this worker runs a task (a Ray task, or an actor's creation): Ray gives
    a worker that ran a task to tasks only, so once idle again it is no warm process for a wake. Ray looks up each
    task's function through ``function_actor_manager.get_execution_info`` on its worker: the first call marks it."""
    manager = _ray_worker().global_worker.function_actor_manager
    lookup = manager.get_execution_info

    def first_lookup(*args: Any, **kwargs: Any) -> Any:
        manager.get_execution_info = lookup  # once
        with contextlib.suppress(OSError), open(os.path.join(_marker_dir(), f"{_SERVED}{os.getpid()}"), "w") as f:
            f.write(_started(os.getpid()) or "")
        return lookup(*args, **kwargs)

    manager.get_execution_info = first_lookup


def _served(directory: str, pids: set[int]) -> set[int]:
    """Those of ``pids`` (alive) that ran a task: their ``watch_tasks`` marker names them, start time included."""
    found = set()
    for pid in pids:
        try:
            with open(os.path.join(directory, f"{_SERVED}{pid}")) as f:
                started = f.read()
        except OSError:
            continue
        if started and started == _started(pid):
            found.add(pid)
    return found


def _markers(directory: str, known: dict[int, str]) -> dict[int, str]:
    """The processes that left a marker and may be alive, each with its start time as its marker says (``known``
    caches what was read). A marker whose process is gone is removed: its pid may be reused."""
    try:
        listed = os.listdir(directory)
    except OSError:
        return {}
    for name in listed:  # a task-run marker whose process is gone
        if name.startswith(_SERVED) and not os.path.exists(f"/proc/{name[len(_SERVED) :]}"):
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))
    names = [name for name in listed if name.isdigit()]
    found: dict[int, str] = {}
    for name in names:
        pid = int(name)
        path = os.path.join(directory, name)
        if not os.path.exists(f"/proc/{pid}"):
            known.pop(pid, None)
            with contextlib.suppress(OSError):
                os.remove(path)
            continue
        if pid not in known:
            try:
                with open(path) as f:
                    known[pid] = f.read()
            except OSError:
                continue
        found[pid] = known[pid]
    for gone in set(known) - set(found):
        del known[gone]
    return found


def _marked(pids: set[int], markers: dict[int, str]) -> set[int]:
    """Those of ``pids`` that left a marker themselves (not an earlier process with the same pid)."""
    return {pid for pid in pids if pid in markers and markers[pid] and markers[pid] == _started(pid)}


def available_memory() -> int:
    """Bytes this node can still give processes: ``MemAvailable``, or less under a cgroup (v2) memory limit."""
    available = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read())
        if limit != "max":
            available = min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return max(available, 0)


def unique_memory(pid: int) -> int | None:
    """The bytes only process ``pid`` holds (USS: its private pages), from ``/proc/<pid>/smaps_rollup``."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return total or None


def memory_cap(share: float, available: int, per_process: int, held: int = 0) -> int:
    """How many warm processes of ``per_process`` bytes fit in ``share`` of a node's memory: ``available`` bytes
    plus the ``held`` bytes the pool's idle processes take already (the pool's own use counts as available, so the
    cap does not shrink as the pool fills)."""
    if per_process <= 0:
        return 0
    return max(int(share * (available + held)) // per_process, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolView:
    """A pool's node at one look. ``booting`` counts every process of the job starting there: the pool's own
    refills and the processes cold wakes started."""

    size: int  # processes wanted: warm_workers, capped by memory
    ready: int  # booted and idle
    booting: int
    since_take_s: float  # since a process last left the pool (a wake took it), or since the pool started
    boots_at_once: int  # half the node's cores, at least one


def refill_count(view: PoolView) -> int:
    """How many processes the pool asks the raylet for now. The rules, in order:

    1. None while a wake may be in flight (a process left the pool less than ``QUIET_S`` ago) and the pool still
       holds booted processes: they serve the burst, and a refill boot, ≈1 s of CPU on 2 cores
       (``scripts/README-perf-notes.md``), would slow its wakes. An empty pool refills at once: the wakes that
       find it empty start their own processes anyway, and Ray hands such a wake a refill still booting.
    2. At most ``boots_at_once`` processes booting at once, a cold wake's included: a refill leaves the node's other
       cores to the agents.
    3. Never past ``size``: the booting ones count as the pool's.
    """
    if view.since_take_s < QUIET_S and view.ready:
        return 0
    return max(min(view.boots_at_once - view.booting, view.size - view.ready - view.booting), 0)


def surplus_count(view: PoolView) -> int:
    """How many booted processes the pool ends: those past its size (``warm_workers`` lowered, or the memory cap),
    once no wake may be in flight (rule 1 of ``refill_count``: a wake takes what it finds first)."""
    return max(view.ready - view.size, 0) if view.since_take_s >= QUIET_S else 0


def _prestart(count: int) -> None:
    """Ask this node's raylet for ``count`` idle workers of this job, with this job's runtime env."""
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    # Generated protobuf modules without type information.
    common: Any = common_pb2
    messages: Any = node_manager_pb2
    service: Any = node_manager_pb2_grpc
    worker: Any = _ray_worker().global_worker
    node = worker.node
    core = worker.core_worker
    channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}", asynchronous=False)
    try:
        stub = service.NodeManagerServiceStub(channel)
        request = messages.PrestartWorkersRequest(
            language=common.Language.PYTHON,
            job_id=core.get_current_job_id().binary(),
            # The job's own runtime env, byte for byte: Ray hands an actor only a worker of the same env hash.
            runtime_env_info=core.get_job_config().runtime_env_info,
            keep_alive_duration_secs=KEEP_ALIVE_S,
            num_workers=count,
        )
        stub.PrestartWorkers(request, timeout=10)
    finally:
        channel.close()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@ray.remote(num_cpus=0)
class _Retiree:
    """An actor whose creation takes an idle process of its node and job through Ray's lease, as a wake would (so it
    never takes one a wake was given), and whose end (``ray.kill``) ends that process."""

    def ready(self) -> None:
        return None


@ray.remote(num_cpus=0, max_restarts=3)
class WarmPool:
    """Keeps ``size`` warm worker processes of its job idle on its node (``start_pools`` starts one per node)."""

    def __init__(self) -> None:
        self.size = 0
        self.setting = 0  # the number of the driver's setting in force (configure)
        self.memory_share = 0.0
        self.cap: int | None = None  # the memory cap, when it is below size
        self.job = ray.get_runtime_context().get_job_id()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.markers = _marker_dir()
        # This process ran the job's set-up hook (it left a marker) or the job has none: then a registered worker
        # is as warm as it gets, and ready means titled ray::IDLE.
        self.marker_cache: dict[int, str] = {}
        self.hooked = bool(_marked({os.getpid()}, _markers(self.markers, self.marker_cache)))
        self.process_bytes = PROCESS_MIB * 2**20
        self.measured = False
        self.jobs: dict[int, str | None] = {}
        self.last: set[int] = set()
        self.departed: set[int] = set()  # alive processes that left the idle ones (taken by an actor or a task)
        self.retiring = 0  # processes being ended (_Retiree) whose departure from the pool is not yet seen
        self.last_take = time.monotonic()  # the quiet rule holds at the start too: the driver may be waking already
        self.next_ask = 0.0
        self.asked = self.taken = self.stopped = 0
        self.failed = False
        self.looked = True  # the last look went through
        self.view = PoolView(size=0, ready=0, booting=0, since_take_s=0.0, boots_at_once=max(_cores() // 2, 1))
        self.ready: set[int] = set()
        self.booting: set[int] = set()
        self._loop = asyncio.get_running_loop().create_task(self._keep())

    def configure(self, size: int, memory_share: float, setting: int) -> None:
        """Keep ``size`` processes, in at most ``memory_share`` of the node's available memory, unless a later
        ``setting`` (the driver numbers them) is in force already."""
        if setting > self.setting:
            self.setting, self.size, self.memory_share = setting, max(size, 0), max(memory_share, 0.0)

    def status(self) -> dict[str, Any]:
        """The pool at its last look: its size, memory cap, ready and booting pids, and its counts so far."""
        return {
            "node_id": self.node_id,
            "size": self.size,
            "cap": self.cap,
            "ready": sorted(self.ready),
            "booting": sorted(self.booting),
            "process_mib": self.process_bytes / 2**20,
            "asked": self.asked,
            "taken": self.taken,
            "stopped": self.stopped,
            "refilling": not self.failed,
        }

    async def _keep(self) -> None:
        while True:
            try:
                self._look()
                self.looked = True
            except Exception:  # logged once a run of failures, not at every look
                if self.looked:
                    log.exception("warm pool on node %s: a look at the node failed", self.node_id)
                self.looked = False
            view = self.view
            resting = view.ready >= view.size and not view.booting and view.since_take_s > 2 * QUIET_S
            await asyncio.sleep(RESTING_POLL_S if resting else POLL_S)

    def _look(self) -> None:
        now = time.monotonic()
        waiting, titled = _idle(self.jobs, self.job)
        # A process that ran a task (its task marker says so, or the pool saw it leave the idle ones and come back)
        # is given by Ray to tasks only, never to a wake: no warm process, nor one still starting.
        self.departed = (self.departed | (self.last - waiting)) & set(self.jobs)
        served = (waiting & self.departed) | _served(self.markers, waiting)
        waiting, titled = waiting - served, titled - served
        markers = _markers(self.markers, self.marker_cache)
        left = len(self.last - waiting)
        retired = min(left, self.retiring)  # the processes the pool's own retirees took are no wake's
        self.retiring -= retired
        if left > retired:
            self.last_take = now
            self.taken += left - retired
        self.last = waiting
        self.ready = _marked(waiting, markers) if self.hooked else titled
        self.booting = waiting - self.ready
        if not self.measured and self.ready:
            measured = unique_memory(min(self.ready))
            if measured:
                self.process_bytes, self.measured = measured, True
        size = self._capped(available_memory())
        self.view = PoolView(
            size=size,
            ready=len(self.ready),
            booting=len(self.booting),
            since_take_s=now - self.last_take,
            boots_at_once=self.view.boots_at_once,
        )
        for _ in range(surplus_count(self.view) - self.retiring):
            self.retiring += 1
            self.stopped += 1
            asyncio.get_running_loop().create_task(self._retire())
        missing = refill_count(self.view)
        if missing and now >= self.next_ask and not self.failed:
            try:
                _prestart(missing)
            except Exception:
                self.failed = True
                log.warning("keeping warm worker processes failed; agents start cold from now on", exc_info=True)
                return
            self.asked += missing
            self.next_ask = now + 2 * POLL_S  # the asked-for processes show up in /proc before the next ask

    async def _retire(self) -> None:
        """End one idle process of the pool: a ``_Retiree`` takes it, then is killed with it."""
        retiree: Any = _Retiree.options(  # type: ignore[attr-defined]
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.node_id, soft=False)
        ).remote()
        try:
            await retiree.ready.remote()
        except Exception:  # it took no process, or the pool cannot tell: the next look counts again
            self.retiring = max(self.retiring - 1, 0)
            log.warning("warm pool on node %s: ending a surplus process failed", self.node_id, exc_info=True)
        finally:
            ray.kill(retiree, no_restart=True)

    def _capped(self, available: int) -> int:
        """``size``, or the memory cap when it is lower (logged when the cap starts or stops biting)."""
        cap = memory_cap(self.memory_share, available, self.process_bytes, len(self.ready) * self.process_bytes)
        capped = cap if cap < self.size else None
        if capped != self.cap:
            if capped is not None:
                log.warning(
                    "warm pool on node %s holds %d processes, not %d: at %.0f MiB each, %d fit in %.0f%% of the "
                    "node's %.0f MiB of available memory (ta.init's warm_memory_share)",
                    self.node_id,
                    capped,
                    self.size,
                    self.process_bytes / 2**20,
                    capped,
                    self.memory_share * 100,
                    available / 2**20,
                )
            else:
                log.info("warm pool on node %s holds its %d processes again", self.node_id, self.size)
            self.cap = capped
        return min(self.size, cap)


def _pool_name(job: str, node_id: str) -> str:
    return f"think_actors/warm-pool/{job}/{node_id}"


def _is_driver() -> bool:
    worker = _ray_worker()
    return bool(worker.global_worker.mode == worker.SCRIPT_MODE)


def start_pools(size: int, memory_share: float, namespace: str) -> None:
    """Have every node alive now keep ``size`` warm processes of this driver's job (a pool actor each, started
    the first time; 0 empties the pools). Only a driver starts pools: they end with its job."""
    if not _is_driver():
        return
    job = ray.get_runtime_context().get_job_id()
    session = _ray_worker().global_worker.node.get_session_dir_path()
    with _lock:
        for node in ray.nodes():  # type: ignore[no-untyped-call]
            if not node.get("Alive"):
                continue
            name = _pool_name(job, node["NodeID"])
            key = f"{session}/{namespace}/{name}"  # a Ray started anew numbers its jobs from 1 again
            pool = _pools.get(key)
            if pool is None and size > 0:
                pool = _pools[key] = WarmPool.options(  # type: ignore[attr-defined]
                    name=name,
                    namespace=namespace,
                    get_if_exists=True,
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                ).remote()
            if pool is not None:
                pool.configure.remote(size, memory_share, next(_settings))
    if size > 0 and _raylet_pid() is not None:  # this driver's own node: say at once when its memory caps the pool
        cap = memory_cap(memory_share, available_memory(), PROCESS_MIB * 2**20)
        if cap < size:
            log.warning(
                "warm_workers=%d: this node keeps %d warm processes, as they may take at most %.0f%% of its %.0f MiB "
                "of available memory (ta.init's warm_memory_share)",
                size,
                cap,
                memory_share * 100,
                available_memory() / 2**20,
            )


async def pool_statuses(namespace: str) -> list[dict[str, Any]]:
    """Each node's pool's ``status()`` for this driver's job (nodes without a pool left out)."""
    job = ray.get_runtime_context().get_job_id()
    found = []
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        try:
            found.append(ray.get_actor(_pool_name(job, node["NodeID"]), namespace=namespace))
        except ValueError:
            continue
    return list(await asyncio.gather(*(pool.status.remote() for pool in found)))
