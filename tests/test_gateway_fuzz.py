"""Fuzzing the WebSocket gateway from the protocol (reference §1.1 frames, §2.3 message_concurrency, §3.5 intake,
§3.7 resume): hundreds of malformed frames on one socket, each followed by a probe, then a valid chat request;
tokens, origins, agent names and frame sizes; 50 sockets at once under every message_concurrency policy.

A case that fails is marked in ``gateway_fuzz_frames.py`` (``known``: an issue 16 item; ``finding``: anything else)
and its batch runs as xfail(strict=True), so it turns red when the fix lands and the marker goes. Issue 16 items
8-18 landed while this suite was written; their cases pass and carry no marker.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import WSMsgType
from aiohttp.test_utils import TestClient, TestServer
from gateway_fuzz_frames import ACK, ERROR, IGNORED, NO_TURN, RESUME, Case, all_cases, dumps, user
from helpers import greeting

import think_actors as ta
from think_actors.gateway import Gateway, LocalDirectory
from think_actors.models import FinishEvent, ModelRequest, TextDelta, Usage

WAIT_S = 10.0


class CountingModel:
    """Answers every request with ``reply <n>``; records the user texts each request saw."""

    model_id = "counting"

    def __init__(self, first_delay_s: float = 0.0, delay_s: float = 0.0) -> None:
        self.first_delay_s = first_delay_s
        self.delay_s = delay_s
        self.seen: list[list[str]] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[Any]:
        n = len(self.seen)
        self.seen.append([m["content"] for m in request.messages if m["role"] == "user"])
        await asyncio.sleep(self.first_delay_s if n == 0 else self.delay_s)
        yield TextDelta(f"reply {n}")
        yield FinishEvent("stop", Usage())


class Fuzzed(ta.Think):
    instances = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).instances += 1
        super().__init__(*args, **kwargs)


def strict_json(text: str) -> Any:
    """A frame as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@dataclass
class Rig:
    client: TestClient[Any, Any]
    gateway: Gateway
    model: CountingModel
    data_dir: Path
    path: str = "/agents/fuzzed/f"

    async def socket(self, path: str | None = None) -> Any:
        ws = await self.client.ws_connect(path or self.path)
        await greeting(ws)
        return ws

    async def history(self, path: str | None = None) -> list[dict[str, Any]]:
        response = await self.client.get(f"{path or self.path}/get-messages")
        assert response.status == 200, await response.text()
        return list(await response.json())


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Any]:
    rigs: list[Rig] = []

    async def make(model: CountingModel | None = None, **options: Any) -> Rig:
        model = model or CountingModel()
        directory = LocalDirectory([Fuzzed], model=model, data_dir=str(tmp_path))
        gateway = Gateway(directory, **options)
        client: TestClient[Any, Any] = TestClient(TestServer(gateway.app()))
        await client.start_server()
        made = Rig(client, gateway, model, tmp_path)
        rigs.append(made)
        return made

    Fuzzed.instances = 0
    yield make
    for made in rigs:
        await made.client.close()


CLOSE_CODES: dict[int, int] = {}


class NotJSONFrame(Exception):
    """The gateway sent a frame a browser's JSON.parse refuses, or one that is not an object."""


async def receive(ws: Any, timeout_s: float = WAIT_S) -> dict[str, Any] | None:
    """The next frame, or None when the socket closed."""
    message = await asyncio.wait_for(ws.receive(), timeout_s)
    if message.type in (WSMsgType.CLOSE, WSMsgType.CLOSED, WSMsgType.CLOSING, WSMsgType.ERROR):
        if message.type == WSMsgType.CLOSE:
            CLOSE_CODES[id(ws)] = message.data  # the server's code (close_code may become 1006 as it hangs up)
        return None
    if message.type != WSMsgType.TEXT:
        raise NotJSONFrame(f"a {message.type.name} frame")
    try:
        frame = strict_json(message.data)
    except ValueError as err:
        raise NotJSONFrame(f"{err}: {message.data[:200]!r}") from None
    if not isinstance(frame, dict):
        raise NotJSONFrame(repr(frame))
    return frame


# ---------------------------------------------------------------------------------------- malformed frames


@dataclass
class Verdict:
    problems: dict[str, list[str]] = field(default_factory=dict)

    def add(self, case: str, problem: str) -> None:
        self.problems.setdefault(case, []).append(problem)


