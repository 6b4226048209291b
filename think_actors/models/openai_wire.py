"""OpenAIWireClient: the fast path for providers that speak OpenAI's chat-completions wire.

Every token of every agent passes through the model client, and litellm's stream wrapper costs ≈300-600 µs of CPU
per chunk (stack-notes.md, scripts/bench_model_path.py). This client streams the same requests over aiohttp and
reads the server-sent events itself: bytes split into lines, ``json.loads`` per event, the fields read straight
from the dicts (≈6 µs per chunk). It emits the ``ModelEvent`` sequence ``LiteLLMClient`` emits for the same stream
and raises the same errors; one conformance suite (``tests/test_model_client_conformance.py``) runs both clients
against the scripted OpenAI server.

litellm stays in charge of what is not the stream (``models/litellm/wire.py``): the provider, endpoint and key a
model id resolves to, the request body (its parameter mapping and validation), the class and words of error
answers, model info, prices and token counts. Providers whose wire is not OpenAI's (Anthropic, Gemini, Bedrock,
...) never come here: ``models/fast_path.py`` holds the one list of those that do, and ``AutoModelClient``
(``models/auto.py``) picks the path per request.

Retries follow the openai SDK's policy for every provider served here (``models/retry_policy.py``): only before the
stream starts, for connection failures, timeouts and 408/409/429/5xx answers, ``max_retries`` 2 unless the request
says otherwise. litellm's loop guard is kept: a stream repeating one chunk 100 times fails as it does there.

Where litellm invents a value, this client reports the provider's facts instead:

- ``ResponseMetadata.timestamp`` is the provider's ``created`` (litellm stamps its own clock and drops it).
- ``Usage`` holds what the provider reported (``total_tokens`` summed when missing, as litellm does). litellm
  estimates with its tokenizer what the provider left out: ``reasoning_tokens`` without usage details, and the
  whole usage when a provider sends none (litellm asks Mistral and Cerebras for none, trusting them to send it).
  This client leaves those None.

For providers litellm reaches through its own HTTP handler rather than the openai SDK (every one here but
``openai`` and ``cerebras``), litellm words transport failures differently and handles ``{"error": ...}`` events
inside a stream erratically (Groq's ends in a ValueError); this client treats them all as the OpenAI route does.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
import uuid
import weakref
from collections.abc import AsyncGenerator, Mapping
from json import loads
from typing import Any

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from think_actors.errors import ConfigurationError, ModelError, ProviderError
from think_actors.models.events import (
    FinishEvent,
    ModelEvent,
    ModelInfo,
    ModelRequest,
    ReasoningDelta,
    ResponseMetadata,
    SourceEvent,
    TextDelta,
    ToolCallDelta,
)
from think_actors.models.fast_path import FAST_PATH_PROVIDERS
from think_actors.models.litellm import LiteLLMClient
from think_actors.models.litellm.wire import (
    REPEATED_CHUNK_LIMIT,
    WireRequest,
    wire_failure,
    wire_finish_reason,
    wire_repetition_error,
    wire_request,
    wire_status_error,
    wire_usage_and_cost,
)
from think_actors.models.provider_data import (
    content_block_events,
    error_event_error,
    file_event,
    get,
    plain,
    reasoning_details_text,
    text_or_none,
)
from think_actors.models.retry_policy import DEFAULT_MAX_RETRIES, retry_after_s, retry_delay_s, should_retry_status

__all__ = ["OpenAIWireClient"]


class OpenAIWireClient:
    """Streams chat completions of OpenAI-wire providers over aiohttp; ``ModelEvent``s as ``LiteLLMClient``'s.

    Args:
        api_base: Default endpoint, e.g. a local OpenAI-compatible server's ``http://127.0.0.1:PORT/v1``.
        api_key: Default key; otherwise the provider's usual environment variable, as litellm reads it.
        **extra: Further default options, as for ``LiteLLMClient``; a request's ``params`` and
            ``provider_options`` override them.

    One aiohttp session (one connection pool) per client and event loop, made at the first request. ``aclose``
    closes it.
    """

    def __init__(self, *, api_base: str | None = None, api_key: str | None = None, **extra: Any) -> None:
        # The litellm client builds the same acompletion arguments and answers model info and token counts.
        self._litellm = LiteLLMClient(api_base=api_base, api_key=api_key, **extra)
        self._api_base = api_base
        self._sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession] = {}
        self._proxies: dict[str, tuple[Any, aiohttp.BasicAuth | None]] = {}
        # A client dropped without aclose (the usual end of a string-id client) still releases its pools.
        weakref.finalize(self, _release, self._sessions)

    def __repr__(self) -> str:
        return f"OpenAIWireClient(api_base={self._api_base!r})"

    def prepare(self, request: ModelRequest) -> WireRequest | None:
        """The HTTP request for ``request``, or None when it must go through litellm instead.

        None for a provider not in ``FAST_PATH_PROVIDERS`` and for options only litellm's route applies (see
        ``think_actors.models.litellm.wire.wire_request``). Costs one litellm request preparation (≈0.1-0.4 ms).
        """
        return wire_request(self._litellm.acompletion_kwargs(request), FAST_PATH_PROVIDERS)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream one request: ``ResponseMetadata``, content events, then exactly one ``FinishEvent``.

        Raises:
            ConfigurationError: the request cannot take the fast path (``prepare`` returned None).
            ModelError: a subclass for every provider failure, as ``LiteLLMClient`` raises it.
        """
        wire = self.prepare(request)
        if wire is None:
            raise ConfigurationError(
                f"{request.model!r} cannot take the OpenAI-wire fast path (provider or options need litellm); "
                "use LiteLLMClient or AutoModelClient"
            )
        async with contextlib.aclosing(self.stream_prepared(wire)) as events:
            async for event in events:
                yield event

    async def stream_prepared(self, wire: WireRequest) -> AsyncGenerator[ModelEvent, None]:
        """Stream a request ``prepare`` made. Closing the generator early closes the HTTP response at once."""
        response = await self._send(wire)
        reusable = False
        try:
            reader = _StreamReader(wire)
            content = response.content
            failure: ModelError | None = None
            buffer = b""
            data: bytes | None = None  # the current event's data lines, joined
            done = False
            after_cr = False  # the last read ended in \r: a \n starting the next one is that line's end
            try:
                async for received in content.iter_any():
                    text = buffer + received if buffer else received
                    if after_cr and text[:1] == b"\n":
                        text = text[1:]  # the \n of a \r\n cut between two reads
                    after_cr = False
                    if b"\r" in text:
                        # The SSE specification ends lines in \r\n, \n or a bare \r.
                        after_cr = text[-1:] == b"\r"
                        text = text.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                    lines = text.split(b"\n")
                    buffer = lines.pop()  # an incomplete last line waits for the rest
                    for line in lines:
                        if not line:  # a blank line ends the event
                            if data is None:
                                continue
                            if data[:6] == b"[DONE]":
                                done = True
                                break
                            for event in reader.read(loads(data)):
                                yield event
                            data = None
                        elif line[:5] == b"data:":
                            value = line[6:] if line[5:6] == b" " else line[5:]
                            data = value if data is None else data + b"\n" + value
                        # Comments (":" keep-alives), event:, id: and retry: lines carry nothing to read.
                    if done:
                        break
                if not done:
                    # A last event without its blank line still counts, as in the openai SDK.
                    if buffer[:5] == b"data:":
                        value = buffer[6:] if buffer[5:6] == b" " else buffer[5:]
                        data = value if data is None else data + b"\n" + value
                    if data is not None and data.strip() and data[:6] != b"[DONE]":
                        for event in reader.read(loads(data)):
                            yield event
                else:
                    # Read the body to its end, as the openai SDK does, so the connection can serve the next request.
                    await content.read()
                    reusable = True
            except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
                # A connection that drops once the answer finished loses nothing (litellm finishes such a stream).
                if reader.finish_reason is None:
                    failure = wire_failure(wire, "timeout" if isinstance(exc, TimeoutError) else "cut")
            except ValueError as exc:  # an event that is not JSON
                failure = ProviderError(
                    f"JSONDecodeError: {exc}", provider=wire.provider, retryable=False, in_stream=False
                )
            # Raised outside the except blocks, so no aiohttp exception is attached as the error's context.
            if failure is not None:
                raise failure
            if reader.finish_reason is None:
                raise wire_failure(wire, "eof")
            yield reader.finish()
        finally:
            if reusable:
                response.release()  # back to the pool for the next request
            else:
                response.close()  # mid-stream or unread rest: the connection cannot be reused

    async def model_info(self, model: str) -> ModelInfo | None:
        """Token limits and prices of ``model`` from litellm's local table; None when it does not know the model."""
        return await self._litellm.model_info(model)

    async def count_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        """The prompt size of ``messages`` by ``model``'s tokenizer, as litellm counts it; None when it cannot."""
        return await self._litellm.count_tokens(model, messages)

    async def aclose(self) -> None:
        """Close the connection pools (the client opens new ones if used again)."""
        running = asyncio.get_running_loop()
        sessions = dict(self._sessions)
        self._sessions.clear()
        for loop, session in sessions.items():
            if loop is running:
                await session.close()
            else:
                _release({loop: session})

    # -- HTTP -------------------------------------------------------------------------------------------------

    async def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is not None and not session.closed:
            return session
        # A session belongs to its event loop; those of loops that ended (an earlier asyncio.run) are dead.
        ended = {old: self._sessions.pop(old) for old in list(self._sessions) if old.is_closed()}
        _release(ended)
        connector = aiohttp.TCPConnector(limit=1000, ssl=_ssl_context())
        # Not trust_env: aiohttp would then look up .netrc and the proxy variables in a worker thread on every
        # request; _proxy reads the proxy variables once per endpoint instead.
        session = aiohttp.ClientSession(connector=connector)
        self._sessions[loop] = session
        return session

    def _proxy(self, url: str) -> tuple[Any, aiohttp.BasicAuth | None]:
        """The proxy ``HTTP(S)_PROXY`` / ``NO_PROXY`` name for ``url`` (as for litellm's httpx clients), if any."""
        origin = url.split("/", 3)[:3]
        key = "/".join(origin)
        if key not in self._proxies:
            try:
                self._proxies[key] = get_env_proxy_for_url(URL(url))
            except LookupError:  # no proxy for this endpoint
                self._proxies[key] = (None, None)
        return self._proxies[key]

    async def _send(self, wire: WireRequest) -> aiohttp.ClientResponse:
        """POST the request, retrying as the openai SDK does until the stream starts; the 2xx response."""
        session = await self._session()
        proxy, proxy_auth = self._proxy(wire.url)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=wire.timeout_s, sock_read=wire.timeout_s)
        max_retries = DEFAULT_MAX_RETRIES if wire.max_retries is None else wire.max_retries
        retries_taken = 0
        while True:
            retry_after: float | None = None
            try:
                response = await session.post(
                    wire.url,
                    data=wire.body,
                    headers=wire.headers,
                    timeout=timeout,
                    proxy=proxy,
                    proxy_auth=proxy_auth,
                )
            except TimeoutError:
                error: ModelError = wire_failure(wire, "timeout")
            except (aiohttp.ClientError, ConnectionError):
                error = wire_failure(wire, "refused")
            else:
                if response.status < 400:
                    return response
                try:
                    body = await response.read()
                except TimeoutError:
                    error = wire_failure(wire, "timeout")
                except (aiohttp.ClientError, ConnectionError):
                    error = wire_failure(wire, "refused")
                else:
                    error = wire_status_error(wire, response.status, response.headers, body)
                    if not should_retry_status(response.status, response.headers):
                        retries_taken = max_retries  # an answer not worth asking again
                    retry_after = retry_after_s(response.headers)
                finally:
                    response.release()
            if retries_taken >= max_retries:
                raise error
            await asyncio.sleep(retry_delay_s(retries_taken, retry_after))
            retries_taken += 1


