"""Relaying turns to a room: every turn's chunks go to every socket of the agent as response frames, in order,
kept for resumes, whatever started the turn: a socket's chat request, or (followed through the agent's events)
a background turn, a turn started in process or through another gateway; and so do message updates, clears,
recovery and compaction notices, and changes of the agent's MCP servers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from ..errors import ThinkError
from ..mcp.manager import MCP_SERVERS_CHANGED
from . import protocol
from .access import Access
from .resume import Resumes, _bounded
from .rooms import _cleared, _Room, _Stream
from .wire import _NO_CONTENT, _agent_tool_frame, wire_message

__all__ = ["Relays"]

log = logging.getLogger("think_actors.gateway")

_BACKGROUND = frozenset({"auto-continuation", "recovery", "submission"})


class Relays(Resumes):
    """Following an agent and pumping its turns to the room (``Gateway`` builds on this)."""

    access: Access  # who may do what, and how much (Gateway sets it): continuations' tokens are counted here

    async def _follow(self, room: _Room, agent: Any) -> None:
        """Relay what the agent does without a socket asking: message updates, clears, and the streams of every
        turn the sockets did not ask for (auto-continuations, recoveries, submissions, and turns started in
        process or through another gateway: Think broadcasts every turn) to every socket."""

        def on_message(event: Any) -> None:
            if event.type == "message:updated":
                frame = {"type": protocol.MESSAGE_UPDATED, "message": wire_message(event.payload["message"])}
                self._spawn(self._relay_update(room, frame))
            elif event.type == "message:clear":
                if room.clearing:  # a socket's own clear, broadcast when it was made
                    room.clearing -= 1
                    return
                _cleared(room)
                self._spawn(room.send(protocol.dumps({"type": protocol.CHAT_CLEAR})))
            elif event.type == MCP_SERVERS_CHANGED:
                # A server connected, failed, was added or removed, or its tools changed: every socket hears.
                states = event.payload.get("servers") or {}
                mcp = protocol.mcp_servers_state(states) if states else protocol.EMPTY_MCP_STATE
                sent = protocol.dumps({"mcp": mcp, "type": protocol.MCP_SERVERS})
                if sent != room.mcp_sent:
                    room.mcp_sent = sent
                    self._spawn(room.send(sent))

        def on_stream(event: Any) -> None:
            request_id = event.payload.get("requestId")
            if event.type == "stream:start" and isinstance(request_id, str) and request_id not in room.own:
                continuation = bool(event.payload.get("continuation"))
                self._spawn(self._pump(room, agent, request_id, agent.attach(request_id), continuation=continuation))

        def on_chat(event: Any) -> None:
            if event.type in ("chat:recovery:detected", "chat:recovery:completed", "chat:recovery:exhausted"):
                recovering = event.type == "chat:recovery:detected"
                frame = {"type": protocol.CHAT_RECOVERING, "recovering": recovering, "id": event.payload["requestId"]}
                self._spawn(room.send(protocol.dumps(frame)))
            elif event.type == "chat:context:compacted":
                frame = {"type": protocol.SESSION, "phase": "idle", "compacted": bool(event.payload.get("shortened"))}
                self._spawn(room.send(protocol.dumps(frame)))
            if event.type == "chat:turn:finish" and event.payload.get("continuation") and room.payers:
                usage = event.payload.get("usage") or {}
                tokens = int(usage.get("inputTokens") or 0) + int(usage.get("outputTokens") or 0)
                self._spawn(self.access.turn_used(room.payers.pop(0), tokens))
            if event.type == "chat:turn:start" and event.payload.get("trigger") in _BACKGROUND:
                request_id = event.payload["requestId"]
                continuation = bool(event.payload.get("continuation"))
                self._spawn(self._pump(room, agent, request_id, agent.attach(request_id), continuation=continuation))

        room.unsubscribe.append(await agent.observe("agents:message", on_message))
        room.unsubscribe.append(await agent.observe("agents:chat", on_chat))
        # While subscribed, the agent keeps the chunks of turns nothing else follows, for attach (_turn/relay.py).
        room.unsubscribe.append(await agent.observe("agents:stream", on_stream))

    @staticmethod
    async def _relay_update(room: _Room, frame: dict[str, Any]) -> None:
        await room.send(protocol.dumps(frame))
        for part in frame["message"].get("parts") or ():
            relayed = room.relayed.get(str(part.get("toolCallId"))) if isinstance(part, dict) else None
            if relayed is not None:
                relayed.set()

    async def _pump(
        self,
        room: _Room,
        agent: Any,
        request_id: str,
        chunks: Any,
        *,
        continuation: bool,
        origin: Any = None,
        started: asyncio.Event | None = None,
    ) -> None:
        """Send a turn's chunks to every socket of the room as response frames, keeping them for resumes.

        As the reference does, the stored transcript goes out before the terminal frame, and terminal frames
        carry the ids of the user messages the request brought (``messageIds``)."""
        stream = room.active = _Stream(request_id, continuation)
        waiting = set(room.parked)  # sockets waiting for a stream to start
        room.parked.clear()
        if continuation:
            room.expecting = False
            waiting.update(room.awaiting)  # and the ones whose answer asked for this continuation
            room.awaiting.clear()
        stream.followers = room.sockets - waiting  # they get every frame live

        async def send(frame: dict[str, Any]) -> None:
            stream.frames.append(frame)
            if waiting:
                # Told RESUMING once the stream has its first frame, so their ACK replays it (reference: its stream
                # starts with its start chunk stored). As the reference, without the probe id they were told
                # PENDING with: this is the stream starting, not an answer.
                for ws in [ws for ws in waiting if not ws.closed and ws not in room.resuming]:
                    await self._offer_resume(ws, room, None)
                waiting.clear()
            await room.send(protocol.dumps(frame), live=True)
            if started is not None:
                started.set()

        try:
            terminal, stored = await self._relay(request_id, chunks, send, continuation, origin)
            try:
                if stored:  # as the reference: a turn that produced nothing stored nothing to show
                    await self._broadcast_messages(room, agent)
            except Exception:  # the agent went away after its turn: the terminal frame still goes out
                log.exception("could not send the transcript after turn %s", request_id)
            room.resuming.clear()  # as the reference: sockets that never ACKed hear how the stream ended
            await send(terminal)
        finally:
            stream.done = True
            if room.active is stream:
                room.active = None
            room.last = stream
            room.terminal = stream if any(f.get("error") for f in stream.frames) else None
            if room.terminal is not None:  # kept with the agent: a restarted gateway still replays it
                with contextlib.suppress(Exception):
                    await agent.remember_chat_terminal({"requestId": request_id, "frames": _bounded(stream.frames)})
            self._release(room)  # its sockets may have left while it streamed

    @staticmethod
    async def _relay(
        request_id: str, chunks: Any, send: Any, continuation: bool, origin: list[str] | None
    ) -> tuple[dict[str, Any], bool]:
        """Send a turn's chunks as response frames. Returns the terminal frame to send once the turn is stored,
        and whether the turn produced any content (the reference broadcasts the transcript only then)."""
        ids = {"messageIds": origin} if origin else {}
        aborted = failed = produced = False
        seq = 0
        try:
            async for chunk in chunks:
                aborted = aborted or chunk.type == "abort"
                failed = failed or chunk.type == "error"
                produced = produced or chunk.type not in _NO_CONTENT
                if chunk.type == "abort":
                    continue  # as the reference: an aborted stream just ends, and the terminal frame says so
                if chunk.type == "agent-tool-event":
                    # A child agent's progress goes out as its own frame, as the reference sends it: clients
                    # that know no such chunk type never see one inside their UI message stream.
                    await send(_agent_tool_frame(chunk))
                    continue
                if chunk.type == "error":
                    frame = protocol.response(
                        request_id, chunk.error_text, done=False, error=True, continuation=continuation
                    )
                    await send({**frame, **ids})
                else:
                    body = protocol.dumps(chunk.to_wire())
                    frame = protocol.response(request_id, body, done=False, continuation=continuation)
                    frame["seq"] = seq  # lets a client skip replayed chunks it already applied
                    seq += 1
                    await send(frame)
        except Exception as err:
            text = err.message if isinstance(err, ThinkError) else str(err) or type(err).__name__
            log.warning("turn %s through the gateway failed: %s", request_id, text)
            terminal = protocol.response(request_id, text, done=True, error=True, continuation=continuation)
            return {**terminal, **ids}, True
        terminal = protocol.response(request_id, "", done=True, continuation=continuation)
        terminal["outcome"] = "error" if failed else "aborted" if aborted else "completed"
        return {**terminal, **ids}, produced
