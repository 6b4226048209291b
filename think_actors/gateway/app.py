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

The parts, each in its module, one building on the other: ``rooms`` (an agent's sockets and sending to them),
``resume`` (resume requests and replays), ``relay`` (every turn's chunks to every socket), ``turns`` (chat
requests and tool answers), and here the routes and the frames a socket sends. ``wire`` holds the pure data
conversions; ``mcp_server`` the agents as MCP tools at ``/mcp``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web

from .. import tracing
from ..errors import InvalidAgentNameError, ThinkError
from ..identity import Principal
from ..quotas import Quotas
from ..store import validate_agent_name
from ..turn_metadata import check_metadata
from . import protocol, security
from .access import PRINCIPAL, Access, QuotaExceeded, expired
from .auth import Authenticate, Authorize, AuthUnavailable, Unauthenticated
from .directory import AgentDirectory, LocalDirectory, RayDirectory, _mcp_state, _refused
from .protocol import FrameError
from .rooms import _cleared, _pending, _Room, _Socket, _Stream
from .turns import ChatTurns, run_limits
from .wire import _branch_point as _branch_point  # re-exported: tests and callers import them from here
from .wire import _incoming, wire_message
from .wire import reconcile as reconcile

__all__ = ["AgentDirectory", "Gateway", "LocalDirectory", "RayDirectory"]

log = logging.getLogger("think_actors.gateway")

MAX_FRAME_BYTES = 4 * 1024 * 1024
_PAGE = Path(__file__).with_name("static") / "index.html"
DENIED = "Tool execution denied by user"


_TRACED_ROUTES = ("/agents/", "/mcp")  # the routes that reach agents (not the page, /healthz or a 404)


class Gateway(ChatTurns):
    """The aiohttp application in front of an ``AgentDirectory`` (``app()`` builds it).

    Args:
        directory: where the agents live: ``LocalDirectory`` (in this process) or ``RayDirectory``.
        token: one shared token every request must carry (``SharedToken``); or give ``authenticate``.
        authenticate: an async function of the request returning the ``ta.Principal`` who sent it, or raising
            ``Unauthenticated`` (401) / ``AuthUnavailable`` (503); ``JWTAuth`` is one. Without it or a token, the
            gateway serves loopback requests only, all as one user.
        authorize: ``(principal, "<class-slug>/<name>", action) -> True | False | reason`` (may be async) for
            every action (``read``, ``chat``, ``respond``, ``cancel``, ``clear``); ``OwnerRule()`` is one.
            Default: everything allowed.
        quotas: ``Quotas`` (or a dict of its fields) per principal, counted for every gateway of these agents.
        turn_metadata: ``(principal, "<class-slug>/<name>", body) -> dict | None`` (may be async): the turn
            metadata of each chat request (``ctx.metadata``), stamped with its messages; the channel is ``"web"``.
        allowed_origins: origins of other sites' pages that may use the gateway.
        max_frame_bytes: the largest frame a socket may send.
        mcp: also serve the agent classes as MCP tools at ``/mcp``.
        client_limits: let a chat request's body lower its ``RunLimits`` (``runLimits``).
    """

    def __init__(
        self,
        directory: AgentDirectory,
        *,
        token: str | None = None,
        allowed_origins: Iterable[str] | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        mcp: bool = False,
        client_limits: bool = False,
        authenticate: Authenticate | None = None,
        authorize: Authorize | None = None,
        quotas: Quotas | dict[str, Any] | None = None,
        turn_metadata: Callable[[Principal, str, dict[str, Any]], Any] | None = None,
    ):
        self.directory = directory
        self.turn_metadata = turn_metadata
        # Who asks (token= is SharedToken(token)), what they may do to which agent, how much (access.py).
        self.access = Access(
            token=token,
            authenticate=authenticate,
            authorize=authorize,
            quotas=Quotas.model_validate(quotas) if isinstance(quotas, dict) else quotas,
        )
        # Chat requests may carry runLimits, which only lower the agent class's run_limits (turns.run_limits).
        self.client_limits = client_limits
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

            McpEndpoint(self.directory, max_body_bytes=self.max_frame_bytes, access=self.access).mount(app)
        app.on_startup.append(self._start_access)
        app.on_shutdown.append(self._shutdown)
        app.on_cleanup.append(self._stop_access)
        return app

    async def _start_access(self, app: web.Application) -> None:
        quotas = self.access.quotas
        keeper = self.directory.quota_keeper(quotas, self.access.gateway_id) if quotas is not None else None
        await self.access.start(keeper)

    async def _stop_access(self, app: web.Application) -> None:
        await self.access.stop()

    # ------------------------------------------------------------------ HTTP

    @web.middleware
    async def _guard(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if request.path != "/healthz":  # it always answers that the server is up
            refusal = self._origin_refusal(request)
            if refusal is not None:
                raise refusal
            if request.path != "/":  # the page holds no data: a user gives it their token in its settings
                request[PRINCIPAL] = await self._principal(request)
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else ""
        if not route.startswith(_TRACED_ROUTES) or request.headers.get("Upgrade", "").lower() == "websocket":
            response: web.StreamResponse = await handler(request)  # a socket's turns have spans of their own
            return response
        # OpenTelemetry's HTTP server convention: a server span per request, a child of the client's span.
        attributes = {"http.request.method": request.method, "http.route": route, "url.path": request.path}
        parent = tracing.incoming(request.headers)
        with tracing.operation(f"{request.method} {route}", attributes, kind="server", parent=parent) as span:
            try:
                response = await handler(request)
            except web.HTTPException as err:
                if span is not None:
                    span.set_attribute("http.response.status_code", err.status)
                raise
            if span is not None:
                span.set_attribute("http.response.status_code", response.status)
            return response

    def _origin_refusal(self, request: web.Request) -> web.HTTPException | None:
        """Why a page (or a host) may not use the gateway (a 403), or None."""
        reason = self.origins.refusal(request, token_required=self.access.required)
        return None if reason is None else _refused(web.HTTPForbidden, reason)

    async def _principal(self, request: web.Request) -> Principal:
        """Who sent the request: a 401 (with its RFC 6750 challenge) or a 503 when that cannot be said."""
        try:
            return await self.access.principal(request)
        except Unauthenticated as err:
            challenge = 'Bearer error="invalid_token"' if err.sent else "Bearer"  # the body says why
            raise _refused(web.HTTPUnauthorized, err.reason, {"WWW-Authenticate": challenge}) from None
        except AuthUnavailable as err:
            raise _refused(web.HTTPServiceUnavailable, err.reason, {"Retry-After": str(err.retry_after_s)}) from None

    async def _allowed(self, request: web.Request, action: str) -> Principal:
        """The request's principal, when it may take ``action`` on the agent it names; else a 403."""
        principal = request[PRINCIPAL]
        slug, name = request.match_info["cls"], request.match_info["name"]
        try:
            validate_agent_name(name)
        except InvalidAgentNameError as err:
            raise _refused(web.HTTPBadRequest, err.message) from None
        self.directory.agent_class(slug)  # an unknown class is a 404 for everyone
        reason = await self.access.refusal(principal, f"{slug}/{name}", action)
        if reason is not None:
            raise _refused(web.HTTPForbidden, f"{action} refused: {reason}")
        return principal

    async def _turn_facts(
        self, ws: web.WebSocketResponse, agent_path: str, request_id: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        """The turn metadata the application gives a chat request (``turn_metadata``); a failure refuses it."""
        if self.turn_metadata is None:
            return None
        try:
            facts = self.turn_metadata(ws.principal, agent_path, body)  # type: ignore[attr-defined]
            if inspect.isawaitable(facts):
                facts = await facts
            return check_metadata(facts)
        except Exception as err:
            log.warning("turn_metadata failed for a chat request of %s", agent_path, exc_info=True)
            raise protocol.RequestError(request_id, f"the request's turn metadata could not be made: {err}") from None

    async def _page(self, request: web.Request) -> web.Response:
        """The chat page: plain HTML and script, no build step."""
        return web.Response(text=_PAGE.read_text(encoding="utf-8"), content_type="text/html")

    async def _healthz(self, request: web.Request) -> web.Response:
        """That the server is up; the agent classes too, to a request that may use the gateway."""
        if self._origin_refusal(request) is not None:
            return web.json_response({"ok": True})
        try:
            await self.access.principal(request)
        except (Unauthenticated, AuthUnavailable):
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
        await self._allowed(request, "read")
        _, agent = await self._agent(request, create=False)
        messages = await agent.get_messages()
        return web.json_response([wire_message(m) for m in messages], dumps=protocol.dumps)

    # ------------------------------------------------------------------ WebSocket

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        principal = await self._allowed(request, "read")
        try:
            counted = await self.access.open_socket(principal)
        except QuotaExceeded as err:
            raise _refused(web.HTTPTooManyRequests, err.message, {"Retry-After": str(err.retry_after_s)}) from None
        try:
            return await self._serve_socket(request, principal)
        finally:
            if counted:
                await self.access.close_socket(principal)

    async def _serve_socket(self, request: web.Request, principal: Principal) -> web.StreamResponse:
        key, agent = await self._agent(request)
        # aiohttp's own limit is set above ours, so a frame over ours gets an error frame and the socket goes on;
        # one over aiohttp's is not read at all (it would be held in memory): an error frame, then a 1009 close.
        ws = _Socket(self.max_frame_bytes, heartbeat=30)
        ws.trace_headers = tracing.incoming(request.headers)
        ws.principal = principal
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
                    if expired(principal):  # a socket lives no longer than the credential that opened it
                        await _error(ws, "your token expired: connect again with a fresh one")
                        await ws.close(code=WSCloseCode.POLICY_VIOLATION, message=b"token expired")
                        break
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

    async def _frame(self, ws: web.WebSocketResponse, room: _Room, agent: Any, text: str) -> None:
        if len(text.encode()) > self.max_frame_bytes:
            await _error(ws, f"frame of {len(text.encode())} bytes is over the limit of {self.max_frame_bytes} bytes")
            return
        try:
            frame = protocol.parse_frame(text)
            kind = frame["type"]
            action = _ACTIONS.get(kind)
            if action is not None:
                reason = await self.access.refusal(ws.principal, room.key, action)  # type: ignore[attr-defined]
                if reason is not None:
                    refused = f"{action} refused: {reason}"
                    if kind == protocol.CHAT_REQUEST and isinstance(frame.get("id"), str) and frame["id"]:
                        raise protocol.RequestError(frame["id"], refused)
                    raise FrameError(refused)
            if kind == protocol.CHAT_REQUEST:
                request_id, body = protocol.chat_request(frame)
                run_limits(request_id, body, self.client_limits)
                incoming = _incoming(request_id, body)  # the whole request is checked before anything is stored
                try:
                    await self.access.start_turn(ws.principal)  # type: ignore[attr-defined]
                except QuotaExceeded as err:
                    raise protocol.RequestError(request_id, f"quota {err.quota}: {err.message}") from None
                except Exception as err:  # the counts could not be reached: refused, nothing stored
                    log.warning("the quota of a chat request could not be checked", exc_info=True)
                    raise protocol.RequestError(
                        request_id, f"the quota could not be checked ({type(err).__name__}: {err}): send it again"
                    ) from None
                facts = await self._turn_facts(ws, room.key, request_id, body)
                await self._chat_request(ws, room, agent, request_id, body, incoming, facts)
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


# What each frame does to the agent (auth.ACTIONS); the socket's connect was its "read".
_ACTIONS = {
    protocol.CHAT_REQUEST: "chat",
    protocol.CHAT_REQUEST_CANCEL: "cancel",
    protocol.CHAT_CLEAR: "clear",
    protocol.TOOL_RESULT: "respond",
    protocol.TOOL_APPROVAL: "respond",
    protocol.STREAM_RESUME_REQUEST: "read",
    protocol.STREAM_RESUME_ACK: "read",
}


async def _error(ws: web.WebSocketResponse, text: str) -> None:
    await ws.send_str(protocol.dumps({"type": protocol.ERROR, "error": text}))
