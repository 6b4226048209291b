"""Session: what ``configure_session`` configures before the agent loads its history.

Four features, all persisted through the agent's store:

- context blocks rendered under the system prompt, which is frozen once rendered (prefix-cache friendly) and
  re-rendered only by ``refresh_system_prompt``, a compaction, or a change of the base prompt or block layout;
  a block's provider decides its kind (text, skills, search: ``context_providers``) and the model's tools;
- compaction overlays: a summary that replaces a range of history in what the model sees (never in the store);
- ``compact_after``: compaction between turns once the model view passes a token threshold;
- ``search``: stemmed full-text search over every message the store holds (``Store.search_messages``).

Loaded skills are read from the history and unloading rewrites it (``session_skills``), through the transcript
the engine attaches (``attach_history``), else through the store.

Store keys: ``session:context:<label>`` (a store-backed block's text), ``session:system-prompt`` (the frozen
prompt and the hashes it was rendered for), ``session:compactions`` (the overlays, a list of plain dicts).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from .compaction import (
    COMPACTION_PREFIX,
    SUMMARY_HEADER,
    CompactionContext,
    CompactionReason,
    CompactionResult,
    TokenCounter,
    count_with,
    estimate_tokens,
)
from .errors import ConfigurationError
from .messages import TextPart, UIMessage, new_id
from .session_parts import (
    Block,
    Overlay,
    Span,
    as_result,
    hidden_count,
    layout_hash,
    make_block,
    resolve,
    spans_on_path,
    takes_context,
    view_bounds,
)
from .session_skills import entry_key, loaded_skills, unloaded, without_skills
from .session_tools import context_tools
from .store import MessageHit, Store
from .tools import Tool

__all__ = ["CompactionContext", "CompactionResult", "Session"]

log = logging.getLogger(__name__)

CONTEXT_KEY_PREFIX = "session:context:"
SYSTEM_PROMPT_KEY = "session:system-prompt"
COMPACTIONS_KEY = "session:compactions"
BANNER = "═" * 46

ContextProvider = Callable[[], str | Awaitable[str]] | Any
"""A callable returning the block's text, or an object with ``get()`` (and ``set(content)`` to be writable)."""


