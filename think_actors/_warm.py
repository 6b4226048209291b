"""Warm worker processes: an agent that wakes takes a process that already runs Python, Ray and this package.

Waking an agent is starting a Ray actor, and on a 2-core machine almost all of that is a new worker process: Python
and ``import ray`` and the core worker's connection to the raylet (≈1.4 s at load 5), then ``import
think_actors.runtime`` (≈0.7 s); the agent's own start, its store and the ``ready`` round trip, is ≈60 ms
(``scripts/README-perf-notes.md``). Ray gives an actor creation an idle worker of the same job and runtime env
when one is there, and its raylet starts such idle workers ahead when asked (its ``PrestartWorkers`` call, with a
keep-alive time that spares them from the idle-worker reaper). Two pieces use that:

- ``think_actors._worker_setup.setup_worker`` is the ``worker_process_setup_hook`` that ``ta.init`` gives a local
  Ray: every worker imports the runtime before it takes its first task, so a pre-started worker is warm, not only
  started (``SETUP_HOOK`` names it).
- ``top_up(count)`` runs in each agent actor once its agent has started (and in the driver when ``ta.init``
  starts Ray): it counts the idle workers of this job on its node and asks the raylet for the missing ones. The
  wake that took a warm worker starts its successor, off the wake's own path.

What it does not cover: Ray 2.60 has no public call for this; the request goes through Ray's generated gRPC stub
for the raylet and its private worker handle, so any failure is logged once and turns the top-up off (an agent
always starts, warm or cold). On a cluster joined with ``address=``, the cluster's runtime env has no set-up hook:
a warm worker still saves the process start, and imports the package when the actor arrives. Idle workers left
by Ray tasks of the same job are counted too (Ray gives those to tasks only), so a node that runs task tools
may stay short of warm workers for a while; nothing goes wrong, a wake is then cold. The count reads Linux's
``/proc``: elsewhere nothing is kept warm.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import ray

__all__ = ["SETUP_HOOK", "idle_workers", "top_up", "top_up_in_background"]

log = logging.getLogger(__name__)

SETUP_HOOK = "think_actors._worker_setup.setup_worker"
KEEP_ALIVE_S = 24 * 3600  # a warm worker waits for the next wake for as long as its node lives
_IDLE_TITLE = "ray::IDLE"
_disabled = False
_lock = threading.Lock()


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


def idle_workers(job_id: str | None = None) -> list[int] | None:
    """The pids of this node's idle (or still starting) worker processes started for ``job_id`` (default: ours);
    None where they cannot be counted (no ``/proc``, or a driver that did not start its node's raylet)."""
    raylet = _raylet_pid()
    if raylet is None or not os.path.isdir(f"/proc/{raylet}/task"):
        return None
    job = job_id or ray.get_runtime_context().get_job_id()
    found = []
    for child in _children(raylet):
        command = _command(child)
        # A worker titles itself ray::IDLE once registered; before that its command line is the worker script's.
        waiting = command[:1] == [_IDLE_TITLE] or any(part.endswith("default_worker.py") for part in command)
        if waiting and _job_of(child) == job:
            found.append(child)
    return found


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


def top_up(count: int) -> int:
    """Make this node hold ``count`` idle workers of this job; returns how many were asked for (0 when off)."""
    global _disabled
    if count <= 0 or _disabled:
        return 0
    with _lock:  # two agents of one process never race; agents in two processes may ask for one worker too many
        try:
            idle = idle_workers()
            if idle is None:  # never ask without counting: each start would add a worker
                return 0
            missing = count - len(idle)
            if missing > 0:
                _prestart(missing)
            return max(missing, 0)
        except Exception:
            _disabled = True
            log.warning("keeping warm worker processes failed; agents start cold from now on", exc_info=True)
            return 0


def top_up_in_background(count: int) -> None:
    """``top_up`` in a thread: the raylet call and the process listing stay off the caller's event loop."""
    if count > 0 and not _disabled:
        threading.Thread(target=top_up, args=(count,), name="think-actors-warm", daemon=True).start()