def judge(case: Case, answers: list[dict[str, Any]]) -> list[str]:
    """What is wrong with the frames a case got before its probe's answer."""
    # An error is the gateway's think_actors_error frame, or for a chat request the protocol's own terminal error
    # response {id, body: <error text>, done: true, error: true}, which also ends the client's request.
    errors = [a for a in answers if a["type"] == "think_actors_error" or is_error_response(a)]
    responses = [a for a in answers if a["type"] == "cf_agent_use_chat_response" and a not in errors]
    others = [a for a in answers if a not in errors and a not in responses]
    problems = []
    if any(
        not (e.get("body") if is_error_response(e) else isinstance(e.get("error"), str) and e["error"]) for e in errors
    ):
        problems.append(f"an error frame without an error text: {errors}")
    if case.expect == ERROR:
        if not errors:
            problems.append(f"no error frame; got {answers}")
        if responses or others:
            problems.append(f"frames beside the error: {responses + others}")
    elif case.expect == IGNORED:
        if responses or others:
            problems.append(f"answered an ignored frame with {responses + others}")
    elif case.expect == RESUME:
        nones = [a for a in others if a["type"] == "cf_agent_stream_resume_none" and a.get("reason") == "idle"]
        if not (errors or len(nones) == 1) or responses or len(others) != len(nones):
            problems.append(f"a resume request while idle got {answers}")
    elif case.expect == ACK:
        bare = [r for r in responses if r.get("done") is True and r.get("replay") is True and r.get("body") == ""]
        if not (errors or len(bare) == 1) or others or len(responses) != len(bare):
            problems.append(f"an ACK while idle got {answers}")
    elif case.expect == NO_TURN:
        # Its turn's in-band error ({done: false, error: true}) and terminal frame, as the reference ends a turn
        # with no messages to send; or a refusal. Never a chunk of a reply.
        done = [r for r in responses if r.get("done") is True and not r.get("body")]
        in_band = [r for r in responses if r.get("error") is True and r.get("done") is False]
        if not (errors or len(done) == 1) or len(responses) != len(done) + len(in_band) or others:
            problems.append(f"a request with nothing to answer got {answers}")
    return problems


def is_error_response(frame: dict[str, Any]) -> bool:
    return (
        frame["type"] == "cf_agent_use_chat_response"
        and frame.get("done") is True
        and frame.get("error") is True
        and isinstance(frame.get("body"), str)
    )


async def fuzz(rig: Rig, cases: list[Case]) -> Verdict:
    """Send every case on one socket, each followed by a resume request with its own probe id (answered
    ``resume_none: idle`` while nothing runs), so every frame's answers are told apart without sleeping."""
    verdict = Verdict()
    ws = await rig.socket()
    calls = len(rig.model.seen)
    for n, case in enumerate(cases):
        if case.binary:
            await ws.send_bytes(case.text.encode("latin-1"))
        else:
            await ws.send_str(case.text)
        probe = f"probe-{n}"
        await ws.send_str(dumps({"type": "cf_agent_stream_resume_request", "probeId": probe}))
        answers: list[dict[str, Any]] = []
        while True:
            try:
                frame = await receive(ws)
            except TimeoutError:
                verdict.add(case.name, "no answer to the probe: the socket is wedged")
                await ws.close()
                break
            except NotJSONFrame as err:
                verdict.add(case.name, f"the gateway sent a frame that is not a JSON object: {err}")
                if f'"{probe}"' in str(err):
                    break
                continue
            if frame is None:
                verdict.add(case.name, f"the socket closed (code {ws.close_code})")
                break
            if frame.get("probeId") == probe:
                if case.expect == NO_TURN and frame.get("type") == "cf_agent_stream_resuming":
                    # The turn ended in an error, which is replayed to a socket that asks (reference §3.7):
                    # ACK it, as a stock client does, and read the replay to its end.
                    await ws.send_str(dumps({"type": "cf_agent_stream_resume_ack", "id": frame["id"]}))
                    replay = await frames_until_done(ws, frame["id"])
                    if not all(f.get("replay") for f in replay):
                        verdict.add(case.name, f"the error's replay was not marked replay: {replay}")
                elif frame != {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": probe}:
                    verdict.add(case.name, f"left the agent not idle: the probe got {frame}")
                break
            answers.append(frame)
        for problem in judge(case, answers):
            verdict.add(case.name, problem)
        if len(rig.model.seen) != calls:
            verdict.add(case.name, "ran a model turn")
            calls = len(rig.model.seen)
        history = await rig.history()
        if ws.closed:
            ws = await rig.socket()
        if history:
            verdict.add(case.name, f"stored {[m.get('id') for m in history]}")
            await ws.send_str(dumps({"type": "cf_agent_chat_clear"}))  # start the next case clean
    await valid_request_is_answered(rig, ws)
    await ws.close()
    return verdict


async def valid_request_is_answered(rig: Rig, ws: Any) -> None:
    """A valid chat request on the same socket gets its whole reply; afterwards nothing is pending, and the store
    holds only that exchange."""
    calls = len(rig.model.seen)
    await ws.send_str(chat_frame("r-valid", user("hello", id="u-valid")))
    frames = await frames_until_done(ws, "r-valid")
    kinds = [json.loads(f["body"])["type"] for f in frames if f["type"] == "cf_agent_use_chat_response" and f["body"]]
    assert kinds == ["start", "start-step", "text-start", "text-delta", "text-end", "finish-step", "finish"], frames
    assert frames[-1]["outcome"] == "completed"
    assert len(rig.model.seen) == calls + 1
    history = await rig.history()
    assert [(m["id"], m["role"]) for m in history] == [("u-valid", "user"), (history[-1]["id"], "assistant")]
    assert history[-1]["parts"][-1]["text"] == f"reply {calls}"
    await nothing_pending(rig, ws)


async def nothing_pending(rig: Rig, ws: Any, path: str | None = None) -> None:
    """Neither this socket nor a new one hears of a stream or a pending turn: nothing is wedged."""
    await ws.send_str(dumps({"type": "cf_agent_stream_resume_request", "probeId": "after"}))
    assert await receive(ws) == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "after"}
    fresh = await rig.client.ws_connect(path or rig.path)
    assert (await greeting(fresh))["type"] == "cf_agent_chat_messages"
    await fresh.send_str(dumps({"type": "cf_agent_stream_resume_request", "probeId": "fresh"}))
    assert await receive(fresh) == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "fresh"}
    await fresh.close()


