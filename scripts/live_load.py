"""The people of scripts/bench_live.py: WebSocket clients of the gateway's chat protocol, all in one event loop.

A user opens a socket to an agent of its own and, until told to stop, sends a chat request (the whole
conversation as the AI SDK's client sends it: its earlier messages and the new user message), reads the
response frames of that request to the terminal one, pauses uniformly 1-3 s, and sends the next. Every turn is a
``Turn`` record: when it was sent, the first ``text-delta`` frame's delay, the gaps between ``text-delta`` frames,
and whether it ended ``completed`` with the whole expected text. A turn that errs, ends otherwise, brings other
text or takes longer than ``TURN_TIMEOUT_S`` is lost; the user then opens a new socket and goes on.

The clients are kept lean, since they share the machine with what they measure: frames other than response frames
are recognised by their first bytes and never parsed (the gateway's transcript frame grows with the conversation),
and a ticker measures how late this event loop wakes (``lag``), which every client-side delay includes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp

CHAT_REQUEST = "cf_agent_use_chat_request"
RESPONSE_PREFIX = '{"type":"cf_agent_use_chat_response"'  # as the gateway (and the relays) write it
TEXT_DELTA_PREFIX = '{"type":"text-delta"'
START_PREFIX = '{"type":"start"'
TURN_TIMEOUT_S = 30.0
ARRIVAL_S = 2.0  # users that join start within this many seconds, each at a random moment
PAUSE_S = (1.0, 3.0)
TICK_S = 0.02


@dataclass(slots=True)
class Turn:
    """One chat request as the client saw it."""

    sent: float  # perf_counter
    tool: bool
    first_s: float | None = None
    gaps: list[float] = field(default_factory=list)
    done: bool = False
    ok: bool = False
    error: str = ""


@dataclass(slots=True)
class User:
    index: int
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    ready: bool = False  # it finished a turn since it joined
    task: asyncio.Task[None] | None = None
    messages: list[dict[str, object]] = field(default_factory=list)


class Load:
    """The users, their turn records and the counters a measurement window reads."""

    def __init__(self, agent_url: Callable[[str], str], expected: str) -> None:
        self.agent_url = agent_url
        self.expected = expected
        self.users: dict[int, User] = {}
        self.leaving: list[User] = []
        self.turns: list[Turn] = []
        self.tokens = 0  # text-delta frames received
        self.completed = 0  # turns ended, lost or not
        self.tool = False  # new turns ask for a tool call
        self.lags: list[tuple[float, float]] = []  # (when, how late the ticker woke)
        self.progress = asyncio.Event()  # set whenever a turn ends
        self.session: aiohttp.ClientSession | None = None
        self._ticker: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Load:
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        self._ticker = asyncio.ensure_future(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.resize(0)
        await self.wait_left(10.0)
        for user in self.leaving:
            if user.task is not None:
                user.task.cancel()
        if self._ticker is not None:
            self._ticker.cancel()
        if self.session is not None:
            await self.session.close()

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due = loop.time() + TICK_S
            await asyncio.sleep(TICK_S)
            now = loop.time()
            self.lags.append((time.perf_counter(), now - due))
            if len(self.lags) > 100_000:
                del self.lags[:50_000]

    @property
    def n(self) -> int:
        return len(self.users)

    async def resize(self, n: int) -> None:
        """Users 0..n-1 chat; those above are told to stop (they finish the turn they are in)."""
        for index in sorted(self.users):
            if index >= n:
                user = self.users.pop(index)
                user.stop.set()
                self.leaving.append(user)
        for index in range(n):
            if index not in self.users:
                user = self.users[index] = User(index)
                user.task = asyncio.ensure_future(self._user(user))

    def ready(self) -> bool:
        return all(u.ready for u in self.users.values())

    async def wait_left(self, timeout_s: float) -> None:
        """Wait for the users told to stop to finish their turns and close their sockets."""
        tasks = [u.task for u in self.leaving if u.task is not None and not u.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)
        self.leaving = [u for u in self.leaving if u.task is not None and not u.task.done()]

    async def settle(self, min_s: float, cap_s: float) -> bool:
        """Wait until every user finished a turn since it joined and the leavers left, at least ``min_s`` and at
        most ``cap_s``. Returns whether everyone was ready."""
        began = time.monotonic()
        await self.wait_left(cap_s)
        await self.wait_until(self.ready, cap_s - (time.monotonic() - began))
        await asyncio.sleep(max(0.0, min_s - (time.monotonic() - began)))
        return self.ready()

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float) -> None:
        """Wait until ``condition()`` holds after some turn ended, at most ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not condition() and time.monotonic() < deadline:
            self.progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.progress.wait(), deadline - time.monotonic())

    async def _user(self, user: User) -> None:
        assert self.session is not None
        name = f"u{user.index}"
        turn_no = 0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(user.stop.wait(), random.uniform(0, ARRIVAL_S))
        while not user.stop.is_set():
            try:
                async with self.session.ws_connect(self.agent_url(name), heartbeat=None, max_msg_size=0) as ws:
                    while not user.stop.is_set():
                        turn_no += 1
                        if not await self._turn(ws, user, f"{name}-{turn_no}"):
                            break  # a lost turn: a new socket
                        user.ready = True
                        self.progress.set()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(user.stop.wait(), random.uniform(*PAUSE_S))
            except (aiohttp.ClientError, OSError) as err:
                turn = Turn(time.perf_counter(), self.tool, done=True, error=f"socket: {type(err).__name__}: {err}")
                self.turns.append(turn)
                self.completed += 1
                user.ready = True
                self.progress.set()
                await asyncio.sleep(1.0)

    async def _turn(self, ws: aiohttp.ClientWebSocketResponse, user: User, message_id: str) -> bool:
        """One chat request; returns whether it was answered in full."""
        text = f"tool: q {message_id}" if self.tool else f"hello {message_id}"
        user.messages.append({"id": message_id, "role": "user", "parts": [{"type": "text", "text": text}]})
        request_id = f"r-{message_id}"
        init = {"method": "POST", "body": json.dumps({"messages": user.messages})}
        turn = Turn(time.perf_counter(), self.tool)
        self.turns.append(turn)
        deltas: list[str] = []
        assistant_id = None
        try:
            async with asyncio.timeout(TURN_TIMEOUT_S):
                await ws.send_str(json.dumps({"type": CHAT_REQUEST, "id": request_id, "init": init}))
                last = 0.0
                while True:
                    message = await ws.receive()
                    if message.type != aiohttp.WSMsgType.TEXT:
                        raise ConnectionError(f"the socket ended mid-turn: {message.type.name}")
                    data = message.data
                    if not data.startswith(RESPONSE_PREFIX):
                        continue
                    frame = json.loads(data)
                    if frame["id"] != request_id:
                        continue
                    if frame["done"]:
                        break
                    body = frame["body"]
                    if body.startswith(TEXT_DELTA_PREFIX):
                        now = time.perf_counter()
                        if turn.first_s is None:
                            turn.first_s = now - turn.sent
                        else:
                            turn.gaps.append(now - last)
                        last = now
                        deltas.append(json.loads(body)["delta"])
                        self.tokens += 1
                    elif body.startswith(START_PREFIX):
                        assistant_id = json.loads(body).get("messageId")
            reply = "".join(deltas)
            if frame.get("error"):
                turn.error = f"error frame: {frame['body'][:200]}"
            elif frame.get("outcome") != "completed":
                turn.error = f"outcome {frame.get('outcome')!r}"
            elif reply != self.expected:
                turn.error = f"text {reply[:40]!r}... ({len(reply)} chars, {len(self.expected)} expected)"
            turn.ok = not turn.error
        except (TimeoutError, ConnectionError, aiohttp.ClientError) as err:
            turn.error = (
                f"{type(err).__name__}: {err}" if str(err) else f"{type(err).__name__} ({TURN_TIMEOUT_S:.0f} s)"
            )
        finally:
            turn.done = True
            self.completed += 1
            self.progress.set()
        if assistant_id is not None:  # the reply as the client holds it, under the server's id
            parts = [{"type": "text", "text": "".join(deltas)}]
            user.messages.append({"id": assistant_id, "role": "assistant", "parts": parts})
        return turn.ok

    def lag_p99_ms(self, began: float, ended: float) -> float:
        lags = [lag for when, lag in self.lags if began <= when < ended]
        return percentile(lags, 99) * 1e3 if lags else 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]