class _StreamReader:
    """Turns one stream's chunk dicts into events and gathers what its ``FinishEvent`` reports.

    The rules are ``LiteLLMClient``'s ``_StreamReader``'s, applied to the wire's JSON instead of litellm objects.
    """

    __slots__ = (
        "_chunks",
        "_content_before",
        "_last_content",
        "_provider_metadata",
        "_refused",
        "_repeats",
        "_saw_tool_calls",
        "_source_prefix",
        "_source_urls",
        "_started",
        "_usage",
        "_wire",
        "finish_reason",
    )

    def __init__(self, wire: WireRequest) -> None:
        self._wire = wire
        self._started = False
        self.finish_reason: str | None = None
        self._usage: Any = None
        self._provider_metadata: dict[str, Any] = {}
        self._source_urls: set[str] = set()
        self._source_prefix = ""
        self._saw_tool_calls = False
        self._refused = False
        self._last_content: Any = None
        self._content_before: Any = None
        self._chunks = 0
        self._repeats = 1

    def read(self, chunk: Any) -> list[ModelEvent]:
        if type(chunk) is not dict:
            return []
        error = chunk.get("error")
        if error:
            # The openai SDK raises for any event whose data has a truthy "error", before it yields anything.
            raise error_event_error(error, self._wire.provider)
        events: list[ModelEvent] = []
        if not self._started:
            self._started = True
            events.append(self._metadata(chunk))
        usage = chunk.get("usage")
        if usage:
            self._usage = usage
        elif "x_groq" in chunk and self._usage is None:
            # Groq's older streams report usage only inside their x_groq member.
            usage = get(chunk["x_groq"], "usage")
            if isinstance(usage, Mapping) and usage:
                self._usage = usage
        fields = chunk.get("provider_specific_fields")
        if fields:
            self._add_provider_metadata(fields)
        choices = chunk.get("choices")
        if choices:
            self._guard_repetition(choices[0].get("delta"))
            for choice in choices:
                index = choice.get("index")
                if index is not None and index != 0:
                    continue  # several choices (n > 1, or a server ignoring n): only the first is read
                reason = choice.get("finish_reason")
                if reason:
                    self.finish_reason = reason
                delta = choice.get("delta")
                if delta:
                    self._delta_events(delta, events)
        if "search_results" in chunk or "citations" in chunk:
            # Perplexity repeats its whole list on every chunk; search_results first, since only they carry titles.
            for result in _list(chunk.get("search_results")):
                self._source(get(result, "url"), get(result, "title"), events)
            for url in _list(chunk.get("citations")):
                self._source(url, None, events)
        return events

    def _delta_events(self, delta: dict[str, Any], events: list[ModelEvent]) -> None:
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning and type(reasoning) is str:
            events.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if content:
            if type(content) is str:
                events.append(TextDelta(content))
            elif type(content) is list:
                events.extend(content_block_events(content))
        refusal = delta.get("refusal")
        if refusal and type(refusal) is str:
            # A refusal is what the model said instead of an answer: shown as text, the finish says content_filter.
            self._refused = True
            events.append(TextDelta(refusal))
        if delta.keys() <= _PLAIN_DELTA_KEYS:
            return  # the common chunk: text or reasoning (and the first chunk's role), nothing else to look for
        if not (reasoning and type(reasoning) is str) and "reasoning_details" in delta:
            text = reasoning_details_text(delta["reasoning_details"])
            if text:
                events.append(ReasoningDelta(text))
        calls = delta.get("tool_calls")
        if calls:
            self._saw_tool_calls = True
            for position, call in enumerate(calls):
                function = call.get("function") or {}
                index = call.get("index")
                call_id = call.get("id")
                name = function.get("name")
                arguments = function.get("arguments") or ""
                if call_id or name or arguments:
                    events.append(
                        ToolCallDelta(
                            index=index if type(index) is int else position,
                            id=str(call_id) if call_id else None,
                            name=str(name) if name else None,
                            arguments=str(arguments),
                        )
                    )
        fields = delta.get("provider_specific_fields")
        if fields:
            self._add_provider_metadata(fields)
        for annotation in _list(delta.get("annotations")):
            if get(annotation, "type") == "url_citation":
                citation = get(annotation, "url_citation") or annotation
                self._source(get(citation, "url"), get(citation, "title"), events)
        if isinstance(fields, Mapping) and isinstance(fields.get("citation"), Mapping):
            self._source(get(fields["citation"], "url"), get(fields["citation"], "title"), events)
        for image in _list(delta.get("images")):
            file = file_event(image)
            if file is not None:
                events.append(file)

    def _guard_repetition(self, delta: Any) -> None:
        """litellm's loop guard, kept so a looping model fails the same way on both paths.

        As litellm checks it: when a chunk with something in it arrives and the chunks before it repeated one
        content longer than two characters ``REPEATED_CHUNK_LIMIT`` times in a row, the stream fails.
        """
        content = delta.get("content") if delta else None
        if self._chunks >= 2 and (
            (type(content) is str and content)
            or (delta and (delta.get("tool_calls") or delta.get("provider_specific_fields")))
            or (delta and delta.get("reasoning_content") is not None)
        ):
            last = self._last_content
            if type(last) is not str or len(last) <= 2:
                self._repeats = 1
            elif last == self._content_before:
                self._repeats += 1
                if self._repeats >= REPEATED_CHUNK_LIMIT:
                    raise wire_repetition_error(self._wire, last)
            else:
                self._repeats = 1
        self._content_before = self._last_content
        self._last_content = content
        self._chunks += 1

    def _metadata(self, chunk: dict[str, Any]) -> ResponseMetadata:
        response_id = text_or_none(chunk.get("id"))
        created = chunk.get("created")
        self._source_prefix = response_id or f"response-{uuid.uuid4().hex[:12]}"
        return ResponseMetadata(
            id=response_id,
            model=text_or_none(chunk.get("model")) or self._wire.api_model,
            timestamp=float(created)
            if isinstance(created, int | float) and type(created) is not bool
            else float(int(time.time())),
        )

    def finish(self) -> FinishEvent:
        usage, cost = wire_usage_and_cost(self._wire, self._usage)
        reason = wire_finish_reason(self.finish_reason, self._saw_tool_calls)
        return FinishEvent(
            finish_reason="content_filter" if self._refused and reason is not None else reason,
            usage=usage,
            warnings=(),
            provider_metadata=self._provider_metadata or None,
            cost_usd=cost,
        )

    def _source(self, url: Any, title: Any, events: list[ModelEvent]) -> None:
        url = text_or_none(url)
        if url is None or url in self._source_urls:
            return
        self._source_urls.add(url)
        events.append(SourceEvent(f"{self._source_prefix}-source-{len(self._source_urls)}", url, text_or_none(title)))

    def _add_provider_metadata(self, fields: Any) -> None:
        if isinstance(fields, Mapping) and fields:
            self._provider_metadata.update(plain(dict(fields)))


_PLAIN_DELTA_KEYS = frozenset({"role", "content", "reasoning_content", "reasoning", "refusal"})


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


_ssl: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    """The CA bundle httpx (and so litellm) trusts: certifi's, or ``$SSL_CERT_FILE``."""
    global _ssl
    if _ssl is None:
        import certifi

        _ssl = ssl.create_default_context(cafile=os.environ.get("SSL_CERT_FILE") or certifi.where())
    return _ssl


def _release(sessions: dict[asyncio.AbstractEventLoop, aiohttp.ClientSession]) -> None:
    """Give up ``sessions`` without awaiting anything: their sockets are closed now.

    Detaching marks each session closed, so aiohttp reports no "Unclosed client session" when it is collected. A
    loop that ended took its sockets with it; then closing only marks the connector closed.
    """
    for session in sessions.values():
        connector = session.connector
        session.detach()
        if connector is not None:
            # aiohttp's synchronous close (TCPConnector.close is a coroutine): it closes every socket at once and
            # returns futures that resolve as they go, which nothing needs to wait for here.
            connector._close()
    sessions.clear()
