"""The gateway on Ray: one ``GatewayServer`` actor per machine of the cluster (``think-actors serve``)."""

from __future__ import annotations

from typing import Any

import ray
from aiohttp import web

from ..errors import ConfigurationError
from ..runtime import RuntimeConfig, _call, _process_setup, _require_config
from .app import Gateway
from .classes import agent_classes, app_access
from .directory import RayDirectory

__all__ = ["GatewayServer", "forget_dead", "start_gateways"]


@ray.remote(num_cpus=0, max_concurrency=1000)  # type: ignore[call-overload]
class GatewayServer:
    """The WebSocket gateway in an actor of its own on one node (``think-actors serve`` starts one per node)."""

    def __init__(self, config: RuntimeConfig, app_module: str, options: dict[str, Any]):
        _process_setup(config)
        self.app_module = app_module
        self.gateway_options = options
        self.runner: Any = None

    async def start(self, host: str, port: int, reuse_port: bool = False) -> str:
        """Serve on ``host:port``; with ``reuse_port`` beside the node's other gateways on the same port (the
        kernel spreads new connections over them)."""
        # The module's authenticate / authorize / quotas are read here, in this process: they need not pickle.
        options = {**app_access(self.app_module), **self.gateway_options}
        gateway = Gateway(RayDirectory(agent_classes(self.app_module)), **options)
        self.runner = web.AppRunner(gateway.app())
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, reuse_port=reuse_port or None)
        await site.start()
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        return f"http://{bound[0]}:{bound[1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def start_gateways(
    app_module: str,
    *,
    host: str,
    port: int,
    options: dict[str, Any],
    served: dict[str, str] | None = None,
    per_node: int = 1,
) -> list[tuple[Any, str]]:
    """``per_node`` gateway actors per node address of the cluster, except the addresses in ``served`` (address ->
    the id of the node whose gateways serve it; the new ones are added to it); returns the actors and their URLs.

    A gateway is one process, so one gateway relays at most a core's worth of tokens (docs: Scaling past one
    machine); several per node share the port (``SO_REUSEPORT``: the kernel spreads connections over them), and
    every gateway serves every agent. An address whose serving node is no longer alive is served again: a node
    that restarts at the same address (a Kubernetes pod whose Ray container restarted) gets new gateways, as the
    old ones died with their node."""
    if not isinstance(per_node, int) or per_node < 1:
        raise ConfigurationError(f"gateways per node must be a whole number >= 1, not {per_node!r}")
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    config = _require_config()
    started: list[tuple[Any, str]] = []
    addresses: dict[str, str] = served if served is not None else {}
    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    forget_dead(addresses, nodes)
    for node in nodes:
        address = node.get("NodeManagerAddress")
        if not node.get("Alive") or address in addresses:
            continue  # several simulated nodes on one machine share its port: one gateway per machine
        actors = [
            GatewayServer.options(  # type: ignore[attr-defined]
                namespace=config.namespace,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(config, app_module, options)
            for _ in range(per_node)
        ]
        try:
            # The first binds the port (a port of 0 picks one); the others join it there.
            first = await _call(actors[0].start.remote(host, port, per_node > 1))
            bound = int(first.rsplit(":", 1)[1])
            urls = [first, *[await _call(a.start.remote(host, bound, True)) for a in actors[1:]]]
        except BaseException:
            # Not marked as served: the next look (``serve`` checks every few seconds) starts others, where a
            # gateway killed during its start used to leave the machine without one for good.
            for actor in actors:
                ray.kill(actor)
            raise
        addresses[address] = node["NodeID"]
        started.extend(zip(actors, urls, strict=True))
    return started


def forget_dead(served: dict[str, str], nodes: list[dict[str, Any]]) -> None:
    """Drop from ``served`` the addresses whose serving node is not alive among ``nodes`` (``ray.nodes()``)."""
    alive = {node["NodeID"] for node in nodes if node.get("Alive")}
    for address, node_id in list(served.items()):
        if node_id not in alive:
            del served[address]
