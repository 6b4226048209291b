"""The shipped extensions: RedactPII (input before the model, output before clients and the store, values split
across stream deltas, checksums that keep look-alikes) and AuditLog (every decision and outcome, durable across a
restart, paged, failing closed when it cannot write)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import drain

import think_actors as ta
from think_actors.messages import ReasoningPart
from think_actors.testing import ScriptedModel, reasoning, step, text, tool_call

# ------------------------------------------------------------------ RedactPII: what it finds

REDACT = ta.RedactPII()


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("Mail alice.smith+billing@example.co.uk today.", "Mail [email] today."),
        ("Reach me at bob@mail.example.com.", "Reach me at [email]."),
        ("Call +1 415 555 0100 or (415) 555-0100.", "Call [phone] or [phone]."),
        ("London office: +44 20 7946 0958", "London office: [phone]"),
        ("Text +14155550100 now", "Text [phone] now"),
        ("Card 4111 1111 1111 1111, exp 12/27", "Card [credit_card], exp 12/27"),
        ("Amex 3782-822463-10005 on file", "Amex [credit_card] on file"),
        ("IBAN DE89 3704 0044 0532 0130 00 please", "IBAN [iban] please"),
        ("Pay to GB82WEST12345698765432.", "Pay to [iban]."),
        # Look-alikes stay: a number failing Luhn, an IBAN failing mod 97, dates, IPs, versions, plain numbers.
        ("Ref 4111 1111 1111 1112", "Ref 4111 1111 1111 1112"),
        ("Code DE89 3704 0044 0532 0130 01", "Code DE89 3704 0044 0532 0130 01"),
        ("Due 2024-01-15, see 10.0.0.12", "Due 2024-01-15, see 10.0.0.12"),
        ("Version 3.12.1 of order 12345678", "Version 3.12.1 of order 12345678"),
        ("steps 1 2 3 4 5 6 7", "steps 1 2 3 4 5 6 7"),
        ("no personal data here", "no personal data here"),
    ],
)
def test_redact_finds_real_values_and_keeps_look_alikes(given: str, expected: str) -> None:
    assert REDACT.redact(given) == expected


def test_patterns_and_replacement_are_configurable() -> None:
    redactor = ta.RedactPII(
        kinds=["email"],
        patterns={"employee_id": r"\bEMP-\d{6}\b"},
        replacement=lambda kind, value: f"<{kind}:{len(value)}>",
    )
    assert redactor.redact("EMP-004211 wrote to a@b.io from 415 555 0100") == (
        "<employee_id:10> wrote to <email:6> from 415 555 0100"
    )
    with pytest.raises(ta.ConfigurationError, match="unknown kinds"):
        ta.RedactPII(kinds=["ssn"])
    with pytest.raises(ta.ConfigurationError, match="not a regex"):
        ta.RedactPII(patterns={"bad": "("})


# ------------------------------------------------------------------ RedactPII in a turn


class Private(ta.Think):
    extensions = [ta.RedactPII()]
    seen: list[str] = []

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta":
            self.seen.append(ctx.text or "")


SECRET_REPLY = (
    "Sure. I emailed jane.doe@example.com and will call +1 415 555 0100; the card 4111 1111 1111 1111 is on "
    "file, refunds go to DE89 3704 0044 0532 0130 00."
)
REDACTED_REPLY = (
    "Sure. I emailed [email] and will call [phone]; the card [credit_card] is on file, refunds go to [iban]."
)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 500])
async def test_the_reply_is_redacted_before_clients_hooks_and_the_store_see_it(
    scripted: ScriptedModel, chunk_size: int
) -> None:
    Private.seen = []
    scripted.add(text(SECRET_REPLY, chunk_size=chunk_size))
    agent = Private(model=scripted, store=ta.MemoryStore())

    chunks = await drain(agent.chat("please sort out my refund"))

    streamed = "".join(c.delta for c in chunks if c.type == "text-delta")
    assert streamed == REDACTED_REPLY
    assert "".join(Private.seen) == REDACTED_REPLY
    assert agent.get_messages()[-1].text == REDACTED_REPLY


async def test_the_users_input_is_redacted_before_the_model_sees_it_and_stored_as_sent(
    scripted: ScriptedModel,
) -> None:
    scripted.add(text("Done."))
    agent = Private(model=scripted, store=ta.MemoryStore())
    sent = "My card is 5555-5555-5555-4444 and my mail is max@firma.de"

    await agent.save_messages(sent)

    assert scripted.requests[0].messages[1] == {
        "role": "user",
        "content": "My card is [credit_card] and my mail is [email]",
    }
    assert agent.get_messages()[0].text == sent


async def test_reasoning_and_text_around_tool_calls_are_redacted(scripted: ScriptedModel) -> None:
    @ta.tool
    async def send(to: str) -> str:
        """Send a message."""
        return "sent"

    scripted.extend(
        [
            step(
                reasoning("The user is ann@corp.com", chunk_size=4),
                text("Writing to ann@corp.com", chunk_size=5),
                tool_call("send", {"to": "ann@corp.com"}),
            ),
            text("Sent to ann@corp.com."),
        ]
    )
    agent = Private(model=scripted, tools=[send], store=ta.MemoryStore())
    await agent.save_messages("write to ann")

    reply = agent.get_messages()[-1]
    assert [p.text for p in reply.parts if isinstance(p, ta.TextPart | ReasoningPart)] == [
        "The user is [email]", "Writing to [email]", "Sent to [email].",
    ]  # fmt: skip
    # Tool inputs are the tool's business: the call gets the address it needs.
    assert [p.input for p in reply.tool_parts] == [{"to": "ann@corp.com"}]


# ------------------------------------------------------------------ AuditLog


@ta.tool
async def refund(order_id: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order_id}"


class Desk(ta.Think):
    tools = [refund]
    extensions = [ta.RedactPII(), ta.AuditLog(page_size=4)]

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        if ctx.input["amount"] > 100:
            return ta.Block("refunds over 100 need a manager")
        return None


def shape(record: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(record.pop("at"), float)
    record.pop("request_id")
    return record


async def test_the_audit_log_records_every_decision_and_outcome_and_survives_a_restart(
    scripted: ScriptedModel, tmp_path: Path
) -> None:
    scripted.extend(
        [
            step(
                tool_call("refund", {"order_id": "A-1", "amount": 20.0}),
                tool_call("refund", {"order_id": "A-2", "amount": 500.0}),
            ),
            text("One refund done, one needs a manager."),
        ]
    )
    agent = Desk("desk", model=scripted, store=ta.SQLiteStore(str(tmp_path / "desk.db")))
    await agent.save_messages("refund A-1 (20) and A-2 (500)")

    records = [shape(r) for r in await ta.AuditLog.records(agent)]
    turn_config = records[0]
    assert turn_config["hook"] == "before_turn" and turn_config["source"] == "redact-pii"
    assert sorted(turn_config["decision"]) == ["transform"]
    tool_records = sorted(
        (r for r in records if r["hook"] in ("before_tool_call", "after_tool_call")),
        key=lambda r: (r["hook"], str(r.get("output"))),
    )
    assert [
        (r["hook"], r.get("source"), r.get("decision"), r.get("success"), r.get("output")) for r in tool_records
    ] == [
        ("after_tool_call", None, None, True, "refunded 20.0 on A-1"),
        ("after_tool_call", None, None, True, "refunds over 100 need a manager"),
        ("before_tool_call", "agent", {"action": "block", "reason": "refunds over 100 need a manager"}, None, None),
    ]
    assert records[-1] == {"hook": "on_chat_response", "status": "completed", "error": None}

    # A new process: the records are read back from the store, and appends go on after them.
    scripted.add(text("Hello again."))
    again = Desk("desk", model=scripted, store=ta.SQLiteStore(str(tmp_path / "desk.db")))
    assert [shape(r) for r in await ta.AuditLog.records(again)] == records
    await again.save_messages("hi")
    after = [shape(r) for r in await ta.AuditLog.records(again)]
    assert after[: len(records)] == records
    assert [r["hook"] for r in after[len(records) :]] == ["before_turn", "on_chat_response"]
    assert len(records) > 4  # more than one page was written


async def test_turn_errors_are_audited(scripted: ScriptedModel) -> None:
    class Failing(ta.Think):
        extensions = [ta.AuditLog()]

    agent = Failing(store=ta.MemoryStore())  # no model: the turn fails at its setup
    with pytest.raises(ta.ConfigurationError):
        await agent.save_messages("hi")
    [record] = [shape(r) for r in await ta.AuditLog.records(agent)]
    assert record == {
        "hook": "on_chat_error",
        "stage": "turn",
        "error": "Failing has no model: set the class attribute `model` or return one from before_turn",
        "error_type": "ConfigurationError",
    }


class AuditDown(ta.MemoryStore):
    async def set_kv(self, key: str, value: Any) -> None:
        if key.startswith("audit:"):
            raise OSError("disk full")
        await super().set_kv(key, value)


async def test_an_audit_log_that_fails_closed_stops_an_unaudited_tool_call(scripted: ScriptedModel) -> None:
    ran: list[str] = []

    @ta.tool
    async def wire(amount: float) -> str:
        """Wire money."""
        ran.append("wire")
        return "wired"

    class Bank(ta.Think):
        extensions = [ta.AuditLog(failure="closed")]

        async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
            return ta.Allow()

    scripted.add(tool_call("wire", {"amount": 5.0}))
    agent = Bank(model=scripted, tools=[wire], store=AuditDown())
    result = await agent.save_messages("wire 5")

    # The decision could not be recorded: the call fails; recording its outcome fails too, and ends the turn.
    assert ran == []
    assert result.status == "error"
    assert result.error == "extension 'audit' after_tool_call raised OSError: disk full (it fails closed)"
