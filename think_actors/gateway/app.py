"""The WebSocket gateway: the Cloudflare agents chat protocol over aiohttp, in front of think_actors agents.

Routes: ``/agents/{agent-class-in-kebab-case}/{name}`` (WebSocket), ``GET .../get-messages``, ``GET /healthz``.
Every socket of one agent sees the same frames: a turn's chunks go to all of them, in order, whatever started the
turn (a socket, a background turn, ``chat()`` / ``save_messages()`` in process or another gateway: followed through
the agent's ``agents:stream`` events), and so does a clear. A chat request's new messages are stored before its
turn is queued (reference §1.1 order), so a reconnecting tab finds them.

Security (``security.py``): with a token, every request but ``/healthz`` must carry it; a page may use the gateway
only from the gateway's own origin or one listed in ``allowed_origins``; without a token, only requests sent to a
loopback host are served (``serve`` refuses to bind a non-loopback host without one). ``/healthz`` lists the agent
classes only to a request that may use the gateway. A read never creates an agent: one that never ran is a 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from ..agent import Think
from ..errors import InvalidAgentNameError, ThinkError
from ..mcp.manager import MCP_SERVERS_CHANGED
from ..messages import ToolPart, UIMessage
from ..store import validate_agent_name
from . import protocol, security
from .directory import AgentDirectory, LocalDirectory, RayDirectory, _mcp_state, _refused
from .protocol import FrameError

__all__ = ["AgentDirectory", "Gateway", "LocalDirectory", "RayDirectory"]

log = logging.getLogger("think_actors.gateway")

MAX_FRAME_BYTES = 4 * 1024 * 1024
FIRST_FRAME_WAIT_S = 5.0  # how long a chat request holds its socket's next frame for the turn's first frame
_PAGE = Path(__file__).with_name("static") / "index.html"
_BODY_KEYS = frozenset({"messages", "trigger", "clientTools", "messageId"})
_BACKGROUND = frozenset({"auto-continuation", "recovery", "submission"})
DENIED = "Tool execution denied by user"


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

    async def send(self, text: str, *, skip: web.WebSocketResponse | None = None, live: bool = False) -> None:
        """Send to every socket; a stream's ``live`` frames skip the sockets that are to get them by replay."""
        for ws in list(self.sockets):
            if ws is skip or ws.closed or (live and (ws in self.resuming or ws in self.replaying)):
                continue
            try:
                await ws.send_str(text)
            except (ConnectionError, RuntimeError):  # a socket that went away mid-broadcast
                self.sockets.discard(ws)


