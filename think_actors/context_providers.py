"""Context providers: what a session's context block is made of, told apart by the methods they have (Think's rule).

A provider is any object with ``get()`` (the block's text for the system prompt; sync or async, None for empty).
What else it has decides the block's kind and the tools the model gets (``Session.tools``):

==============================  =========================  ====================================================
provider has                    block                      model's tools
==============================  =========================  ====================================================
``get``                         read-only text             none
``get``, ``set(content)``       writable text              ``set_context``
``get``, ``load(key)``          skills (``[loadable]``)    ``load_context``, ``unload_context``; with
                                                           ``set(key, content, description)``: ``set_context``
``get``, ``search(query)``      searchable                 ``search_context``; with ``set(key, content)``:
                                                           ``set_context``
==============================  =========================  ====================================================

``search`` wins over ``load`` when a provider has both. Two providers ship here: ``SkillSet`` (skills held in the
process, e.g. declared on the agent class) and ``HistorySearch`` (the agent's own message history, through
``Session.search``). Writing your own is writing those methods.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import ConfigurationError
from .store import MessageHit

__all__ = [
    "ContextProvider",
    "HistorySearch",
    "SearchProvider",
    "Skill",
    "SkillProvider",
    "SkillSet",
    "WritableContextProvider",
    "provider_kind",
]

SEARCH_CONTEXT_LIMIT = 10
"""What ``search_context`` returns at most, as Think's search providers."""


@runtime_checkable
class ContextProvider(Protocol):
    """A read-only block: ``get()`` returns its text (None: empty)."""

    def get(self) -> str | Awaitable[str | None] | None: ...


@runtime_checkable
class WritableContextProvider(Protocol):
    """A writable block: ``set(content)`` stores the block's new text (durably, if it should survive a restart)."""

    def get(self) -> str | Awaitable[str | None] | None: ...

    def set(self, content: str) -> Awaitable[None] | None: ...


@runtime_checkable
class SkillProvider(Protocol):
    """Skills: ``get()`` lists them for the system prompt, ``load(key)`` returns one's content (None: no such key).

    Optional ``set(key, content, description)`` lets the model write skills through ``set_context``.
    """

    def get(self) -> str | Awaitable[str | None] | None: ...

    def load(self, key: str) -> str | Awaitable[str | None] | None: ...


@runtime_checkable
class SearchProvider(Protocol):
    """Searchable context: ``get()`` summarises it for the system prompt, ``search(query)`` returns the best
    matches as text (at most 10, as Think's), or None when nothing matches.

    Optional ``set(key, content)`` lets the model index entries through ``set_context``.
    """

    def get(self) -> str | Awaitable[str | None] | None: ...

    def search(self, query: str) -> str | Awaitable[str | None] | None: ...


BlockKind = Literal["text", "skill", "search"]


def provider_kind(provider: Any) -> BlockKind:
    """``search`` for a provider with ``search()``, ``skill`` for one with ``load()``, else ``text``."""
    if callable(getattr(provider, "search", None)):
        return "search"
    if callable(getattr(provider, "load", None)):
        return "skill"
    return "text"


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill of a ``SkillSet``: its content (what ``load_context`` returns) and a one-line description."""

    content: str
    description: str | None = None


class SkillSet:
    """Skills held in the process: ``SkillSet({"sql-style": Skill(text, "How we write SQL"), "tone": "..."})``.

    ``get()`` lists ``- key: description`` per skill (the block's text in the system prompt), ``load(key)``
    returns a skill's content, ``set(key, content, description)`` adds or replaces one (the model's
    ``set_context`` on this block). Writes live as long as the process: for skills that must survive a restart,
    write a provider over your own storage.
    """

    def __init__(self, skills: Mapping[str, str | Skill] | None = None) -> None:
        self._skills: dict[str, Skill] = {}
        for key, value in (skills or {}).items():
            skill = Skill(value) if isinstance(value, str) else value
            if not isinstance(key, str) or not key.strip() or not isinstance(skill, Skill):
                raise ConfigurationError(f"SkillSet: a skill is a non-empty str key and a str or Skill, got {key!r}")
            self._skills[key] = skill

    def get(self) -> str | None:
        lines = [f"- {key}: {s.description}" if s.description else f"- {key}" for key, s in self._skills.items()]
        return "\n".join(lines) or None

    def load(self, key: str) -> str | None:
        skill = self._skills.get(key)
        return None if skill is None else skill.content

    def set(self, key: str, content: str, description: str | None = None) -> None:
        self._skills[key] = Skill(content, description)

    def keys(self) -> list[str]:
        return list(self._skills)


class _Searchable(Protocol):
    async def search(self, query: str, *, limit: int = ...) -> Sequence[MessageHit]: ...


class HistorySearch:
    """A search block over the agent's own stored history: ``session.with_context("history",
    provider=HistorySearch(session))`` gives the model ``search_context`` over every message ever stored (the
    ones a compaction hides from it included), top 10.

    Each result is ``[role, id, time UTC] snippet``, the matched words in ``**``. Read-only: the history is
    written by the conversation itself.
    """

    def __init__(self, session: _Searchable, *, limit: int = SEARCH_CONTEXT_LIMIT) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigurationError(f"HistorySearch: limit must be a positive int, got {limit!r}")
        self._session = session
        self._limit = limit

    def get(self) -> str:
        return "Every earlier message of this conversation, searchable by words with search_context."

    async def search(self, query: str) -> str | None:
        found = await self._session.search(query, limit=self._limit)
        return "\n\n".join(_format_hit(hit) for hit in found) or None


def _format_hit(hit: MessageHit) -> str:
    when = ""
    if hit.created_at is not None:
        when = ", " + dt.datetime.fromtimestamp(hit.created_at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"[{hit.role}, {hit.message_id}{when}] {hit.snippet}"
