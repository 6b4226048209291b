"""UI chunks, the single streaming currency, and the accumulator that folds them into a UIMessage.

The chunk types are defined in ``chunk_types.py`` and re-exported here; this module adds the accumulator and
the cross-message tool updates.
"""

from __future__ import annotations

from typing import Any, Literal

from .chunk_types import (
    AbortChunk,
    AgentToolEventChunk,
    DataChunk,
    ErrorChunk,
    FileChunk,
    FinishChunk,
    FinishStepChunk,
    MessageMetadataChunk,
    ReasoningDeltaChunk,
    ReasoningEndChunk,
    ReasoningStartChunk,
    SourceDocumentChunk,
    SourceUrlChunk,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolApprovalRequestChunk,
    ToolInputAvailableChunk,
    ToolInputDeltaChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputDeniedChunk,
    ToolOutputErrorChunk,
    UIChunk,
    chunk_classes,
    parse_chunk,
    trusted_builder,
    ui_finish_reason,
)
from .messages import (
    SETTLED_STATES,
    DataPart,
    FilePart,
    MessagePart,
    ReasoningPart,
    SourceDocumentPart,
    SourceUrlPart,
    StepStartPart,
    TextPart,
    ToolApproval,
    ToolPart,
    UIMessage,
)

__all__ = [
    "AbortChunk",
    "AgentToolEventChunk",
    "DataChunk",
    "ErrorChunk",
    "FileChunk",
    "FinishChunk",
    "FinishStepChunk",
    "MessageAccumulator",
    "MessageMetadataChunk",
    "ReasoningDeltaChunk",
    "ReasoningEndChunk",
    "ReasoningStartChunk",
    "SourceDocumentChunk",
    "SourceUrlChunk",
    "StartChunk",
    "StartStepChunk",
    "TextDeltaChunk",
    "TextEndChunk",
    "TextStartChunk",
    "ToolApprovalRequestChunk",
    "ToolInputAvailableChunk",
    "ToolInputDeltaChunk",
    "ToolInputErrorChunk",
    "ToolInputStartChunk",
    "ToolOutputAvailableChunk",
    "ToolOutputDeniedChunk",
    "ToolOutputErrorChunk",
    "ToolUpdate",
    "UIChunk",
    "chunk_classes",
    "parse_chunk",
    "trusted_builder",
    "ui_finish_reason",
]


class ToolUpdate:
    """A tool result for a tool call that lives in an earlier message (a cross-message update)."""

    __slots__ = ("chunk", "tool_call_id")

    def __init__(self, tool_call_id: str, chunk: Any):
        self.tool_call_id = tool_call_id
        self.chunk = chunk

    def apply(self, message: UIMessage) -> UIMessage | None:
        """The message with this result applied, or None if the call is absent or already settled."""
        parts = list(message.parts)
        for i, part in enumerate(parts):
            if isinstance(part, ToolPart) and part.tool_call_id == self.tool_call_id:
                updated = _apply_tool_result(part, self.chunk)
                if updated is None:
                    return None
                parts[i] = updated
                return message.model_copy(update={"parts": tuple(parts)})
        return None


def _apply_tool_result(part: ToolPart, chunk: Any) -> ToolPart | None:
    # First write wins: a settled part (not a preliminary output) never changes again.
    if part.state in SETTLED_STATES and not part.preliminary:
        return None
    if isinstance(chunk, ToolOutputAvailableChunk):
        return part.with_state("output-available", output=chunk.output, preliminary=True if chunk.preliminary else None)
    if isinstance(chunk, ToolOutputErrorChunk):
        return part.with_state("output-error", error_text=chunk.error_text)
    if isinstance(chunk, ToolOutputDeniedChunk):
        if part.state == "approval-responded" and part.approval and part.approval.approved:
            return None
        return part.with_state("output-denied")
    return None


class _Text:
    __slots__ = ("chunks", "done", "kind", "provider_metadata")

    def __init__(self, kind: str, provider_metadata: dict[str, Any] | None = None):
        self.kind = kind
        self.chunks: list[str] = []
        self.done = False
        self.provider_metadata = provider_metadata


