"""Real providers' streams, replayed byte for byte through both model clients.

Every recording in ``tests/data/provider_streams/`` (real chat-completions streams from public SDK snapshots,
cassettes and fixtures; ``index.json`` cites each one's repository, path and commit) is served by a local server
exactly as recorded: whole, and cut into separate writes at awkward places (inside UTF-8 sequences, between ``\\r``
and ``\\n``, right after ``data:``). Each is replayed under its provider's prefix and under ``openai/``, through
``OpenAIWireClient`` (the fast path) and ``LiteLLMClient``. Both must report the same facts — text, reasoning,
tool calls, finish reason, usage, cost, and for a failed stream the error's class, message, retryable and status —
and both must equal what the recording itself carries, read here by a separate SSE parser written from the
specification (``read_sse``) and the normalisation rules listed in ``expected``. The differences kept on
purpose are in ``KEPT_DIFFERENCES``, each with its reason, and, for framings litellm's readers get wrong, in
``LITELLM_REPORTS`` with exactly what litellm reports instead (the README's model-path table lists the same).

Never reaches the network: the server is on 127.0.0.1 and any other host lookup fails the test.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from think_actors.errors import ContextOverflowError, ModelConnectionError, ModelError, ProviderError, RateLimitError
from think_actors.models import (
    FinishEvent,
    ModelClient,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from think_actors.models.fast_path import FAST_PATH_PROVIDERS
from think_actors.models.litellm import LiteLLMClient
from think_actors.models.openai_wire import OpenAIWireClient

# litellm counts tokens for some models (Llama's tokenizer) and would try to download the tokenizer first.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

DATA = Path(__file__).parent / "data" / "provider_streams"
INDEX = json.loads((DATA / "index.json").read_text())
RECORDINGS = {entry["id"]: entry for entry in INDEX["recordings"]}
VARIANTS = {f"{v['of']}~{v['framing']}": v for v in INDEX["framings"]["variants"]}
HELLO = [{"role": "user", "content": "hello"}]
# USD per xAI tick (xAI bills in ten-billionths of a dollar: docs.x.ai, cost tracking).
USD_PER_XAI_TICK = 1e-10


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    lookup = socket.getaddrinfo

    def local_only(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in ("127.0.0.1", "localhost", "::1", None):
            raise OSError(f"test tried to reach {host!r}")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", local_only)


# -- the recordings' bytes ------------------------------------------------------------------------------------


def recorded_body(entry: dict[str, Any]) -> bytes:
    """The HTTP body a recording stands for: an SSE file as is; a chunks file framed as vercel/ai replays it."""
    raw: bytes = (DATA / entry["file"]).read_bytes()
    if entry["format"] == "sse":
        return raw
    lines = [line for line in raw.decode("utf-8").split("\n") if line.strip()]
    return "".join(f"data: {line}\n\n" for line in lines).encode() + b"data: [DONE]\n\n"


def reframed(body: bytes, framing: str) -> bytes:
    """``body`` with the same events in another framing the SSE specification allows."""
    events = [block for block in body.replace(b"\r\n", b"\n").split(b"\n\n") if block.strip()]
    if framing == "crlf":
        return b"".join(block.replace(b"\n", b"\r\n") + b"\r\n\r\n" for block in events)
    if framing == "cr":
        return b"".join(block.replace(b"\n", b"\r") + b"\r\r" for block in events)
    if framing == "no_space":
        return b"".join(block.replace(b"data: ", b"data:") + b"\n\n" for block in events)
    if framing == "no_done":
        return b"".join(block + b"\n\n" for block in events if block.strip() != b"data: [DONE]")
    if framing == "event_lines":
        out = [b"retry: 3000\n\n"]
        for n, block in enumerate(events):
            out.append(b"event: message\nid: %d\n" % n + block + b"\n\n")
        return b"".join(out)
    if framing == "multiline_data":
        out = []
        for block in events:
            value = block.removeprefix(b"data: ")
            if value == b"[DONE]" or value == block:  # [DONE], or a block of comments only (OpenRouter's)
                out.append(block + b"\n\n")
                continue
            # Split the JSON after each comma between members: joined with "\n" it is the same JSON.
            parts = _json_split(value.decode())
            out.append(b"".join(b"data: " + part.encode() + b"\n" for part in parts) + b"\n")
        return b"".join(out)
    raise ValueError(framing)


def _json_split(text: str) -> list[str]:
    parts: list[str] = []
    start = 0
    for match in re.finditer(r',"', text):
        candidate = text[start : match.start() + 1]
        rest = text[match.start() + 1 :]
        joined = "\n".join([*parts, candidate, rest])
        try:
            same = json.loads(joined) == json.loads(text)
        except ValueError:
            same = False
        if same:
            parts.append(candidate)
            start = match.start() + 1
    return [*parts, text[start:]]


def awkward_cuts(body: bytes, limit: int = 40) -> list[int]:
    """Offsets to cut ``body`` at: inside UTF-8 sequences, between ``\\r`` and ``\\n``, right after ``data:``."""
    inside_utf8 = [i for i in range(1, len(body)) if 0x80 <= body[i] < 0xC0]
    between_cr_lf = [m.start() + 1 for m in re.finditer(rb"\r\n", body)]
    after_data = [m.end() for m in re.finditer(rb"data:", body)]
    cuts: set[int] = set()
    for group in (inside_utf8, between_cr_lf, after_data):
        step = max(1, len(group) // (limit // 3 or 1))
        cuts.update(group[::step][: limit // 3 + 1])
    return sorted(cut for cut in cuts if 0 < cut < len(body))


# -- an SSE parser written from the specification, and what a recording carries --------------------------------


def read_sse(body: bytes) -> list[tuple[str, str]]:
    """The events of ``body`` as (type, data), by the WHATWG server-sent events rules.

    Lines end in CRLF, LF or CR; a line starting with ``:`` is a comment; ``field: value`` loses one leading space
    of the value; ``data`` lines join with ``\\n``; a blank line dispatches the event (none when no data came); an
    event left without its blank line at the end of the body is dispatched too, as the openai SDK does.
    """
    text = body.decode("utf-8")
    events: list[tuple[str, str]] = []
    data: list[str] | None = None
    kind = "message"
    for line in re.split(r"\r\n|\r|\n", text):
        if line == "":
            if data is not None:
                events.append((kind, "\n".join(data)))
            data, kind = None, "message"
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data = [*(data or []), value]
        elif name == "event":
            kind = value
    if data is not None:
        events.append((kind, "\n".join(data)))
    return events


@dataclass
class Facts:
    """What one stream said, in the project's normal form; the unit both clients and the recording are compared in."""

    text: str = ""
    reasoning: str = ""
    tool_calls: list[tuple[str | None, str | None, str]] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    error: tuple[type[ModelError], str, bool, int | None] | None = None