class Gateway:
    """The aiohttp application in front of an ``AgentDirectory``."""

    def __init__(
        self,
        directory: AgentDirectory,
        *,
        token: str | None = None,
        allowed_origins: Iterable[str] | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        mcp: bool = False,
    ):
        self.directory = directory
        self.mcp = mcp  # serve the agent classes as MCP tools at /mcp (mcp_server.py)
        self.token = token
        # Pages of other origins than the gateway's own that may use it (security.py, rule 2).
        self.origins = security.OriginPolicy(allowed_origins)
        self.max_frame_bytes = max_frame_bytes
        self._rooms: dict[str, _Room] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def app(self) -> web.Application:
        security.redact_logs()  # aiohttp's access log would show ?token= in every request line
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._page)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/agents/{cls}/{name}/get-messages", self._get_messages)
        app.router.add_get("/agents/{cls}/{name}", self._socket)
        if self.mcp:
            # Imported only here: the MCP SDK costs a second or more to import, and most gateways do not serve it.
            from .mcp_server import McpEndpoint

            McpEndpoint(self.directory, max_body_bytes=self.max_frame_bytes).mount(app)
        app.on_shutdown.append(self._shutdown)
        return app

    # ------------------------------------------------------------------ HTTP

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if request.path != "/healthz":  # it always answers that the server is up
            refusal = self._refusal(request)
            if refusal is not None:
                raise refusal
        response: web.StreamResponse = await handler(request)
        return response

    def _refusal(self, request: web.Request) -> web.HTTPException | None:
        """Why the request may not use the gateway (401 or 403), or None."""
        if self.token is not None and not security.token_matches(request, self.token):
            return _refused(
                web.HTTPUnauthorized, "missing or wrong token: send Authorization: Bearer <token> or ?token="
            )
        reason = self.origins.refusal(request, token_required=self.token is not None)
        return None if reason is None else _refused(web.HTTPForbidden, reason)

    async def _page(self, request: web.Request) -> web.Response:
        """The chat page: plain HTML and script, no build step."""
        return web.Response(text=_PAGE.read_text(encoding="utf-8"), content_type="text/html")

    async def _healthz(self, request: web.Request) -> web.Response:
        """That the server is up; the agent classes too, to a request that may use the gateway."""
        if self._refusal(request) is not None:
            return web.json_response({"ok": True})
        return web.json_response({"ok": True, "classes": sorted(self.directory.classes)})

    async def _agent(self, request: web.Request, *, create: bool = True) -> tuple[str, Any]:
        """The agent the request names; a read (``create=False``) of one that does not exist is a 404."""
        slug, name = request.match_info["cls"], request.match_info["name"]
        try:
            validate_agent_name(name)
        except InvalidAgentNameError as err:
            raise _refused(web.HTTPBadRequest, err.message) from None
        if create:
            return f"{slug}/{name}", await self.directory.get(slug, name)
        agent = await self.directory.find(slug, name)
        if agent is None:
            message = f"no agent {slug}/{name} here: it never ran (a chat over its WebSocket starts it)"
            raise _refused(web.HTTPNotFound, message)
        return f"{slug}/{name}", agent

    async def _get_messages(self, request: web.Request) -> web.Response:
        _, agent = await self._agent(request, create=False)
        messages = await agent.get_messages()
        return web.json_response([wire_message(m) for m in messages], dumps=protocol.dumps)

    # ------------------------------------------------------------------ WebSocket

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        key, agent = await self._agent(request)
        # aiohttp's own limit is set above ours, so a frame over ours gets an error frame and the socket goes on;
        # one over aiohttp's is not read at all (it would be held in memory): an error frame, then a 1009 close.
        ws = _Socket(self.max_frame_bytes, heartbeat=30)
        await ws.prepare(request)
        room = self._rooms.get(key)
        if room is None:
            room = self._rooms[key] = _Room(key)
            room.agent_class = self.directory.agent_class(request.match_info["cls"])
            await self._follow(room, agent)
            record = await agent.chat_terminal()  # how its last turn failed, from before this gateway started
            if record is not None:
                stream = _Stream(record["requestId"], False)
                stream.frames, stream.done = list(record.get("frames") or []), True
                room.terminal = room.last = stream
        room.sockets.add(ws)
        try:
            if room.active is not None:
                # A stream is running: the transcript would clobber the client's partial reply (reference).
                await self._offer_resume(ws, room, None)
            else:
                await self._send_messages(ws, agent, connect=True)
            # Who the client reached, and its MCP servers' states, as the reference sends on connect; a later
            # change of a server's state or tools reaches every socket by the agent's events (_follow).
            identity = {
                "type": protocol.IDENTITY,
                "name": request.match_info["name"],
                "agent": request.match_info["cls"],
            }
            await ws.send_str(protocol.dumps(identity))
            mcp = protocol.dumps({"mcp": await _mcp_state(agent), "type": protocol.MCP_SERVERS})
            room.mcp_sent = room.mcp_sent or mcp
            await ws.send_str(mcp)
            if room.active is None and room.in_flight > 0:  # accepted, not streaming yet: hears when it starts
                room.parked[ws] = None
                await ws.send_str(protocol.dumps(_pending(room.latest, None)))
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    await self._frame(ws, room, agent, message.data)
                elif message.type == WSMsgType.BINARY:
                    await _error(ws, "binary frames are not part of the protocol: send JSON text")
                elif message.type == WSMsgType.ERROR:
                    break
        finally:
            room.sockets.discard(ws)
            room.resuming.discard(ws)
            room.replaying.discard(ws)
            room.parked.pop(ws, None)
            room.awaiting.pop(ws, None)
            if room.owner is ws:
                room.owner = None  # any socket may now follow the continuation it asked for
            self._release(room)
        return ws

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

    async def _frame(self, ws: web.WebSocketResponse, room: _Room, agent: Any, text: str) -> None:
        if len(text.encode()) > self.max_frame_bytes:
            await _error(ws, f"frame of {len(text.encode())} bytes is over the limit of {self.max_frame_bytes} bytes")
            return
        try:
            frame = protocol.parse_frame(text)
            kind = frame["type"]
            if kind == protocol.CHAT_REQUEST:
                request_id, body = protocol.chat_request(frame)
                incoming = _incoming(request_id, body)  # the whole request is checked before anything is stored
                await self._chat_request(ws, room, agent, request_id, body, incoming)
            elif kind == protocol.CHAT_REQUEST_CANCEL:
                if not isinstance(frame.get("id"), str) or not frame["id"]:
                    raise FrameError(f'{kind} needs the id of the request to cancel: {{"id": "<request id>"}}')
                await agent.cancel_chat(frame["id"])  # one that is not running is a no-op (reference)
            elif kind == protocol.CHAT_CLEAR:
                _cleared(room)
                room.clearing += 1  # its message:clear is not broadcast again: the sender is not told (reference)
                try:
                    await agent.clear()
                except BaseException:
                    room.clearing -= 1
                    raise
                await room.send(protocol.dumps({"type": protocol.CHAT_CLEAR}), skip=ws)
            elif kind == protocol.CHAT_MESSAGES:
                pass  # the server owns the transcript: a client cannot overwrite it (reference)
            elif kind == protocol.STREAM_RESUME_REQUEST:
                await self._resume_request(ws, room, agent, frame.get("probeId"))
            elif kind == protocol.STREAM_RESUME_ACK:
                await self._replay(ws, room, frame.get("id"))
            elif kind == protocol.TOOL_RESULT:
                call = protocol.tool_call_id(frame)
                offered = protocol.client_tools(frame.get("clientTools"))
                if offered:
                    await agent.set_client_tools(offered)  # the continuation offers these
                error = None
                if frame.get("state") == "output-error":
                    error = frame.get("errorText") or DENIED
                auto = bool(frame.get("autoContinue"))
                answer = agent.add_tool_result(call, frame.get("output"), error=error, auto_continue=auto)
                await self._tool_answer(ws, room, frame, call, answer)
            elif kind == protocol.TOOL_APPROVAL:
                call = protocol.tool_call_id(frame)
                if not isinstance(frame.get("approved"), bool):
                    raise FrameError(f"{protocol.TOOL_APPROVAL} needs approved: true or false")
                auto = bool(frame.get("autoContinue"))
                await self._tool_answer(
                    ws, room, frame, call, agent.add_tool_approval(call, frame["approved"], auto_continue=auto)
                )
            else:
                raise FrameError(
                    f"unknown frame type {kind!r}; this gateway speaks: {', '.join(sorted(protocol.KNOWN))}"
                )
        except protocol.RequestError as err:
            await ws.send_str(protocol.response_frame(err.request_id, str(err), done=True, error=True))
        except FrameError as err:
            await _error(ws, str(err))
        except ThinkError as err:
            await _error(ws, err.message)
        except Exception as err:  # a frame must never cost the socket or the agent
            log.exception("frame handling failed")
            await _error(ws, f"could not handle the frame: {type(err).__name__}: {err}")

    async def _tool_answer(
        self, ws: web.WebSocketResponse, room: _Room, frame: dict[str, Any], call: str, answer: Awaitable[bool]
    ) -> None:
        """Apply a tool result or approval. One that no waiting call takes is refused and arms no continuation
        (the reference takes it silently, and its sockets then wait for a continuation that never comes)."""
        undo = self._expect_continuation(ws, room, frame)  # before the answer: the continuation may start at once
        relayed = room.relayed[call] = asyncio.Event()
        try:
            if not await answer:
                undo()
                raise FrameError(
                    f"no tool call {call!r} waits for an answer: the id is unknown, or the call was answered "
                    "already (the first answer wins)"
                )
            if room.active is None and room.in_flight == 0:
                # As the reference, the answer's cf_agent_message_updated goes out before the socket's next frame
                # is read (a resume request then hears of the continuation after it). The update comes by the
                # agent's events, which on Ray may trail the call's return. (An answer to a call still streaming
                # is applied when the turn stores it: nothing to wait for then.)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(relayed.wait(), FIRST_FRAME_WAIT_S)
        finally:
            if room.relayed.get(call) is relayed:
                del room.relayed[call]

    @staticmethod
    def _expect_continuation(ws: web.WebSocketResponse, room: _Room, frame: dict[str, Any]) -> Callable[[], None]:
        """A tool answer that asks to auto-continue: its socket follows the continuation through a resume.
        Returns what takes the expectation back."""
        if not frame.get("autoContinue"):
            return lambda: None
        expecting, owner, awaited, probe = room.expecting, room.owner, ws in room.awaiting, room.awaiting.get(ws)
        room.expecting = True
        room.owner = ws
        room.awaiting[ws] = None

        def undo() -> None:  # only what this answer changed, and only if a continuation did not take it since
            room.expecting = room.expecting and expecting
            if room.owner is ws:
                room.owner = owner
            if ws in room.awaiting:
                if awaited:
                    room.awaiting[ws] = probe
                else:
                    del room.awaiting[ws]

        return undo

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

    async def _new_messages(self, agent: Any, incoming: list[UIMessage]) -> list[UIMessage]:
        """The request's messages the server does not have yet (the server's copy wins: reference §3.5)."""
        return [_stamp_web(m) for m in reconcile(incoming, await agent.get_messages())]

    async def _persist(self, ws: web.WebSocketResponse, room: _Room, agent: Any, incoming: list[UIMessage]) -> int:
        """Store the request's messages the server does not have yet, before the turn is queued."""
        new = await self._new_messages(agent, incoming)
        if new:
            await agent.add_messages(new)
            await self._broadcast_messages(room, agent, skip=ws)
        return len(new)

    async def _chat_request(
        self,
        ws: web.WebSocketResponse,
        room: _Room,
        agent: Any,
        request_id: str,
        body: dict[str, Any],
        incoming: list[UIMessage],
    ) -> None:
        """A chat request under the agent's ``message_concurrency`` (reference §2.3, plus ``steer``)."""
        if room.terminal is not None:  # a new turn supersedes the replay of an old error
            room.terminal = None
            await agent.remember_chat_terminal(None)
        if room.active is None:
            # Told RESUMING for the old error and no ACK yet: its own request streams to it, not a replay. (Told
            # for a running stream, it stays out until that stream ends, as the reference has it.)
            room.resuming.discard(ws)
        strategy, debounce_s = _concurrency(room.agent_class)
        debounce_s = debounce_s if strategy == "debounce" else 0.0
        submit = body.get("trigger", "submit-message") != "regenerate-message"
        overlapping = submit and room.current > 0
        if overlapping and strategy == "drop":
            # Rejected before anything is stored: the sender's optimistic message is rolled back.
            await self._send_messages(ws, agent)
            await ws.send_str(protocol.skipped_frame(request_id, body))
            return
        if overlapping and strategy == "steer" and await agent.steer(await self._new_messages(agent, incoming)):
            await ws.send_str(protocol.skipped_frame(request_id, body))  # it joined the running turn
            return
        # Stored now, before the turn is queued, even while another turn runs (reference §1.1, §2.3).
        await self._persist(ws, room, agent, incoming)
        room.sequence += 1
        sequence = room.sequence
        if overlapping and strategy in ("latest", "merge", "debounce"):
            room.newest = sequence
        room.in_flight += 1
        room.current += 1
        room.latest = request_id  # as the reference's pre-stream record: PENDING tells this id
        # Only a request that overlapped a running turn may be superseded: the first one always runs (reference).
        supersedable = overlapping and strategy in ("latest", "merge", "debounce")
        started = asyncio.Event()
        self._spawn(
            self._run_turn(room, agent, request_id, body, sequence if supersedable else 0, debounce_s, ws, started)
        )
        if not overlapping:
            # As the reference handles frames one at a time: a turn that can start now has sent its first frame
            # before the socket's next frame is read (a cancel or a drop then follows it on the wire).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(started.wait(), FIRST_FRAME_WAIT_S)

    async def _run_turn(
        self,
        room: _Room,
        agent: Any,
        request_id: str,
        body: dict[str, Any],
        sequence: int,
        debounce_s: float,
        sender: web.WebSocketResponse,
        started: asyncio.Event,
    ) -> None:
        """Run one chat request's turn. ``sequence`` is 0 for a request nothing can supersede."""
        generation = room.generation
        try:
            if sequence and debounce_s and sequence == room.newest:
                await asyncio.sleep(debounce_s)  # trailing edge: a newer message may still come
            async with room.turns:
                if generation != room.generation or (sequence and sequence < room.newest):
                    # Cleared while it waited, or superseded: a newer message will answer, seeing this one too.
                    await sender.send_str(protocol.skipped_frame(request_id, body))
                    return
                custom = {k: v for k, v in body.items() if k not in _BODY_KEYS} or None
                room.own[request_id] = None  # before the turn starts: its stream:start may come at once
                while len(room.own) > OWN_KEPT:
                    del room.own[next(iter(room.own))]
                client_tools = body.get("clientTools") or None
                if "clientTools" in body:  # stored, as Think's WS path: continuations offer them, calls wait
                    await agent.set_client_tools(client_tools or [])
                branch = _branch_point(body) if body.get("trigger") == "regenerate-message" else None
                stream = agent.chat(
                    [], request_id=request_id, body=custom, client_tools=client_tools, branch_from=branch
                )
                origin = protocol.origin_message_ids(body["messages"])
                await self._pump(room, agent, request_id, stream, continuation=False, origin=origin, started=started)
        finally:
            started.set()
            room.in_flight -= 1
            if room.in_flight == 0:
                room.latest = None
            if generation == room.generation:
                room.current -= 1
            self._release(room)

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

    async def _send_messages(self, ws: web.WebSocketResponse, agent: Any, *, connect: bool = False) -> None:
        await ws.send_str(await _transcript_frame(agent, connect=connect))

    async def _broadcast_messages(self, room: _Room, agent: Any, *, skip: web.WebSocketResponse | None = None) -> None:
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


