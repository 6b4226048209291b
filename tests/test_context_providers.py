"""Skill and search blocks (issue 21; reference §5): provider kinds, their tools and headers, loading and unloading
skills (the unload rewriting the history to ``[skill unloaded: key]``), keyed writes, and the frozen system prompt.

Ported from Cloudflare's own tests of Think's Session, ``cloudflare/agents`` at ``a0e134bbc`` (the commit
``tests/think_port`` ports from): ``packages/agents/src/tests/experimental/memory/session/skills.test.ts``,
``search.test.ts`` and ``session.test.ts``; each test names its source as ``file.test.ts:LINE "name"``. The
reference's §9.2 lists the Think-level dynamic-context cases of ``hooks.test.ts`` (think-semantics.md lines
1252-1262); those are ported in ``tests/think_port/test_hooks.py``. Where think_actors differs, the docstring says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import think_actors as ta
from think_actors.context_providers import HistorySearch, Skill, SkillSet, provider_kind
from think_actors.errors import ConfigurationError
from think_actors.messages import ToolPart, UIMessage
from think_actors.testing import ScriptedModel, text, tool_call


class Notes:
    """A writable provider (get + set)."""

    def __init__(self, text: str = "") -> None:
        self.text = text

    def get(self) -> str:
        return self.text

    def set(self, content: str) -> None:
        self.text = content


class Index:
    """A search provider with keyed writes: ``search`` matches entries holding every word."""

    def __init__(self) -> None:
        self.entries: dict[str, str] = {}

    def get(self) -> str | None:
        return f"{len(self.entries)} entries indexed." if self.entries else None

    async def search(self, query: str) -> str | None:
        words = query.lower().split()
        found = [f"[{k}]\n{v}" for k, v in self.entries.items() if all(w in v.lower() for w in words)]
        return "\n\n".join(found[:10]) or None

    def set(self, key: str, content: str) -> None:
        self.entries[key] = content


class ReadOnlyIndex:
    def get(self) -> str:
        return "docs"

    def search(self, query: str) -> str | None:
        return f"hit for {query}" if query == "ray" else None


def skills() -> SkillSet:
    return SkillSet(
        {
            "code-review": Skill("# Code Review\nCheck for bugs.", "Code review"),
            "sql-query": Skill("Write SQL", "SQL guide"),
            "pirate": "Talk like a pirate",
        }
    )


def tools_of(session: ta.Session) -> dict[str, ta.Tool]:
    return {t.name: t for t in session.tools()}


async def call(session: ta.Session, name: str, **args: Any) -> Any:
    tool = tools_of(session)[name]
    assert tool.executor is not None
    return await tool.executor(args, None)


def banner(header: str, body: str) -> str:
    line = "═" * 46
    return f"{line}\n{header}\n{line}\n{body}"


# --- provider kinds and their tools ----------------------------------------------------------------------------------


def test_provider_kinds_come_from_their_methods() -> None:
    """skills.test.ts:205 "Provider type detection" and search.test.ts:68 "SearchProvider detection"."""
    assert [provider_kind(p) for p in (Notes(), skills(), Index(), ReadOnlyIndex(), lambda: "x")] == [
        "text",
        "skill",
        "search",
        "search",
        "text",
    ]


def test_a_readonly_provider_gets_no_set_context_and_a_writable_one_does() -> None:
    """skills.test.ts:206 "readonly provider: no set_context tool", :215 "writable provider: set_context tool
    available"."""
    assert tools_of(ta.Session("a", ta.MemoryStore()).with_context("soul", provider=lambda: "calm")) == {}
    assert list(tools_of(ta.Session("a", ta.MemoryStore()).with_context("memory", provider=Notes()))) == ["set_context"]