OPENAI_FINISH = {"stop": "stop", "eos": "stop", "length": "length", "tool_calls": "tool_calls"}
OPENAI_FINISH |= {"content_filter": "content_filter", "function_call": "function_call"}


def expected(body: bytes, prefix: str) -> Facts:
    """What the recording carries, by the rules both clients must follow (the README's model-path section).

    - One choice: the one with index 0 (a server that ignores ``n`` sends several, interleaved).
    - Text: ``delta.content`` as a string, or the ``text`` blocks of a list of content blocks (Mistral); a
      ``delta.refusal`` is text too, and makes the finish reason ``content_filter``.
    - Reasoning: ``reasoning_content``, else ``reasoning``, else the ``thinking`` blocks of a content list
      (Magistral), else the text of ``reasoning_details`` entries of type ``reasoning.text`` / ``reasoning.summary``.
    - Usage: the last ``usage``, else Groq's ``x_groq.usage``; output tokens include reasoning tokens when the
      provider counted them apart (xAI: ``total = prompt + completion + reasoning``); cached input from
      ``prompt_tokens_details.cached_tokens`` or DeepSeek's ``prompt_cache_hit_tokens``; cache writes from
      ``prompt_tokens_details.cache_write_tokens`` (OpenRouter).
    - Cost: what the provider reported (xAI's ``cost_in_usd_ticks``, OpenRouter's ``usage.cost``); else the price
      table's, which this function does not compute (the two clients must still agree on it).
    - An event whose data has a truthy ``error``: the stream fails with it (see ``stream_error``); a stream that
      ends without a finish reason fails as cut (litellm's rule, kept by the fast path).
    """
    facts = Facts()
    calls: dict[int, list[Any]] = {}
    usage: Any = None
    refused = False
    reason: str | None = None
    for _, data in read_sse(body):
        if data.startswith("[DONE]"):
            break
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            continue
        if chunk.get("error"):
            facts.error = stream_error(chunk["error"])
            break
        usage = chunk.get("usage") or usage
        groq = chunk.get("x_groq")
        if usage is None and isinstance(groq, dict) and groq.get("usage"):
            usage = groq["usage"]
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            reason = choice.get("finish_reason") or reason
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str):
                facts.reasoning += reasoning
            content = delta.get("content")
            if isinstance(content, str):
                facts.text += content
            elif isinstance(content, list):
                for block in content:
                    if block.get("type") == "text":
                        facts.text += block.get("text") or ""
                    elif block.get("type") == "thinking" and not isinstance(reasoning, str):
                        for part in block.get("thinking") or []:
                            if part.get("type") == "text":
                                facts.reasoning += part.get("text") or ""
            if not isinstance(reasoning, str):
                for detail in delta.get("reasoning_details") or []:
                    if detail.get("type") == "reasoning.text":
                        facts.reasoning += detail.get("text") or ""
                    elif detail.get("type") == "reasoning.summary":
                        facts.reasoning += detail.get("summary") or ""
            if isinstance(delta.get("refusal"), str) and delta["refusal"]:
                refused = True
                facts.text += delta["refusal"]
            for position, call in enumerate(delta.get("tool_calls") or []):
                index = call.get("index", position)
                function = call.get("function") or {}
                seen = calls.setdefault(index, [None, None, ""])
                seen[0] = seen[0] or call.get("id") or None
                seen[1] = seen[1] or function.get("name") or None
                seen[2] += function.get("arguments") or ""
    facts.tool_calls = [(calls[index][0], calls[index][1], calls[index][2]) for index in sorted(calls)]
    if facts.error is None and reason is not None:
        facts.finish_reason = OPENAI_FINISH.get(reason, "stop")
        if facts.finish_reason == "stop" and calls:
            facts.finish_reason = "tool_calls"
        if refused:
            facts.finish_reason = "content_filter"
    if facts.error is None and facts.finish_reason is None:
        name = "OpenAI" if prefix == "openai" else prefix[:1].upper() + prefix[1:]
        detail = "Stream ended before a finish_reason was received"
        message = (
            f"stream cut before it finished: litellm.APIConnectionError: APIConnectionError: {name}Exception - {detail}"
        )
        facts.error = (ModelConnectionError, message, True, None)
    if usage is not None and facts.error is None:
        facts.usage, facts.cost_usd = usage_facts(usage)
    return facts


