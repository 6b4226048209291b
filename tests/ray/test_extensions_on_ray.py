"""Extensions on Ray: an agent class's extensions travel with the class to its actor and work there as in process.
The actor's reply is redacted before the handle's caller and the store see it, a tool call is blocked by an
extension, and the audit records it wrote are in the agent's store (read here from the same SQLite file)."""

from __future__ import annotations

from typing import Any

import pytest

import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(180)]


@ta.tool
async def close_account(account: str) -> str:
    """Close a customer's account."""
    return f"closed {account}"


class NoClosing(ta.Extension):
    async def before_tool_call(self, agent: Any, ctx: ta.ToolCallContext) -> Any:
        return ta.Block("accounts are closed by a person") if ctx.tool_name == "close_account" else None


class Support(ta.Think):
    tools = [close_account]
    extensions = [ta.RedactPII(), NoClosing(name="no-closing"), ta.AuditLog()]


async def test_extensions_work_in_an_agent_actor(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel(
        [
            tool_call("close_account", {"account": "ACC-9"}),
            text("I wrote to jane.doe@example.com about it.", chunk_size=4),
        ]
    )
    agent = await ta.spawn(Support, unique, model=model)

    result = await agent.save_messages("close my account, I am jane.doe@example.com")

    assert result.status == "completed"
    assert result.message is not None and result.message.text == "I wrote to [email] about it."
    [part] = [p for m in await agent.get_messages() for p in m.tool_parts]
    assert part.output == "accounts are closed by a person"
    store = ta.SQLiteStore.for_agent(ray_runtime.data_dir, agent.path)
    try:
        records = await ta.AuditLog.records(store)
    finally:
        await store.close()
    assert [(r["hook"], r.get("source"), r.get("decision")) for r in records] == [
        ("before_turn", "redact-pii", {"messages": "1 messages", "transform": "RedactPII.transform"}),
        ("before_tool_call", "no-closing", {"action": "block", "reason": "accounts are closed by a person"}),
        ("after_tool_call", None, None),
        ("on_chat_response", None, None),
    ]
