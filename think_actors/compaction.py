"""Compaction: the types a compaction function speaks, the token estimate, and the shipped summarising function.

A compaction function gets the model view of the history (earlier summaries included, as synthetic
``compaction_<id>`` messages) and returns the range it summarised; the Session stores that as an overlay and the
model sees the summary instead of the range. Nothing is deleted: ``get_messages()`` still returns everything.
"""

from __future__ import annotations

import inspect
import json
import math
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from .errors import ConfigurationError
from .messages import FilePart, ReasoningPart, TextPart, ToolPart, UIMessage

__all__ = [
    "COMPACTION_PREFIX",
    "SUMMARY_HEADER",
    "SUMMARY_INSTRUCTIONS",
    "CompactionContext",
    "CompactionFn",
    "CompactionReason",
    "CompactionResult",
    "TokenCounter",
    "create_compact_function",
    "estimate_text_tokens",
    "estimate_tokens",
    "is_compaction_message",
    "summary_of",
]

TokenCounter = Callable[[list[UIMessage], str], float | Awaitable[float]]
"""``counter(messages, system_prompt)``: the tokens a prompt of these messages and this system prompt costs.

An int, or a float that is rounded up; sync or async.
"""

CompactionReason = Literal["manual", "threshold", "reactive", "proactive"]

COMPACTION_PREFIX = "compaction_"
"""Id prefix of the synthetic summary messages in a model view (``compaction_<overlay id>``)."""

SUMMARY_HEADER = "[Summary of the earlier conversation, condensed to save context]"
"""First line of a synthetic summary message; the summary follows it."""

TOKENS_PER_MESSAGE = 4
TOOL_IO_CHARS = 500  # per tool input/output in a summary prompt


@dataclass(frozen=True, slots=True)
class CompactionResult:
    """What a compaction function returns: the summary of the view's messages ``from_message_id``..``to_message_id``.

    The ids are those of the model view it was given; either may be a synthetic ``compaction_<id>`` message, which
    stands for the range that earlier summary covers.
    """

    summary: str
    from_message_id: str
    to_message_id: str


@dataclass(frozen=True, kw_only=True, slots=True)
class CompactionContext:
    """Given to a compaction function with the history it should shorten."""

    token_counter: TokenCounter
    """The session's counter (``compact_after``'s, else the engine's, else ``estimate_tokens``)."""
    reason: CompactionReason
    request_id: str | None = None


CompactionFn = Callable[[list[UIMessage], CompactionContext], Awaitable[CompactionResult | None]]


def estimate_text_tokens(text: str) -> int:
    """``max(chars / 4, words * 1.3)`` rounded up: a tokenizer-free estimate that errs high for prose and code."""
    if not text:
        return 0
    by_chars = (len(text) + 3) // 4
    by_words = (len(text.split()) * 13 + 9) // 10  # integer maths: 10 words are 13 tokens, not 13.000000000000002
    return max(by_chars, by_words)


def _value_tokens(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return estimate_text_tokens(value)
    return estimate_text_tokens(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str))


def estimate_tokens(messages: list[UIMessage], system_prompt: str = "") -> int:
    """The default token counter: 4 per message plus the estimate of every text the model sees.

    Counted: text and reasoning parts, tool inputs, outputs and error texts (non-strings JSON-dumped), and the
    system prompt. Files, sources and data parts are not.
    """
    tokens = estimate_text_tokens(system_prompt)
    for message in messages:
        tokens += TOKENS_PER_MESSAGE
        for part in message.parts:
            if isinstance(part, TextPart | ReasoningPart):
                tokens += estimate_text_tokens(part.text)
            elif isinstance(part, ToolPart):
                tokens += _value_tokens(part.input) + _value_tokens(part.output) + _value_tokens(part.error_text)
    return tokens


async def count_with(counter: TokenCounter, messages: list[UIMessage], system_prompt: str = "") -> int:
    """Run a sync or async counter and make its answer a non-negative int."""
    value: Any = counter(messages, system_prompt)
    if inspect.isawaitable(value):
        value = await value
    number = float(value)
    if not math.isfinite(number):  # a counter that gives up (NaN, inf) is no evidence of a big prompt
        return 0
    return max(0, math.ceil(number))


def is_compaction_message(message: UIMessage) -> bool:
    """Whether ``message`` is a synthetic summary of a model view."""
    return message.id.startswith(COMPACTION_PREFIX)


def summary_of(message: UIMessage) -> str | None:
    """The summary a synthetic compaction message carries, or None for any other message."""
    if not is_compaction_message(message):
        return None
    text = message.text
    return text[len(SUMMARY_HEADER) :].lstrip("\n") if text.startswith(SUMMARY_HEADER) else text


SUMMARY_INSTRUCTIONS = """\
Summarize the conversation below so the summary can replace its messages in the assistant's context.
Be factual: include only what was actually said or done, and never invent names, paths, commands or results.
If a previous summary is given, update it: keep what still holds, add what is new, and drop only what is
clearly obsolete.

Write only the summary, in this structure:

## Topic
What the conversation is about.

## Key Points
Important facts, decisions and conclusions.

## Current State
What has been done and what is in progress.

## Open Items
Unresolved questions, pending tasks and next steps."""
"""The instructions at the head of every summary prompt ``create_compact_function`` builds."""


