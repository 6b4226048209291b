"""The per-node pool of model-server actors that serve string model ids (agents never import litellm).

A ``ModelServer`` actor runs ``LiteLLMClient`` calls; agents on its node reach it through ``PooledModel``, which
asks a restarting server again while nothing was streamed and otherwise fails with a retryable error the turn's
recovery resumes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..batching import _batches
from ..errors import AgentUnavailableError, ModelServerUnavailableError
from ..logs import configure_logging
from ..models import ModelInfo, ModelRequest
from .calls import _call
from .config import RuntimeConfig
from .stream import RemoteStream

__all__ = ["ModelServer", "PoolResolver", "PooledModel", "start_model_pools"]


@ray.remote(num_cpus=0, max_concurrency=100)  # type: ignore[call-overload]
class ModelServer:
    """Serves model calls for the agents of one node (they never import litellm themselves).

    OpenAI-wire providers stream through the fast path unless ``RuntimeConfig.fast_model_path`` is off; every other
    provider through litellm (``AutoModelClient``).
    """

    def __init__(self, config: RuntimeConfig):
        from ..models.auto import AutoModelClient  # here only: litellm costs ~3 s and ~200 MiB, agents never load it

        configure_logging(config.log_level)
        self.config = config
        self.client = AutoModelClient(fast_path=config.fast_model_path)

    async def stream(self, request: ModelRequest) -> AsyncIterator[bytes]:
        async for batch in _batches(self.client.stream(request).__aiter__(), self.config):
            yield batch

    async def model_info(self, model: str) -> ModelInfo | None:
        return await self.client.model_info(model)

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        return await self.client.count_tokens(model, messages)


_SERVER_RESTART_S = 15.0  # how long a request waits for a restarting model server before it fails


class PooledModel:
    """A ModelClient that streams from a model-server actor on this node."""

    def __init__(self, servers: list[Any]):
        self._servers = servers
        self._next = 0
        self._model_info: dict[str, ModelInfo | None] = {}

    def _server(self) -> Any:
        server = self._servers[self._next % len(self._servers)]
        self._next += 1
        return server

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        deadline = time.monotonic() + _SERVER_RESTART_S
        while True:
            remote = RemoteStream(self._server().stream.options(num_returns="streaming").remote(request))
            started = False
            try:
                try:
                    async for event in remote:
                        started = True
                        yield event
                    return
                except AgentUnavailableError as err:
                    if not started and time.monotonic() < deadline:
                        # Nothing was streamed yet, so asking again is safe: the server is restarting.
                        await asyncio.sleep(0.2)
                        continue
                    # The model server died, not the provider: a retryable project error; the turn is resumed.
                    raise ModelServerUnavailableError(
                        f"the model-server actor died mid-stream: {err.message}", retryable=True
                    ) from None
            finally:
                await remote.aclose()

    async def model_info(self, model: str) -> ModelInfo | None:
        """The model's limits and prices from a model server, remembered per model id in this process."""
        # A failed call raises and is not remembered; an unknown model (None) is.
        if model not in self._model_info:
            self._model_info[model] = await _call(self._server().model_info.remote(model))
        return self._model_info[model]

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        """The prompt's size by ``model``'s tokenizer, counted in a model server (this process has no litellm)."""
        count: int | None = await _call(self._server().count_tokens.remote(model, messages))
        return count


def _node_pool(config: RuntimeConfig, node: str) -> list[Any]:
    """The model servers of ``node``, named after it: got if they run, else started there."""
    return [
        ModelServer.options(  # type: ignore[attr-defined]
            name=f"think_actors/model-server/{node}/{i}",
            namespace=config.namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,  # a dead server comes back; the turn it was serving is resumed by recovery
            # Without a resource request Ray ignores soft node affinity (see runtime.placement): one byte.
            memory=1,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
        ).remote(config)
        for i in range(max(1, config.model_pool_size))
    ]


async def start_model_pools(config: RuntimeConfig, started: set[str]) -> list[str]:
    """Start the model-server pool of every live node not in ``started`` and wait until its servers are up (a
    node's pool otherwise starts at its first string model id); returns those nodes, now also in ``started``."""
    live = ray.nodes()  # type: ignore[no-untyped-call]
    nodes = [n["NodeID"] for n in live if n.get("Alive") and n["NodeID"] not in started]
    for node in nodes:
        await asyncio.gather(*(_call(server.__ray_ready__.remote()) for server in _node_pool(config, node)))
        started.add(node)
    return nodes


class PoolResolver:
    def __init__(self, config: RuntimeConfig):
        self.config = config
        self._client: PooledModel | None = None

    def __call__(self, model_id: str) -> PooledModel:
        if self._client is None:
            self._client = PooledModel(_node_pool(self.config, ray.get_runtime_context().get_node_id()))
        return self._client
