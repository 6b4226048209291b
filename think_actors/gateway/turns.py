"""A socket's chat requests and tool answers: stored before the turn is queued, run one at a time per agent under
the class's ``message_concurrency`` (reference §2.3, plus ``steer``), and tool results or approvals that may ask
for an auto-continuation."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import ValidationError

from .. import tracing
from ..errors import ConfigurationError
from ..limits import RunLimits
from ..messages import UIMessage
from ..turn_metadata import stamp
from . import protocol
from .access import LOCAL_USER, QuotaExceeded
from .protocol import FrameError
from .relay import Relays
from .rooms import OWN_KEPT, _Room
from .wire import _branch_point, _concurrency, _stamp_web, reconcile

__all__ = ["FIRST_FRAME_WAIT_S", "ChatTurns"]

FIRST_FRAME_WAIT_S = 5.0  # how long a chat request holds its socket's next frame for the turn's first frame
_BODY_KEYS = frozenset({"messages", "trigger", "clientTools", "messageId", "runLimits"})


class ChatTurns(Relays):
    """Chat requests and tool answers of the room's sockets (``Gateway`` builds on this)."""

    client_limits = False  # whether a chat request's body may carry runLimits (Gateway(client_limits=True))

    async def _tool_answer(
        self, ws: web.WebSocketResponse, room: _Room, frame: dict[str, Any], call: str, answer: Awaitable[bool]
    ) -> None:
        """Apply a tool result or approval. One that no waiting call takes is refused and arms no continuation
        (the reference takes it silently, and its sockets then wait for a continuation that never comes)."""
        principal = getattr(ws, "principal", None)
        paying = bool(frame.get("autoContinue")) and principal is not None
        if paying:  # the continuation it asks for is a turn of theirs: counted now, refused before it is applied
            try:
                await self.access.start_turn(principal)
            except QuotaExceeded as err:
                if inspect.iscoroutine(answer):
                    answer.close()  # never applied
                raise FrameError(f"quota {err.quota}: {err.message}") from None
            room.payers.append(principal)
        undo = self._expect_continuation(ws, room, frame)  # before the answer: the continuation may start at once
        relayed = room.relayed[call] = asyncio.Event()
        try:
            if not await answer:
                undo()
                if paying:
                    room.payers.remove(principal)
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

    async def _new_messages(
        self, ws: Any, agent: Any, incoming: list[UIMessage], facts: dict[str, Any] | None = None
    ) -> list[UIMessage]:
        """The request's messages the server does not have yet (the server's copy wins: reference §3.5), stamped
        with who sent them and the application's facts of the request (``Gateway(turn_metadata=...)``)."""
        principal = getattr(ws, "principal", None)
        if principal is LOCAL_USER:  # a gateway without authentication knows nobody: it stamps no one (as Think)
            principal = None
        known = await agent.get_messages()
        return [stamp(_stamp_web(m), metadata=facts, principal=principal) for m in reconcile(incoming, known)]

    async def _persist(
        self,
        ws: web.WebSocketResponse,
        room: _Room,
        agent: Any,
        incoming: list[UIMessage],
        facts: dict[str, Any] | None = None,
    ) -> int:
        """Store the request's messages the server does not have yet, before the turn is queued."""
        new = await self._new_messages(ws, agent, incoming, facts)
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
        facts: dict[str, Any] | None = None,
    ) -> None:
        """A chat request under the agent's ``message_concurrency`` (reference §2.3, plus ``steer``); ``facts``
        is the turn metadata the application gives it."""
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
        if (
            overlapping
            and strategy == "steer"
            and await agent.steer(await self._new_messages(ws, agent, incoming, facts))
        ):
            await ws.send_str(protocol.skipped_frame(request_id, body))  # it joined the running turn
            return
        # Stored now, before the turn is queued, even while another turn runs (reference §1.1, §2.3).
        await self._persist(ws, room, agent, incoming, facts)
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
            self._run_turn(
                room, agent, request_id, body, sequence if supersedable else 0, debounce_s, ws, started, facts
            )
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
        facts: dict[str, Any] | None = None,
    ) -> None:
        """Run one chat request's turn. ``sequence`` is 0 for a request nothing can supersede."""
        generation = room.generation
        principal = getattr(sender, "principal", None)
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
                # The socket's request is the trace's root span; the agent's turn (its actor's) is its child.
                with tracing.operation(
                    f"chat_request {room.key}",
                    {tracing.names.REQUEST_ID: request_id},
                    kind="server",
                    parent=getattr(sender, "trace_headers", None),  # the upgrade request's, as a _Socket keeps
                ):
                    stream = agent.chat(
                        [],
                        request_id=request_id,
                        body=custom,
                        client_tools=client_tools,
                        branch_from=branch,
                        limits=_client_limits(body, room.agent_class),
                        principal=principal,
                        metadata=facts,
                    )
                    origin = protocol.origin_message_ids(body["messages"])
                    await self._pump(
                        room, agent, request_id, stream, continuation=False, origin=origin, started=started
                    )
                if principal is not None:
                    await self.access.turn_used(principal, _tokens(stream.outcome))
        finally:
            started.set()
            room.in_flight -= 1
            if room.in_flight == 0:
                room.latest = None
            if generation == room.generation:
                room.current -= 1
            self._release(room)


def run_limits(request_id: str, body: dict[str, Any], allowed: bool) -> None:
    """Check a chat request's ``runLimits`` before anything of it is stored: refused where the gateway does not
    take them from clients, or when they are not ``RunLimits`` fields."""
    if "runLimits" not in body or body["runLimits"] is None:
        return
    if not allowed:
        raise protocol.RequestError(
            request_id, "this gateway takes no runLimits from clients (think-actors serve --client-limits allows them)"
        )
    try:
        RunLimits.of(body["runLimits"])
    except (ValidationError, ConfigurationError) as err:
        raise protocol.RequestError(request_id, f"runLimits: {err}") from None


def _tokens(outcome: Any) -> int:
    """The model tokens a finished turn used, every agent it started included (what a daily quota counts)."""
    tree = getattr(outcome, "tree_usage", None)
    if tree is not None and tree.total_tokens:
        return int(tree.total_tokens)
    usage = getattr(outcome, "usage", None)
    if usage is None:
        return 0
    return int((usage.input_tokens or 0) + (usage.output_tokens or 0))


def _client_limits(body: dict[str, Any], agent_class: Any) -> RunLimits | None:
    """A request's ``runLimits`` (checked by ``run_limits``), never looser than the agent class's ``run_limits``:
    a client may only lower its budget."""
    requested = RunLimits.of(body.get("runLimits"))
    return None if requested is None else requested.tightened(getattr(agent_class, "run_limits", None))
