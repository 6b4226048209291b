"""The rooms of a gateway: the sockets of one agent, the streams they follow, and sending to all of them.

A ``_Room`` is the gateway's state for one agent (``{class slug}/{name}``): its sockets, the stream running now
and the last one, the sockets resuming or replaying it, and the bookkeeping of its chat requests. It lives while
a socket is open or a turn it relays runs (``_release``). ``Rooms`` is the base of the gateway's parts: the rooms,
the tasks that relay turns, and the sends every part uses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from aiohttp import WSCloseCode, web

from ..agent import Think
from . import protocol
from .directory import AgentDirectory
from .security import OriginPolicy
from .wire import _transcript_frame

__all__ = ["OWN_KEPT", "Rooms"]

OWN_KEPT = 256


class _Stream:
    """The response frames of one turn so far, for sockets that resume it (reference §3.7)."""

    def __init__(self, request_id: str, continuation: bool) -> None:
        self.request_id = request_id
        self.continuation = continuation
        self.frames: list[dict[str, Any]] = []
        self.done = False
        # Sockets that have every frame so far: the room's sockets when it started, and the ones that caught up
        # by a replay. While out of the resuming and replaying sets, they follow it live.
        self.followers: set[web.WebSocketResponse] = set()

    def followed_by(self, ws: web.WebSocketResponse, room: _Room) -> bool:
        return ws in self.followers and ws not in room.resuming and ws not in room.replaying


class _Socket(web.WebSocketResponse):
    """A WebSocket that says why before aiohttp closes it for a frame too big to read (1009)."""

    def __init__(self, limit: int, **options: Any) -> None:
        super().__init__(max_msg_size=limit * 2 + 1024, **options)
        self.limit = limit
        self.trace_headers: dict[str, str] = {}  # the upgrade request's W3C trace context: its turns' parent
        self.principal: Any = None  # who opened it (access.py): its turns act for them

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        if code == WSCloseCode.MESSAGE_TOO_BIG and not self.closed:
            text = (
                f"a frame over {self.limit * 2 + 1024} bytes (twice the limit of {self.limit} bytes, and 1 KiB) "
                "is not read: the socket closes (1009, message too big)"
            )
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self.send_str(protocol.dumps({"type": protocol.ERROR, "error": text}))
            message = message or b"frame too big"
        return await super().close(code=code, message=message, drain=drain)


class _Room:
    """The sockets of one agent, the agent's events that every one of them must see, and its streams."""

    def __init__(self, key: str) -> None:
        self.key = key  # "{class slug}/{name}"
        self.sockets: set[web.WebSocketResponse] = set()
        self.unsubscribe: list[Callable[[], None]] = []
        self.active: _Stream | None = None  # the stream running now
        self.last: _Stream | None = None  # the last one that ended
        self.terminal: _Stream | None = None  # the last stream, if it ended in an error nobody has replayed yet
        self.resuming: set[web.WebSocketResponse] = set()  # told RESUMING, replay after their ACK
        self.replaying: set[web.WebSocketResponse] = set()  # ACKed, catching up on the stream's frames so far
        self.parked: dict[web.WebSocketResponse, Any] = {}  # told PENDING: a stream is on its way
        # Sockets whose tool answer asked for the continuation: told RESUMING when it starts (reference).
        self.awaiting: dict[web.WebSocketResponse, Any] = {}
        self.owner: web.WebSocketResponse | None = None  # the socket whose answer last asked for a continuation
        self.agent_class: type[Think] | None = None
        self.turns = asyncio.Lock()  # the room's chat requests, one at a time, in arrival order
        self.in_flight = 0  # chat requests accepted and not yet done
        self.generation = 0  # a clear starts a new one: requests from before it are skipped, never overlapped
        self.current = 0  # requests of this generation accepted and not yet done
        self.newest = 0  # the newest overlapping request's sequence number (latest / merge / debounce)
        self.sequence = 0
        self.expecting = False  # a tool answer asked to auto-continue and its continuation has not started
        self.relayed: dict[str, asyncio.Event] = {}  # tool call id -> set once its message update went out
        self.latest: str | None = None  # the newest accepted request while any is in flight (told with PENDING)
        # The ids of the room's own requests, which it relays itself: their stream:start is not followed. Kept
        # past the turn (on Ray the event may trail the turn's own stream), the newest OWN_KEPT of them.
        self.own: dict[str, None] = {}
        self.clearing = 0  # the room's own clears whose message:clear has not come yet (they are broadcast)
        self.mcp_sent: str | None = None  # the last cf_agent_mcp_servers frame the room's sockets got
        # Who pays for the continuations this gateway's sockets asked for (a tool answer with autoContinue), in
        # order: their tokens are counted when each ends (access.py). Only the gateway that took the answer has it.
        self.payers: list[Any] = []

    async def send(self, text: str, *, skip: web.WebSocketResponse | None = None, live: bool = False) -> None:
        """Send to every socket; a stream's ``live`` frames skip the sockets that are to get them by replay."""
        for ws in list(self.sockets):
            if ws is skip or ws.closed or (live and (ws in self.resuming or ws in self.replaying)):
                continue
            try:
                await ws.send_str(text)
            except (ConnectionError, RuntimeError):  # a socket that went away mid-broadcast
                self.sockets.discard(ws)