def _clip(text: str, limit: int = TOOL_IO_CHARS) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... [{len(text) - limit} more chars]"


def _dump(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _render_tool(part: ToolPart) -> str:
    line = f"[tool call {part.name}] input: {_clip(_dump(part.input if part.input is not None else {}))}"
    if part.state == "output-available":
        return f"{line}\n[tool result {part.name}] {_clip(_dump(part.output))}"
    if part.state == "output-error":
        return f"{line}\n[tool error {part.name}] {_clip(part.error_text or 'tool failed')}"
    if part.state == "output-denied":
        return f"{line}\n[tool denied {part.name}]"
    return f"{line}\n[tool {part.name}: no result]"


def render_for_summary(messages: list[UIMessage]) -> str:
    """A plain-text transcript: one ``role: text`` block per message, tool calls with clipped input and output."""
    blocks = []
    for message in messages:
        lines = []
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                lines.append(part.text)
            elif isinstance(part, ToolPart):
                lines.append(_render_tool(part))
            elif isinstance(part, FilePart):
                lines.append(f"[file {part.filename or part.media_type}]")
        blocks.append(f"{message.role}: " + "\n".join(lines))
    return "\n\n".join(blocks)


def build_summary_prompt(messages: list[UIMessage], previous_summary: str | None, target_tokens: int) -> str:
    """The prompt ``summarize`` gets: instructions, the earlier summary (if any), then the messages."""
    sections = [SUMMARY_INSTRUCTIONS, f"Aim for about {target_tokens} tokens."]
    if previous_summary:
        sections.append(f"PREVIOUS SUMMARY:\n{previous_summary}")
    sections.append(f"CONVERSATION TO SUMMARIZE:\n{render_for_summary(messages)}")
    return "\n\n".join(sections)


def _call_ids(message: UIMessage) -> set[str]:
    return {part.tool_call_id for part in message.parts if isinstance(part, ToolPart)}


def _tail_start(view: list[UIMessage], start: int, cut: int) -> int:
    """Move the tail's first message back to a clean boundary: a user message, else a step that starts there.

    A tail starting on an assistant message that continues the one before it (or shares a tool call with the
    summarised part) would cut a step in two. When no clean boundary exists the cut stays where the budget put it:
    whole UIMessages still convert to a valid provider conversation.
    """
    for i in range(cut, start, -1):
        if view[i].role == "user":
            return i
    summarised: Counter[str] = Counter()
    for message in view[start:cut]:
        summarised.update(_call_ids(message))
    for i in range(cut, start, -1):
        message = view[i]
        if message.role == "system":
            return i
        continues = view[i - 1].role == "assistant"
        if not continues and not any(summarised[call_id] for call_id in _call_ids(message)):
            return i
        summarised.subtract(_call_ids(view[i - 1]))  # view[i - 1] joins the tail on the next try
    return cut


def create_compact_function(
    summarize: Callable[[str], Awaitable[str]],
    *,
    protect_head: int = 3,
    tail_token_budget: int = 20_000,
    min_tail_messages: int = 2,
    token_counter: TokenCounter | None = None,
) -> CompactionFn:
    """The shipped compaction: keep the head and a recent tail, summarise the middle with ``summarize(prompt)``.

    The first ``protect_head`` messages stay (but an earlier summary inside them starts the middle, so it is
    re-summarised rather than stranded); the tail keeps the newest messages within ``tail_token_budget`` tokens
    (at least ``min_tail_messages``), moved back to start on a user message when one is in reach. The middle is
    rendered as plain text under ``SUMMARY_INSTRUCTIONS`` with the earlier summary, and ``summarize``'s answer
    becomes the overlay. Returns None when the middle is empty or ``summarize`` answers only whitespace.

    Tokens per message come from ``token_counter``, else the session's counter (``ctx.token_counter``), else
    ``estimate_tokens``; the counter is called once per tail message.
    """
    for name, value in (
        ("protect_head", protect_head),
        ("tail_token_budget", tail_token_budget),
        ("min_tail_messages", min_tail_messages),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"create_compact_function: {name} must be an int >= 0, got {value!r}")

    async def compact(view: list[UIMessage], ctx: CompactionContext | None = None) -> CompactionResult | None:
        counter: TokenCounter = token_counter or (ctx.token_counter if ctx is not None else None) or estimate_tokens
        n = len(view)
        start = min(protect_head, n)
        earlier = next((i for i, m in enumerate(view) if is_compaction_message(m)), None)
        if earlier is not None and earlier < start:
            start = earlier
        if n - start <= min_tail_messages:
            return None
        cut, kept = n, 0
        for i in range(n - 1, start - 1, -1):
            tokens = await count_with(counter, [view[i]])
            if kept + tokens > tail_token_budget and cut < n:
                break
            kept += tokens
            cut = i
        cut = min(cut, n - min_tail_messages)
        if cut <= start:
            return None
        cut = _tail_start(view, start, cut)
        middle = view[start:cut]
        real = [m for m in middle if not is_compaction_message(m)]
        if not real:
            return None
        previous = "\n\n".join(summary_of(m) or "" for m in middle if is_compaction_message(m)) or None
        target = max(100, estimate_tokens(real) // 5)
        summary = (await summarize(build_summary_prompt(real, previous, target))).strip()
        if not summary:
            return None
        return CompactionResult(summary, middle[0].id, middle[-1].id)

    return compact
