"""A scripted OpenAI-compatible chat-completions server for tests.

``LiteLLMClient`` has to be tested through litellm's real OpenAI path (HTTP, SSE parsing, its exception mapping)
without ever reaching a provider. This server speaks just enough of ``POST /v1/chat/completions`` for that: each
request takes the next scripted entry, streamed as ``data: {...}`` lines ending in ``data: [DONE]``, or answered
whole when the request did not ask to stream. Failures are scripted too (error statuses, a stream cut without
``[DONE]``, an error event mid-stream), so every mapping in the client can be driven by a real socket, and an error
body can be any provider's (an Anthropic-shaped JSON object, a proxy's plain text) to replay real failures.

Every chunk of a response carries the same ``id`` (``chatcmpl-scripted-<n>``, n counting responses), ``created``
(unix seconds) and ``model`` (the server's ``model``), as OpenAI sends them.

Example::

    async with ScriptedOpenAIServer() as server:
        server.add_text("hello", chunk_size=2)
        ...  # point a client at server.base_url with model "openai/scripted"
        server.assert_complete()
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

from aiohttp import web

from think_actors.errors import ScriptError

__all__ = ["ScriptedOpenAIServer"]


@dataclass(frozen=True, slots=True)
class _ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class _Reply:
    """An assistant answer: streamed in chunks, or sent whole to a non-streaming request."""

    text: str = ""
    reasoning: str = ""
    tool_calls: tuple[_ToolCall, ...] = ()
    chunk_size: int = 4
    finish_reason: str = "stop"
    usage: dict[str, Any] | None = None
    url_citations: tuple[tuple[str, str | None], ...] = ()
    images: tuple[str, ...] = ()
    extra_deltas: tuple[dict[str, Any], ...] = ()
    chunk_fields: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _ErrorReply:
    """An HTTP error status sent before any stream starts: a JSON body, or a ``str`` sent as plain text."""

    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class _BrokenStream:
    """Some text chunks, then the stream breaks instead of finishing.

    ``ending`` says how: ``cut`` drops the connection without ``[DONE]``, ``error`` sends ``event`` (e.g.
    ``{"error": {...}}``) as the last data line and ends, ``stall`` stops sending until the server stops (so the
    client's read timeout fires), ``eof`` ends the HTTP body cleanly with neither a finish reason nor ``[DONE]``,
    ``done`` sends ``[DONE]`` without a finish reason. ``headers=False`` (stall only) stalls before even the
    response headers, so the timeout fires at the call.
    """

    text: str
    chunk_size: int
    ending: Literal["cut", "error", "stall", "eof", "done"]
    event: Any = None
    headers: bool = True


_Entry = _Reply | _ErrorReply | _BrokenStream


class ScriptedOpenAIServer:
    """An OpenAI-compatible HTTP server on 127.0.0.1 that answers each request with the next scripted entry.

    ``requests`` holds every request body in arrival order and ``request_headers`` the matching headers (names
    lowercased, since clients differ in case), so a test can assert exactly what the client sent. When the script
    runs out the server answers 500 with a message saying so, and ``assert_complete`` fails. ``model`` is the model
    name the responses report (a provider reports the version that answered, e.g. ``gpt-4o-mini-2024-07-18``).
    """

    def __init__(self, host: str = "127.0.0.1", *, model: str = "scripted") -> None:
        self.host = host
        self.model = model
        self.requests: list[dict[str, Any]] = []
        self.request_headers: list[dict[str, str]] = []
        self._script: deque[_Entry] = deque()
        self._exhausted_requests = 0
        self._ids = itertools.count(1)
        self._responses = itertools.count(1)
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None

    def __repr__(self) -> str:
        return f"ScriptedOpenAIServer(port={self._port}, queued={len(self._script)}, requests={len(self.requests)})"

    # -- script -------------------------------------------------------------------------------------------------

    def add_text(
        self,
        text: str,
        *,
        chunk_size: int = 4,
        reasoning: str = "",
        finish_reason: str = "stop",
        usage: dict[str, Any] | None = None,
        url_citations: Sequence[tuple[str, str | None]] = (),
        images: Sequence[str] = (),
        extra_deltas: Sequence[dict[str, Any]] = (),
        chunk_fields: dict[str, Any] | None = None,
    ) -> None:
        """Queue a text answer streamed ``chunk_size`` characters per chunk (reasoning chunks first, if any).

        Args:
            usage: The OpenAI ``usage`` object to report; by default a small one is made up from the text.
            url_citations: ``(url, title)`` pairs sent after the text as one delta of OpenAI ``url_citation``
                ``annotations`` (as web search sends them).
            images: Image URLs (usually ``data:`` URLs) sent after the text as one delta of ``images``, the shape
                litellm gives image output.
            extra_deltas: Further deltas sent verbatim after those, for shapes no option covers.
            chunk_fields: Top-level fields added to every chunk that carries text (e.g. Perplexity's
                ``citations`` and ``search_results``).
        """
        self._script.append(
            _Reply(
                text=text,
                reasoning=reasoning,
                chunk_size=chunk_size,
                finish_reason=finish_reason,
                usage=usage,
                url_citations=tuple(url_citations),
                images=tuple(images),
                extra_deltas=tuple(extra_deltas),
                chunk_fields=chunk_fields,
            )
        )

    def add_tool_calls(
        self,
        calls: Sequence[tuple[str, dict[str, Any]]],
        *,
        text: str = "",
        chunk_size: int = 4,
        usage: dict[str, Any] | None = None,
    ) -> None:
        """Queue parallel tool calls ``(name, arguments)``; their JSON arguments stream in ``chunk_size`` pieces.

        Calls get ids ``call_1``, ``call_2``, ... numbered across the whole server, so ids never repeat.
        """
        tool_calls = tuple(
            _ToolCall(id=f"call_{next(self._ids)}", name=name, arguments=json.dumps(arguments))
            for name, arguments in calls
        )
        self._script.append(
            _Reply(text=text, tool_calls=tool_calls, chunk_size=chunk_size, finish_reason="tool_calls", usage=usage)
        )

    def add_error(
        self,
        status: int,
        body: Any = None,
        *,
        message: str | None = None,
        code: str | None = None,
        error_type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue an HTTP error answer, e.g. 400 ``context_length_exceeded``, 429 or 500.

        Give either ``body``, sent as is (a ``str`` as ``text/plain``, anything else as JSON, e.g. another
        provider's real error body), or ``message`` (with ``code`` and ``error_type``) for an OpenAI-shaped
        ``{"error": {...}}`` body. ``headers`` are added to the answer, e.g. ``{"Retry-After": "2"}`` on a 429.

        Raises:
            TypeError: both ``body`` and ``message`` were given, or neither.
        """
        if (body is None) == (message is None):
            raise TypeError("add_error takes either body (sent as is) or message (an OpenAI-shaped error body)")
        if body is None:
            error_type = error_type or ("invalid_request_error" if status < 500 else "server_error")
            body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        elif code is not None or error_type is not None:
            raise TypeError("add_error: code and error_type go with message, not with a body sent as is")
        self._script.append(_ErrorReply(status, body, tuple((headers or {}).items())))

    def add_cut_stream(
        self, text: str, *, chunk_size: int = 4, close: Literal["abort", "eof", "done"] = "abort"
    ) -> None:
        """Queue a stream that sends ``text`` in chunks and never sends a finish reason.

        ``close`` says how it ends: ``abort`` drops the connection mid-body (as when a proxy dies), ``eof`` ends
        the HTTP body cleanly without ``[DONE]``, ``done`` sends ``[DONE]`` as if the answer were complete.
        """
        self._script.append(_BrokenStream(text, chunk_size, "cut" if close == "abort" else close))

    def add_stream_error(
        self,
        text: str,
        error_payload: Any = None,
        *,
        message: str = "The server had an error while processing your request.",
        code: str | None = "server_error",
        error_type: str = "server_error",
        chunk_size: int = 4,
    ) -> None:
        """Queue a stream that sends ``text`` in chunks, then an error event, then ends.

        The event's data is ``error_payload`` as given (any JSON, e.g. Anthropic's ``{"type": "error", "error":
        {...}}``), else the OpenAI-shaped ``{"error": {...}}`` built from ``message``, ``code`` and ``error_type``.
        """
        if error_payload is None:
            error_payload = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
        self._script.append(_BrokenStream(text, chunk_size, "error", error_payload))

    def add_stall(self, text: str | None = None, *, chunk_size: int = 4) -> None:
        """Queue an answer that never finishes, to drive the client's timeout.

        With ``text=None`` the server sends nothing, not even headers, so the client times out at the call;
        otherwise it streams ``text`` and then goes silent, so the client times out while reading.
        """
        self._script.append(_BrokenStream(text or "", chunk_size, "stall", headers=text is not None))

    def assert_complete(self) -> None:
        """Fail unless every scripted entry was used and no request arrived after the script ran out.

        Raises:
            ScriptError: entries are left over, or some request found the script empty.
        """
        problems = []
        if self._script:
            problems.append(f"{len(self._script)} scripted response(s) never requested")
        if self._exhausted_requests:
            problems.append(f"{self._exhausted_requests} request(s) arrived after the script was exhausted")
        if problems:
            raise ScriptError("ScriptedOpenAIServer: " + "; ".join(problems))

    # -- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The OpenAI ``api_base``, e.g. ``http://127.0.0.1:PORT/v1``."""
        if self._port is None:
            raise RuntimeError("ScriptedOpenAIServer is not started; use `async with ScriptedOpenAIServer()`")
        return f"http://{self.host}:{self._port}/v1"

    async def start(self) -> None:
        """Listen on an ephemeral port."""
        self._stopping.clear()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        # A short shutdown timeout: a client that stopped reading must not hold up the test's teardown.
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self._port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Close the listener and every open connection."""
        self._stopping.set()  # releases stalled handlers, so cleanup does not wait for them
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- HTTP -----------------------------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            body = None
        if not isinstance(body, dict):
            error = {"message": "request body must be a JSON object", "type": "invalid_request_error", "code": None}
            return _error_response(400, {"error": error})
        self.requests.append(body)
        self.request_headers.append({name.lower(): value for name, value in request.headers.items()})
        if not self._script:
            self._exhausted_requests += 1
            message = (
                f"ScriptedOpenAIServer script exhausted: request #{len(self.requests)} has no scripted response "
                "(queue one with add_text / add_tool_calls / add_error / ...)"
            )
            error = {"message": message, "type": "server_error", "param": None, "code": None}
            return _error_response(500, {"error": error})
        entry = self._script.popleft()
        if isinstance(entry, _ErrorReply):
            return _error_response(entry.status, entry.body, dict(entry.headers))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._stream(request, entry, include_usage)
        return await self._whole(request, entry)

    async def _stream(
        self, request: web.Request, entry: _Reply | _BrokenStream, include_usage: bool
    ) -> web.StreamResponse:
        if isinstance(entry, _BrokenStream) and not entry.headers:
            await self._stopping.wait()
            return web.Response(status=503)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        chunk = _ChunkMaker(f"chatcmpl-scripted-{next(self._responses)}", self.model)
        fields = (entry.chunk_fields if isinstance(entry, _Reply) else None) or {}
        try:
            await _send(response, chunk({"role": "assistant", "content": ""}))
            if isinstance(entry, _Reply):
                for piece in _pieces(entry.reasoning, entry.chunk_size):
                    await _send(response, chunk({"reasoning_content": piece}))
            for piece in _pieces(entry.text, entry.chunk_size):
                await _send(response, {**chunk({"content": piece}), **fields})
            if isinstance(entry, _BrokenStream):
                await self._break(request, response, entry)
                return response
            if entry.url_citations:
                await _send(response, chunk({"annotations": _annotations(entry)}))
            if entry.images:
                await _send(response, chunk({"images": _images(entry)}))
            for delta in entry.extra_deltas:
                await _send(response, chunk(delta))
            for index, call in enumerate(entry.tool_calls):
                function = {"name": call.name, "arguments": ""}
                first = {"index": index, "id": call.id, "type": "function", "function": function}
                await _send(response, chunk({"tool_calls": [first]}))
                for piece in _pieces(call.arguments, entry.chunk_size):
                    await _send(response, chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
            await _send(response, chunk({}, finish_reason=entry.finish_reason))
            if include_usage:
                await _send(response, chunk.usage_chunk(_usage(entry, _messages(self.requests[-1]))))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client stopped reading (an early `break`); nothing is left to tell it
        return response

    async def _break(self, request: web.Request, response: web.StreamResponse, entry: _BrokenStream) -> None:
        if entry.ending == "cut":
            # Drop the socket mid-body: the client sees an incomplete chunked response, as when a proxy dies.
            if request.transport is not None:
                request.transport.abort()
        elif entry.ending == "error":
            await response.write(f"data: {json.dumps(entry.event)}\n\n".encode())
            await response.write_eof()
        elif entry.ending in ("eof", "done"):
            if entry.ending == "done":
                await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        else:
            await self._stopping.wait()

    async def _whole(self, request: web.Request, entry: _Reply | _BrokenStream) -> web.StreamResponse:
        if isinstance(entry, _BrokenStream):
            if entry.ending == "error":
                return _error_response(500, entry.event)
            if entry.ending == "stall":
                await self._stopping.wait()
            elif entry.ending in ("eof", "done"):
                return web.json_response({"id": "chatcmpl-incomplete", "object": "chat.completion", "choices": []})
            elif request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)  # never read: the client is gone
        message: dict[str, Any] = {"role": "assistant", "content": entry.text or None}
        if entry.reasoning:
            message["reasoning_content"] = entry.reasoning
        if entry.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in entry.tool_calls
            ]
        if entry.url_citations:
            message["annotations"] = _annotations(entry)
        if entry.images:
            message["images"] = _images(entry)
        completion = {
            **(entry.chunk_fields or {}),
            "id": f"chatcmpl-scripted-{next(self._responses)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": entry.finish_reason}],
            "usage": _usage(entry, _messages(self.requests[-1])),
        }
        return web.json_response(completion)


class _ChunkMaker:
    """Builds ``chat.completion.chunk`` objects that share one id and timestamp, as a real stream does."""

    def __init__(self, response_id: str, model: str) -> None:
        created = int(time.time())
        self._base = {"id": response_id, "object": "chat.completion.chunk", "created": created, "model": model}

    def __call__(self, delta: dict[str, Any], *, finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**self._base, "choices": [choice]}

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        return {**self._base, "choices": [], "usage": usage}


async def _send(response: web.StreamResponse, payload: dict[str, Any]) -> None:
    await response.write(f"data: {json.dumps(payload)}\n\n".encode())


def _pieces(text: str, size: int) -> Iterable[str]:
    return (text[i : i + size] for i in range(0, len(text), max(size, 1)))


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return messages if isinstance(messages, list) else []


def _usage(entry: _Reply, messages: list[Any]) -> dict[str, Any]:
    # Made-up but deterministic counts (about four characters a token) when the script did not give any.
    if entry.usage is not None:
        return entry.usage
    prompt = max(1, len(json.dumps(messages)) // 4)
    completion = max(1, (len(entry.text) + len(entry.reasoning) + sum(len(c.arguments) for c in entry.tool_calls)) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _annotations(entry: _Reply) -> list[dict[str, Any]]:
    text_end = len(entry.text)
    return [
        {"type": "url_citation", "url_citation": {"url": url, "title": title, "start_index": 0, "end_index": text_end}}
        for url, title in entry.url_citations
    ]


def _images(entry: _Reply) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": url}, "index": i} for i, url in enumerate(entry.images)]


def _error_response(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    if isinstance(body, str):
        return web.Response(status=status, text=body, content_type="text/plain", headers=headers)
    return web.json_response(body, status=status, headers=headers)