class Rooms:
    """The rooms and the relaying tasks of a gateway (``Gateway`` builds on this)."""

    directory: AgentDirectory
    token: str | None
    origins: OriginPolicy
    max_frame_bytes: int
    _rooms: dict[str, _Room]
    _tasks: set[asyncio.Task[None]]

    def _release(self, room: _Room) -> None:
        """The last socket of an idle agent left: stop following the agent (so it may hibernate, and keeps no
        chunks for a gateway); what the room must remember (how the last turn failed) is stored with the agent,
        and a new socket opens a new room. Checked when a socket leaves and when a turn it was relaying ends."""
        if room.sockets or room.in_flight or room.active is not None or room.expecting:
            return
        if self._rooms.get(room.key) is room:
            del self._rooms[room.key]
        for unsubscribe in room.unsubscribe:
            unsubscribe()
        room.unsubscribe.clear()

    async def _send_messages(self, ws: web.WebSocketResponse, agent: Any, *, connect: bool = False) -> None:
        await ws.send_str(await _transcript_frame(agent, connect=connect))

    async def _broadcast_messages(self, room: _Room, agent: Any, *, skip: web.WebSocketResponse | None = None) -> None:
        if not any(ws is not skip and not ws.closed for ws in room.sockets):
            return  # nobody to tell: the transcript (a read of the whole history) is not even fetched
        await room.send(await _transcript_frame(agent), skip=skip)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _shutdown(self, app: web.Application) -> None:
        for room in list(self._rooms.values()):  # closing a socket may release its room
            for unsubscribe in room.unsubscribe:
                unsubscribe()
            for ws in list(room.sockets):
                with contextlib.suppress(Exception):
                    await ws.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def turns_idle(self) -> None:
        """Wait until every turn started through this gateway has sent its last frame."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _cleared(room: _Room) -> None:
    """The agent's history was cleared (by a socket, or in process): the room forgets what came before."""
    room.newest = room.sequence  # submits after a clear do not overlap the ones before it
    room.generation += 1  # and the ones still queued are skipped (reference resetTurnState)
    room.current = 0
    room.terminal = None  # the agent's clear forgets its stored copy


def _pending(request_id: str | None, probe: Any) -> dict[str, Any]:
    """``cf_agent_stream_pending``: a turn is accepted and its stream has not started; with its request id when
    one is known, and the probe id of the resume request it answers (reference ``PreStreamTurns.park``)."""
    return {
        "type": protocol.STREAM_PENDING,
        **({"id": request_id} if request_id else {}),
        **({"probeId": probe} if probe else {}),
    }
