"""Resuming a stream (reference §3.7): a socket that (re)connects asks for the running stream, is told it is
resuming, and after its ACK gets every frame so far (``replay``), then the live ones; a tab that was away learns
how the last turn failed from the failed stream's frames, kept with the agent."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from . import protocol
from .rooms import Rooms, _pending, _Room, _Stream

__all__ = ["MAX_TERMINAL_FRAMES", "Resumes"]

MAX_TERMINAL_FRAMES = 2000


class Resumes(Rooms):
    """Resume requests, offers and replays (``Gateway`` builds on this)."""

    async def _resume_request(self, ws: web.WebSocketResponse, room: _Room, agent: Any, probe: Any) -> None:
        """A client asks for the running stream (reference ``handleResumeRequest``)."""
        probe_ids = {"probeId": probe} if probe else {}
        upcoming = None
        if room.active is None and room.expecting and (room.owner is None or room.owner is ws):
            # The continuation's id, as the reference tells it; None: none is armed (it ran, or the answer that
            # asked for it matched nothing), so the socket is not told to wait for it.
            upcoming = await agent.pending_continuation_id()
            if upcoming is None and room.active is None:
                room.expecting = False
        active = room.active
        if active is not None:
            if active.continuation and room.owner is not None and room.owner is not ws and room.owner in room.sockets:
                # Another tab asked for this continuation and follows it; this one sees its frames live.
                reply = {"type": protocol.STREAM_RESUME_NONE, "reason": "continuation-owned", **probe_ids}
                await ws.send_str(protocol.dumps(reply))
            elif active.followed_by(ws, room):
                # It follows the stream already: the answer is the same, and it goes on getting every frame live
                # (the reference takes it out of the broadcast until an ACK its client never sends again).
                await ws.send_str(
                    protocol.dumps({"type": protocol.STREAM_RESUMING, "id": active.request_id, **probe_ids})
                )
            else:
                await self._offer_resume(ws, room, probe)
        elif room.expecting and (room.owner is None or room.owner is ws):
            # The continuation is armed (coalescing): the socket hears RESUMING when it starts.
            room.awaiting[ws] = probe
            await ws.send_str(protocol.dumps(_pending(upcoming, probe)))
        elif room.terminal is not None:
            # A tab that was away learns how the last turn failed: its frames, ending in the error.
            await self._offer_resume(ws, room, probe, room.terminal.request_id)
        elif room.in_flight > 0:
            # An accepted request waits for its turn: answer when its stream starts (STREAM_PENDING, then RESUMING).
            room.parked[ws] = probe
            await ws.send_str(protocol.dumps(_pending(room.latest, probe)))
        else:
            await ws.send_str(protocol.dumps({"type": protocol.STREAM_RESUME_NONE, "reason": "idle", **probe_ids}))

    async def _offer_resume(
        self, ws: web.WebSocketResponse, room: _Room, probe: Any, request_id: str | None = None
    ) -> None:
        if request_id is None:
            assert room.active is not None
            request_id = room.active.request_id
        room.resuming.add(ws)
        frame = {"type": protocol.STREAM_RESUMING, "id": request_id}
        await ws.send_str(protocol.dumps({**frame, **({"probeId": probe} if probe else {})}))

    async def _replay(self, ws: web.WebSocketResponse, room: _Room, request_id: Any) -> None:
        """After an ACK: every frame of the stream so far (``replay``), then live frames again."""
        following = room.active is not None and room.active.followed_by(ws, room)
        room.resuming.discard(ws)
        stream = room.active if room.active is not None and room.active.request_id == request_id else None
        if stream is not None and following:
            # It has every frame already (an ACK after a repeated resume request): none is sent twice.
            marker = protocol.response(
                stream.request_id, "", done=False, replay=True, replayComplete=True, continuation=stream.continuation
            )
            await ws.send_str(protocol.dumps(marker))
            return
        if stream is None and room.last is not None and room.last.request_id == request_id:
            stream = room.last
        if stream is None:
            await ws.send_str(protocol.dumps(protocol.response(str(request_id or ""), "", done=True, replay=True)))
            return
        if stream is room.terminal:  # kept (not forgotten) for the other tabs that come back
            for frame in _terminal_replay(stream):
                await ws.send_str(protocol.dumps(frame))
            return
        # The socket stays out of the live broadcast until it has every frame so far, so none is sent twice or
        # out of order; the last check and leaving the replaying set happen with no await between them.
        room.replaying.add(ws)
        sent = 0
        marked = False
        try:
            while True:
                while sent < len(stream.frames):
                    await ws.send_str(protocol.dumps({**stream.frames[sent], "replay": True}))
                    sent += 1
                if not marked and not stream.done:
                    marked = True
                    marker = protocol.response(
                        stream.request_id,
                        "",
                        done=False,
                        replay=True,
                        replayComplete=True,
                        continuation=stream.continuation,
                    )
                    await ws.send_str(protocol.dumps(marker))
                    continue
                if sent == len(stream.frames):
                    stream.followers.add(ws)
                    return
        finally:
            room.replaying.discard(ws)


def _terminal_replay(stream: _Stream) -> list[dict[str, Any]]:
    """The replay of a stream that failed, as the reference's ``_replayTerminalOnAck`` sends it: the content
    frames sent before the error, then one ``{done: true, error: true, body: <error>}``. Live, the error went
    out as a frame of its own and a plain ``done`` followed; the replay does not repeat those. Every frame says
    ``replay``, the terminal too (the reference's has no flag; clients read ``error`` before it)."""
    frames = [{**f, "replay": True} for f in stream.frames if not f.get("error") and not f.get("done")]
    error = next((f["body"] for f in reversed(stream.frames) if f.get("error")), "")
    return [*frames, protocol.response(stream.request_id, str(error), done=True, error=True, replay=True)]


def _bounded(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A failed stream's frames to store for its replay: all of them, or, for a very long one, its error frames."""
    if len(frames) <= MAX_TERMINAL_FRAMES:
        return frames
    return [f for f in frames if f.get("error") or f.get("done")][-MAX_TERMINAL_FRAMES:]
