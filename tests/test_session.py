"""Session: context blocks, the frozen system prompt, compaction overlays, compact_after, the shipped compaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from think_actors.compaction import (
    SUMMARY_HEADER,
    SUMMARY_INSTRUCTIONS,
    CompactionContext,
    CompactionResult,
    create_compact_function,
    estimate_text_tokens,
    estimate_tokens,
)
from think_actors.errors import ConfigurationError
from think_actors.messages import ReasoningPart, StepStartPart, TextPart, ToolPart, UIMessage
from think_actors.session import Session
from think_actors.store import MemoryStore, SQLiteStore
from think_actors.tools import ToolContext, ToolInputError

B = "═" * 46
MANUAL = CompactionContext(token_counter=estimate_tokens, reason="manual")
CTX = ToolContext(tool_call_id="call-1", tool_name="set_context", request_id="req-1", agent=None, messages=[])


def banner(header: str, body: str) -> str:
    return f"{B}\n{header}\n{B}\n{body}"


def msg(id: str, role: Any, text: str, created_at: float = 1.0) -> UIMessage:
    return UIMessage(id=id, role=role, parts=(TextPart(text=text),), created_at=created_at)


def chat(*ids: str) -> list[UIMessage]:
    """Messages named u*/a* (user/assistant) whose text is their id."""
    return [msg(i, "user" if i.startswith("u") else "assistant", f"text of {i}") for i in ids]


def summary(overlay_id: str, role: Any, text: str, created_at: float) -> UIMessage:
    return UIMessage(
        id=f"compaction_{overlay_id}",
        role=role,
        parts=(TextPart(text=f"{SUMMARY_HEADER}\n{text}"),),
        created_at=created_at,
    )


class ReadOnly:
    def __init__(self, text: str | None):
        self.text = text

    async def get(self) -> str | None:
        return self.text


class Writable(ReadOnly):
    def __init__(self, text: str | None):
        super().__init__(text)
        self.inits: list[str] = []

    def init(self, label: str) -> None:
        self.inits.append(label)

    def set(self, content: str) -> None:
        self.text = content


class Summaries:
    """A compaction function answering from a list, recording what it was given."""

    def __init__(self, *results: Any):
        self.results = list(results)
        self.calls: list[tuple[list[UIMessage], CompactionContext]] = []

    async def __call__(self, history: list[UIMessage], ctx: CompactionContext) -> Any:
        self.calls.append((history, ctx))
        return self.results.pop(0)


# ---------------------------------------------------------------------------------------------- context blocks


async def test_blocks_render_under_the_base_prompt_with_their_banners() -> None:
    async def weather() -> str:
        return "sunny"

    session = (
        Session("a/1", MemoryStore())
        .with_context("soul", content="You are terse.", description="who you are")
        .with_context("clock", provider=lambda: "12:00")
        .with_context("weather", provider=weather)
        .with_context("facts", provider=ReadOnly("water is wet"))
        .with_context("blank", provider=ReadOnly(None))
        .with_context("notes", description="your notes", max_tokens=100)
        .with_context("todo")
    )
    assert session.has_context_blocks
    assert await session.system_prompt("Be helpful.") == "\n\n".join(
        [
            "Be helpful.",
            banner("SOUL (who you are) [readonly]", "You are terse."),
            banner("CLOCK [readonly]", "12:00"),
            banner("WEATHER [readonly]", "sunny"),
            banner("FACTS [readonly]", "water is wet"),
            banner("NOTES (your notes) [0% — 0/100 tokens] [writable]", ""),
            banner("TODO [writable]", ""),
        ]
    )  # the empty read-only block is left out; the empty writable ones stay, so the model knows it can write them


async def test_blocks_read_their_providers_and_the_store() -> None:
    provider = Writable("first")
    store = MemoryStore()
    session = (
        Session("a/1", store)
        .with_context("mem", provider=provider)
        .with_context("seeded", content="seed", writable=True)
        .with_context("pinned", provider=Writable("fixed"), writable=False)
    )
    assert provider.inits == ["mem"]
    assert await session.set_context("mem", "second") == "Wrote 2 tokens to mem (2 tokens in total)"
    assert provider.text == "second"
    assert await session.get_context("seeded") == "seed"
    await session.set_context("seeded", "grown", action="append")
    assert await store.get_kv("session:context:seeded") == "seed\ngrown"
    assert await session.get_context("seeded") == "seed\ngrown"
    assert await Session("a/1", store).with_context("seeded", content="seed", writable=True).get_context("seeded") == (
        "seed\ngrown"
    )
    with pytest.raises(ConfigurationError, match="context block 'pinned' is read-only"):
        await session.set_context("pinned", "x")
    assert await session.get_context("missing") is None


def test_a_duplicate_label_is_a_configuration_error() -> None:
    session = Session("a/1", MemoryStore()).with_context("notes")
    with pytest.raises(ConfigurationError, match="context block 'notes' already exists: labels must be unique"):
        session.with_context("notes", content="again")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"label": ""}, "a context block needs a non-empty label, got ''"),
        ({"label": "x", "content": "a", "provider": lambda: "b"}, "give content= or provider=, not both"),
        ({"label": "x", "provider": lambda: "b", "writable": True}, "a callable provider is read-only"),
        ({"label": "x", "provider": ReadOnly("b"), "writable": True}, r"a writable provider needs set\(content\)"),
        ({"label": "x", "writable": False}, "is read-only but has no content or provider"),
        ({"label": "x", "provider": 42}, r"a provider is a callable or has get\(\)"),
        ({"label": "x", "max_tokens": 0}, "max_tokens must be a positive int, got 0"),
    ],
)
def test_bad_block_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Session("a/1", MemoryStore()).with_context(**options)


async def test_a_block_over_its_budget_is_truncated_with_a_marker() -> None:
    long = "word " * 50  # 50 words: 65 tokens; the first 10 words are the longest prefix within 13
    session = (
        Session("a/1", MemoryStore())
        .with_context("log", content=long, max_tokens=13)
        .with_context("notes", content=long, writable=True, max_tokens=13)
    )
    kept = " ".join(["word"] * 10)
    assert await session.system_prompt("") == "\n\n".join(
        [
            banner("LOG [500% — 65/13 tokens] [readonly]", f"{kept}\n[truncated to 13 of 65 tokens]"),
            banner("NOTES [500% — 65/13 tokens] [writable]", f"{kept}\n[truncated to 13 of 65 tokens]"),
        ]
    )
    assert await session.get_context("log") == long  # the block itself is whole


async def test_the_frozen_prompt_ignores_block_writes_until_refreshed() -> None:
    session = Session("a/1", MemoryStore()).with_context("notes", max_tokens=500)
    first = await session.system_prompt("Base.")
    assert first == "Base.\n\n" + banner("NOTES [0% — 0/500 tokens] [writable]", "")
    assert await session.set_context("notes", "hello world") == "Wrote 3 tokens to notes (3/500 tokens)"
    assert await session.system_prompt("Base.") == first
    refreshed = "Base.\n\n" + banner("NOTES [1% — 3/500 tokens] [writable]", "hello world")
    assert await session.refresh_system_prompt("Base.") == refreshed
    assert await session.system_prompt("Base.") == refreshed
    assert await session.system_prompt("Other base.") == "Other base.\n\n" + banner(
        "NOTES [1% — 3/500 tokens] [writable]", "hello world"
    )  # a changed base re-renders


async def test_the_frozen_prompt_survives_a_restart_over_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    store = SQLiteStore(path)
    session = Session("a/1", store).with_context("notes")
    frozen = await session.system_prompt("Base.")
    await session.set_context("notes", "written after freezing")
    await store.close()

    store = SQLiteStore(path)
    restarted = Session("a/1", store).with_context("notes")
    assert await restarted.system_prompt("Base.") == frozen
    assert await restarted.get_context("notes") == "written after freezing"
    assert await restarted.system_prompt("New base.") == "New base.\n\n" + banner(
        "NOTES [writable]", "written after freezing"
    )
    await store.close()

    store = SQLiteStore(path)
    relaid = Session("a/1", store).with_context("notes").with_context("rules", content="be kind")
    assert await relaid.system_prompt("New base.") == "\n\n".join(
        ["New base.", banner("NOTES [writable]", "written after freezing"), banner("RULES [readonly]", "be kind")]
    )  # another block layout is another prompt, whatever was frozen
    await store.close()


async def test_without_blocks_the_base_prompt_passes_through_and_nothing_is_stored() -> None:
    store = MemoryStore()
    session = Session("a/1", store)
    assert not session.has_context_blocks
    assert await session.system_prompt("Base.") == "Base."
    assert await store.get_kv("session:system-prompt") is None
    assert session.tools() == []


async def test_blocks_can_be_added_and_removed_at_runtime() -> None:
    session = Session("a/1", MemoryStore()).with_context("soul", content="calm")
    frozen = await session.system_prompt("Base.")
    await session.add_context("mood", provider=lambda: "curious", description="today")
    assert await session.get_context("mood") == "curious"
    assert await session.system_prompt("Base.") == frozen
    assert await session.refresh_system_prompt("Base.") == "\n\n".join(
        ["Base.", banner("SOUL [readonly]", "calm"), banner("MOOD (today) [readonly]", "curious")]
    )
    with pytest.raises(ConfigurationError, match="context block 'mood' already exists"):
        await session.add_context("mood", content="again")
    assert await session.remove_context("mood") is True
    assert await session.remove_context("mood") is False
    assert await session.remove_context("never") is False
    assert await session.refresh_system_prompt("Base.") == "Base.\n\n" + banner("SOUL [readonly]", "calm")


async def test_set_context_tool_has_a_schema_and_writes_blocks() -> None:
    session = (
        Session("a/1", MemoryStore())
        .with_context("notes", description="your notes", max_tokens=500)
        .with_context("tiny", max_tokens=5)
        .with_context("rules", content="be kind")
    )
    [tool] = session.tools()
    assert tool.name == "set_context"
    assert tool.description == (
        "Write to a context block of your system prompt. Writes are durable; the system prompt shows them from "
        "its next refresh. Blocks:\n- notes: your notes (at most 500 tokens)\n- tiny: no description (at most 5 tokens)"
    )
    assert tool.input_schema == {
        "type": "object",
        "properties": {
            "label": {"type": "string", "enum": ["notes", "tiny"], "description": "The block to write"},
            "content": {"type": "string", "description": "The text to write"},
            "action": {
                "type": "string",
                "enum": ["replace", "append"],
                "default": "replace",
                "description": "replace the block's text (default) or append to it",
            },
        },
        "required": ["label", "content"],
        "additionalProperties": False,
    }

    async def run(raw: dict[str, Any]) -> Any:
        assert tool.executor is not None
        return await tool.executor(tool.validate_input(raw), CTX)

    assert await run({"label": "notes", "content": "hello world"}) == "Wrote 3 tokens to notes (3/500 tokens)"
    assert await run({"label": "notes", "content": "again", "action": "append"}) == (
        "Wrote 2 tokens to notes (5/500 tokens)"
    )
    assert await session.get_context("notes") == "hello world\nagain"
    assert await run({"label": "notes", "content": "fresh", "action": "replace"}) == (
        "Wrote 2 tokens to notes (2/500 tokens)"
    )
    with pytest.raises(ConfigurationError, match="context block 'rules' is read-only"):
        await run({"label": "rules", "content": "be rude"})
    with pytest.raises(ConfigurationError, match=r"no context block 'nope' \(writable blocks: notes, tiny\)"):
        await run({"label": "nope", "content": "x"})
    with pytest.raises(
        ConfigurationError, match="context block 'tiny' holds at most 5 tokens; this write would make it 6"
    ):
        await run({"label": "tiny", "content": "one two three four"})
    assert await session.get_context("tiny") == ""
    with pytest.raises(ToolInputError, match="action"):
        tool.validate_input({"label": "notes", "content": "x", "action": "delete"})
    assert await session.get_context("rules") == "be kind"


def test_a_read_only_session_has_no_tools() -> None:
    session = Session("a/1", MemoryStore()).with_context("rules", content="be kind").with_context("t", provider=str)
    assert session.tools() == []


# ---------------------------------------------------------------------------------------------- compaction


async def test_a_compaction_overlay_replaces_its_range_in_the_model_view_only() -> None:
    store = MemoryStore()
    messages = chat("u1", "a1", "u2", "a2", "u3", "a3")
    fn = Summaries(CompactionResult("they talked", "a1", "a2"))
    session = Session("a/1", store).on_compaction(fn)
    await session.load()
    result = await session.compact(messages, reason="reactive", request_id="req-7")
    assert result == CompactionResult("they talked", "a1", "a2")
    [(seen, ctx)] = fn.calls
    assert seen == messages
    assert ctx == CompactionContext(token_counter=estimate_tokens, reason="reactive", request_id="req-7")
    [stored] = await store.get_kv("session:compactions")
    assert sorted(stored) == ["created_at", "from_message_id", "id", "summary", "to_message_id"]
    assert (stored["from_message_id"], stored["to_message_id"], stored["summary"]) == ("a1", "a2", "they talked")
    # Between two user messages the summary speaks as the assistant, so the roles still alternate.
    assert session.model_view(messages) == [
        messages[0],
        summary(stored["id"], "assistant", "they talked", stored["created_at"]),
        messages[4],
        messages[5],
    ]
    assert messages == chat("u1", "a1", "u2", "a2", "u3", "a3")

    restarted = Session("a/1", store)
    assert restarted.model_view(messages) == messages  # overlays come from load()
    await restarted.load()
    assert restarted.model_view(messages) == session.model_view(messages)


async def test_a_second_compaction_extends_the_first() -> None:
    store = MemoryStore()
    messages = chat("u1", "a1", "u2", "a2", "u3", "a3")
    fn = Summaries(CompactionResult("first", "a1", "a2"))
    session = Session("a/1", store).on_compaction(fn)
    await session.compact(messages)
    [first] = await store.get_kv("session:compactions")
    first_summary = summary(first["id"], "assistant", "first", first["created_at"])

    fn.results.append(CompactionResult("second", f"compaction_{first['id']}", "u3"))
    assert await session.compact(messages) == CompactionResult("second", "a1", "u3")
    assert fn.calls[1][0] == [messages[0], first_summary, messages[4], messages[5]]  # it saw the earlier summary
    [_, second] = await store.get_kv("session:compactions")
    assert (second["from_message_id"], second["to_message_id"]) == ("a1", "u3")
    assert session.model_view(messages) == [
        messages[0],
        summary(second["id"], "user", "second", second["created_at"]),
        messages[5],
    ]

    # A range that directly follows the summary folds it in; one starting on the summary message's id does too.
    messages = [*messages, *chat("u4", "a4")]
    fn.results.append(CompactionResult("third", "a3", "u4"))
    assert await session.compact(messages) == CompactionResult("third", "a1", "u4")
    assert [m.id for m in session.model_view(messages)] == ["u1", f"compaction_{(await _overlays(store))[-1]}", "a4"]


async def _overlays(store: MemoryStore) -> list[str]:
    return [o["id"] for o in await store.get_kv("session:compactions")]


async def test_a_range_before_the_summary_is_kept_as_its_own_overlay() -> None:
    messages = chat("u1", "a1", "u2", "a2", "u3", "a3", "u4")
    session = Session("a/1", MemoryStore()).on_compaction(
        Summaries(CompactionResult("late", "u3", "a3"), CompactionResult("early", "a1", "u2"))
    )
    await session.compact(messages)
    assert await session.compact(messages) == CompactionResult("early", "a1", "u2")
    # Folding "early" into "late" would hide a2, which neither summary covers.
    view = session.model_view(messages)
    assert [(m.role, m.text) for m in view] == [
        ("user", "text of u1"),
        ("user", f"{SUMMARY_HEADER}\nearly"),
        ("assistant", "text of a2"),
        ("user", f"{SUMMARY_HEADER}\nlate"),
        ("user", "text of u4"),
    ]


async def test_an_overlay_applies_only_on_the_branch_holding_both_its_ends() -> None:
    store = MemoryStore()
    for m in chat("u1", "a1", "u2", "a2", "u3", "a3"):
        await store.append_message(m)
    session = Session("a/1", store).on_compaction(
        Summaries(CompactionResult("branch one", "a1", "a2"), CompactionResult("branch two", "a1", "u2"))
    )
    await session.compact(await store.load_messages())

    await store.append_message(msg("a2b", "assistant", "regenerated"), parent_id="u2")
    branch_two = await store.load_messages()
    assert [m.id for m in branch_two] == ["u1", "a1", "u2", "a2b"]
    assert session.model_view(branch_two) == branch_two
    assert await session.compact(branch_two) == CompactionResult("branch two", "a1", "u2")
    assert [m.text for m in session.model_view(branch_two)] == [
        "text of u1",
        f"{SUMMARY_HEADER}\nbranch two",
        "regenerated",
    ]

    await store.append_message(msg("u4", "user", "back on branch one"), parent_id="a3")
    branch_one = await store.load_messages()
    assert [m.text for m in session.model_view(branch_one)] == [
        "text of u1",
        f"{SUMMARY_HEADER}\nbranch one",  # branch two's shorter overlay does not shadow this branch's own
        "text of u3",
        "text of a3",
        "back on branch one",
    ]


async def test_the_summary_speaks_as_the_user_at_the_edges() -> None:
    messages = chat("u1", "a1", "u2", "a2")
    session = Session("a/1", MemoryStore()).on_compaction(
        Summaries(CompactionResult("start", "u1", "a1"), CompactionResult("all", "compaction_x", "a2"))
    )
    await session.compact(messages)
    assert [(m.role, m.id.startswith("compaction_")) for m in session.model_view(messages)] == [
        ("user", True),
        ("user", False),
        ("assistant", False),
    ]
    assert await session.compact(messages) is None  # "compaction_x" is no message of the view
    session.on_compaction(Summaries(CompactionResult("tail", "u2", "a2")))
    await session.compact(messages)
    # A range right after the summary folds it in; alone, the summary is a user message, never a last assistant
    # message (which would make the model continue it).
    assert [(m.role, m.text) for m in session.model_view(messages)] == [("user", f"{SUMMARY_HEADER}\ntail")]


@pytest.mark.parametrize(
    "answer",
    [
        None,
        CompactionResult("   ", "a1", "a2"),  # a blank summary
        CompactionResult("s", "nope", "a2"),  # an unknown id
        CompactionResult("s", "a2", "a1"),  # a reversed range
        CompactionResult("s", "a1", "a1x"),
    ],
)
async def test_a_compaction_that_cannot_shorten_stores_nothing(answer: Any) -> None:
    store = MemoryStore()
    session = Session("a/1", store).on_compaction(Summaries(answer))
    assert await session.compact(chat("u1", "a1", "u2", "a2")) is None
    assert await store.get_kv("session:compactions") is None


async def test_compacting_only_the_summary_again_stores_nothing() -> None:
    store = MemoryStore()
    messages = chat("u1", "a1", "u2", "a2", "u3")
    session = Session("a/1", store).on_compaction(Summaries(CompactionResult("s", "a1", "a2")))
    await session.compact(messages)
    synthetic = session.model_view(messages)[1].id
    session.on_compaction(Summaries(CompactionResult("again", synthetic, synthetic)))
    assert await session.compact(messages) is None
    assert len(await store.get_kv("session:compactions")) == 1
    session.on_compaction(Summaries(CompactionResult("hidden", "u2", "u2")))  # not in the view: inside the overlay
    assert await session.compact(messages) is None


async def test_compact_without_a_function_returns_none() -> None:
    store = MemoryStore()
    assert await Session("a/1", store).compact(chat("u1", "a1")) is None
    assert await store.get_kv("session:compactions") is None


async def test_the_old_one_argument_form_and_dict_results_are_accepted() -> None:
    seen: list[list[UIMessage]] = []

    async def summarize(history: list[UIMessage]) -> dict[str, Any]:
        seen.append(history)
        return {"summary": "old style", "from_message_id": "a1", "to_message_id": "u2"}

    messages = chat("u1", "a1", "u2", "a2")
    session = Session("a/1", MemoryStore()).on_compaction(summarize)
    assert session.compaction is summarize
    assert await session.compact(messages) == CompactionResult("old style", "a1", "u2")
    assert seen == [messages]

    async def broken(history: list[UIMessage]) -> Any:
        return {"summary": "no range"}

    with pytest.raises(ConfigurationError, match="lacks 'from_message_id'"):
        await session.on_compaction(broken).compact(messages)


async def test_compaction_unfreezes_the_prompt_and_clear_drops_everything() -> None:
    store = MemoryStore()
    session = Session("a/1", store).with_context("notes").on_compaction(Summaries(CompactionResult("s", "a1", "u2")))
    messages = chat("u1", "a1", "u2", "a2")
    await session.system_prompt("Base.")
    await session.set_context("notes", "remember this")
    await session.compact(messages)
    assert await store.get_kv("session:system-prompt") is None
    assert await session.system_prompt("Base.") == "Base.\n\n" + banner("NOTES [writable]", "remember this")

    await session.clear()
    assert await store.get_kv("session:compactions") is None
    assert await store.get_kv("session:system-prompt") is None
    assert session.model_view(messages) == messages
    assert await session.get_context("notes") == "remember this"  # blocks are memory, not history


# ---------------------------------------------------------------------------------------------- compact_after


def per_message(messages: list[UIMessage], system_prompt: str) -> int:
    return 10 * len(messages) + len(system_prompt)


async def test_compact_after_compacts_only_above_the_threshold() -> None:
    fn = Summaries(CompactionResult("s", "a1", "u2"))
    session = Session("a/1", MemoryStore()).on_compaction(fn).compact_after(50, token_counter=per_message)
    assert await session.maybe_compact(chat("u1", "a1", "u2", "a2"), "0123456789") is None  # 50 is not above 50
    assert fn.calls == []
    assert await session.maybe_compact(chat("u1", "a1", "u2", "a2"), "01234567890") == CompactionResult("s", "a1", "u2")
    [(_, ctx)] = fn.calls
    assert ctx == CompactionContext(token_counter=per_message, reason="threshold", request_id=None)
    # Counted on the model view: the summary stands for two messages now (3 * 10 + 11 = 41).
    assert await session.maybe_compact(chat("u1", "a1", "u2", "a2"), "01234567890") is None
    assert len(fn.calls) == 1


async def test_maybe_compact_without_compact_after_does_nothing() -> None:
    fn = Summaries(CompactionResult("s", "a1", "u2"))
    session = Session("a/1", MemoryStore()).on_compaction(fn)
    assert await session.maybe_compact(chat("u1", "a1", "u2", "a2"), "x" * 10_000) is None
    assert fn.calls == []


async def test_an_automatic_compaction_failure_is_reported_not_raised() -> None:
    boom = RuntimeError("summariser down")
    reported: list[BaseException] = []

    async def failing(history: list[UIMessage], ctx: CompactionContext) -> CompactionResult | None:
        raise boom

    async def on_error(error: BaseException) -> None:
        reported.append(error)

    session = Session("a/1", MemoryStore()).on_compaction(failing).compact_after(1).on_compaction_error(on_error)
    assert await session.maybe_compact(chat("u1", "a1", "u2"), "") is None
    assert reported == [boom]
    with pytest.raises(RuntimeError, match="summariser down"):
        await session.compact(chat("u1", "a1", "u2"))  # a direct compact() lets its caller decide

    def broken_callback(error: BaseException) -> None:
        raise ValueError("callback bug")

    session.on_compaction_error(broken_callback)
    assert await session.maybe_compact(chat("u1", "a1", "u2"), "") is None


async def test_the_explicit_counter_wins_over_the_engine_default() -> None:
    def fixed(value: int) -> Any:
        async def count(messages: list[UIMessage], system_prompt: str) -> int:
            return value

        return count

    session = Session("a/1", MemoryStore())
    assert session.token_counter is estimate_tokens
    assert await session.count_tokens(chat("u1"), "hi") == 4 + 4 + 2  # 3 words of text, 1 word of prompt
    default = fixed(7)
    session.set_default_token_counter(default)
    assert session.token_counter is default
    assert await session.count_tokens(chat("u1")) == 7
    session.compact_after(100, token_counter=lambda messages, system_prompt: 2.2)
    assert await session.count_tokens(chat("u1")) == 3  # rounded up
    with pytest.raises(ConfigurationError, match="compact_after: tokens must be a positive int, got 0"):
        session.compact_after(0)


# ---------------------------------------------------------------------------------------------- token estimate


def test_estimate_text_tokens_takes_the_larger_of_chars_and_words() -> None:
    assert [estimate_text_tokens(t) for t in ["", "abcd", "abcde", "hello world", "a " * 10, "x" * 400]] == [
        0,
        2,  # one word is 1.3 -> 2
        2,
        3,  # 11 chars -> 3, 2 words -> 2.6 -> 3
        13,  # 10 words -> exactly 13
        100,  # 400 chars in one word
    ]


def test_estimate_tokens_counts_texts_tool_io_and_the_system_prompt() -> None:
    tool = ToolPart(
        type="tool-search", tool_call_id="c1", state="output-available", input={"q": "ray"}, output="found it"
    )
    failed = ToolPart(type="tool-search", tool_call_id="c2", state="output-error", input={}, error_text="boom")
    assistant = UIMessage(
        id="a1",
        role="assistant",
        parts=(StepStartPart(), ReasoningPart(text="think"), tool, failed, TextPart(text="hello world")),
    )
    assert estimate_tokens([]) == 0
    assert estimate_tokens([msg("u1", "user", "hello world")]) == 4 + 3
    # 4 + reasoning 2 + input {"q":"ray"} 3 + output 3 + input {} 2 + error 2 + text 3
    assert estimate_tokens([assistant]) == 19
    assert estimate_tokens([assistant], "You are terse.") == 19 + 4


# ---------------------------------------------------------------------------------------------- shipped compaction


class Recorder:
    def __init__(self, answer: str = "## Topic\nsummary"):
        self.answer = answer
        self.prompts: list[str] = []

    async def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.answer


def ten_token_chat(n: int) -> list[UIMessage]:
    """u0, a1, u2, ... each 14 tokens by the estimate (40 chars + 4)."""
    return [msg(f"{'ua'[i % 2]}{i}", "user" if i % 2 == 0 else "assistant", f"{i:02d}" + "x" * 38) for i in range(n)]


async def test_the_shipped_compaction_keeps_head_and_tail_and_summarises_the_middle() -> None:
    summarize = Recorder()
    compact = create_compact_function(summarize, tail_token_budget=30)
    messages = ten_token_chat(10)
    assert await compact(messages, MANUAL) == CompactionResult("## Topic\nsummary", "a3", "a7")
    [prompt] = summarize.prompts
    middle = "\n\n".join(f"{m.role}: {m.text}" for m in messages[3:8])
    assert prompt == f"{SUMMARY_INSTRUCTIONS}\n\nAim for about 100 tokens.\n\nCONVERSATION TO SUMMARIZE:\n{middle}"
    for section in ("## Topic", "## Key Points", "## Current State", "## Open Items"):
        assert section in SUMMARY_INSTRUCTIONS


async def run(messages: list[UIMessage], ctx: CompactionContext = MANUAL, **options: Any) -> Any:
    return await create_compact_function(Recorder(), **options)(messages, ctx)


async def test_the_tail_keeps_min_tail_messages_and_starts_on_a_user_message() -> None:
    messages = ten_token_chat(10)
    result = CompactionResult("## Topic\nsummary", "a3", "a5")
    assert await run(messages, tail_token_budget=0, min_tail_messages=3) == result  # the tail moves from a7 to u6
    assert await run(messages, tail_token_budget=60, protect_head=1) == CompactionResult(result.summary, "a1", "a5")
    assert await run(messages, tail_token_budget=10_000) is None  # everything fits the tail
    assert await run(ten_token_chat(5), min_tail_messages=2) is None  # nothing between head and tail


async def test_the_tail_never_starts_inside_a_step() -> None:
    pending = ToolPart(type="tool-deploy", tool_call_id="c1", state="approval-requested", input={})
    done = ToolPart(type="tool-deploy", tool_call_id="c1", state="output-available", input={}, output="ok")
    messages = [
        msg("u0", "user", "deploy it"),
        UIMessage(id="a1", role="assistant", parts=(pending,)),
        msg("s2", "system", "approved"),
        UIMessage(id="a3", role="assistant", parts=(done,)),
        msg("a4", "assistant", "deployed"),
    ]
    # a4 continues a3's step and a3 answers a1's call, so the tail starts on the system note before them.
    assert await run(messages, protect_head=1, tail_token_budget=0) == CompactionResult("## Topic\nsummary", "a1", "a1")
    steps = [msg("u0", "user", "go"), *(msg(f"a{i}", "assistant", f"step {i}") for i in range(1, 5))]
    assert await run(steps, protect_head=1, tail_token_budget=0, min_tail_messages=1) == CompactionResult(
        "## Topic\nsummary", "a1", "a3"
    )  # no clean boundary at all: the budget's cut stands


async def test_the_tail_walk_counts_with_the_sessions_counter_unless_given_one() -> None:
    def hundred(messages: list[UIMessage], system_prompt: str) -> int:
        return 100 * len(messages)

    ctx = CompactionContext(token_counter=hundred, reason="threshold")
    messages = ten_token_chat(10)
    # By the session's counter no message fits 60 tokens, so the tail is min_tail_messages; by the estimate, four.
    assert await run(messages, ctx, tail_token_budget=60) == CompactionResult("## Topic\nsummary", "a3", "a7")
    assert await run(messages, ctx, tail_token_budget=60, token_counter=estimate_tokens) == CompactionResult(
        "## Topic\nsummary", "a3", "a5"
    )


async def test_the_shipped_compaction_renders_tool_calls_clipped() -> None:
    call = ToolPart(
        type="tool-fetch", tool_call_id="c1", state="output-available", input={"url": "u"}, output="y" * 600
    )
    messages = [
        *ten_token_chat(3),
        UIMessage(id="a3", role="assistant", parts=(TextPart(text="fetching"), call)),
        *ten_token_chat(6)[4:],
    ]
    summarize = Recorder()
    assert await create_compact_function(summarize, tail_token_budget=0)(messages, MANUAL) == (
        CompactionResult("## Topic\nsummary", "a3", "a3")
    )
    assert summarize.prompts[0].endswith(
        'assistant: fetching\n[tool call fetch] input: {"url": "u"}\n'
        f"[tool result fetch] {'y' * 500}... [100 more chars]"
    )


async def test_a_second_pass_feeds_the_earlier_summary_back() -> None:
    summarize = Recorder("first summary")
    session = Session("a/1", MemoryStore()).on_compaction(create_compact_function(summarize, tail_token_budget=30))
    messages = ten_token_chat(10)
    assert await session.compact(messages) == CompactionResult("first summary", "a3", "a7")
    messages = [*messages, *ten_token_chat(14)[10:]]
    summarize.answer = "second summary"
    assert await session.compact(messages) == CompactionResult("second summary", "a3", "a11")
    second = summarize.prompts[1]
    assert "PREVIOUS SUMMARY:\nfirst summary\n\nCONVERSATION TO SUMMARIZE:\nuser: 08" in second
    assert "compaction_" not in second
    view = session.model_view(messages)
    assert [m.text[:2] for m in view] == ["00", "01", "02", SUMMARY_HEADER[:2], "12", "13"]
    assert view[3].text == f"{SUMMARY_HEADER}\nsecond summary"


async def test_an_earlier_summary_inside_the_head_starts_the_middle() -> None:
    summarize = Recorder("again")
    session = Session("a/1", MemoryStore()).on_compaction(Summaries(CompactionResult("early", "a1", "a3")))
    messages = ten_token_chat(10)
    await session.compact(messages)  # view: u0, summary, u4, a5, ...
    session.on_compaction(create_compact_function(summarize, tail_token_budget=30))
    assert await session.compact(messages) == CompactionResult("again", "a1", "a7")
    assert "PREVIOUS SUMMARY:\nearly\n\nCONVERSATION TO SUMMARIZE:\nuser: 04" in summarize.prompts[0]


async def test_the_shipped_compaction_returns_none_for_a_blank_summary() -> None:
    assert await create_compact_function(Recorder("  \n"), tail_token_budget=30)(ten_token_chat(10), MANUAL) is None
    with pytest.raises(ConfigurationError, match="protect_head must be an int >= 0, got -1"):
        create_compact_function(Recorder(), protect_head=-1)
