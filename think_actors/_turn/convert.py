"""What the model sees: transcript repair, truncation of older messages, and conversion to OpenAI messages."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Container, Sequence
from typing import Any

from ..messages import (
    FilePart,
    MessagePart,
    ReasoningPart,
    StepStartPart,
    TextPart,
    ToolPart,
    UIMessage,
)

INTERRUPTED_TOOL_TEXT = "The tool call was interrupted before a result was recorded."
CONTINUE_TEXT = "Continue your previous response from exactly where it left off. Do not repeat any of it."
KEEP_RECENT = 4
OLDER_TOOL_OUTPUT_CHARS = 500
OLDER_TEXT_CHARS = 10_000


def default_repair(part: ToolPart) -> ToolPart | MessagePart | None:
    """The reference repair: an interrupted call becomes an error result."""
    return part.with_state("output-error", error_text=INTERRUPTED_TOOL_TEXT)


def _normalize_input(value: Any) -> tuple[Any, bool]:
    """A plain-object input; JSON-object strings are parsed, anything else that is not an object becomes {}."""
    if isinstance(value, dict):
        return value, False
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed, True
    return {}, True


def repair_transcript(
    messages: list[UIMessage], repair: Callable[[ToolPart], Any], spare: Container[str] = ()
) -> tuple[list[UIMessage], list[UIMessage], list[str]]:
    """Repair every unsettled tool part (except ``approval-responded`` and the calls in ``spare``, which are about
    to run) and normalise tool inputs.

    Returns the repaired transcript, the messages that changed (to persist) and the repaired tool call ids.
    """
    out: list[UIMessage] = []
    changed: list[UIMessage] = []
    repaired_ids: list[str] = []
    for message in messages:
        if message.role != "assistant":
            out.append(message)
            continue
        parts: list[Any] = []
        dirty = False
        for part in message.parts:
            if isinstance(part, ToolPart):
                if part.state not in (
                    "output-available",
                    "output-error",
                    "output-denied",
                    "approval-responded",
                ) and (not spare or part.tool_call_id not in spare):
                    replacement = repair(part)
                    repaired_ids.append(part.tool_call_id)
                    dirty = True
                    if replacement is None:
                        continue
                    part = replacement
                if isinstance(part, ToolPart) and part.state != "input-streaming":
                    normalized, did = _normalize_input(part.input)
                    if did:
                        part = part.model_copy(update={"input": normalized})
                        dirty = True
            parts.append(part)
        if dirty:
            message = message.model_copy(update={"parts": tuple(parts)})
            changed.append(message)
        out.append(message)
    return out, changed, repaired_ids


def _truncate_output(output: Any, limit: int) -> Any:
    text = output if isinstance(output, str) else json.dumps(output, default=str)
    if len(text) <= limit:
        return output
    return text[:limit] + f"... [truncated {len(text) - limit} chars]"


def truncate_older(messages: list[UIMessage]) -> list[UIMessage]:
    """Keep the last ``KEEP_RECENT`` messages whole; shorten big tool outputs and texts in older ones."""
    if len(messages) <= KEEP_RECENT:
        return messages
    head = []
    for message in messages[:-KEEP_RECENT]:
        parts: list[Any] = []
        dirty = False
        for part in message.parts:
            if isinstance(part, ToolPart) and part.state == "output-available":
                short = _truncate_output(part.output, OLDER_TOOL_OUTPUT_CHARS)
                if short is not part.output:
                    part = part.model_copy(update={"output": short})
                    dirty = True
            elif isinstance(part, TextPart) and len(part.text) > OLDER_TEXT_CHARS:
                cut = len(part.text) - OLDER_TEXT_CHARS
                part = part.model_copy(update={"text": part.text[:OLDER_TEXT_CHARS] + f"... [truncated {cut} chars]"})
                dirty = True
            parts.append(part)
        head.append(message.model_copy(update={"parts": tuple(parts)}) if dirty else message)
    return head + messages[-KEEP_RECENT:]


def _tool_content(part: ToolPart) -> str:
    if part.state == "output-error":
        return f"Error: {part.error_text or 'tool failed'}"
    if part.state == "output-denied":
        reason = part.approval.reason if part.approval and part.approval.reason else None
        return f"The tool call was denied{': ' + reason if reason else ' by the user'}."
    output = part.output
    return output if isinstance(output, str) else json.dumps(output, default=str)


def _user_content(message: UIMessage) -> str | list[dict[str, Any]]:
    texts = [p.text for p in message.parts if isinstance(p, TextPart)]
    files = [p for p in message.parts if isinstance(p, FilePart)]
    if not files:
        return "".join(texts) if len(texts) == 1 else "\n".join(texts)
    content: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    for f in files:
        if f.media_type.startswith("image/"):
            content.append({"type": "image_url", "image_url": {"url": f.url}})
        else:
            content.append({"type": "file", "file": {"file_data": f.url, "filename": f.filename or "file"}})
    return content


def _assistant_messages(message: UIMessage) -> list[dict[str, Any]]:
    """One assistant message (+ its tool results) per step of the UI message."""
    out: list[dict[str, Any]] = []
    texts: list[str] = []
    calls: list[ToolPart] = []

    def flush() -> None:
        settled = [c for c in calls if c.state in ("output-available", "output-error", "output-denied")]
        if not texts and not settled:
            return
        entry: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
        if settled:
            entry["tool_calls"] = [
                {
                    "id": c.tool_call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.input if c.input is not None else {})},
                }
                for c in settled
            ]
        out.append(entry)
        out.extend({"role": "tool", "tool_call_id": c.tool_call_id, "content": _tool_content(c)} for c in settled)
        texts.clear()
        calls.clear()

    for part in message.parts:
        if isinstance(part, StepStartPart):
            flush()
        elif isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ToolPart):
            calls.append(part)
        elif isinstance(part, ReasoningPart):
            continue  # providers get reasoning back through their own metadata, not as content
    flush()
    return out


def to_model_messages(messages: list[UIMessage]) -> list[dict[str, Any]]:
    """OpenAI chat messages for a transcript. Incomplete tool calls are dropped (repair ran before)."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "assistant":
            out.extend(_assistant_messages(message))
        elif message.role == "system":
            text = "".join(p.text for p in message.parts if isinstance(p, TextPart))
            if text:
                out.append({"role": "system", "content": text})
        else:
            if message.parts:  # an empty user text still asks the model to answer (chat(""))
                out.append({"role": "user", "content": _user_content(message)})
    return out


def ensure_continue_checkpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Append the ephemeral "continue" user message when the list ends with an assistant message."""
    if messages and messages[-1].get("role") == "assistant":
        return [*messages, {"role": "user", "content": CONTINUE_TEXT}]
    return messages


def reply_after(messages: Sequence[UIMessage], message_id: str) -> UIMessage | None:
    """The assistant messages that follow message ``message_id`` up to the next other message, as one message (the
    first's id and metadata, every part in order); None when there are none or ``message_id`` is not there."""
    index = next((i for i, m in enumerate(messages) if m.id == message_id), None)
    if index is None:
        return None
    replies = list(itertools.takewhile(lambda m: m.role == "assistant", messages[index + 1 :]))
    if len(replies) <= 1:
        return replies[0] if replies else None
    return replies[0].model_copy(update={"parts": tuple(p for m in replies for p in m.parts)})