class Session:
    """An agent's store, context blocks, frozen system prompt and compaction.

    ``configure_session`` receives one per agent start and returns it configured, e.g.
    ``return session.with_context("notes", max_tokens=500).on_compaction(create_compact_function(summarize))``.
    The engine then calls ``load()`` once, ``system_prompt(base)`` and ``tools()`` per turn, ``model_view()`` for
    what the model sees, ``maybe_compact()`` after a message is appended between turns, and ``compact()`` for
    context-overflow recovery.
    """

    def __init__(self, agent_path: str, store: Store):
        self.agent_path = agent_path
        self.store = store
        self.compaction: Callable[..., Any] | None = None
        self._blocks: dict[str, Block] = {}
        self._frozen: tuple[str, str] | None = None  # (hash of the base it was rendered on, prompt)
        self._base: str | None = None  # the base of the last system_prompt call
        self._overlays: list[Overlay] = []
        self._loaded = False
        self._lock = asyncio.Lock()
        self._synthetic: dict[tuple[str, str], UIMessage] = {}
        self._threshold: int | None = None
        self._threshold_counter: TokenCounter | None = None
        self._default_counter: TokenCounter | None = None
        self._compaction_error: Callable[[BaseException], Any] | None = None
        self._loaded_skills: set[tuple[str, str]] | None = None  # None until read from the history
        self._pending_unloads: set[tuple[str, str]] = set()  # unloaded before their load's reply was stored
        self._history: Callable[[], list[UIMessage]] | None = None
        self._rewrite: Callable[[UIMessage], Awaitable[None]] | None = None

    # ------------------------------------------------------------------ builder

    def on_compaction(self, fn: Callable[..., Awaitable[CompactionResult | dict[str, Any] | None]]) -> Session:
        """Register the function that summarises a range of history: ``fn(history, ctx)`` (or the old ``fn(history)``).

        It gets the model view (earlier summaries in place) and a ``CompactionContext``; it returns a
        ``CompactionResult`` (or a dict with the same keys), or None when it cannot shorten the history.
        """
        self.compaction = fn
        return self

    def with_store(self, store: Store) -> Session:
        """Use another store for this agent (e.g. a PostgreSQL store on a cluster)."""
        self.store = store
        return self

    def with_context(
        self,
        label: str,
        *,
        content: str | None = None,
        provider: ContextProvider | None = None,
        description: str | None = None,
        max_tokens: int | None = None,
        writable: bool | None = None,
    ) -> Session:
        """Add a context block rendered under the system prompt; raises ``ConfigurationError`` on a bad option.

        A block is static ``content``, a ``provider`` (a callable returning the text, sync or async, or an object
        with ``get()`` and, to be writable, ``set(content)``), or, with neither, a writable block stored in the
        agent's store (``content`` then seeds a writable block when ``writable=True``). Writable blocks get the
        ``set_context`` tool; ``max_tokens`` caps what a write may hold and what the prompt shows of the block.
        """
        if label in self._blocks:
            raise ConfigurationError(f"context block {label!r} already exists: labels must be unique")
        block = make_block(label, content, provider, description, max_tokens, writable)
        self._blocks[block.label] = block
        return self

    def attach_history(
        self, history: Callable[[], list[UIMessage]], rewrite: Callable[[UIMessage], Awaitable[None]]
    ) -> None:
        """Read the active path through ``history()`` and rewrite a stored message through ``rewrite(message)``
        (the engine attaches its transcript, so an unload changes what the next turn sends). Unattached, the
        session reads and writes the store."""
        self._history, self._rewrite = history, rewrite

    def compact_after(self, tokens: int, *, token_counter: TokenCounter | None = None) -> Session:
        """Compact between turns once the model view and system prompt pass ``tokens`` (needs ``on_compaction``).

        ``token_counter`` counts for this check, for the block budgets and for the compaction function, ahead of
        the engine's default counter.
        """
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
            raise ConfigurationError(f"compact_after: tokens must be a positive int, got {tokens!r}")
        self._threshold = tokens
        self._threshold_counter = token_counter
        return self

    def on_compaction_error(self, fn: Callable[[BaseException], Any]) -> Session:
        """Register ``fn(error)`` (sync or async), told when an automatic (``compact_after``) compaction fails."""
        self._compaction_error = fn
        return self

    def set_default_token_counter(self, fn: TokenCounter | None) -> Session:
        """The counter to use when ``compact_after`` was given none (the engine plugs in the model's counter)."""
        self._default_counter = fn
        return self

    # ------------------------------------------------------------------ lifecycle

    async def load(self) -> None:
        """Read the compaction overlays from the store (once, at agent start; ``model_view`` needs them)."""
        stored = await self.store.get_kv(COMPACTIONS_KEY)
        overlays = [Overlay.from_dict(v) for v in stored] if isinstance(stored, list) else []
        self._overlays = [o for o in overlays if o is not None]
        self._synthetic.clear()
        self._loaded = True
        if any(b.kind == "skill" for b in self._blocks.values()):
            await self._restore_skills()

    async def clear(self) -> None:
        """Drop the overlays, the loaded skills and the frozen system prompt (the history is being cleared).
        Block contents stay."""
        self._overlays = []
        self._synthetic.clear()
        self._loaded_skills = set()
        self._pending_unloads.clear()
        self._frozen = None
        self._loaded = True
        await self.store.set_kv(COMPACTIONS_KEY, None)
        await self.store.set_kv(SYSTEM_PROMPT_KEY, None)

    # ------------------------------------------------------------------ tokens

    @property
    def token_counter(self) -> TokenCounter:
        """The counter in effect: ``compact_after``'s, else the default the engine set, else ``estimate_tokens``."""
        return self._threshold_counter or self._default_counter or estimate_tokens

    async def count_tokens(self, messages: list[UIMessage], system_prompt: str = "") -> int:
        """Tokens of ``messages`` (as given) and ``system_prompt`` by the counter in effect."""
        return await count_with(self.token_counter, messages, system_prompt)

    # ------------------------------------------------------------------ context blocks

    @property
    def has_context_blocks(self) -> bool:
        return bool(self._blocks)

    async def add_context(
        self,
        label: str,
        *,
        content: str | None = None,
        provider: ContextProvider | None = None,
        description: str | None = None,
        max_tokens: int | None = None,
        writable: bool | None = None,
    ) -> None:
        """Add a block at runtime (options as ``with_context``); the frozen prompt shows it after a refresh."""
        self.with_context(
            label, content=content, provider=provider, description=description, max_tokens=max_tokens, writable=writable
        )
        if self._blocks[label].kind == "skill" and self._loaded_skills is None:
            await self._restore_skills()

    async def remove_context(self, label: str) -> bool:
        """Remove a block (False when there is none); its stored text stays, the frozen prompt until a refresh.
        Its skills count as unloaded; their outputs in the history stay as they are."""
        if self._loaded_skills is not None:
            self._loaded_skills = {s for s in self._loaded_skills if s[0] != label}
        return self._blocks.pop(label, None) is not None

    async def get_context(self, label: str) -> str | None:
        """A block's current text (not truncated), or None when there is no such block."""
        block = self._blocks.get(label)
        return None if block is None else await self._read(block)

    async def set_context(
        self,
        label: str,
        content: str,
        *,
        action: Literal["replace", "append"] = "replace",
        key: str | None = None,
        description: str | None = None,
    ) -> str:
        """Write a writable block and return its usage (``Wrote 12 tokens to notes (12/500 tokens)``).

        ``append`` adds ``content`` on a new line. A keyed block (skills, search) gets an entry instead:
        ``provider.set(key, content[, description])``, the key made from the content when not given. Raises
        ``ConfigurationError`` for an unknown or read-only block, an unknown action, or a write past
        ``max_tokens`` (then nothing is written). The frozen system prompt keeps the old text until it is refreshed.
        """
        block = self._blocks.get(label)
        if block is None:
            writable = ", ".join(b.label for b in self._blocks.values() if b.writable) or "none"
            raise ConfigurationError(f"no context block {label!r} (writable blocks: {writable})")
        if not block.writable:
            raise ConfigurationError(f"context block {label!r} is read-only")
        if action not in ("replace", "append"):
            raise ConfigurationError(f"set_context: action must be 'replace' or 'append', got {action!r}")
        if block.keyed:
            key = key.strip() if isinstance(key, str) and key.strip() else entry_key(None, content)
            if block.kind == "skill":
                await resolve(block.provider.set(key, content, description))
            else:
                await resolve(block.provider.set(key, content))
            return f"Indexed {key!r} in {label}"
        new = content
        if action == "append":
            current = await self._read(block)
            new = current + ("\n" if current and not content.startswith("\n") else "") + content
        total = await self._text_tokens(new)
        if block.max_tokens is not None and total > block.max_tokens:
            raise ConfigurationError(
                f"context block {label!r} holds at most {block.max_tokens} tokens; this write would make it {total}"
            )
        if block.provider is None:
            await self.store.set_kv(CONTEXT_KEY_PREFIX + label, new)
        else:
            await resolve(block.provider.set(new))
        written = await self._text_tokens(content)
        usage = f"{total}/{block.max_tokens} tokens" if block.max_tokens is not None else f"{total} tokens in total"
        return f"Wrote {written} tokens to {label} ({usage})"

    def tools(self) -> list[Tool]:
        """The model's context tools: ``set_context`` for writable blocks, ``load_context`` / ``unload_context``
        for skill blocks, ``search_context`` for searchable ones (``session_tools``)."""
        loaded = sorted(f"{label}:{key}" for label, key in self._loaded_skills or ())
        return context_tools(self, self._blocks.values(), loaded)

    # ------------------------------------------------------------------ skills and search

    async def search(self, query: str, *, limit: int = 20) -> list[MessageHit]:
        """Every stored message of the agent (all branches, compacted ones too) matching ``query``, best first.

        Stemmed full-text search (``running`` finds ``runs``): words are all required, ``"a phrase"`` in order,
        ``or`` between terms accepts either, ``-word`` excludes; no query is a syntax error. Raises
        ``ConfigurationError`` for a blank query, a limit outside 1..1000, or a store that cannot search.
        """
        searching = getattr(self.store, "search_messages", None)
        if searching is None:
            raise ConfigurationError(f"the store {self.store!r} cannot search messages (it has no search_messages)")
        found: list[MessageHit] = await searching(query, limit=limit)
        return found

    async def load_context(self, label: str, key: str) -> str:
        """A skill's content (``provider.load(key)``), which then counts as loaded; ``ConfigurationError`` for a
        block that is not a skill block or a key it does not have."""
        block = self._keyed_block(label, "skill")
        content = await resolve(block.provider.load(key))
        if content is None:
            raise ConfigurationError(f"no skill {key!r} in {label} (the system prompt lists its keys)")
        if not isinstance(content, str):
            raise ConfigurationError(f"the provider of {label!r} loaded {content!r} for {key!r}, not a str")
        (await self._restore_skills()).add((label, key))
        return content

    async def unload_context(self, label: str, key: str) -> str:
        """Unload a loaded skill: the output of the ``load_context`` call that loaded it becomes
        ``[skill unloaded: key]`` in the history, from the next turn on. A load in the running turn is rewritten
        once its reply is stored (the next turn's model view and system prompt apply it)."""
        self._keyed_block(label, "skill")
        skills = await self._restore_skills()
        if (label, key) not in skills:
            return f"Skill {key!r} is not loaded in {label}."
        skills.discard((label, key))
        self._pending_unloads.add((label, key))
        await self._apply_unloads()
        return f"Unloaded {key!r} from {label}; its content left the conversation."

    async def search_context(self, label: str, query: str) -> str:
        """A search block's best matches for ``query`` (``provider.search``), or ``No results found.``"""
        block = self._keyed_block(label, "search")
        found = await resolve(block.provider.search(query))
        if found is not None and not isinstance(found, str):
            raise ConfigurationError(f"the provider of {label!r} returned {found!r} for a search, not a str")
        return found or "No results found."

    async def loaded_skill_keys(self) -> set[str]:
        """The loaded skills as ``label:key``, as the history records them."""
        return {f"{label}:{key}" for label, key in await self._restore_skills()}

    async def system_prompt(self, base: str) -> str:
        """``base`` with the context blocks under it, frozen: later calls return the same text.

        Rendered once and persisted; block writes do not change it until ``refresh_system_prompt``. A new Session
        over the same store reuses the persisted text while ``base`` and the block layout (labels, descriptions,
        budgets, writability) are unchanged. A different ``base`` re-renders. Without blocks: ``base`` unchanged.
        """
        self._base = base
        if not self._blocks:
            return base
        if self._pending_unloads:
            await self._apply_unloads()
        base_hash = layout_hash(base)
        if self._frozen is not None:
            if self._frozen[0] == base_hash:
                return self._frozen[1]
        else:
            stored = await self.store.get_kv(SYSTEM_PROMPT_KEY)
            if (
                isinstance(stored, dict)
                and stored.get("base_hash") == base_hash
                and stored.get("layout_hash") == self._layout_hash()
                and isinstance(stored.get("prompt"), str)
            ):
                self._frozen = (base_hash, stored["prompt"])
                return self._frozen[1]
        return await self.refresh_system_prompt(base)

    async def refresh_system_prompt(self, base: str | None = None) -> str:
        """Render ``base`` and the blocks' current text, freeze and persist it, and return it.

        Without ``base``, the base of the last turn is used (the agent's prompt for that turn's tools); before
        any turn, the frozen prompt is dropped and the next turn renders it.
        """
        if base is None:
            if self._base is None:
                self._frozen = None
                await self.store.set_kv(SYSTEM_PROMPT_KEY, None)
                return ""
            base = self._base
        if not self._blocks:
            self._frozen = None
            await self.store.set_kv(SYSTEM_PROMPT_KEY, None)
            return base
        rendered = [await self._render_block(b) for b in self._blocks.values()]
        prompt = "\n\n".join(part for part in (base, *rendered) if part)
        base_hash = layout_hash(base)
        await self.store.set_kv(
            SYSTEM_PROMPT_KEY, {"prompt": prompt, "base_hash": base_hash, "layout_hash": self._layout_hash()}
        )
        self._frozen = (base_hash, prompt)
        return prompt

    # ------------------------------------------------------------------ compaction

    def model_view(self, messages: list[UIMessage]) -> list[UIMessage]:
        """What the model sees of the active path ``messages``: each applicable overlay's range as one summary.

        An overlay applies when both its ends are on the path; where applicable overlays overlap, the one hiding
        more wins (then the newer). Needs ``load()`` first; the result is a new list, ``messages`` is untouched.

        The summary is a synthetic ``compaction_<overlay id>`` message whose role keeps the provider conversation
        valid whatever surrounds it. ``user`` by default: valid first (some providers require it), last (the
        model answers; a last ``assistant`` message would get the continue-checkpoint) and after tool results,
        where a mid-history ``system`` message is rejected by strict chat templates and hoisted out of order by
        Anthropic. ``assistant`` between two user messages, so the common case (a head ending on a user message,
        a tail starting on one) keeps alternating instead of stacking three user turns. System messages around
        it are ignored for this choice.
        """
        spans = spans_on_path(messages, self._overlays)
        view = self._view(messages, spans) if spans else list(messages)
        return without_skills(view, self._pending_unloads) if self._pending_unloads else view

    async def compact(
        self, messages: list[UIMessage], *, reason: CompactionReason = "manual", request_id: str | None = None
    ) -> CompactionResult | None:
        """Run the compaction function over the model view of ``messages`` and store its range as an overlay.

        Iterative: a range that includes, overlaps or directly follows the summary already applied on this path
        replaces it with one overlay from the earliest ``from`` to the latest ``to``; a range that starts or ends
        on a summary message stands for that summary's whole range. Returns the stored range (real message ids),
        or None, storing nothing, when there is no function, it returns None or a blank summary, or its range is
        unknown, reversed or hides no message not already hidden. The function's exceptions propagate.
        A stored overlay unfreezes the system prompt, so the next ``system_prompt()`` re-renders it.
        """
        async with self._lock:
            if not self._loaded:
                await self.load()
            fn = self.compaction
            if fn is None:
                return None
            spans = spans_on_path(messages, self._overlays)
            view = self._view(messages, spans)
            ctx = CompactionContext(token_counter=self.token_counter, reason=reason, request_id=request_id)
            raw = await resolve(fn(view, ctx) if takes_context(fn) else fn(view))
            result = as_result(raw)
            if result is None or not result.summary.strip():
                return None
            bounds = view_bounds(messages, spans)
            first, last = bounds.get(result.from_message_id), bounds.get(result.to_message_id)
            if first is None or last is None:
                return None
            lo, hi = first[0], last[1]
            if lo > hi:
                return None
            for i, j, _ in sorted(spans, key=lambda s: s[0], reverse=True):
                if i <= hi and j >= lo - 1:  # overlaps, or is the summary right before the new range
                    lo, hi = min(lo, i), max(hi, j)
            overlay = Overlay(new_id(), messages[lo].id, messages[hi].id, result.summary, time.time())
            overlays = [*self._overlays, overlay]
            if hidden_count(spans_on_path(messages, overlays)) <= hidden_count(spans):
                return None
            await self.store.set_kv(COMPACTIONS_KEY, [o.to_dict() for o in overlays])
            self._overlays = overlays
            if self._blocks:
                self._frozen = None
                await self.store.set_kv(SYSTEM_PROMPT_KEY, None)
            return CompactionResult(result.summary, overlay.from_message_id, overlay.to_message_id)

    @property
    def compact_threshold(self) -> int | None:
        """The ``compact_after`` token threshold, or None when automatic compaction is off."""
        return self._threshold

    async def maybe_compact(self, messages: list[UIMessage], system_prompt: str = "") -> CompactionResult | None:
        """Compact (reason ``threshold``) when the model view and ``system_prompt`` pass ``compact_after``'s tokens.

        Call between turns, after a message is appended. Never raises: a failure is logged and given to the
        ``on_compaction_error`` callback, and None is returned.
        """
        if self._threshold is None or self.compaction is None:
            return None
        try:
            if not self._loaded:
                await self.load()
            tokens = await self.count_tokens(self.model_view(messages), system_prompt)
            if tokens <= self._threshold:
                return None
            return await self.compact(messages, reason="threshold")
        except Exception as err:
            log.warning("automatic compaction of %s failed: %r", self.agent_path, err)
            if self._compaction_error is not None:
                try:
                    await resolve(self._compaction_error(err))
                except Exception:
                    log.exception("on_compaction_error callback of %s failed", self.agent_path)
            return None

    # ------------------------------------------------------------------ internals

    def _keyed_block(self, label: str, kind: str) -> Block:
        block = self._blocks.get(label)
        if block is None or block.kind != kind:
            names = ", ".join(b.label for b in self._blocks.values() if b.kind == kind) or "none"
            what = "skill" if kind == "skill" else "searchable"
            raise ConfigurationError(f"{label!r} is not a {what} block ({what} blocks: {names})")
        return block

    async def _messages(self) -> list[UIMessage]:
        return list(self._history()) if self._history is not None else await self.store.load_messages()

    async def _restore_skills(self) -> set[tuple[str, str]]:
        if self._loaded_skills is None:
            self._loaded_skills = loaded_skills(await self._messages())
        return self._loaded_skills

    async def _apply_unloads(self) -> None:
        """Rewrite the latest ``load_context`` output of each pending unload; keep the ones not stored yet."""
        history = await self._messages()
        for label, key in list(self._pending_unloads):
            for message in reversed(history):
                changed = unloaded(message, label, key)
                if changed is not None:
                    if self._rewrite is not None:
                        await self._rewrite(changed)
                    else:
                        await self.store.update_message(changed)
                    self._pending_unloads.discard((label, key))
                    break

    async def _read(self, block: Block) -> str:
        if block.provider is None:
            if block.writable:
                stored = await self.store.get_kv(CONTEXT_KEY_PREFIX + block.label)
                if isinstance(stored, str):
                    return stored
            return block.content or ""
        getter = block.provider.get if callable(getattr(block.provider, "get", None)) else block.provider
        text = await resolve(getter())
        if text is None:
            return ""
        if not isinstance(text, str):
            raise ConfigurationError(f"the provider of context block {block.label!r} returned {text!r}, not a str")
        return text

    async def _text_tokens(self, text: str) -> int:
        return await self.count_tokens([], text)

    async def _render_block(self, block: Block) -> str:
        text = await self._read(block)
        if not text and not block.writable and not block.keyed:
            return ""  # an empty read-only block tells the model nothing; the others say what it can do with them
        tokens = await self._text_tokens(text)
        # As the reference's renderPrompt: the usage when the block has a budget, then what the model may do with it.
        header = block.label.upper() + (f" ({block.description})" if block.description else "")
        if block.max_tokens:
            percent = (tokens * 100 + block.max_tokens // 2) // block.max_tokens  # rounded half up
            header += f" [{percent}% — {tokens}/{block.max_tokens} tokens]"
        tags = {"search": " [searchable]", "skill": " [loadable]"}
        header += tags.get(block.kind) or (" [writable]" if block.writable else " [readonly]")
        if block.max_tokens is not None and tokens > block.max_tokens:
            text = (
                await self._truncate(text, block.max_tokens) + f"\n[truncated to {block.max_tokens} of {tokens} tokens]"
            )
        return f"{BANNER}\n{header}\n{BANNER}\n{text}"

    async def _truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` within ``max_tokens`` (binary search: counters are monotone in length)."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if await self._text_tokens(text[:mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        return text[:lo].rstrip()

    def _layout_hash(self) -> str:
        return layout_hash([b.layout() for b in self._blocks.values()])

    def _view(self, messages: list[UIMessage], spans: list[Span]) -> list[UIMessage]:
        out: list[UIMessage] = []
        pos = 0
        for i, j, overlay in spans:
            out.extend(messages[pos:i])
            before = next((m.role for m in reversed(out) if m.role != "system"), None)
            after = next((messages[k].role for k in range(j + 1, len(messages)) if messages[k].role != "system"), None)
            role: Literal["user", "assistant"] = "assistant" if before == "user" and after == "user" else "user"
            out.append(self._summary_message(overlay, role))
            pos = j + 1
        out.extend(messages[pos:])
        return out

    def _summary_message(self, overlay: Overlay, role: Literal["user", "assistant"]) -> UIMessage:
        key = (overlay.id, role)
        message = self._synthetic.get(key)
        if message is None:
            message = UIMessage(
                id=f"{COMPACTION_PREFIX}{overlay.id}",
                role=role,
                parts=(TextPart(text=f"{SUMMARY_HEADER}\n{overlay.summary}"),),
                created_at=overlay.created_at,
            )
            self._synthetic[key] = message
        return message