def usage_facts(usage: dict[str, Any]) -> tuple[Usage, float | None]:
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    total = usage.get("total_tokens")
    details = usage.get("completion_tokens_details") or {}
    reasoning = details.get("reasoning_tokens")
    if total is None:
        total = (prompt or 0) + (completion or 0)
    if reasoning and completion is not None and prompt is not None and total == prompt + completion + reasoning:
        completion += reasoning  # counted apart from completion_tokens (xAI)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    if cached is None:
        cached = usage.get("prompt_cache_hit_tokens")
    cost = None
    if isinstance(usage.get("cost_in_usd_ticks"), int):
        cost = usage["cost_in_usd_ticks"] * USD_PER_XAI_TICK
    elif isinstance(usage.get("cost"), int | float):
        cost = float(usage["cost"])
    written = (usage.get("prompt_tokens_details") or {}).get("cache_write_tokens")
    return Usage(prompt, completion, total, reasoning, cached, written), cost


def stream_error(error: Any) -> tuple[type[ModelError], str, bool, int | None]:
    """An in-stream ``{"error": ...}`` event as both clients must raise it: class, message, retryable, status.

    The status is the error's numeric ``code`` (OpenRouter: 400) or its ``status_code`` (Groq); a 4xx, or a
    type of ``invalid_request_error``, is not retryable; overflow and rate-limit wordings keep their classes.
    """
    message = error.get("message") if isinstance(error, dict) else error
    text = f"error event mid-stream: {message}"
    status = None
    for key in ("code", "status_code"):
        value = error.get(key) if isinstance(error, dict) else None
        if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
            status = int(value) if 100 <= int(value) < 600 else None
            if status is not None:
                break
    if "context" in str(message).lower() and "length" in str(message).lower():
        return ContextOverflowError, text, False, status
    if status == 429:
        return RateLimitError, text, True, status
    invalid = isinstance(error, dict) and error.get("type") == "invalid_request_error"
    return ProviderError, text, not invalid and not (status is not None and 400 <= status < 500), status


# -- the replay server and the clients ----------------------------------------------------------------------------