def test_a_skill_provider_gets_set_load_and_unload_context() -> None:
    """skills.test.ts:224 "skill provider: set_context, load_context, and unload_context tools"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    assert list(tools_of(session)) == ["set_context", "load_context", "unload_context"]
    load = tools_of(session)["load_context"]
    assert load.input_schema["properties"]["label"]["enum"] == ["skills"]
    assert load.input_schema["required"] == ["label", "key"]


def test_search_providers_get_search_context_and_set_context_only_with_set() -> None:
    """search.test.ts:69 "search provider: search_context tool available", :82 "no search_context when no search
    providers", :91 "readonly search provider: search_context but no set_context"."""
    assert list(tools_of(ta.Session("a", ta.MemoryStore()).with_context("k", provider=Index()))) == [
        "set_context",
        "search_context",
    ]
    assert "search_context" not in tools_of(ta.Session("a", ta.MemoryStore()).with_context("m", provider=Notes()))
    readonly = ta.Session("a", ta.MemoryStore()).with_context("docs", provider=ReadOnlyIndex())
    assert list(tools_of(readonly)) == ["search_context"]


def test_no_skill_tools_without_a_skill_provider() -> None:
    """skills.test.ts:338 "no load_context when no skill providers", :666 "no unload_context when no skill
    providers"."""
    names = tools_of(ta.Session("a", ta.MemoryStore()).with_context("memory", provider=Notes()))
    assert "load_context" not in names and "unload_context" not in names


def test_a_writable_keyed_provider_without_set_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"a writable provider needs set\(key, content, \.\.\.\)"):
        ta.Session("a", ta.MemoryStore()).with_context("docs", provider=ReadOnlyIndex(), writable=True)


# --- headers in the system prompt ------------------------------------------------------------------------------------


async def test_skill_metadata_renders_with_the_loadable_tag() -> None:
    """skills.test.ts:262 "renders skill metadata with load_context hint"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    assert await session.system_prompt("Base.") == "Base.\n\n" + banner(
        "SKILLS [loadable]", "- code-review: Code review\n- sql-query: SQL guide\n- pirate"
    )


async def test_empty_skill_and_search_blocks_still_render() -> None:
    """skills.test.ts:286 "empty skill provider renders with loadable tag", search.test.ts:123 "renders searchable
    block even when content is empty", session.test.ts:191 "renders empty skill blocks so load_context stays
    discoverable"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=SkillSet())
    session.with_context("knowledge", provider=Index(), description="facts")
    assert await session.system_prompt("") == "\n\n".join(
        [banner("SKILLS [loadable]", ""), banner("KNOWLEDGE (facts) [searchable]", "")]
    )


async def test_readonly_and_writable_blocks_are_tagged() -> None:
    """skills.test.ts:240 "readonly block marked as readonly in system prompt", :249 "writable block not marked as
    readonly", search.test.ts:108 "renders searchable hint in header"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("soul", provider=lambda: "calm")
    session.with_context("memory", provider=Notes("likes tea")).with_context("docs", provider=ReadOnlyIndex())
    assert await session.system_prompt("") == "\n\n".join(
        [
            banner("SOUL [readonly]", "calm"),
            banner("MEMORY [writable]", "likes tea"),
            banner("DOCS [searchable]", "docs"),
        ]
    )


# --- load_context / unload_context -----------------------------------------------------------------------------------


async def test_load_context_returns_a_skills_content_and_tracks_it() -> None:
    """skills.test.ts:308 "loads skill content by key", :527 "tracks loaded skills after load_context"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    assert await session.loaded_skill_keys() == set()
    assert await call(session, "load_context", label="skills", key="code-review") == "# Code Review\nCheck for bugs."
    assert await session.loaded_skill_keys() == {"skills:code-review"}


async def test_an_unknown_key_is_a_tool_error() -> None:
    """skills.test.ts:324 "returns not found for unknown key". think_actors raises (the model sees a tool error
    naming the key) where the reference returns "Not found: key" as an output: an output would count as a load
    when the history is read back."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    with pytest.raises(ConfigurationError, match="no skill 'nope' in skills"):
        await call(session, "load_context", label="skills", key="nope")
    with pytest.raises(ConfigurationError, match=r"'notes' is not a skill block \(skill blocks: skills\)"):
        await session.load_context("notes", "x")
    assert await session.loaded_skill_keys() == set()


async def test_unload_unloads_and_reloading_works() -> None:
    """skills.test.ts:547 "unloads a loaded skill", :574 "returns error when unloading a skill that is not loaded",
    :620 "can re-load after unloading"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    assert await call(session, "unload_context", label="skills", key="pirate") == (
        "Skill 'pirate' is not loaded in skills."
    )
    await call(session, "load_context", label="skills", key="pirate")
    assert (await call(session, "unload_context", label="skills", key="pirate")).startswith("Unloaded 'pirate'")
    assert await session.loaded_skill_keys() == set()
    assert await call(session, "load_context", label="skills", key="pirate") == "Talk like a pirate"
    assert await session.loaded_skill_keys() == {"skills:pirate"}


