"""Getting agents by class and name: ``spawn`` (get or create), ``get`` (wake), ``provision`` (addressable, not
started), ``list_agents``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import ray

from .. import registry
from ..agent import Think, kebab_case
from ..errors import (
    AgentUnavailableError,
    ConfigurationError,
)
from ..store import agent_path
from .class_schedules import declare_class, register_agent
from .config import _require_config
from .handles import AgentHandle, _spawn_path, start_shared_host

log = logging.getLogger("think_actors")


async def spawn(agent_class: type[Think], name: str, *, node_id: str | None = None, **options: Any) -> AgentHandle:
    """Get or create the agent ``name`` of ``agent_class`` as a named actor; its history loads from its store.

    ``options`` go to the class's constructor (``model=``, ``instructions=``, ``data_dir=`` ...) when the actor
    is created; an existing actor is returned as it is. New agents are spread over the nodes; ``node_id`` (a hex
    id from ``ray.nodes()``) asks for that node, softly: if it is gone, Ray places the agent elsewhere.
    """
    config = _require_config()
    path = agent_path(kebab_case(agent_class.__name__), name)
    if isinstance(agent_class, type) and issubclass(agent_class, Think):
        try:  # what the class declares now; its actor's start writes this agent's rows
            await declare_class(agent_class, options, config)
        except Exception:
            log.exception("the schedules of %s could not be recorded; its agents' starts register them", agent_class)
    return await _spawn_path(agent_class, name, path, options, config, node_id)


async def get(agent_class: type[Think], name: str) -> AgentHandle:
    """The existing agent ``name`` of ``agent_class``, woken if it hibernates; AgentUnavailableError if the
    cluster never started it."""
    config = _require_config()
    path = agent_path(kebab_case(agent_class.__name__), name)
    try:
        actor = ray.get_actor(path, namespace=config.namespace)
    except ValueError:
        if registry.lookup(config.namespace, path) is None:
            raise AgentUnavailableError(
                f"no agent {path!r} in namespace {config.namespace!r}: start it with ta.spawn", agent=path
            ) from None
        handle = AgentHandle(None, path, agent_class.__name__)
        await handle._wake()
        return handle
    return AgentHandle(actor, path, agent_class.__name__)


def provision(agent_class: type[Think], name: str, **options: Any) -> AgentHandle:
    """Make the agent ``name`` addressable without starting its actor: the first call through the handle (or
    ``get``, ``spawn``, the gateway) starts it, as it wakes a hibernated one. An agent that exists is left as it
    is. Costs one registry write, no process: a cluster can hold far more agents than it can keep resident.

    A class that declares ``schedules`` gets the agent's rows in the schedule store now (one transaction; an
    agent provisioned again keeps them as they are), so the cluster's scheduler fires them before the agent
    ever ran; its first due prompt starts it."""
    if not (isinstance(agent_class, type) and issubclass(agent_class, Think)):
        raise ConfigurationError(f"provision needs a Think subclass, got {agent_class!r}")
    config = _require_config()
    path = agent_path(kebab_case(agent_class.__name__), name)
    options = dict(options)
    options.setdefault("data_dir", config.data_dir)
    # The class's schedules first: a provisioned agent may never start to register them itself (class_schedules).
    register_agent(agent_class, path, options, config)
    registry.record_provisioned(config.namespace, path, agent_class, name, options)
    if agent_class.hosting == "shared":
        start_shared_host(config, path)  # its first call then loads it into a running process
    return AgentHandle(None, path, agent_class.__name__)


@dataclass(frozen=True, slots=True)
class AgentListing:
    """The agents of a namespace: every one addressable, and which are resident on which node."""

    agents: list[registry.AgentRecord]

    @property
    def addressable(self) -> int:
        """How many agents a call can reach (resident or not)."""
        return len(self.agents)

    @property
    def resident(self) -> int:
        """How many agents have a running actor."""
        return sum(1 for a in self.agents if a.resident)

    def resident_by_node(self) -> dict[str, int]:
        """The resident agents per node id."""
        counts: dict[str, int] = {}
        for agent in self.agents:
            if agent.resident:
                counts[agent.node_id] = counts.get(agent.node_id, 0) + 1
        return counts


def list_agents() -> AgentListing:
    """Every agent the cluster has started in this namespace: resident (its actor runs, on which node) or
    hibernated (only its store holds it; the next call wakes it)."""
    config = _require_config()
    return AgentListing(registry.list_records(config.namespace))