class MessageAccumulator:
    """Folds UI chunks into one assistant message.

    Hot path: text and reasoning deltas only append to a list; the frozen ``UIMessage`` is built by
    ``message()``. ``apply`` returns a ``ToolUpdate`` when a tool result targets a call this message does
    not hold (the caller applies it to the stored message that does).
    """

    def __init__(self, message_id: str, *, metadata: dict[str, Any] | None = None, continuation: bool = False):
        self.message_id = message_id
        self.continuation = continuation
        self.metadata: dict[str, Any] | None = dict(metadata) if metadata else None
        self._parts: list[Any] = []  # _Text builders, ToolPart, and other frozen parts
        self._open: dict[str, _Text] = {}
        self._tools: dict[str, int] = {}
        self._tool_input_text: dict[str, list[str]] = {}
        self._data: dict[tuple[str, str], int] = {}

    def apply(self, chunk: Any) -> ToolUpdate | None:
        kind = chunk.type
        if kind == "text-delta" or kind == "reasoning-delta":
            text = self._open.get(chunk.id)
            if text is None:  # a delta without its start still lands in a part
                text = self._start_text("text" if kind == "text-delta" else "reasoning", chunk.id, None)
            text.chunks.append(chunk.delta)
            return None
        handler = _HANDLERS.get(kind)
        if handler is not None:
            result: ToolUpdate | None = handler(self, chunk)
            return result
        if kind.startswith("data-") and not chunk.transient:
            self._apply_data(chunk)
        return None

    def open_text(self, part_id: str) -> list[str] | None:
        """The texts of the open text or reasoning part ``part_id`` (a delta of it may be appended directly)."""
        text = self._open.get(part_id)
        return None if text is None else text.chunks

    def _start_text(self, kind: str, part_id: str, provider_metadata: dict[str, Any] | None) -> _Text:
        text = _Text(kind, provider_metadata)
        self._open[part_id] = text
        self._parts.append(text)
        return text

    def _end_text(self, chunk: Any) -> None:
        text = self._open.pop(chunk.id, None)
        if text is not None:
            text.done = True
            if getattr(chunk, "provider_metadata", None):
                text.provider_metadata = chunk.provider_metadata

    def _merge_metadata(self, metadata: dict[str, Any] | None) -> None:
        if metadata:
            self.metadata = {**(self.metadata or {}), **metadata}

    def _on_start(self, chunk: StartChunk) -> None:
        if chunk.message_id and not self.continuation:
            self.message_id = chunk.message_id
        self._merge_metadata(chunk.message_metadata)

    def _tool(self, tool_call_id: str) -> ToolPart | None:
        index = self._tools.get(tool_call_id)
        return None if index is None else self._parts[index]

    def _set_tool(self, part: ToolPart) -> None:
        index = self._tools.get(part.tool_call_id)
        if index is None:
            self._tools[part.tool_call_id] = len(self._parts)
            self._parts.append(part)
        else:
            self._parts[index] = part

    def _on_tool_input_start(self, chunk: ToolInputStartChunk) -> None:
        if chunk.tool_call_id in self._tools:  # a replayed start never resets a part
            return
        self._set_tool(_new_tool_part(chunk, "input-streaming"))
        self._tool_input_text[chunk.tool_call_id] = []

    def _on_tool_input_delta(self, chunk: ToolInputDeltaChunk) -> None:
        part = self._tool(chunk.tool_call_id)
        if part is not None and part.state == "input-streaming":
            self._tool_input_text[chunk.tool_call_id].append(chunk.input_text_delta)

    def _on_tool_input_available(self, chunk: ToolInputAvailableChunk) -> None:
        part = self._tool(chunk.tool_call_id)
        if part is None:
            self._set_tool(_new_tool_part(chunk, "input-available", input=chunk.input))
        elif part.state == "input-streaming":
            self._set_tool(part.with_state("input-available", input=chunk.input))
        self._tool_input_text.pop(chunk.tool_call_id, None)

    def _on_tool_input_error(self, chunk: ToolInputErrorChunk) -> None:
        part = self._tool(chunk.tool_call_id)
        if part is None:
            part = _new_tool_part(chunk, "input-streaming")
        if part.state in SETTLED_STATES:
            return
        self._set_tool(part.with_state("output-error", input=chunk.input, error_text=chunk.error_text))
        self._tool_input_text.pop(chunk.tool_call_id, None)

    def _on_approval_request(self, chunk: ToolApprovalRequestChunk) -> None:
        part = self._tool(chunk.tool_call_id)
        if part is None or part.state in SETTLED_STATES or part.state == "approval-responded":
            return
        self._set_tool(part.with_state("approval-requested", approval=ToolApproval(id=chunk.approval_id)))

    def _on_tool_result(self, chunk: Any) -> ToolUpdate | None:
        part = self._tool(chunk.tool_call_id)
        if part is None:
            return ToolUpdate(chunk.tool_call_id, chunk)
        updated = _apply_tool_result(part, chunk)
        if updated is not None:
            self._set_tool(updated)
        return None

    def _apply_data(self, chunk: DataChunk) -> None:
        part = DataPart(type=chunk.type, id=chunk.id, data=chunk.data)
        if chunk.id is not None:
            key = (chunk.type, chunk.id)
            index = self._data.get(key)
            if index is not None:
                self._parts[index] = part
                return
            self._data[key] = len(self._parts)
        self._parts.append(part)

    def _append(self, part: Any) -> None:
        self._parts.append(part)

    @property
    def has_content(self) -> bool:
        """Whether the message holds anything but step-start parts (only such a message is persisted)."""
        return any(not isinstance(p, StepStartPart) for p in self._parts)

    @property
    def text(self) -> str:
        return "".join("".join(p.chunks) for p in self._parts if isinstance(p, _Text) and p.kind == "text")

    def tool_part(self, tool_call_id: str) -> ToolPart | None:
        return self._tool(tool_call_id)

    def message(self) -> UIMessage:
        """The message as folded so far (streaming text parts stay ``state="streaming"``)."""
        parts: list[MessagePart] = []
        for p in self._parts:
            if isinstance(p, _Text):
                text = "".join(p.chunks)
                state: Literal["streaming", "done"] = "done" if p.done else "streaming"
                if p.kind == "text":
                    parts.append(TextPart(text=text, state=state))
                elif text or p.provider_metadata:  # empty reasoning is dropped unless it carries metadata
                    parts.append(ReasoningPart(text=text, state=state, provider_metadata=p.provider_metadata))
            else:
                parts.append(p)
        return UIMessage(id=self.message_id, role="assistant", parts=tuple(parts), metadata=self.metadata)


