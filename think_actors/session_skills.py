"""Loaded skills, read from and written into the history: which are loaded, and the unload marker (Think's rules).

Which skills are loaded is not stored anywhere: it is what the history says, so it survives a restart with the
history. A ``load_context`` call with an output loads ``label:key``, unless its output is the unload marker; an
``unload_context`` call unloads it. Unloading rewrites the output of the ``load_context`` call that loaded the
skill to ``[skill unloaded: key]``, so the model stops paying for the skill's content in every later turn, and the
marker itself records the unload. Pure functions over messages: ``session.py`` does the reading and the writing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

from .messages import ToolPart, UIMessage

__all__ = ["LOAD_TOOL", "UNLOAD_TOOL", "entry_key", "loaded_skills", "unload_marker", "unloaded", "without_skills"]

LOAD_TOOL = "load_context"
UNLOAD_TOOL = "unload_context"
_MARKER_PREFIX = "[skill unloaded:"
_SLUG = re.compile(r"[^a-z0-9]+")


def unload_marker(key: str) -> str:
    return f"[skill unloaded: {key}]"


def _skill_of(part: ToolPart) -> tuple[str, str] | None:
    value = part.input
    if not isinstance(value, dict):
        return None
    label, key = value.get("label"), value.get("key")
    if isinstance(label, str) and label and isinstance(key, str) and key:
        return label, key
    return None


def loaded_skills(messages: Iterable[UIMessage]) -> set[tuple[str, str]]:
    """The ``(label, key)`` skills the history leaves loaded, reading its assistant messages in order."""
    loaded: set[tuple[str, str]] = set()
    for message in messages:
        if message.role != "assistant":
            continue
        for part in message.tool_parts:
            if part.state != "output-available" or (skill := _skill_of(part)) is None:
                continue
            if part.name == LOAD_TOOL:
                marker = isinstance(part.output, str) and part.output.startswith(_MARKER_PREFIX)
                (loaded.discard if marker else loaded.add)(skill)
            elif part.name == UNLOAD_TOOL:
                loaded.discard(skill)
    return loaded


def unloaded(message: UIMessage, label: str, key: str) -> UIMessage | None:
    """``message`` with the output of its ``load_context`` call of ``label:key`` replaced by the unload marker, or
    None when it holds no such call whose output is not the marker yet."""
    if message.role != "assistant":
        return None
    changed = False
    parts = []
    marker = unload_marker(key)
    for part in message.parts:
        if (
            isinstance(part, ToolPart)
            and part.name == LOAD_TOOL
            and part.state == "output-available"
            and _skill_of(part) == (label, key)
            and part.output != marker
        ):
            part = part.model_copy(update={"output": marker})
            changed = True
        parts.append(part)
    return message.model_copy(update={"parts": tuple(parts)}) if changed else None


def without_skills(messages: list[UIMessage], skills: Iterable[tuple[str, str]]) -> list[UIMessage]:
    """``messages`` with every ``load_context`` output of ``skills`` replaced by its marker (what the model sees of
    an unload whose rewrite has not been stored yet)."""
    skills = list(skills)
    out = []
    for message in messages:
        for label, key in skills:
            message = unloaded(message, label, key) or message
        out.append(message)
    return out


def entry_key(title: str | None, content: str) -> str:
    """The key of a keyed entry written without one: the slug of its title, else of its content's start plus a
    short hash of the content (so two entries that start alike get two keys)."""
    if title and title.strip():
        slug = _SLUG.sub("-", title.strip().lower()[:60]).strip("-")
        return slug or "entry-" + hashlib.sha256(title.encode()).hexdigest()[:8]
    slug = _SLUG.sub("-", content.lower()[:40]).strip("-") or "entry"
    return f"{slug}-{hashlib.sha256(content.encode()).hexdigest()[:8]}"
