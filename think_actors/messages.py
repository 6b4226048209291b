"""UIMessage and its parts: the persisted, wire-visible shape of a conversation (AI SDK field names on the wire).

Tool parts follow the reference state machine::

    input-streaming -> input-available -> (approval-requested -> approval-responded | output-denied)
                    -> output-available | output-error

"Settled" means output-available, output-error or output-denied.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag
from pydantic.alias_generators import to_camel

__all__ = [
    "DataPart",
    "FilePart",
    "MessagePart",
    "ReasoningPart",
    "SourceDocumentPart",
    "SourceUrlPart",
    "StepStartPart",
    "TextPart",
    "ToolApproval",
    "ToolPart",
    "ToolState",
    "UIMessage",
    "new_id",
    "user_message",
]

ToolState = Literal[
    "input-streaming",
    "input-available",
    "approval-requested",
    "approval-responded",
    "output-available",
    "output-error",
    "output-denied",
]
SETTLED_STATES: frozenset[str] = frozenset({"output-available", "output-error", "output-denied"})


def new_id() -> str:
    """A fresh random id (hex uuid4)."""
    return uuid.uuid4().hex


class WireModel(BaseModel):
    """Frozen, strict, camelCase on the wire (``by_alias``), snake_case in Python."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        # Validators are built at a model's first use, not at import: an agent actor starts ~60 ms sooner, and
        # the chunk and part types a process never meets cost it nothing.
        defer_build=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """JSON-ready dict with the AI SDK's field names, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class TextPart(WireModel):
    type: Literal["text"] = "text"
    text: str
    state: Literal["streaming", "done"] | None = None
    provider_metadata: dict[str, Any] | None = None  # the AI SDK's UIMessage allows it (kept, not interpreted)


class ReasoningPart(WireModel):
    type: Literal["reasoning"] = "reasoning"
    text: str
    state: Literal["streaming", "done"] | None = None
    provider_metadata: dict[str, Any] | None = None


class StepStartPart(WireModel):
    type: Literal["step-start"] = "step-start"


class ToolApproval(WireModel):
    id: str
    approved: bool | None = None
    reason: str | None = None


class ToolPart(WireModel):
    """A tool call and its result. ``type`` is ``tool-<name>``, or ``dynamic-tool`` with ``tool_name`` set."""

    type: str
    tool_call_id: str
    state: ToolState
    tool_name: str | None = None
    input: Any = None
    output: Any = None
    error_text: str | None = None
    approval: ToolApproval | None = None
    preliminary: bool | None = None
    provider_executed: bool | None = None
    call_provider_metadata: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        """The tool's name, whether the part is static (``tool-<name>``) or dynamic."""
        if self.type == "dynamic-tool":
            return self.tool_name or ""
        return self.type[5:]

    @property
    def settled(self) -> bool:
        return self.state in SETTLED_STATES

    def with_state(self, state: ToolState, **changes: Any) -> ToolPart:
        """This part in ``state`` with ``changes``, every field the new state does not have cleared.

        The fields each state has are the AI SDK's (``UIToolInvocation``): only ``output-available`` has an output
        (and ``preliminary``), only ``output-error`` an error text; an approval exists from ``approval-requested``
        on (only its id while requested), and past the call only when it approved it (``output-denied`` keeps its
        refusal). Every state change goes through here, so no part carries a field of a state it left.
        """
        fields: dict[str, Any] = {"state": state, **changes}
        if state != "output-available":
            fields["output"] = None
            fields["preliminary"] = None
        if state != "output-error":
            fields["error_text"] = None
        approval = fields.get("approval", self.approval)
        if state in ("input-streaming", "input-available"):
            approval = None
        elif state == "approval-requested" and approval is not None:
            approval = ToolApproval(id=approval.id)
        elif state in ("output-available", "output-error") and approval is not None and approval.approved is not True:
            approval = None
        fields["approval"] = approval
        return self.model_copy(update=fields)


class SourceUrlPart(WireModel):
    type: Literal["source-url"] = "source-url"
    source_id: str
    url: str
    title: str | None = None
    provider_metadata: dict[str, Any] | None = None


class SourceDocumentPart(WireModel):
    type: Literal["source-document"] = "source-document"
    source_id: str
    media_type: str
    title: str
    filename: str | None = None
    provider_metadata: dict[str, Any] | None = None


class FilePart(WireModel):
    type: Literal["file"] = "file"
    url: str
    media_type: str
    filename: str | None = None
    provider_metadata: dict[str, Any] | None = None


class DataPart(WireModel):
    """A ``data-<name>`` part; the same ``type`` and ``id`` update one part in place."""

    type: str
    id: str | None = None
    data: Any = None


def _part_tag(value: Any) -> str:
    kind = value.get("type", "") if isinstance(value, dict) else getattr(value, "type", "")
    if not isinstance(kind, str):  # a malformed part must fail validation, not crash the discriminator
        return ""
    if kind.startswith("tool-") or kind == "dynamic-tool":
        return "tool"
    if kind.startswith("data-"):
        return "data"
    return str(kind)


MessagePart = Annotated[
    Annotated[TextPart, Tag("text")]
    | Annotated[ReasoningPart, Tag("reasoning")]
    | Annotated[StepStartPart, Tag("step-start")]
    | Annotated[ToolPart, Tag("tool")]
    | Annotated[SourceUrlPart, Tag("source-url")]
    | Annotated[SourceDocumentPart, Tag("source-document")]
    | Annotated[FilePart, Tag("file")]
    | Annotated[DataPart, Tag("data")],
    Discriminator(_part_tag),
]


class UIMessage(WireModel):
    """One message of the conversation: ``{id, role, parts, metadata, createdAt}`` on the wire."""

    id: str = Field(default_factory=new_id)
    role: Literal["system", "user", "assistant"]
    parts: tuple[MessagePart, ...] = ()
    metadata: dict[str, Any] | None = None
    created_at: float = Field(default_factory=time.time)

    @property
    def text(self) -> str:
        """The concatenated text parts."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_parts(self) -> list[ToolPart]:
        return [p for p in self.parts if isinstance(p, ToolPart)]


def user_message(text: str, *, id: str | None = None, metadata: dict[str, Any] | None = None) -> UIMessage:
    """A user message holding one text part."""
    return UIMessage(id=id or new_id(), role="user", parts=(TextPart(text=text),), metadata=metadata)