def chat_frame(request_id: str, *messages: dict[str, Any], **body: Any) -> str:
    init = {"method": "POST", "body": dumps({"messages": list(messages), "trigger": "submit-message", **body})}
    return dumps({"type": "cf_agent_use_chat_request", "id": request_id, "init": init})


async def frames_until_done(ws: Any, request_id: str) -> list[dict[str, Any]]:
    seen = []
    while True:
        frame = await receive(ws)
        assert frame is not None, f"the socket closed before {request_id} was done: {seen}"
        seen.append(frame)
        if frame["type"] == "cf_agent_use_chat_response" and frame.get("id") == request_id and frame["done"]:
            return seen


CASES = all_cases()


def _group(case: Case) -> str:
    if case.finding:
        return f"finding: {case.finding}"
    if case.known:
        return f"issue 16 item {case.known}"
    return "ok"


def _families() -> list[Any]:
    """One batch per family of cases that pass today, and one per known item or finding (xfail strict)."""
    from gateway_fuzz_frames import FAMILIES

    params = []
    for family, make in FAMILIES.items():
        names = {c.name for c in make()}
        passing = [c.name for c in CASES if c.name in names and _group(c) == "ok"]
        if passing:
            params.append(pytest.param(passing, id=family))
    for group in sorted({_group(c) for c in CASES} - {"ok"}):
        names_ = [c.name for c in CASES if _group(c) == group]
        params.append(pytest.param(names_, id=group, marks=pytest.mark.xfail(strict=True, reason=group)))
    return params


@pytest.mark.parametrize("names", _families())
async def test_malformed_frames_are_answered_and_never_cost_the_socket(rig: Any, names: list[str]) -> None:
    chosen = set(names)
    verdict = await fuzz(await rig(), [c for c in CASES if c.name in chosen])
    assert verdict.problems == {}


# ---------------------------------------------------------------------------------------- valid edge cases


VALID_EDGES = [
    pytest.param(user("🦀 crab", id="u-edge"), id="non-bmp-text"),
    pytest.param(user("\ud83e\udd80 escaped pair", id="u-edge"), id="escaped-surrogate-pair"),  # a valid pair
    pytest.param(user("x", id="u-edge", metadata={"nested": {"a": [1, {"b": None}]}}), id="metadata"),
    pytest.param(
        {"id": "u-edge", "role": "user", "parts": [{"type": "text", "text": "hi", "providerMetadata": {"p": {}}}]},
        id="text-part-provider-metadata",
    ),
    pytest.param(user("", id="u-edge"), id="empty-text"),
    pytest.param(user("a\x00b\u2028c", id="u-edge"), id="nul-and-line-separator"),
]


