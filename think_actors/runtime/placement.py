"""Where an agent actor goes and how Ray keeps it: its name, lifetime, restarts and node."""

from __future__ import annotations

from typing import Any

from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .config import RuntimeConfig


def _actor_options(config: RuntimeConfig, path: str, node_id: str | None = None) -> dict[str, Any]:
    return {
        "name": path,
        "namespace": config.namespace,
        "get_if_exists": True,
        "lifetime": "detached",  # a child outlives a restarting parent; re-attach finds it by name
        "max_restarts": config.max_restarts,
        "max_task_retries": 0,  # turns are not idempotent: never re-run one behind the caller's back
        "num_cpus": 0,  # agents wait on models and children; they do not compute
        # Ray puts an actor that asks for no resource at all on a random node whatever its strategy (measured with
        # Ray 2.60; ray-project/ray#25360 fixed hard node affinity only): one byte of memory makes SPREAD and soft
        # node affinity hold.
        "memory": 1,
        # Soft: when that node is gone, a restart places the agent on another one.
        "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=True) if node_id else "SPREAD",
        "max_concurrency": 1000,  # cancel_chat and reads must get through while a turn runs
    }
