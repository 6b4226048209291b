"""``default_context_overflow_classifier``: tell a context-window overflow apart from every other model error.

Return it from a ``Think`` subclass's ``classify_chat_error`` and the engine recovers from "the prompt does not fit"
(compacting and retrying) instead of failing the turn::

    async def classify_chat_error(self, error, ctx):
        return ta.default_context_overflow_classifier(error, ctx)

What it reads. The error may be a ``ContextOverflowError`` (always an overflow), a ``ModelError`` with its
``message``, ``status_code`` and ``response_body``, any other exception (its message, duck-typed ``status_code``,
``body``, ``response_body``, ``code``, ``type``, ``response.text`` / ``response.json()``, and its ``__cause__`` /
``__context__`` / ``original_exception`` chain), a ``str`` (an in-stream error event or a raw body; JSON text is
parsed), a ``dict`` / ``list`` body, or ``bytes``. Every string found anywhere in that, nested JSON strings
included (proxies such as OpenRouter and LiteLLM wrap the upstream body as text), is one piece of evidence.

How it decides, in this order (a ``ContextOverflowError`` anywhere in the chain is an overflow unless rule 1
or 2 vetoes it: litellm maps "the requested output alone fills the window" to a context-window error too):

1. Any piece that names a rate limit, quota, credits or throttling: not an overflow. Tokens-per-minute limits
   (OpenAI and Groq "Request too large ... tokens per min (TPM)", Anthropic "input tokens per minute", Bedrock
   "Too many tokens, please wait", Azure "token rate limit") and spend limits (OpenRouter "can only afford",
   a key's "monthly limit") speak of tokens and sizes but go away with time or money, not with a shorter prompt.
2. Any piece where the requested output alone fills the window: not an overflow. OpenAI, Azure and vLLM word
   it "maximum context length is W ... (I in the messages, O in the completion)" even when ``O >= W`` (often with
   ``code: context_length_exceeded``), Anthropic "I + O > W", TGI "must be <= W. Given: I inputs and O
   max_new_tokens". Compacting the prompt cannot help then; only a smaller ``max_tokens`` can. When ``O < W`` the
   prompt is part of the problem and it is an overflow (vLLM "is too large: 64000 ... context length is 64001").
   Cohere's output cap counts here too: "too many tokens: max tokens must be less than or equal to 4096, the
   maximum output for this model" (its documented 400 examples) shares the "too many tokens:" prefix of its
   overflows but names only the output.
3. Any piece matching a known overflow wording: overflow. The wordings come from the providers' documentation,
   their own source (vLLM, llama.cpp server, Ollama, LM Studio) and errors users pasted in public issue
   threads; ``tests/data/context_overflow_corpus.json`` holds one cited example or more per wording, for OpenAI,
   Azure OpenAI, Anthropic, Gemini, Vertex AI, Bedrock (Claude, Titan, Llama, Mistral, Converse), Mistral,
   Cohere, Groq, DeepSeek, xAI, OpenRouter, Together, Fireworks, Ollama, vLLM, SGLang, llama.cpp, llama-box,
   LM Studio, Hugging Face TGI, Perplexity and GitHub Copilot. vLLM's "max_tokens must be at least 1, got -N"
   is one too: it derives the output budget from the window less the prompt, so a negative budget means the
   prompt alone is over the window.
   Local and hosted servers word it their own way: llama.cpp "Context size has been exceeded." (a 500, beside its
   exceed_context_size_error), llama-box "prefill N tokens exceed n_ctx_per_seq", TGI "`inputs` must have less
   than N tokens" (its router's InputLength check), Perplexity "The total length of all messages is too long.".
   Bedrock's "Malformed input request: expected maxLength: N, actual: M" is one only for the whole input: with
   a field path (``#/texts/0: expected maxLength``) it is one part of an embedding request over its cap, which
   compaction does not shrink.
   Output-only caps ("max_tokens is too large ... supports at most N completion tokens", "max_tokens: N > M,
   which is the maximum allowed number of output tokens") match none of them.
4. HTTP 413 with nothing else to go on: overflow. Anthropic's ``request_too_large`` (the request's bytes pass
   the endpoint's fixed limit) and Cerebras' bare 413 can only be fixed by sending less, which is what
   overflow recovery does; a 413 that says "tokens per minute" was already ruled out by step 1. Limits on a
   single part (an image over 5 MB or too many pixels, a file too large) are not 413s and are not overflows:
   compaction would not shrink that part.

It never raises: anything it cannot read counts as no evidence, and an unexpected failure answers ``None``.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from .errors import ContextOverflowError

__all__ = ["default_context_overflow_classifier"]

# Bounds, so a huge body or a self-referencing object costs little: nodes visited, chain depth, text kept.
_MAX_VISITS = 200
_MAX_DEPTH = 10
_MAX_TEXTS = 100
_MAX_CHARS = 20_000
_MAX_ITEMS = 50

_OVERFLOW = re.compile(
    "|".join(
        [
            r"prompt is too long",  # Anthropic, Bedrock Claude, Fireworks, Vertex Claude
            r"prompt too long; exceeded",  # Ollama
            r"input length and .{0,2}max_tokens.{0,2} exceed context limit",  # Anthropic (see step 2)
            r"\brequest_too_large\b",  # Anthropic 413
            r"request exceeds the maximum size",  # Anthropic 413
            r"request size exceeds model context window",  # Anthropic 413
            r"context[_ ]length[_ ]exceeded",  # OpenAI, Azure, Groq code
            r"maximum context length",  # OpenAI, Azure, DeepSeek, OpenRouter, vLLM, Mistral, litellm
            r"context window exceeds limit",  # MiniMax
            r"exceeds the context window",  # OpenAI Responses
            r"input tokens exceed the configured limit",  # OpenAI/Azure gpt-5
            r"input token count\b.{0,40}?exceeds the maximum number of tokens",  # Gemini, Vertex
            r"input token count is \d+ but model only supports up to",  # Vertex
            r"input is too long",  # Bedrock
            r"too many input tokens",  # Bedrock Titan
            r"too many tokens:",  # Cohere
            r"maximum prompt length is \d+",  # xAI
            r"\binput_too_large\b",  # xAI gRPC
            r"exceeds? the available context size",  # llama.cpp server
            r"exceed_context_size_error",  # llama.cpp server
            r"input is larger than the max context size",  # llama.cpp embeddings
            r"input is too large to process",  # llama.cpp embeddings
            r"greater than the context length",  # LM Studio
            r"when context the overflows",  # LM Studio (sic)
            r"cannot truncate prompt with n_keep",  # LM Studio, llama.cpp
            r"input length \d+ exceeds context length",  # LM Studio
            r"input length exceeds (?:the )?(?:maximum )?context length",  # Ollama embed
            r"prompt is longer than the context length",  # Ollama chat
            r"input (?:after truncation )?exceeds maximum context length",  # Ollama embed
            r"longer than the maximum model length",  # vLLM
            r"too long to fit into the model",  # vLLM v1
            r"longer than the model.{0,3}s context length",  # SGLang, Together
            r"tokens \+ .{0,2}max_new_tokens.{0,2} must be <=",  # TGI (Together)
            r"range of input length should be",  # DashScope
            r"request payload size exceeds the limit",  # Gemini
            r"requested tokens \(\d+\) exceed context window",  # llama-cpp-python
            r"reduce the length of the messages",  # Groq, Cerebras
            r"max_tokens must be at least 1, got -\d+",  # vLLM: the prompt left a negative output budget
            r"input length \(\d+ tokens\) exceeds the maximum allowed length",  # SGLang
            r"prompt token count of \d+ exceeds the limit of \d+",  # GitHub Copilot
            r"\bmodel_max_prompt_tokens_exceeded\b",  # GitHub Copilot code
            r"context size has been exceeded",  # llama.cpp server, LM Studio (MLX)
            r"prefill \d+ tokens exceed n_ctx_per_seq",  # llama-box (GPUStack)
            r"`?inputs`? must have less than \d+ tokens",  # Hugging Face TGI (and TEI)
            r"malformed input request: expected maxlength: \d+, actual: \d+",  # Bedrock, the whole input (see step 3)
            r"the total length of all messages is too long",  # Perplexity
        ]
    ),
    re.IGNORECASE,
)

_NOT_OVERFLOW = re.compile(
    "|".join(
        [
            r"rate[ _-]?limit",
            r"tokens per (?:min|minute|day)\b",
            r"\bTPM\b",
            r"too many requests",
            r"resource(?:_| has been | )exhausted",
            r"quota",
            r"throttl",
            r"please wait before trying again",
            r"credit balance",
            r"more credits",
            r"insufficient balance",
            r"can only afford",
            r"monthly limit",
            r"\bbilling\b",
        ]
    ),
    re.IGNORECASE,
)

# Wordings that cap the output alone whatever else they say: Cohere heads them "too many tokens:" like its overflows.
_OUTPUT_ONLY = re.compile(r"the maximum output for this model", re.IGNORECASE)

# Caps on the output alone. litellm maps some of them to a context-window error because they name the window
# (Groq "... is less than the `context_window` for this model"); with no overflow wording beside them, they veto it.
_OUTPUT_CAP = re.compile(
    r"max_(?:completion_)?tokens.{0,2} (?:is too large|must be less than or equal to)"
    r"|maximum allowed number of output tokens|supports at most \d+ completion tokens",
    re.IGNORECASE,
)

_NUMBER = r"(\d[\d,]*)"
_WINDOW = re.compile(rf"maximum context length is {_NUMBER}", re.IGNORECASE)
_OUTPUT = re.compile(
    rf"{_NUMBER} (?:in|for) the (?:completion|output)|requested {_NUMBER} output tokens|is too large: {_NUMBER}",
    re.IGNORECASE,
)
_INPUT_PLUS_OUTPUT = re.compile(rf"exceed context limit: {_NUMBER} \+ {_NUMBER} > {_NUMBER}", re.IGNORECASE)
_TGI_BUDGET = re.compile(
    rf"must be <= {_NUMBER}\. Given: {_NUMBER} .inputs. tokens and {_NUMBER} .max_new_tokens.", re.IGNORECASE
)
_STATUS_413 = re.compile(
    r"^\W*413\b|error code:? 413\b|status(?: code)?:? 413\b|\b413 (?:request entity too large|payload too large)",
    re.IGNORECASE,
)

_TEXT_ATTRS = ("code", "type", "param", "error_code", "error_type")
_STATUS_ATTRS = ("status_code", "status", "http_status", "code")
_BODY_ATTRS = ("body", "response_body", "json_body", "error", "errors", "details", "data")
_CHAIN_ATTRS = ("__cause__", "__context__", "original_exception", "exceptions")
_STATUS_KEYS = frozenset({"code", "status", "status_code", "statusCode", "httpStatusCode"})


class _Evidence:
    """What one call found: the texts, the HTTP statuses, and whether a ContextOverflowError was seen."""

    __slots__ = ("overflow", "seen", "statuses", "texts", "visits")

    def __init__(self) -> None:
        self.overflow = False
        self.seen: set[int] = set()
        self.statuses: set[int] = set()
        self.texts: list[str] = []
        self.visits = 0

    def add_status(self, value: object) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            self.statuses.add(value)


def _attr(obj: object, name: str) -> Any:
    # A property that raises, or a proxy object's __getattr__, must not end the search.
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _safe_str(obj: object) -> str | None:
    try:
        text = str(obj)
    except Exception:
        return None
    return text if isinstance(text, str) else None


def _gather(obj: object, ev: _Evidence, depth: int) -> None:
    if depth > _MAX_DEPTH or ev.visits >= _MAX_VISITS or len(ev.texts) >= _MAX_TEXTS:
        return
    ev.visits += 1
    if isinstance(obj, ContextOverflowError):
        # Still read it: litellm calls "the requested output alone fills the window" a context-window error
        # too, and compaction cannot fix that one (rule 2 below vetoes it).
        ev.overflow = True
    if obj is None or isinstance(obj, (bool, int, float)):
        return
    elif isinstance(obj, str):
        _gather_text(obj, ev, depth)
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        _gather_text(bytes(obj[: _MAX_CHARS * 4]).decode("utf-8", errors="replace"), ev, depth)
    elif id(obj) not in ev.seen:
        ev.seen.add(id(obj))
        if isinstance(obj, dict):
            _gather_mapping(obj, ev, depth)
        elif isinstance(obj, (list, tuple)):
            for item in obj[:_MAX_ITEMS]:
                _gather(item, ev, depth + 1)
        else:
            _gather_object(obj, ev, depth)


def _gather_text(text: str, ev: _Evidence, depth: int) -> None:
    text = text[:_MAX_CHARS]
    ev.texts.append(text)
    stripped = text.strip()
    if stripped[:1] in ("{", "[", '"'):
        start, source = 0, stripped
    else:
        # A wrapper such as "litellm.BadRequestError: OpenAIException - {...}" carries the body after a prefix.
        start, source = text.find("{"), text
        if start < 0:
            return
    try:
        parsed, _ = json.JSONDecoder().raw_decode(source, start)
    except (ValueError, RecursionError):
        return
    if parsed != text:
        _gather(parsed, ev, depth + 1)


def _gather_mapping(mapping: dict[Any, Any], ev: _Evidence, depth: int) -> None:
    try:
        items = list(mapping.items())[:_MAX_ITEMS]
    except Exception:
        return
    for key, value in items:
        if key in _STATUS_KEYS and isinstance(value, int):
            ev.add_status(value)
        else:
            _gather(value, ev, depth + 1)


def _gather_object(obj: object, ev: _Evidence, depth: int) -> None:
    message = _attr(obj, "message")
    if isinstance(message, str):
        _gather_text(message, ev, depth)
    text = _safe_str(obj)
    if text and text != message:
        _gather_text(text, ev, depth)
    for name in _STATUS_ATTRS:
        ev.add_status(_attr(obj, name))
    for name in _TEXT_ATTRS:
        value = _attr(obj, name)
        if isinstance(value, str):
            _gather_text(value, ev, depth)
    for name in _BODY_ATTRS:
        value = _attr(obj, name)
        if value is not None and value is not obj:
            _gather(value, ev, depth + 1)
    response = _attr(obj, "response")
    if response is not None:
        _gather_response(response, ev, depth + 1)
    for name in _CHAIN_ATTRS:
        value = _attr(obj, name)
        if value is not None:
            _gather(value, ev, depth + 1)


def _gather_response(response: object, ev: _Evidence, depth: int) -> None:
    # An HTTP response (httpx, requests, aiohttp-like): its status and its body text, else its parsed JSON.
    if isinstance(response, (str, bytes, dict, list)):
        _gather(response, ev, depth)
        return
    ev.add_status(_attr(response, "status_code"))
    ev.add_status(_attr(response, "status"))
    text = _attr(response, "text")
    if isinstance(text, str):
        _gather_text(text, ev, depth)
        return
    parse = _attr(response, "json")
    if callable(parse):
        try:
            _gather(parse(), ev, depth + 1)
        except Exception:
            return


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _output_fills_window(text: str) -> bool:
    """Whether ``text`` says the requested output alone is at least the context window, or caps it (step 2)."""
    if _OUTPUT_ONLY.search(text):
        return True
    match = _INPUT_PLUS_OUTPUT.search(text)
    if match and _number(match[2]) >= _number(match[3]):
        return True
    match = _TGI_BUDGET.search(text)
    if match and _number(match[3]) >= _number(match[1]):
        return True
    window, output = _WINDOW.search(text), _OUTPUT.search(text)
    if window and output:
        requested = next(group for group in output.groups() if group is not None)
        return _number(requested) >= _number(window[1])
    return False


def _is_overflow(ev: _Evidence) -> bool:
    if any(_NOT_OVERFLOW.search(text) or _output_fills_window(text) for text in ev.texts):
        return False
    worded = any(_OVERFLOW.search(text) for text in ev.texts)
    if ev.overflow:
        return worded or not any(_OUTPUT_CAP.search(text) for text in ev.texts)
    if worded:
        return True
    return 413 in ev.statuses or any(_STATUS_413.search(text) for text in ev.texts)


class _ContextOverflowClassifier:
    """The type of ``default_context_overflow_classifier``.

    A plain function stored as a class attribute becomes a method, so ``agent.classify_chat_error(error, ctx)``
    would pass the agent as ``error``. An instance of a class without ``__get__`` is not a descriptor: read
    through an instance or a class it stays this object, and both call styles see ``(error, ctx)``.
    """

    __slots__ = ()

    def __call__(self, error: object, ctx: object | None = None) -> Literal["context_overflow"] | None:
        """Classify a model error.

        Args:
            error: A ``ModelError``, any exception, an error text, a JSON body (``dict``/``list``/text) or bytes.
            ctx: The engine's ``ChatErrorContext``; unused, accepted so the hook's signature fits.

        Returns:
            ``"context_overflow"`` when the error means the prompt does not fit the model's context window,
            else ``None``. Never raises.
        """
        try:
            evidence = _Evidence()
            _gather(error, evidence, 0)
            return "context_overflow" if _is_overflow(evidence) else None
        except Exception:
            return None

    def __repr__(self) -> str:
        return "default_context_overflow_classifier"


default_context_overflow_classifier = _ContextOverflowClassifier()