async def test_clearing_resets_loaded_skills() -> None:
    """skills.test.ts:644 "clearSkillState resets all tracking" (think_actors: ``clear()`` of the history)."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    await session.load_context("skills", "pirate")
    await session.load_context("skills", "sql-query")
    assert await session.loaded_skill_keys() == {"skills:pirate", "skills:sql-query"}
    await session.clear()
    assert await session.loaded_skill_keys() == set()


async def test_unload_context_description_lists_the_loaded_skills() -> None:
    """skills.test.ts:675 "unload_context description lists currently loaded skills"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=skills())
    assert tools_of(session)["unload_context"].description.endswith("No skill is loaded now.")
    await session.load_context("skills", "pirate")
    await session.load_context("skills", "code-review")
    assert tools_of(session)["unload_context"].description.endswith(
        "Currently loaded: skills:code-review, skills:pirate."
    )


# --- keyed writes ---------------------------------------------------------------------------------------------------


async def test_set_context_writes_skills_by_key_and_the_listing_follows_after_a_refresh() -> None:
    """skills.test.ts:373 "writes to skill block with title as key", :412 "set_context with description persists
    and refreshes metadata", :495 "multiple set_context calls accumulate skills in metadata" (think_actors: the key
    is given as ``key``; the listing shows from the next refresh, the prompt being frozen)."""
    provider = SkillSet()
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=provider)
    frozen = await session.system_prompt("")
    answer = await call(session, "set_context", label="skills", key="deploy", content="Run make.", description="How")
    assert answer == "Indexed 'deploy' in skills"
    await session.set_context("skills", "Be kind.", key="tone")
    assert await session.system_prompt("") == frozen
    assert await session.refresh_system_prompt("") == banner("SKILLS [loadable]", "- deploy: How\n- tone")
    assert await session.load_context("skills", "deploy") == "Run make."


async def test_keys_made_from_content_differ_for_entries_that_start_alike() -> None:
    """skills.test.ts:388 "auto-generates key from content when no title for skill block", :459 "auto-generated keys
    avoid content prefix and non-Latin collisions", search.test.ts:214 "auto-generates key when none provided for
    search block"."""
    provider = SkillSet()
    session = ta.Session("a", ta.MemoryStore()).with_context("skills", provider=provider)
    first = await session.set_context("skills", "Same start of a long text, then one ending")
    second = await session.set_context("skills", "Same start of a long text, then another ending")
    third = await session.set_context("skills", "日本語のテキスト")
    fourth = await session.set_context("skills", "中文文本")
    assert len(set(provider.keys())) == 4
    assert first != second and third != fourth
    assert all(k.startswith("same-start-of-a-long-text") for k in provider.keys()[:2])


async def test_set_context_indexes_a_search_entry_and_search_context_finds_it() -> None:
    """search.test.ts:193 "indexes content and makes it searchable", :146 "returns matching results", :164 "returns
    no results message when nothing matches", :228 "updates block summary after indexing" (after a refresh)."""
    index = Index()
    session = ta.Session("a", ta.MemoryStore()).with_context("knowledge", provider=index)
    await call(session, "set_context", label="knowledge", key="ray", content="Ray actors run Python classes")
    assert await call(session, "search_context", label="knowledge", query="actors python") == (
        "[ray]\nRay actors run Python classes"
    )
    assert await call(session, "search_context", label="knowledge", query="kubernetes") == "No results found."
    assert "1 entries indexed." in await session.refresh_system_prompt("")