class ReplayServer:
    """Answers every chat-completions request with ``body``, written in pieces split at ``cuts``."""

    def __init__(self) -> None:
        self.body = b""
        self.cuts: list[int] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def __aenter__(self) -> ReplayServer:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/chat/completions", self._handle)
        app.router.add_post("/openai/v1/chat/completions", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        start = 0
        for cut in [*self.cuts, len(self.body)]:
            await response.write(self.body[start:cut])
            start = cut
            if cut != len(self.body):
                await asyncio.sleep(0.001)  # so the piece leaves as its own segment
        await response.write_eof()
        return response


@pytest.fixture
async def replay() -> AsyncIterator[ReplayServer]:
    async with ReplayServer() as server:
        yield server


async def facts_of(client: ModelClient, model: str) -> Facts:
    facts = Facts()
    calls: dict[int, list[Any]] = {}
    request = ModelRequest(model=model, messages=HELLO, max_retries=0)
    try:
        async for event in client.stream(request):
            if isinstance(event, TextDelta):
                facts.text += event.text
            elif isinstance(event, ReasoningDelta):
                facts.reasoning += event.text
            elif isinstance(event, ToolCallDelta):
                seen = calls.setdefault(event.index, [None, None, ""])
                seen[0] = seen[0] or event.id
                seen[1] = seen[1] or event.name
                seen[2] += event.arguments
            elif isinstance(event, FinishEvent):
                facts.finish_reason, facts.usage, facts.cost_usd = event.finish_reason, event.usage, event.cost_usd
    except ModelError as error:
        facts.error = (type(error), error.message, error.retryable, error.status_code)
    facts.tool_calls = [(calls[index][0], calls[index][1], calls[index][2]) for index in sorted(calls)]
    return facts


def clients(base_url: str) -> Iterator[tuple[str, ModelClient]]:
    yield "fast_path", OpenAIWireClient(api_base=base_url, api_key="test")
    yield "litellm", LiteLLMClient(api_base=base_url, api_key="test")


# What litellm's route reports differently, kept (the README's model-path table): reason -> fields, recordings.
# litellm's stream wrapper, not the client, loses these facts before any chunk reaches LiteLLMClient.
_REFUSAL = "litellm's stream wrapper drops a chunk whose delta holds only a refusal"
_XAI_AS_OPENAI = "litellm's OpenAI route recomputes total_tokens and drops cost_in_usd_ticks (its xai/ route is right)"
_X_GROQ = "litellm drops x_groq and counts tokens itself (Groq's older streams report usage only there)"
_BLOCKS_AS_OPENAI = "litellm's OpenAI route passes only the first chunk of a content-block list through"
_DETAILS = "litellm keeps reasoning_details of the first chunk only"
KEPT_DIFFERENCES: dict[tuple[str, str], dict[str, str]] = {
    ("openai-refusal", "openai"): {"text": _REFUSAL, "finish_reason": _REFUSAL},
    ("openai-refusal-logprobs", "openai"): {"text": _REFUSAL, "finish_reason": _REFUSAL},
    **{
        (name, "openai"): {"usage": _XAI_AS_OPENAI, "cost_usd": _XAI_AS_OPENAI}
        for name in ("xai-text", "xai-tool-call", "xai-reasoning-text", "xai-reasoning-tool-call")
    },
    **{
        (name, prefix): {"usage": _X_GROQ}
        for name in ("groq-x-groq-usage", "groq-x-groq-usage-2")
        for prefix in ("groq", "openai")
    },
    ("mistral-magistral-blocks", "openai"): {"text": _BLOCKS_AS_OPENAI, "reasoning": _BLOCKS_AS_OPENAI},
    ("mistral-magistral-thinking", "openai"): {"reasoning": _BLOCKS_AS_OPENAI},
    ("snowflake-reasoning-details", "openai"): {"reasoning": _DETAILS},
}


# Framing the SSE specification allows and litellm's readers do not (item 9 of issue 17): each as litellm reports it.
_SPLIT_DATA = (
    "litellm's own HTTP handler (its groq/, mistral/, xai/, deepseek/, openrouter/, together_ai/, fireworks_ai/ and"
    " hosted_vllm/ routes) parses every data: line as a whole event: JSON split over several data: lines is dropped,"
    " [DONE] then says stop and litellm counts the tokens itself"
)
_EMPTY_EVENT = (
    "the openai SDK (litellm's openai/ and cerebras/ routes) dispatches an event with no data: line (a lone retry:)"
    " and fails parsing its empty data; the SSE specification dispatches nothing"
)
_LINE_AFTER_FINISH = (
    "litellm's own HTTP handler reads an event: or id: line as an empty chunk; one between the finish chunk and the"
    " usage chunk ends the stream before the usage arrives, and litellm counts the tokens itself"
)
_SDK_CUT = (
    ModelConnectionError,
    "stream cut before it finished: litellm.APIConnectionError: APIConnectionError: OpenAIException - "
    "Expecting value: line 1 column 1 (char 0)",
    True,
    None,
)
# The facts litellm reports for a message of "hello" it counted itself: 8 prompt tokens, nothing generated.
_COUNTED = Usage(input_tokens=8, output_tokens=0, total_tokens=8, reasoning_tokens=None, cached_input_tokens=None)
_COUNTED_REASONING = replace(_COUNTED, reasoning_tokens=0)
_NOTHING: dict[str, Any] = {
    "text": "",
    "reasoning": "",
    "tool_calls": [],
    "finish_reason": None,
    "usage": None,
    "cost_usd": None,
}
_EMPTY_EVENT_FAILS = {**_NOTHING, "error": _SDK_CUT}
LITELLM_REPORTS: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("groq-tool-call~multiline_data", "groq"): (
        _SPLIT_DATA,
        {"tool_calls": [], "finish_reason": "stop", "usage": _COUNTED},
    ),
    ("mistral-tool-call~multiline_data", "mistral"): (
        _SPLIT_DATA,
        {"tool_calls": [], "finish_reason": "stop", "usage": _COUNTED},
    ),
    ("xai-tool-call~multiline_data", "xai"): (
        _SPLIT_DATA,
        {"reasoning": "", "tool_calls": [], "finish_reason": "stop", "usage": _COUNTED_REASONING, "cost_usd": None},
    ),
    ("deepseek-tool-call~multiline_data", "deepseek"): (
        _SPLIT_DATA,
        {"reasoning": "", "tool_calls": [], "finish_reason": "stop", "usage": _COUNTED_REASONING},
    ),
    ("openrouter-streaming-reasoning~multiline_data", "openrouter"): (
        _SPLIT_DATA,
        {"text": "", "reasoning": "", "usage": _COUNTED_REASONING, "cost_usd": 0.0},
    ),
    ("fireworks-tool-call~multiline_data", "fireworks_ai"): (
        _SPLIT_DATA,
        {"tool_calls": [], "finish_reason": "stop", "usage": _COUNTED},
    ),
    ("together-deepseek-r1~multiline_data", "together_ai"): (_SPLIT_DATA, {"text": "", "usage": _COUNTED}),
    ("vllm-crusoe~multiline_data", "hosted_vllm"): (_SPLIT_DATA, {"text": "", "usage": _COUNTED}),
    **{
        (f"{name}~event_lines", prefix): (_EMPTY_EVENT, _EMPTY_EVENT_FAILS)
        for name, prefix in [
            ("openai-text", "openai"),
            ("groq-text", "openai"),
            ("xai-text", "openai"),
            ("vllm-crusoe", "openai"),
            ("fireworks-text", "openai"),
            ("cerebras-reasoning-tools", "openai"),
            ("cerebras-reasoning-tools", "cerebras"),
        ]
    },
    ("xai-text~event_lines", "xai"): (
        _LINE_AFTER_FINISH,
        {"usage": Usage(input_tokens=8, output_tokens=6, total_tokens=14, reasoning_tokens=5), "cost_usd": None},
    ),
    ("vllm-crusoe~event_lines", "hosted_vllm"): (
        _LINE_AFTER_FINISH,
        {"usage": Usage(input_tokens=8, output_tokens=13, total_tokens=21)},
    ),
}


