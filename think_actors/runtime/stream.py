"""``RemoteStream``: the chunks of a streamed remote call, unbatched, resumable after the agent's actor died."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import ray
from ray.exceptions import ActorUnavailableError, RayActorError, RayTaskError

from .._turn.journal import units
from ..batching import _is_last, _unpack
from ..errors import (
    AgentUnavailableError,
    ConfigurationError,
)
from .calls import _hibernated, _unwrap


class _Resumable(Protocol):
    """What a stream needs of its agent's handle: wake a hibernating agent, follow a resumed turn."""

    path: str
    _actor: Any

    async def _wake(self) -> None: ...

    def attach(self, request_id: str, *, position: int | None = None) -> RemoteStream: ...


class RemoteStream:
    """Chunks of a streamed remote call, unbatched. Closing it early cancels the remote turn.

    When the actor dies during a turn, the error says so and names the turn: the restarted actor resumes it,
    and ``resume()`` follows the resumed turn from ``position``, the units (``journal.units``) of the turn's
    stream this caller received: every chunk of the reply reaches it once. A chunk reaches the caller only once
    the agent's log holds it, so what the caller saw is what the recovery continues from.
    """

    def __init__(
        self,
        generator: Any,
        request_id: str | None = None,
        *,
        resumable: bool = False,
        handle: _Resumable | None = None,
        restart: Callable[[], Any] | None = None,
        position: int | None = None,
    ):
        self.request_id = request_id
        self.position = position  # None: this stream does not know where in its turn's stream it began
        self._resumable = resumable
        self._generator = generator
        self._items: AsyncIterator[Any] | None = None
        self._done = False
        self._handle = handle  # with ``restart``: a call that found the agent hibernating wakes it and is resent
        self._restart = restart
        self._received = False

    def __aiter__(self) -> AsyncIterator[Any]:
        # An async generator: ``async for`` then takes each chunk without a coroutine of ours per chunk.
        if self._items is None:
            self._items = self._unbatched()
        return self._items

    async def __anext__(self) -> Any:
        return await self.__aiter__().__anext__()

    async def _unbatched(self) -> AsyncIterator[Any]:
        while not self._done:
            if self._generator is None:  # a provisioned agent: start it, then the call
                assert self._handle is not None and self._restart is not None
                await self._handle._wake()
                self._generator = self._restart()
            try:
                data = await (await self._generator.__anext__())
            except StopAsyncIteration:
                self._done = True
                return
            except (RayTaskError, RayActorError, ActorUnavailableError) as err:
                handle, restart = self._handle, self._restart
                if (
                    not self._received
                    and handle is not None
                    and restart is not None
                    and _hibernated(err, handle.path, handle._actor)
                ):
                    await handle._wake()  # nothing of the call ran: the agent was hibernating
                    self._generator = restart()
                    self._restart = None  # once
                    continue
                self._done = True
                error = _unwrap(err)
                if self._resumable and isinstance(error, AgentUnavailableError):
                    raise AgentUnavailableError(
                        f"the agent actor died during turn {self.request_id!r}; it restarts and resumes the turn "
                        f"from its store: follow it with stream.resume(), which is "
                        f"handle.attach({self.request_id!r}, position={self.position}) ({err})",
                        request_id=self.request_id,
                        retryable=True,
                    ) from None
                raise error from None
            self._received = True
            if _is_last(data):
                # The remote generator has returned: end here rather than wait for Ray's end-of-stream message.
                self._done = True
            if self.position is None:
                for item in _unpack(data):
                    yield item
                continue
            for item in _unpack(data):
                self.position += units(item)
                yield item

    def resume(self) -> RemoteStream:
        """The rest of this stream's turn after an interruption, from ``position``: ``handle.attach(request_id,
        position=...)``. Resume the stream it returns in turn if that is interrupted too."""
        if self._handle is None or self.request_id is None or self.position is None:
            raise ConfigurationError(
                "only a chat() stream, or an attach() stream given a position, knows where to resume from"
            )
        return self._handle.attach(self.request_id, position=self.position)

    async def aclose(self) -> None:
        if not self._done:
            self._done = True
            if self._generator is not None:
                ray.cancel(self._generator)

    async def collect(self) -> list[Any]:
        return [item async for item in self]