async def _transcript_frame(agent: Any, *, connect: bool = False) -> str:
    """The agent's stored messages as a ``cf_agent_chat_messages`` frame (``connect`` on a socket's first one)."""
    messages = await agent.get_messages()
    frame: dict[str, Any] = {"type": protocol.CHAT_MESSAGES, "messages": [wire_message(m) for m in messages]}
    if connect:
        frame["connect"] = True
    return protocol.dumps(frame)


MAX_TERMINAL_FRAMES = 2000
OWN_KEPT = 256


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


def wire_message(message: UIMessage | dict[str, Any]) -> dict[str, Any]:
    """A message as the AI SDK's ``UIMessage`` (which has no ``createdAt``; the store keeps the time)."""
    wire = message.to_wire() if isinstance(message, UIMessage) else dict(message)
    wire.pop("createdAt", None)
    return wire


# Chunks that put nothing into the assistant message.
_NO_CONTENT = frozenset({"start", "start-step", "finish-step", "finish", "abort", "error", "message-metadata"})

# Message metadata the server writes (reference: RESERVED_MESSAGE_METADATA_KEYS); a client's copy is dropped.
_RESERVED_METADATA = ("channel", "turnMetadata")


def _stamp_web(message: UIMessage) -> UIMessage:
    """A user message that came through a socket carries ``metadata.channel == "web"``, as the reference stamps it;
    a client cannot forge the server-written keys."""
    if message.role != "user":
        return message
    metadata = {k: v for k, v in (message.metadata or {}).items() if k not in _RESERVED_METADATA}
    return message.model_copy(update={"metadata": {**metadata, "channel": "web"}})