async def test_set_context_on_a_readonly_block_is_refused() -> None:
    """skills.test.ts:403 "rejects writes to readonly block"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("soul", provider=lambda: "calm")
    session.with_context("memory", provider=Notes())
    with pytest.raises(ConfigurationError, match="context block 'soul' is read-only"):
        await session.set_context("soul", "x")


# --- the frozen system prompt ------------------------------------------------------------------------------------


async def test_block_writes_keep_the_frozen_prompt_until_a_refresh() -> None:
    """session.test.ts:86 "toSystemPrompt returns same value on repeated calls", :111 "setBlock does NOT change
    frozen prompt", :130 "refreshSnapshot picks up changes", :1862 "system prompt is persisted and frozen across
    calls", :1868 "refreshSystemPrompt updates stored prompt"."""
    store = ta.MemoryStore()
    session = ta.Session("a", store).with_context("memory", provider=Notes("v1"))
    first = await session.system_prompt("Base.")
    assert await session.system_prompt("Base.") == first
    await session.set_context("memory", "v2")
    assert await session.system_prompt("Base.") == first
    again = ta.Session("a", store).with_context("memory", provider=Notes("v3"))  # a restart over the same store
    assert await again.system_prompt("Base.") == first
    refreshed = await again.refresh_system_prompt("Base.")
    assert refreshed == "Base.\n\n" + banner("MEMORY [writable]", "v3")
    assert await ta.Session("a", store).with_context("memory", provider=Notes("v4")).system_prompt("Base.") == refreshed


async def test_readonly_blocks_reject_writes_and_budgets_are_enforced() -> None:
    """session.test.ts:153 "readonly blocks reject writes", :161 "maxTokens enforcement"."""
    session = ta.Session("a", ta.MemoryStore()).with_context("rules", content="be kind")
    session.with_context("notes", max_tokens=5)
    with pytest.raises(ConfigurationError, match="read-only"):
        await session.set_context("rules", "be mean")
    with pytest.raises(ConfigurationError, match="holds at most 5 tokens"):
        await session.set_context("notes", "one two three four five six seven eight")
    assert await session.get_context("notes") == ""


# --- in turns: the model loads, unloads, and the history is rewritten ------------------------------------------------


class Skilled(ta.Think):
    instructions = "You follow skills."

    async def configure_session(self, session: ta.Session) -> ta.Session:
        return session.with_context("skills", provider=skills(), description="how-tos")


def load_outputs(messages: list[UIMessage]) -> list[Any]:
    return [p.output for m in messages for p in m.tool_parts if p.name == "load_context"]


def tool_results(request: ta.ModelRequest) -> list[str]:
    return [str(m["content"]) for m in request.messages if m["role"] == "tool"]


async def test_unloading_rewrites_the_loads_output_in_the_history_and_the_next_request(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            tool_call("load_context", {"label": "skills", "key": "pirate"}),
            text("Arr!"),
            tool_call("unload_context", {"label": "skills", "key": "pirate"}),
            text("Back to normal."),
            text("Hello."),
        ]
    )
    store = ta.SQLiteStore(tmp_path / "a.db")
    agent = Skilled(model=model, store=store)
    await agent.save_messages("talk like a pirate")
    assert tool_results(model.requests[1]) == ["Talk like a pirate"]
    assert load_outputs(await store.load_messages()) == ["Talk like a pirate"]
    assert agent.session is not None and await agent.session.loaded_skill_keys() == {"skills:pirate"}

    await agent.save_messages("stop it")
    # The turn that unloads keeps what its steps were sent (its request was built at its start, as Think's);
    # the history changes for every later turn.
    assert tool_results(model.requests[3])[0] == "Talk like a pirate"
    assert load_outputs(await store.load_messages()) == ["[skill unloaded: pirate]"]
    assert load_outputs(agent.get_messages()) == ["[skill unloaded: pirate]"]

    await agent.save_messages("hi")
    assert tool_results(model.requests[4])[0] == "[skill unloaded: pirate]"
    assert "Talk like a pirate" not in str(model.requests[4].messages)
    model.assert_complete()
    await agent.close()

    # The history is the record: a restarted agent reads the skill as unloaded.
    restarted = Skilled(model=ScriptedModel([]), store=ta.SQLiteStore(tmp_path / "a.db"))
    await restarted.load_messages()
    assert restarted.session is not None and await restarted.session.loaded_skill_keys() == set()
    await restarted.close()