def _new_tool_part(chunk: Any, state: str, input: Any = None) -> ToolPart:
    dynamic = bool(getattr(chunk, "dynamic", None))
    return ToolPart(
        type="dynamic-tool" if dynamic else f"tool-{chunk.tool_name}",
        tool_name=chunk.tool_name,  # on static parts too, as the reference stores them
        tool_call_id=chunk.tool_call_id,
        state=state,
        input=input,
        provider_executed=getattr(chunk, "provider_executed", None),
    )


_HANDLERS: dict[str, Any] = {
    "start": MessageAccumulator._on_start,
    "start-step": lambda acc, chunk: acc._append(StepStartPart()),
    "text-start": lambda acc, chunk: acc._start_text("text", chunk.id, None) and None,
    "text-end": MessageAccumulator._end_text,
    "reasoning-start": lambda acc, chunk: acc._start_text("reasoning", chunk.id, chunk.provider_metadata) and None,
    "reasoning-end": MessageAccumulator._end_text,
    "tool-input-start": MessageAccumulator._on_tool_input_start,
    "tool-input-delta": MessageAccumulator._on_tool_input_delta,
    "tool-input-available": MessageAccumulator._on_tool_input_available,
    "tool-input-error": MessageAccumulator._on_tool_input_error,
    "tool-approval-request": MessageAccumulator._on_approval_request,
    "tool-output-available": MessageAccumulator._on_tool_result,
    "tool-output-error": MessageAccumulator._on_tool_result,
    "tool-output-denied": MessageAccumulator._on_tool_result,
    "source-url": lambda acc, c: acc._append(
        SourceUrlPart(source_id=c.source_id, url=c.url, title=c.title, provider_metadata=c.provider_metadata)
    ),
    "source-document": lambda acc, c: acc._append(
        SourceDocumentPart(
            source_id=c.source_id,
            media_type=c.media_type,
            title=c.title,
            filename=c.filename,
            provider_metadata=c.provider_metadata,
        )
    ),
    "file": lambda acc, c: acc._append(FilePart(url=c.url, media_type=c.media_type)),
    "message-metadata": lambda acc, c: acc._merge_metadata(c.message_metadata),
    "finish": lambda acc, c: acc._merge_metadata(c.message_metadata),
}
