"""The per-node pool of model-server actors that serve string model ids (agents never import litellm).

A ``ModelServer`` actor runs ``LiteLLMClient`` calls; agents on its node reach it through ``PooledModel``, which
asks a restarting server again while nothing was streamed and otherwise fails with a retryable error the turn's
recovery resumes.

Traced, a call carries the agent's ``chat <model>`` span context and the agent's tracing config: the server's own
``chat <model>`` span (kind SERVER, with what the provider answered) is its child. The config travels with the
call because the servers are detached and shared: one started before tracing was turned on (by an earlier driver,
or by ``think-actors serve``) still traces the calls of agents that trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import tracing
from ..batching import _batches
from ..errors import AgentUnavailableError, ModelServerUnavailableError
from ..logs import configure_logging
from ..models import FinishEvent, ModelEvent, ModelInfo, ModelRequest, ResponseMetadata
from .calls import _call
from .channel import ReplyTo, deliver
from .config import RuntimeConfig
from .stream import RemoteStream, open_channel

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
        _configure_tracing(config.tracing)  # the driver's decision, never this worker's own environment
        self.config = config
        self.client = AutoModelClient(fast_path=config.fast_model_path)

    async def stream(
        self,
        request: ModelRequest,
        trace: dict[str, str] | None = None,
        tracing_config: tracing.TracingConfig | None = None,
        reply_to: ReplyTo | None = None,
    ) -> AsyncIterator[bytes]:
        """Stream one call's events in batches, to ``reply_to`` when given (``channel.deliver``); under a span when
        the agent sent its trace context and config."""
        events: AsyncGenerator[ModelEvent, None] = self.client.stream(request)
        if trace and tracing_config is not None:
            events = _traced(events, request.model, trace, tracing_config)
        async for item in deliver(functools.partial(_batches, events), self.config, reply_to):
            yield item

    async def model_info(self, model: str) -> ModelInfo | None:
        return await self.client.model_info(model)

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        return await self.client.count_tokens(model, messages)


def _configure_tracing(config: tracing.TracingConfig | None) -> None:
    """Trace as ``config`` says: the driver's when the server starts, then the calling agent's."""
    tracing.configure(config or False, node_id=ray.get_runtime_context().get_node_id())


async def _traced(
    events: AsyncGenerator[ModelEvent, None], model: str, trace: dict[str, str], config: tracing.TracingConfig
) -> AsyncGenerator[ModelEvent, None]:
    """``events`` under the server's ``chat <model>`` span, a child of the agent's; it ends with the stream."""
    if config != tracing.current_config():
        _configure_tracing(config)
    tracing.adopt(trace)  # in the task that reads the call's events (_batches' pump), theirs alone
    span = tracing.start_chat(model=model, kind="server")
    finish = FinishEvent()
    response = ResponseMetadata()
    try:
        async with contextlib.aclosing(events) as source:
            async for event in source:
                if isinstance(event, FinishEvent):
                    finish = event
                elif isinstance(event, ResponseMetadata):
                    response = event
                yield event
    except BaseException as err:
        tracing.fail_chat(span, err)
        raise
    usage = finish.usage
    tracing.end_chat(
        span,
        finish_reason=finish.finish_reason or "stop",
        input_tokens=usage.input_tokens if usage is not None else None,
        output_tokens=usage.output_tokens if usage is not None else None,
        response_model=response.model,
        response_id=response.id,
        cost_usd=finish.cost_usd,
    )


_SERVER_RESTART_S = 15.0  # how long a request waits for a restarting model server before it fails


class PooledModel:
    """A ModelClient that streams from a model-server actor on this node."""

    def __init__(self, servers: list[Any]):
        self._servers = servers
        self._next = 0
        self._model_info: dict[str, ModelInfo | None] = {}
        self._up: list[Any] = []  # the servers known to have started, in the order they did
        self._watches: list[asyncio.Task[None]] = []  # their starts, watched from the first call in a loop

    def _server(self) -> Any:
        """The next server, round robin over those that have started: a server still booting (litellm's import
        takes seconds) gets no request while another is up, so no call waits for its boot."""
        if not self._watches:
            self._watch_starts()
        servers = self._up or self._servers
        server = servers[self._next % len(servers)]
        self._next += 1
        return server

    def _watch_starts(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop yet: plain round robin until a call from one
        self._watches = [loop.create_task(self._started(server)) for server in self._servers]

    async def _started(self, server: Any) -> None:
        with contextlib.suppress(Exception):  # a server that fails to start is asked anyway, and says why
            await server.__ray_ready__.remote()
            self._up.append(server)

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        deadline = time.monotonic() + _SERVER_RESTART_S
        while True:
            call = self._server().stream.options(num_returns="streaming")
            # Traced, the agent's chat span (current while its model call runs) is the parent of the server's;
            # untraced, the call is what it always was.
            trace = tracing.carrier()
            reply_to, inbox, inflow = open_channel()
            remote = RemoteStream(
                call.remote(request, trace, tracing.current_config() if trace else None, reply_to=reply_to),
                channel=(inbox, inflow),
            )
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

    async def start(node: str) -> None:  # the nodes' servers boot side by side, each node's set marked when up
        await asyncio.gather(*(_call(server.__ray_ready__.remote()) for server in _node_pool(config, node)))
        started.add(node)

    await asyncio.gather(*(start(node) for node in nodes))
    return nodes


class PoolResolver:
    def __init__(self, config: RuntimeConfig):
        self.config = config
        self._client: PooledModel | None = None

    def __call__(self, model_id: str) -> PooledModel:
        if self._client is None:
            self._client = PooledModel(_node_pool(self.config, ray.get_runtime_context().get_node_id()))
        return self._client