async def test_a_skill_unloaded_in_the_turn_that_loaded_it_is_rewritten_once_the_reply_is_stored() -> None:
    model = ScriptedModel(
        [
            tool_call("load_context", {"label": "skills", "key": "sql-query"}),
            tool_call("unload_context", {"label": "skills", "key": "sql-query"}),
            text("done"),
            text("next"),
        ]
    )
    agent = Skilled(model=model, store=ta.MemoryStore())
    await agent.save_messages("write a query, then forget the guide")
    assert load_outputs(agent.get_messages()) == ["Write SQL"]  # stored with the reply, after the unload ran
    await agent.save_messages("next")  # the next turn's system prompt applies the pending rewrite first
    assert load_outputs(agent.get_messages()) == ["[skill unloaded: sql-query]"]
    assert load_outputs(await agent.store.load_messages()) == ["[skill unloaded: sql-query]"]
    assert "Write SQL" not in str(model.requests[3].messages)
    assert agent.session is not None and await agent.session.loaded_skill_keys() == set()


async def test_a_restarted_agent_reads_loaded_skills_from_its_history(tmp_path: Path) -> None:
    """session.test.ts:2186 "restores loaded skills via row stats + per-message reads when supported" (the
    behaviour: loaded skills survive a restart, read from the history)."""
    model = ScriptedModel([tool_call("load_context", {"label": "skills", "key": "pirate"}), text("Arr!")])
    agent = Skilled(model=model, store=ta.SQLiteStore(tmp_path / "a.db"))
    await agent.save_messages("pirate please")
    await agent.close()
    restarted = Skilled(model=ScriptedModel([]), store=ta.SQLiteStore(tmp_path / "a.db"))
    await restarted.load_messages()
    assert restarted.session is not None
    assert await restarted.session.loaded_skill_keys() == {"skills:pirate"}
    assert (await restarted.session.unload_context("skills", "pirate")).startswith("Unloaded")
    assert load_outputs(restarted.get_messages()) == ["[skill unloaded: pirate]"]
    await restarted.close()


async def test_a_recorded_unload_context_call_counts_as_an_unload() -> None:
    """skills history test ("treats a recorded unload_context call as an unload"): an unload the history records
    wins over the load before it, even when the load's output was never rewritten."""
    load = ToolPart(
        type="tool-load_context",
        tool_call_id="c1",
        state="output-available",
        input={"label": "skills", "key": "pirate"},
        output="Talk like a pirate",
    )
    unload = load.model_copy(update={"type": "tool-unload_context", "tool_call_id": "c2", "output": "Unloaded"})
    store = ta.MemoryStore()
    await store.append_message(UIMessage(id="a1", role="assistant", parts=(load,)))
    session = ta.Session("a", store).with_context("skills", provider=skills())
    await session.load()
    assert await session.loaded_skill_keys() == {"skills:pirate"}
    await store.append_message(UIMessage(id="a2", role="assistant", parts=(unload,)))
    fresh = ta.Session("a", store).with_context("skills", provider=skills())
    await fresh.load()
    assert await fresh.loaded_skill_keys() == set()


class Remembering(ta.Think):
    instructions = "You remember."

    async def configure_session(self, session: ta.Session) -> ta.Session:
        return session.with_context("history", provider=HistorySearch(session), description="past messages")


async def test_a_history_search_block_gives_the_model_the_top_ten_of_its_own_history(tmp_path: Path) -> None:
    model = ScriptedModel(
        [text("noted")] * 12
        + [tool_call("search_context", {"label": "history", "query": "favourite colours"}), text("Teal.")]
    )
    agent = Remembering(model=model, store=ta.SQLiteStore(tmp_path / "a.db"))
    for i in range(11):
        await agent.save_messages(f"my favourite colour number {i} is teal")
    await agent.save_messages("unrelated")
    await agent.save_messages("what are my favourite colours?")
    header = banner("HISTORY (past messages) [searchable]", HistorySearch(agent.session).get())  # type: ignore[arg-type]
    assert header in str(model.requests[-1].messages[0]["content"])
    [result] = tool_results(model.requests[-1])
    lines = result.split("\n\n")
    assert len(lines) == 10  # top 10 of the 12 messages that match
    assert all(line.startswith("[user, ") and "**favourite** **colour" in line for line in lines)
    await agent.close()