def cases() -> Iterator[Any]:
    for name, entry in RECORDINGS.items():
        own = entry.get("replay_as") or entry["provider"]
        for prefix in sorted({own, "openai"}):
            yield pytest.param(name, prefix, id=f"{name}@{prefix}")
    for name, variant in VARIANTS.items():
        entry = RECORDINGS[variant["of"]]
        for prefix in sorted({entry.get("replay_as") or entry["provider"], "openai"}):
            yield pytest.param(name, prefix, id=f"{name}@{prefix}")


def body_of(name: str) -> bytes:
    if name in VARIANTS:
        variant = VARIANTS[name]
        return reframed(recorded_body(RECORDINGS[variant["of"]]), variant["framing"])
    return recorded_body(RECORDINGS[name])


def model_of(name: str, prefix: str) -> str:
    entry = RECORDINGS[VARIANTS[name]["of"]] if name in VARIANTS else RECORDINGS[name]
    return f"{prefix}/{entry['model']}"


def compare(name: str, prefix: str, want: Facts, got: dict[str, Facts]) -> None:
    of = VARIANTS[name]["of"] if name in VARIANTS else name
    kept = KEPT_DIFFERENCES.get((of, prefix), {}) | KEPT_DIFFERENCES.get((name, prefix), {})
    litellm = got["litellm"]
    if want.usage is None and want.error is None:
        # litellm counts the tokens itself when the provider reported no usage; the fast path reports none.
        litellm = replace(litellm, usage=None, cost_usd=None)
    elif want.usage is not None and litellm.usage is not None and want.usage.reasoning_tokens is None:
        # litellm fills in reasoning_tokens (0, or its tokenizer's count) when the provider gave no details.
        litellm = replace(litellm, usage=replace(litellm.usage, reasoning_tokens=None))
    why, reports = LITELLM_REPORTS.get((name, prefix), ("", {}))
    if reports:
        # A framing litellm misreads: what it reports instead, exactly, so this fails the day litellm reads it right.
        assert {attribute: getattr(litellm, attribute) for attribute in reports} == reports, why
        litellm = replace(litellm, **{attribute: getattr(want, attribute) for attribute in reports})
        kept = kept | dict.fromkeys(reports, why)
    for attribute, reason in kept.items():
        if attribute not in reports:
            assert getattr(litellm, attribute) != getattr(want, attribute), f"no longer differs ({reason}): drop it"
            litellm = replace(litellm, **{attribute: getattr(want, attribute)})
    fast = got["fast_path"]
    if want.cost_usd is None:
        if not kept.keys() & {"usage", "error"}:
            # A price-table cost: not the recording's fact, but both clients must agree on it.
            assert fast.cost_usd == pytest.approx(litellm.cost_usd)
        fast, litellm = replace(fast, cost_usd=None), replace(litellm, cost_usd=None)
    else:
        fast = replace(fast, cost_usd=pytest.approx(fast.cost_usd))  # type: ignore[arg-type]
    assert fast == want
    assert litellm == want


