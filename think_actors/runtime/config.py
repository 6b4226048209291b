"""How agent actors are made (``RuntimeConfig``) and starting or joining Ray for think_actors (``init``).

The process's current config lives here: ``init`` sets it in the driver, ``host._process_setup`` in every actor.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from .._warm import SETUP_HOOK, start_pools
from ..errors import (
    ConfigurationError,
)
from ..models.fast_path import fast_path_enabled
from ..store import STORE_ENV, check_store_url
from ..tracing import TracingConfig, otel_env
from ..tracing import configure as configure_tracing


@dataclass(frozen=True, kw_only=True, slots=True)
class RuntimeConfig:
    """How agent actors are created; shipped to every actor that creates more actors."""

    namespace: str = "think_actors"
    data_dir: str = ""
    store_url: str = ""  # "" means each agent's SQLite file under data_dir
    model_pool_size: int = 2
    max_restarts: int = -1  # Ray restarts a crashed agent without limit; recovery budgets bound crash loops
    batch_max: int = 1024
    flush_s: float = 0.003
    first_chunk_at_once: bool = True  # False: a turn's opening chunks wait for its first content (batching.py)
    log_level: int = logging.WARNING
    idle_timeout_s: float | None = None  # agents hibernate after this long without work (a class may override)
    fast_model_path: bool = True
    warm_workers: int = 1  # warm agent processes each node keeps booted for the next wakes (_warm.WarmPool)
    warm_memory_share: float = 0.2  # the most of a node's available memory its warm processes may take
    tracing: TracingConfig | None = None  # None: no spans (think_actors.tracing)
    shared_hosts: int = 1  # the actors that host the agents of classes with hosting = "shared" (shared.py)
    stream_channels: bool = True  # streamed calls' batches over direct connections, not Ray items (channel.py)
    stream_latency_s: float = 0.0  # how long a streamed call's producer may hold chunks to send them together
    restart_wait_s: float = 60.0  # how long a handle's safe call waits for the agent's restarting actor


_config: RuntimeConfig | None = None


def init(
    address: str | None = None,
    *,
    namespace: str = "think_actors",
    data_dir: str | None = None,
    store: str | None = None,
    num_cpus: int | None = None,
    model_pool_size: int = 2,
    max_restarts: int = -1,
    idle_timeout_s: float | None = None,
    quiet: bool = True,
    fast_model_path: bool | None = None,
    warm_workers: int = 1,
    warm_memory_share: float = 0.2,
    tracing: bool | TracingConfig | None = None,
    first_chunk_at_once: bool = True,
    shared_hosts: int = 0,
    stream_channels: bool = True,
    stream_latency_ms: float = 0.0,
    restart_wait_s: float = 60.0,
    **ray_kwargs: Any,
) -> RuntimeConfig:
    """Start (or join) Ray for think_actors. Local Ray by default; ``address="auto"`` joins a running cluster.

    ``data_dir`` is where agents' SQLite stores live (default ``$THINK_ACTORS_DATA_DIR`` or ``./.think_actors``).
    ``idle_timeout_s``: an agent with nothing to do for that long hibernates (its actor exits; its store keeps
    everything) and any handle, ``spawn``, ``get`` or the gateway wakes it; a class's own ``idle_timeout_s``
    wins. None (the default) keeps agents resident.
    ``store`` is a store URL for every agent (default ``$THINK_STORE``): ``postgresql://user@host/db`` when agents
    run on more than one node, or ``sqlite:///dir``; it travels to every actor. A URL of another scheme raises
    ``ConfigurationError`` before Ray starts.
    ``max_restarts`` is how often Ray restarts a crashed agent actor: by default (-1) always, so the agent stays
    reachable, and what gives up on a turn that kills its process again and again is the turn's recovery budget
    (the class's ``chat_recovery``, ``ChatRecoveryConfig``), which ends the turn and calls
    ``on_chat_recovery_exhausted``. A finite count is Ray's over the actor's whole life, not per turn: once it is
    spent Ray declares the actor dead, every call gets ``AgentUnavailableError`` and the interrupted turn is never
    finished. One crash loop takes up to ``max_total_attempts + 1`` restarts (``max_attempts + 1`` if no attempt
    gets further), so a count you set must stay above that. A process that dies in its own start-up, before its
    recovery counts an attempt, spends no budget: only a finite count ends that loop.
    ``fast_model_path`` lets the model-server pool stream OpenAI-wire providers through ``OpenAIWireClient``
    (default: on, unless ``$THINK_FAST_MODEL_PATH`` is ``0``); off, every model call goes through litellm.
    ``warm_workers``: how many agent processes each node keeps booted ahead, with Python, Ray and this package
    loaded (default 1; 0 turns it off). A spawn or wake binds its agent to one of them, still an actor and a process
    of its own, instead of starting a process: ≈0.1 s against ≈1.5-2 s on 2 cores, and a burst of 40 wakes with 40
    warm ends within a second. Each idle one holds ≈54 MiB and ≈0.6 % of a core. A pool actor on each node boots
    the successors in the background, about one a second per two cores, and waits while a burst is still taking the
    processes it has left. Size it for the largest burst you expect: past it, each wake starts its own process, at
    most as many at once as the node has CPUs (on 2 cores, the 10 wakes past a pool of 40 took ≈15 s at load 15).
    ``warm_memory_share``: the most of a node's available memory the warm processes may take (default 0.2); a node
    with less keeps fewer and logs a warning, and ends the processes past that.
    ``tracing``: OpenTelemetry spans of every agent (True, a ``ta.TracingConfig``, or False; default: as the
    driver's ``OTEL_*`` environment says), exported by every actor (the ``otel`` extra, see
    ``think_actors.tracing``).
    ``first_chunk_at_once``: an agent actor sends a turn's first chunk (``start``) the moment the turn starts, so a
    caller sees the turn begin before the model answers (the default). False: the opening chunks wait for the
    turn's first content and cross with it, one Ray stream item fewer per turn (less CPU on a busy node), for
    callers that wait for the text anyway (batch and scheduled work).
    ``shared_hosts``: how many actors host the agents of classes with ``hosting = "shared"``, many agents to a
    process, spread over the nodes (default 0: one per CPU the cluster has now). An agent's host is fixed by its
    path and this count: drivers that join a cluster grown since should pass the first one's count.
    ``stream_channels``: the chunks of a streamed call between processes (a model server to an agent, an agent to
    the gateway, a parent or this driver) travel over a direct TCP connection between the two processes, on the
    node's address, while Ray still starts, cancels and watches the call (the default: at a provider's pace each
    chunk would otherwise cost a Ray stream item, about a millisecond of CPU). False sends them as Ray items; so
    does a process that cannot reach the caller's address (nodes whose firewall opens only Ray's own ports).
    ``stream_latency_ms``: how long each process on a stream's way (the model server, the agent) may hold chunks
    to send them together, in milliseconds (default 0: each chunk leaves as soon as it is ready). At a provider's
    pace a token arrives every 10-30 ms, so every token is a send and a wake-up of the next process; a budget of
    a few tens of milliseconds, invisible to a reader, sends two or three tokens at a time and cuts the CPU each
    conversation costs (docs/performance.md measures it). The reader sees tokens in small bursts, each at most this
    much later per process on the way (the first token too), never out of order.
    ``restart_wait_s``: how long a handle's call that is safe to send again waits for an agent whose actor Ray is
    restarting (after a crash) before it raises ``AgentUnavailableError`` (default 60 s): reads (``get_messages``,
    ``inspect_submission``, ``list_submissions``, ``wait_for_submission``, ``search_messages``, ...), a
    submission with its ``submission_id`` or ``idempotency_key``, and ``attach`` with a position (what
    ``stream.resume()`` sends). A call that may have run before the crash (``chat``, ``save_messages``, a
    submission without a key) is not sent again: it raises at once and says how to follow the turn.
    Calling it again returns the same config.
    """
    global _config
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    resolved_dir = os.path.abspath(data_dir or os.environ.get("THINK_ACTORS_DATA_DIR") or ".think_actors")
    store_url = store or os.environ.get(STORE_ENV) or ""
    store_url = check_store_url(store_url) if store_url else ""
    stream_latency_s = _latency_s(stream_latency_ms)
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {
            "address": address or "local",
            "namespace": namespace,
            "include_dashboard": False,
            "log_to_driver": not quiet,
            "logging_level": logging.ERROR if quiet else logging.INFO,
        }
        if kwargs["address"] == "local":
            kwargs["num_cpus"] = num_cpus
            # Workers import agent classes by module name: give them the driver's import path.
            paths = [os.path.abspath(p or ".") for p in sys.path if os.path.isdir(p or ".")]
            kwargs["runtime_env"] = {
                "env_vars": {
                    "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths)),
                    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                    "THINK_ACTORS_DATA_DIR": resolved_dir,
                    **({STORE_ENV: store_url} if store_url else {}),
                    **otel_env(),  # the exporter's own knobs (OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES, ...)
                },
                # Every worker imports the runtime before its first task, a warm one before any agent needs it.
                "worker_process_setup_hook": SETUP_HOOK,
            }
        kwargs.update(ray_kwargs)
        ray.init(**kwargs)
    start_pools(warm_workers, warm_memory_share, namespace)  # each node's pool boots them in the background
    _config = RuntimeConfig(
        namespace=namespace,
        data_dir=resolved_dir,
        store_url=store_url,
        model_pool_size=model_pool_size,
        max_restarts=max_restarts,
        log_level=logging.WARNING if quiet else logging.INFO,
        idle_timeout_s=idle_timeout_s,
        # Decided here, in the driver, so every model server of the cluster follows the driver's setting.
        fast_model_path=_fast_path_setting(fast_model_path),
        warm_workers=warm_workers,
        warm_memory_share=warm_memory_share,
        first_chunk_at_once=first_chunk_at_once,
        # Fixed here: an agent's host is its path's hash over this count, the same in every process of the job.
        shared_hosts=shared_hosts or max(1, int(ray.cluster_resources().get("CPU", 1))),  # type: ignore[no-untyped-call]
        tracing=configure_tracing(tracing),  # decided in the driver, for every actor (and this process)
        stream_channels=stream_channels,
        stream_latency_s=stream_latency_s,
        restart_wait_s=restart_wait_s,
    )
    return _config


def _latency_s(milliseconds: float) -> float:
    if not 0 <= milliseconds <= 1000:
        raise ConfigurationError(
            f"stream_latency_ms={milliseconds!r}: give the milliseconds a chunk may wait to travel with the next "
            "ones, from 0 (send each at once, the default) to 1000; a few tens is invisible to a reader"
        )
    return milliseconds / 1000


def _fast_path_setting(setting: bool | None) -> bool:
    return fast_path_enabled(setting)  # models.fast_path has no litellm: the driver never loads it


def is_initialized() -> bool:
    return _config is not None and ray.is_initialized()


_at_shutdown: list[Callable[[], None]] = []


def at_shutdown(close: Callable[[], None]) -> None:
    """Have ``shutdown`` call ``close`` (what a module above this one opened in the driver: its threads, pools)."""
    if close not in _at_shutdown:
        _at_shutdown.append(close)


def shutdown() -> None:
    """Disconnect from Ray (a local cluster started by ``init`` stops with it), after closing what the runtime
    opened in this process (``at_shutdown``)."""
    global _config
    for close in list(_at_shutdown):
        try:
            close()
        except Exception:
            logging.getLogger("think_actors").exception("closing %r at shutdown failed", close)
    _config = None
    if ray.is_initialized():
        ray.shutdown()


def _require_config() -> RuntimeConfig:
    if _config is None:
        if ray.is_initialized():
            return init()
        raise ConfigurationError("think_actors runtime is not started: call ta.init() first")
    return _config


def current_config() -> RuntimeConfig | None:
    """This process's runtime config, or None before ``init`` (or an actor's set-up)."""
    return _config


def _set_current(config: RuntimeConfig) -> None:
    """Make ``config`` this process's runtime config (an actor's set-up: it was shipped from the driver)."""
    global _config
    _config = config