def reconcile(incoming: list[UIMessage], server: list[UIMessage]) -> list[UIMessage]:
    """The incoming messages the server does not have (reference §3.5). The server's copy always wins, so a stale
    client never overwrites a settled tool result; a client's copy of a server reply under another id is matched
    by a shared tool call id, or, for a reply without tools, by identical content, instead of being stored twice."""
    known = {m.id for m in server}
    tool_calls = {p.tool_call_id for m in server for p in m.parts if isinstance(p, ToolPart)}
    unclaimed = [m for m in server if m.role == "assistant" and not any(isinstance(p, ToolPart) for p in m.parts)]
    new = []
    for message in incoming:
        if message.id in known:
            continue
        if message.role == "assistant":
            calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolPart)}
            if calls & tool_calls:
                continue  # the client's snapshot of a reply the server has (resolveToolMergeId)
            twin = next((m for m in unclaimed if not calls and _content(m) == _content(message)), None)
            if twin is not None:
                unclaimed.remove(twin)
                continue
        new.append(message)
    return new


def _content(message: UIMessage) -> str:
    parts = [p.model_dump(mode="json", exclude={"state", "provider_metadata"}) for p in message.parts]
    return json.dumps(parts, sort_keys=True)


def _agent_tool_frame(chunk: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": chunk.kind, "runId": chunk.run_id, "agent": chunk.agent}
    if chunk.chunk is not None:
        event["body"] = protocol.dumps(chunk.chunk.to_wire())
    if chunk.summary is not None:
        event["summary"] = chunk.summary
    if chunk.error is not None:
        event["error"] = chunk.error
    return {
        "type": protocol.AGENT_TOOL_EVENT,
        "parentToolCallId": chunk.parent_tool_call_id,
        "sequence": chunk.sequence,
        "event": event,
    }


def _incoming(request_id: str, body: dict[str, Any]) -> list[UIMessage]:
    """A chat request's messages as UIMessages; a request with one that is not is refused whole.

    As the AI SDK's UIMessage schema has it, a message brings its id (which the server keeps: reconciliation and
    terminal frames go by it) and its parts, at least one unless it is the assistant's; a message without is not
    given a made-up id or stored empty."""
    for n, message in enumerate(body["messages"]):
        if not isinstance(message, dict):
            continue  # validation below says what it is
        if not isinstance(message.get("id"), str) or not message["id"]:
            raise protocol.RequestError(request_id, f"messages[{n}] needs its id: a non-empty string")
        if not isinstance(message.get("parts"), list):
            raise protocol.RequestError(request_id, f"messages[{n}] needs its parts: an array")
        if not message["parts"] and message.get("role") != "assistant":
            raise protocol.RequestError(
                request_id, f"messages[{n}] needs at least one part (only an assistant's may have none)"
            )
    try:
        return [UIMessage.model_validate(m) for m in body["messages"]]
    except ValueError as err:
        raise protocol.RequestError(request_id, f"a message of the request is not a UIMessage: {err}") from None


def _branch_point(body: dict[str, Any]) -> str | None:
    """A regeneration answers the last message the client kept (it truncated its list there)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    return last.get("id") if isinstance(last, dict) and isinstance(last.get("id"), str) else None


def _concurrency(cls: type[Think] | None) -> tuple[str, float]:
    """The agent class's ``message_concurrency``: the strategy and the debounce wait in seconds."""
    value: Any = getattr(cls, "message_concurrency", "queue")
    if isinstance(value, dict):
        ms = value.get("debounce_ms", value.get("debounceMs", 750))
        return str(value.get("strategy", "queue")), (ms if isinstance(ms, int | float) and ms >= 0 else 750) / 1000
    return (value if value in _STRATEGIES else "queue"), 0.75


_STRATEGIES = frozenset({"queue", "latest", "merge", "drop", "debounce", "steer"})


async def _error(ws: web.WebSocketResponse, text: str) -> None:
    await ws.send_str(protocol.dumps({"type": protocol.ERROR, "error": text}))