@pytest.mark.parametrize("message", VALID_EDGES)
async def test_valid_edge_messages_are_stored_and_answered(rig: Any, message: dict[str, Any]) -> None:
    made = await rig()
    ws = await made.socket()
    await ws.send_str(chat_frame("r-edge", message, trigger="not-a-known-trigger", customKey=[1, 2]))
    frames = await frames_until_done(ws, "r-edge")
    assert frames[-1]["outcome"] == "completed", frames
    history = await made.history()
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0]["parts"][0]["text"] == json.loads(dumps(message))["parts"][0]["text"]  # as JSON reads it
    await nothing_pending(made, ws)


# ---------------------------------------------------------------------------------------- frame sizes

LIMIT = 10_000


def sized_request(request_id: str, size: int, char: str = "a") -> str:
    """A valid chat request of exactly ``size`` bytes of UTF-8, its text made of ``char`` (sent unescaped, as a
    browser sends it)."""

    def frame(text: str) -> str:
        body = {"messages": [user(text, id=f"u-{request_id}")], "trigger": "submit-message"}
        init = {"method": "POST", "body": json.dumps(body, ensure_ascii=False)}
        return json.dumps({"type": "cf_agent_use_chat_request", "id": request_id, "init": init}, ensure_ascii=False)

    room = size - len(frame("").encode())
    width = len(char.encode())
    text = char * (room // width) + "a" * (room % width)
    assert len(frame(text).encode()) == size
    return frame(text)


async def test_a_frame_at_the_size_limit_is_answered(rig: Any) -> None:
    made = await rig(max_frame_bytes=LIMIT)
    ws = await made.socket()
    await ws.send_str(sized_request("r-at", LIMIT))
    frames = await frames_until_done(ws, "r-at")
    assert frames[-1]["outcome"] == "completed"
    history = await made.history()
    assert [(m["role"], m["id"]) for m in history] == [("user", "u-r-at"), ("assistant", history[-1]["id"])]


@pytest.mark.parametrize(
    ("size", "char"),
    [(LIMIT + 1, "a"), (LIMIT + 2, "é"), (3 * LIMIT, "a"), (100 * LIMIT, "a"), (LIMIT // 2 * 2 + 2, "é")],
    ids=["one-byte-over", "two-byte-chars-over", "three-times", "hundred-times", "chars-under-bytes-over"],
)
async def test_a_frame_over_the_size_limit_is_refused_and_nothing_is_stored(rig: Any, size: int, char: str) -> None:
    """README: the limit applies and a bad frame gets an error frame; a close as too big (1009) is the one close
    the protocol allows. Either way nothing is stored and the next socket (or this one) chats on."""
    made = await rig(max_frame_bytes=LIMIT)
    ws = await made.socket()
    await ws.send_str(sized_request("r-over", size, char))
    frame = await receive(ws)
    if frame is not None:
        assert frame["type"] == "think_actors_error" and str(LIMIT) in frame["error"], frame
        # A close, if one comes, follows the error frame at once. (Writing to a socket the server is closing
        # would lose its close frame to a reset, so this one waits a moment instead of sending a probe.)
        with contextlib.suppress(TimeoutError):
            frame = await receive(ws, 0.5)
        if frame is not None:
            await ws.send_str(dumps({"type": "cf_agent_stream_resume_request", "probeId": "p"}))
            assert await receive(ws) == {"type": "cf_agent_stream_resume_none", "reason": "idle", "probeId": "p"}
    if frame is None:
        assert CLOSE_CODES.get(id(ws)) == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
        ws = await made.socket()
    assert await made.history() == []
    assert made.model.seen == []
    await valid_request_is_answered(made, ws)


async def test_invalid_utf8_in_a_text_frame_closes_the_socket_as_the_websocket_rfc_says(rig: Any) -> None:
    made = await rig()
    ws = await made.socket()
    await ws._writer.send_frame(b'{"type": "\xff"}', WSMsgType.TEXT)  # no client API sends invalid UTF-8
    assert await receive(ws) is None
    assert CLOSE_CODES.get(id(ws)) == aiohttp.WSCloseCode.INVALID_TEXT
    await valid_request_is_answered(made, await made.socket())


# ---------------------------------------------------------------------------------------- tokens, origins, names

TOKEN = "s3cret-fuzz-token"
WS_HEADERS = (
    b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
)


async def raw_status(rig: Rig, target: bytes, headers: bytes = b"", *, websocket: bool = False) -> tuple[int, bytes]:
    """The status and body of one request written byte for byte (no client normalises the path or the headers)."""
    server = rig.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        head = b"GET " + target + b" HTTP/1.1\r\nHost: " + f"{server.host}:{server.port}".encode() + b"\r\n"
        head += (WS_HEADERS if websocket else b"Connection: close\r\n") + headers + b"\r\n"
        writer.write(head)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), WAIT_S)
        status = int(status_line.split()[1])
        if status == 101:
            return status, b""
        body = await asyncio.wait_for(reader.read(65536), WAIT_S)
        return status, body.split(b"\r\n\r\n", 1)[-1]
    finally:
        writer.close()


async def has_run(rig: Rig) -> list[str]:
    """Chat once on the rig's agent (reads of an agent that never ran are 404); returns its store files."""
    ws = await rig.socket()
    await ws.send_str(chat_frame("r-first", user("first", id="u-first")))
    await frames_until_done(ws, "r-first")
    await ws.close()
    return store_files(rig)


def store_files(rig: Rig) -> list[str]:
    return sorted(str(p.relative_to(rig.data_dir)) for p in rig.data_dir.rglob("*") if p.is_file())


BAD_TOKENS = [
    pytest.param(b"", id="missing"),
    pytest.param(b"Authorization: Bearer nope\r\n", id="wrong"),
    pytest.param(b"Authorization: Bearer \r\n", id="empty"),
    pytest.param(b"Authorization: Bearer\r\n", id="scheme-only"),
    pytest.param(b"Authorization: " + TOKEN.encode() + b"\r\n", id="no-scheme"),
    pytest.param(b"Authorization: Basic " + TOKEN.encode() + b"\r\n", id="basic"),
    pytest.param(b"Authorization: Bearer " + TOKEN[:-1].encode() + b"\r\n", id="prefix"),
    pytest.param(b"Authorization: Bearer " + TOKEN.encode() + b"x\r\n", id="longer"),
    pytest.param(b"Authorization: Bearer " + TOKEN.upper().encode() + b"\r\n", id="other-case"),
    pytest.param("Authorization: Bearer s3crét\r\n".encode(), id="utf8"),
    pytest.param(b"Authorization: Bearer " + b"t" * 8000 + b"\r\n", id="huge"),
    pytest.param(
        b"Authorization: Bearer \xff\xfe\r\n",
        id="not-utf8",
    ),
    pytest.param(
        b"Authorization: Bearer " + TOKEN.encode() + b"\xc3\r\n",
        id="token-then-not-utf8",
    ),
    pytest.param(b"Authorization: Bearer \x01\x02\r\n", id="control-bytes"),
    pytest.param(b"Authorization: Bearer a\x00b\r\n", id="nul"),
]
BAD_QUERY_TOKENS = [b"", b"nope", b"%ff%fe", b"%00", b"%C3%A9", TOKEN[:-1].encode(), b"%20" + TOKEN.encode()]


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
@pytest.mark.parametrize("header", BAD_TOKENS)
async def test_a_wrong_or_odd_token_is_refused_with_401(rig: Any, header: bytes, websocket: bool) -> None:
    made = await rig(token=TOKEN)
    target = made.path.encode() + (b"" if websocket else b"/get-messages")
    status, body = await raw_status(made, target, header, websocket=websocket)
    # A header a server refuses to parse (control bytes) may get 400; nothing gets through, nothing is a 500.
    assert status == 401 or (status == 400 and header.strip(b"\r\n").endswith((b"\x01\x02", b"a\x00b"))), body
    assert body
    assert Fuzzed.instances == 0 and store_files(made) == []


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
async def test_a_wrong_query_token_is_refused_and_the_right_one_lets_in(rig: Any, websocket: bool) -> None:
    made = await rig(token=TOKEN)
    target = made.path.encode() + (b"" if websocket else b"/get-messages")
    for token in BAD_QUERY_TOKENS:
        status, body = await raw_status(made, target + b"?token=" + token, websocket=websocket)
        assert (token, status) == (token, 401), body
    assert Fuzzed.instances == 0 and store_files(made) == []
    ws = await made.client.ws_connect(f"{made.path}?token={TOKEN}")
    await greeting(ws)
    for scheme in ("Bearer", "bearer"):  # the scheme is case-insensitive (RFC 7235)
        auth = {"Authorization": f"{scheme} {TOKEN}"}
        assert (await made.client.get(f"{made.path}/get-messages", headers=auth)).status == 200


async def test_healthz_without_the_token_says_only_that_the_gateway_is_up(rig: Any) -> None:
    made = await rig(token=TOKEN)
    response = await made.client.get("/healthz")
    assert response.status == 200
    assert "fuzzed" not in await response.text()


async def test_the_token_never_reaches_the_logs(rig: Any, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from aiohttp import web

    caplog.set_level(logging.DEBUG)
    made = await rig(token=TOKEN)
    # As ``think-actors serve`` runs it: web.run_app's access log on.
    runner = web.AppRunner(made.gateway.app(), access_log=logging.getLogger("aiohttp.access"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            for url in (f"/agents/fuzzed/f/get-messages?token={TOKEN}", "/agents/fuzzed/f/get-messages?token=guess"):
                async with session.get(f"http://127.0.0.1:{port}{url}") as response:
                    await response.read()
            async with session.ws_connect(f"http://127.0.0.1:{port}/agents/fuzzed/f?token={TOKEN}") as ws:
                await greeting(ws)
    finally:
        await runner.cleanup()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "access" in " ".join(r.name for r in caplog.records)  # the access log did run
    assert TOKEN not in logged and "guess" not in logged


CROSS_SITE = ["https://evil.example", "null", "http://127.0.0.1.evil.example", "http://localhost:1"]


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
async def test_same_origin_and_no_origin_are_let_in(rig: Any, websocket: bool) -> None:
    made = await rig()
    await has_run(made)
    server = made.client.server
    target = made.path.encode() + (b"" if websocket else b"/get-messages")
    for headers in (b"", f"Origin: http://{server.host}:{server.port}\r\n".encode()):
        status, body = await raw_status(made, target, headers, websocket=websocket)
        assert status == (101 if websocket else 200), body


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
@pytest.mark.parametrize("origin", CROSS_SITE)
async def test_a_cross_site_origin_is_refused_by_default(rig: Any, origin: str, websocket: bool) -> None:
    made = await rig()
    files = await has_run(made)
    for path in (made.path, "/agents/fuzzed/other"):  # an agent that ran, and one that never did
        target = path.encode() + (b"" if websocket else b"/get-messages")
        status, body = await raw_status(made, target, f"Origin: {origin}\r\n".encode(), websocket=websocket)
        assert status == 403, body
    assert Fuzzed.instances == 1 and store_files(made) == files


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
async def test_an_origin_allow_list_refuses_every_other_origin(rig: Any, websocket: bool) -> None:
    made = await rig(allowed_origins=["https://app.example"])
    files = await has_run(made)
    target = made.path.encode() + (b"" if websocket else b"/get-messages")
    for origin in [*CROSS_SITE, "https://app.example.evil", "https://APP.example:443x", "http://app.example"]:
        status, body = await raw_status(made, target, f"Origin: {origin}\r\n".encode(), websocket=websocket)
        assert (origin, status) == (origin, 403), body
    assert Fuzzed.instances == 1 and store_files(made) == files
    status, _ = await raw_status(made, target, b"Origin: https://app.example\r\n", websocket=websocket)
    assert status == (101 if websocket else 200)


BAD_NAMES = [
    b"",
    b"a" * 129,
    b"a" * 5000,
    b"..",
    b"..%2F..%2Fetc",
    b"%2e%2e",
    b"%2E%2E%2Fpasswd",
    b"a%2Fb",
    b"a%5Cb",
    b"a%00b",
    b"%00",
    b"%ff%fe",
    b"%c3%28",
    b"%",
    b"%zz",
    b"-bad",
    b".hidden",
    b"_x",
    b"a..b",
    b"a%20b",
    b"%C3%BCber",
    b"a%0Ab",
    b"a%0D%0Ab",
    b"CON%3A%5C",
]


@pytest.mark.parametrize("websocket", [False, True], ids=["http", "websocket"])
async def test_a_bad_agent_name_is_refused_and_creates_nothing(rig: Any, websocket: bool) -> None:
    made = await rig()
    answers = {}
    for name in BAD_NAMES:
        for slug in (b"fuzzed", b"nobody", b"..%2Ffuzzed"):
            target = b"/agents/" + slug + b"/" + name + (b"" if websocket else b"/get-messages")
            answers[target] = await raw_status(made, target, websocket=websocket)
    refused = {t: s for t, (s, body) in answers.items() if not (400 <= s < 500 and body.strip())}
    assert refused == {}
    assert Fuzzed.instances == 0 and store_files(made) == []
    assert (await made.client.get("/healthz")).status == 200


async def test_reading_an_agent_that_does_not_exist_is_404_and_creates_nothing(rig: Any) -> None:
    made = await rig()
    for name in ("never-used", "a.b:c@d", "x" * 128):
        response = await made.client.get(f"/agents/fuzzed/{name}/get-messages")
        assert response.status == 404, await response.text()
    assert store_files(made) == []
    assert (await made.client.get("/agents/fuzzed/never-used/get-messages")).status == 404  # still not there


# ---------------------------------------------------------------------------------------- 50 sockets at once

SOCKETS = 50


class Queued(ta.Think):
    message_concurrency = "queue"


class Latest(ta.Think):
    message_concurrency = "latest"


class Merged(ta.Think):
    message_concurrency = "merge"


class Dropping(ta.Think):
    message_concurrency = "drop"


class Debounced(ta.Think):
    message_concurrency = {"strategy": "debounce", "debounce_ms": 50}


class Steered(ta.Think):
    message_concurrency = "steer"


@dataclass
class Crowd:
    """What 50 sockets, one request each, saw and what the agent stored."""

    own: dict[str, list[dict[str, Any]]]  # request id -> the response frames for it on its own socket
    sockets: list[list[dict[str, Any]]]  # every frame each socket got
    history: list[dict[str, Any]]
    model: CountingModel

    def outcome(self, request_id: str) -> str:
        return str(self.own[request_id][-1].get("outcome"))

    def users(self) -> list[str]:
        return [m["id"] for m in self.history if m["role"] == "user"]

    def replies(self) -> list[str]:
        return [m["parts"][-1]["text"] for m in self.history if m["role"] == "assistant"]


async def crowd(tmp_path: Path, cls: type[ta.Think]) -> Crowd:
    # The first turn is slow, so every other request arrives while it runs (reference: "overlapping").
    model = CountingModel(first_delay_s=1.0, delay_s=0.005)
    directory = LocalDirectory([cls], model=model, data_dir=str(tmp_path))
    gateway = Gateway(directory)
    path = f"/agents/{ta.kebab_case(cls.__name__)}/crowd"
    async with TestClient(TestServer(gateway.app())) as client:
        sockets = [await client.ws_connect(path) for _ in range(SOCKETS)]
        for ws in sockets:
            await greeting(ws)
        frames: list[list[dict[str, Any]]] = [[] for _ in sockets]
        answered = [asyncio.Event() for _ in sockets]

        async def read(i: int) -> None:
            # Every socket reads to the end: a socket that stops reading would hold up the broadcast.
            while (frame := await receive(sockets[i], 60)) is not None:
                frames[i].append(frame)
                if frame["type"] == "cf_agent_use_chat_response" and frame["id"] == f"r{i}" and frame["done"]:
                    answered[i].set()

        readers = [asyncio.ensure_future(read(i)) for i in range(SOCKETS)]
        await asyncio.gather(
            *(ws.send_str(chat_frame(f"r{i}", user(f"q{i}", id=f"u{i}"))) for i, ws in enumerate(sockets))
        )
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in answered)), 40)
        await asyncio.wait_for(gateway.turns_idle(), 10)
        history = list(await (await client.get(f"{path}/get-messages")).json())
        for ws in sockets:
            await ws.close()
        await asyncio.gather(*readers, return_exceptions=True)
        rig = Rig(client, gateway, model, tmp_path, path)
        await nothing_pending(rig, await rig.socket(), path)
    own = {
        f"r{i}": [f for f in got if f["type"] == "cf_agent_use_chat_response" and f["id"] == f"r{i}"]
        for i, got in enumerate(frames)
    }
    return Crowd(own, frames, history, model)


ALL = {f"u{i}" for i in range(SOCKETS)}


def skipped(request_id: str) -> dict[str, Any]:
    n = request_id[1:]
    return {
        "type": "cf_agent_use_chat_response",
        "id": request_id,
        "body": "",
        "done": True,
        "outcome": "skipped",
        "messageIds": [f"u{n}"],
    }


def asked(user_texts: list[str]) -> list[str]:
    """The crowd's questions among a model request's user messages (not the reference's ephemeral "Continue
    your previous response" message, added when the history ends with a reply)."""
    return sorted(t for t in user_texts if t.startswith("q"))


def check_answers(result: Crowd) -> tuple[list[str], list[str]]:
    """Every request ends on its own socket, completed with a reply or skipped as the reference skips."""
    ran = [r for r in result.own if result.outcome(r) == "completed"]
    others = [r for r in result.own if r not in ran]
    for r in ran:
        assert any(f["body"] for f in result.own[r]), result.own[r]
    for r in others:
        assert result.own[r] == [skipped(r)], result.own[r]
    return ran, others


async def test_queue_under_50_sockets_runs_every_request_in_arrival_order(tmp_path: Path) -> None:
    result = await crowd(tmp_path, Queued)
    ran, others = check_answers(result)
    assert others == [] and len(ran) == SOCKETS
    assert sorted(result.users()) == sorted(ALL) and len(result.users()) == SOCKETS
    assert result.replies() == [f"reply {n}" for n in range(SOCKETS)]
    # FIFO: the turns end (every socket sees every done frame) in the order the messages were stored.
    done_order = [
        f["messageIds"][0] for f in result.sockets[0] if f["type"] == "cf_agent_use_chat_response" and f["done"]
    ]
    assert done_order == result.users()
    assert len(result.model.seen) == SOCKETS


@pytest.mark.parametrize("cls", [Latest, Merged, Debounced], ids=["latest", "merge", "debounce"])
async def test_latest_merge_debounce_under_50_sockets_store_all_and_answer_with_the_newest(
    tmp_path: Path, cls: type[ta.Think]
) -> None:
    result = await crowd(tmp_path, cls)
    ran, others = check_answers(result)
    users = result.users()
    assert sorted(users) == sorted(ALL) and len(users) == SOCKETS  # every message stored on arrival, once
    assert others, "the requests that arrived while the first turn ran overlap it"
    first, newest = f"r{users[0][1:]}", f"r{users[-1][1:]}"
    assert first in ran and newest in ran  # the first always runs; the newest runs and sees them all
    assert len(result.model.seen) == len(ran) == len(result.replies())
    assert asked(result.model.seen[-1]) == sorted(f"q{i}" for i in range(SOCKETS))


async def test_drop_under_50_sockets_answers_the_dropped_and_stores_none_of_them(tmp_path: Path) -> None:
    result = await crowd(tmp_path, Dropping)
    ran, dropped = check_answers(result)
    assert dropped, "the requests that arrived while the first turn ran overlap it"
    assert sorted(result.users()) == sorted(f"u{r[1:]}" for r in ran)
    # Each accepted request ran alone: its message, then its reply.
    assert [m["role"] for m in result.history] == ["user", "assistant"] * len(ran)
    assert len(result.model.seen) == len(ran)
    # Reference: the dropping socket gets the server transcript, without its message (a rollback), then done.
    for r in dropped:
        got = result.sockets[int(r[1:])]
        before = got[: got.index(skipped(r))]
        transcripts = [f for f in before if f["type"] == "cf_agent_chat_messages"]
        assert transcripts and f"u{r[1:]}" not in [m["id"] for m in transcripts[-1]["messages"]], r


async def test_steer_under_50_sockets_stores_every_message_once_and_answers_every_request(tmp_path: Path) -> None:
    result = await crowd(tmp_path, Steered)
    check_answers(result)
    users = result.users()
    assert sorted(users) == sorted(ALL) and len(users) == SOCKETS
    assert asked(result.model.seen[-1]) == sorted(f"q{i}" for i in range(SOCKETS))


async def test_repeated_resume_requests_mid_stream_give_every_chunk_once(tmp_path: Path) -> None:
    """Reference §3.7: each resume request while a stream runs is answered RESUMING; after one ACK the socket has
    every frame of the stream exactly once (replay, then live), whatever number of requests came before it."""
    from think_actors.testing import ScriptedModel, delay, step, text

    model = ScriptedModel([step(text("first half, "), delay(0.3), text("second half"))])
    directory = LocalDirectory([Fuzzed], model=model, data_dir=str(tmp_path))
    async with TestClient(TestServer(Gateway(directory).app())) as client:
        sender = await client.ws_connect("/agents/fuzzed/resume")
        await greeting(sender)
        tab = await client.ws_connect("/agents/fuzzed/resume")
        await greeting(tab)
        await sender.send_str(chat_frame("r", user("tell me", id="u1")))
        got: list[dict[str, Any]] = []
        while (frame := await receive(tab)) is not None:
            got.append(frame)
            if "first half" in str(frame.get("body")):
                break
        for n in range(5):
            await tab.send_str(dumps({"type": "cf_agent_stream_resume_request", "probeId": f"p{n}"}))
        answers = [await receive(tab) for _ in range(5)]
        assert answers == [{"type": "cf_agent_stream_resuming", "id": "r", "probeId": f"p{n}"} for n in range(5)]
        await tab.send_str(dumps({"type": "cf_agent_stream_resume_ack", "id": "r"}))
        got += await frames_until_done(tab, "r")
        everything = await frames_until_done(sender, "r")
    # Live before, and replayed or live after the ACK: each chunk once, in order, as the sender got it.
    assert [f["seq"] for f in got if "seq" in f] == [f["seq"] for f in everything if "seq" in f]
    assert "".join(json.loads(f["body"]).get("delta", "") for f in got if "seq" in f) == "first half, second half"
