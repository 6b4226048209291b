"""The parts a ``Session`` keeps: context blocks, compaction overlays, and where overlays fall on the path.

Also the inputs of the model's context tools (``set_context``, ``load_context``, ``unload_context``,
``search_context``) and ``make_block``, the rules a block's options must follow.

Plain data and pure functions: ``session.py`` holds the state and the store writes, this module what it is made of.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from .compaction import COMPACTION_PREFIX, CompactionResult
from .context_providers import BlockKind, provider_kind
from .errors import ConfigurationError
from .messages import UIMessage

__all__ = [
    "Block",
    "KeyedInput",
    "Overlay",
    "SearchContextInput",
    "SetContextInput",
    "Span",
    "as_result",
    "hidden_count",
    "layout_hash",
    "make_block",
    "resolve",
    "spans_on_path",
    "takes_context",
    "view_bounds",
]


async def resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def layout_hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode()).hexdigest()


@dataclass(slots=True)
class Block:
    label: str
    description: str | None
    max_tokens: int | None
    writable: bool
    content: str | None  # the static text, or a store-backed block's text until its first write
    provider: Any  # None, a callable, or an object with get() (and set / load / search: context_providers)
    kind: BlockKind = "text"

    @property
    def keyed(self) -> bool:
        """Whether writes go to an entry by key (skills, search) rather than replace the block's text."""
        return self.kind != "text"

    def layout(self) -> list[Any]:
        return [self.label, self.description, self.max_tokens, self.writable, self.kind]


def make_block(
    label: str,
    content: str | None,
    provider: Any,
    description: str | None,
    max_tokens: int | None,
    writable: bool | None,
) -> Block:
    """The block ``with_context`` describes, or ``ConfigurationError`` saying which option is wrong."""
    if not isinstance(label, str) or not label.strip():
        raise ConfigurationError(f"a context block needs a non-empty label, got {label!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0):
        raise ConfigurationError(f"context block {label!r}: max_tokens must be a positive int, got {max_tokens!r}")
    if content is not None and provider is not None:
        raise ConfigurationError(f"context block {label!r}: give content= or provider=, not both")
    kind: BlockKind = "text"
    if provider is not None:
        if callable(getattr(provider, "get", None)):
            kind = provider_kind(provider)
            settable = callable(getattr(provider, "set", None))
            if writable and not settable:
                needs = "set(content)" if kind == "text" else "set(key, content, ...)"
                raise ConfigurationError(f"context block {label!r}: a writable provider needs {needs}")
            writable = settable if writable is None else writable
        elif callable(provider):
            if writable:
                raise ConfigurationError(f"context block {label!r}: a callable provider is read-only")
            writable = False
        else:
            raise ConfigurationError(f"context block {label!r}: a provider is a callable or has get()")
        init = getattr(provider, "init", None)
        if callable(init):
            init(label)
    elif content is None:
        if writable is False:
            raise ConfigurationError(f"context block {label!r} is read-only but has no content or provider")
        writable = True
    else:
        writable = bool(writable)
    return Block(label, description, max_tokens, writable, content, provider, kind)


@dataclass(frozen=True, slots=True)
class Overlay:
    id: str
    from_message_id: str
    to_message_id: str
    summary: str
    created_at: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "from_message_id": self.from_message_id,
            "to_message_id": self.to_message_id,
            "summary": self.summary,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, value: Any) -> Overlay | None:
        try:
            return cls(
                str(value["id"]),
                str(value["from_message_id"]),
                str(value["to_message_id"]),
                str(value["summary"]),
                float(value["created_at"]),
            )
        except (KeyError, TypeError, ValueError):
            return None


Span = tuple[int, int, Overlay]  # first and last index of an applied overlay's range on the path


class SetContextInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    content: str
    action: Literal["replace", "append"] = "replace"
    key: str | None = None  # keyed blocks (skills, search): the entry to write
    description: str | None = None  # skills: the entry's one-line description


class KeyedInput(BaseModel):
    """``load_context`` / ``unload_context``: a skill block's label and the skill's key."""

    model_config = ConfigDict(extra="forbid")
    label: str
    key: str


class SearchContextInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str
    query: str


def takes_context(fn: Callable[..., Any]) -> bool:
    """Whether a compaction function takes ``(history, ctx)`` rather than the old ``(history)``."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    positional = 0
    for p in parameters:
        if p.kind is p.VAR_POSITIONAL:
            return True
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            positional += 1
    return positional >= 2


def as_result(raw: Any) -> CompactionResult | None:
    if raw is None or isinstance(raw, CompactionResult):
        return raw
    if isinstance(raw, Mapping):
        try:
            values = [raw["summary"], raw["from_message_id"], raw["to_message_id"]]
        except KeyError as err:
            raise ConfigurationError(f"a compaction function's dict result lacks {err.args[0]!r}") from None
        if all(isinstance(v, str) for v in values):
            return CompactionResult(*values)
    raise ConfigurationError(
        f"a compaction function must return a CompactionResult, a dict of str summary/from_message_id/"
        f"to_message_id, or None; got {raw!r}"
    )


def spans_on_path(messages: list[UIMessage], overlays: list[Overlay]) -> list[Span]:
    """The overlays that apply to the path ``messages``, as disjoint index ranges in path order.

    Where applicable overlays overlap, the one hiding more wins, then the newer: an iterative compaction's
    overlay contains the ones it extended, and a sibling branch's smaller overlay never shadows this branch's.
    """
    if not overlays:
        return []
    index = {m.id: i for i, m in enumerate(messages)}
    candidates: list[tuple[int, int, int, Overlay]] = []
    for order, overlay in enumerate(overlays):
        i, j = index.get(overlay.from_message_id), index.get(overlay.to_message_id)
        if i is not None and j is not None and i <= j:
            candidates.append((j - i, order, i, overlay))
    spans: list[Span] = []
    for _, _, i, overlay in sorted(candidates, key=lambda c: (c[0], c[1]), reverse=True):
        j = index[overlay.to_message_id]
        if all(j < a or i > b for a, b, _ in spans):
            spans.append((i, j, overlay))
    spans.sort(key=lambda s: s[0])
    return spans


def view_bounds(messages: list[UIMessage], spans: list[Span]) -> dict[str, tuple[int, int]]:
    """Each id of the model view mapped to the path range it stands for (a summary stands for its overlay's)."""
    hidden = {k for i, j, _ in spans for k in range(i, j + 1)}
    bounds = {m.id: (k, k) for k, m in enumerate(messages) if k not in hidden}
    bounds.update({f"{COMPACTION_PREFIX}{o.id}": (i, j) for i, j, o in spans})
    return bounds


def hidden_count(spans: list[Span]) -> int:
    return sum(j - i + 1 for i, j, _ in spans)