@pytest.mark.parametrize(("name", "prefix"), list(cases()))
async def test_a_recorded_stream_replayed_whole_gives_its_facts_on_both_paths(
    replay: ReplayServer, name: str, prefix: str
) -> None:
    replay.body, replay.cuts = body_of(name), []
    got = {}
    for kind, client in clients(replay.base_url):
        got[kind] = await facts_of(client, model_of(name, prefix))
        if hasattr(client, "aclose"):
            await client.aclose()
    compare(name, prefix, expected(replay.body, prefix), got)


@pytest.mark.parametrize(("name", "prefix"), list(cases()))
async def test_a_recorded_stream_cut_at_awkward_places_gives_the_same_facts(
    replay: ReplayServer, name: str, prefix: str
) -> None:
    replay.body = body_of(name)
    replay.cuts = awkward_cuts(replay.body)
    got = {}
    for kind, client in clients(replay.base_url):
        got[kind] = await facts_of(client, model_of(name, prefix))
        if hasattr(client, "aclose"):
            await client.aclose()
    compare(name, prefix, expected(replay.body, prefix), got)


def test_the_index_holds_every_file_and_the_kinds_the_issue_asks_for() -> None:
    import hashlib

    files = {path.name for path in DATA.iterdir()} - {"index.json"}
    assert files == {entry["file"] for entry in RECORDINGS.values()}
    for entry in RECORDINGS.values():
        assert hashlib.sha256((DATA / entry["file"]).read_bytes()).hexdigest() == entry["sha256"]
        assert entry["source"]["repository"] and entry["source"]["path"] and len(entry["source"]["commit"]) == 40
    assert len(RECORDINGS) >= 30
    # Every provider the fast path serves has at least one real recording replayed under its own prefix.
    replayed = {entry["provider"] for entry in RECORDINGS.values() if "replay_as" not in entry}
    assert replayed >= FAST_PATH_PROVIDERS, sorted(FAST_PATH_PROVIDERS - replayed)


def test_the_sse_parser_follows_the_specification() -> None:
    body = b": comment\r\nevent: x\rdata: a\ndata:b\r\n\r\ndata:  c\n\nid: 1\n\ndata: last"
    assert read_sse(body) == [("x", "a\nb"), ("message", " c"), ("message", "last")]
