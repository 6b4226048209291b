"""Malformed and edge-case frames for the gateway fuzz suite, written from the protocol (reference §1.1, §3.5).

Every case is raw frame text and what the protocol lets the gateway answer with (``expect``):

- ``ERROR``: a ``think_actors_error`` frame (README: bad frames get one and never cost the socket).
- ``IGNORED``: the reference documents no answer (a client's ``cf_agent_chat_messages``, a cancel of an id nobody
  runs, a clear, which is not echoed to its sender); an error frame is accepted too.
- ``RESUME``: a resume request; answered with ``cf_agent_stream_resume_none`` (idle) or an error frame.
- ``ACK``: a resume ACK while idle; the bare ``{done: true, replay: true}`` response frame, or an error frame.
- ``NO_TURN``: a chat request that must not run a turn (``messages: []``); its terminal response frame or an
  error frame.

``known`` names the issue 16 item a case fails because of, ``finding`` a failure found by this suite outside those
items; the suite runs such cases in batches of their own marked xfail(strict=True).

The seeded generator below adds random junk on top of the hand-written cases; hypothesis is not installed here.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

ERROR = "error"
IGNORED = "ignored"
RESUME = "resume"
ACK = "ack"
NO_TURN = "no-turn"

CHAT_REQUEST = "cf_agent_use_chat_request"
CANCEL = "cf_agent_chat_request_cancel"
CLEAR = "cf_agent_chat_clear"
MESSAGES = "cf_agent_chat_messages"
TOOL_RESULT = "cf_agent_tool_result"
TOOL_APPROVAL = "cf_agent_tool_approval"
RESUME_REQUEST = "cf_agent_stream_resume_request"
RESUME_ACK = "cf_agent_stream_resume_ack"

LONE = "\ud800"  # json.dumps writes it as the escape "\ud800": valid JSON text, not a valid Unicode string
LONE_LOW = "\udfff"
HUGE = "x" * 200_000

# The values a field gets when its type is wrong: numbers, null, booleans, lists, objects, and strings where
# something else is expected.
WRONG_TYPES: list[Any] = [0, 1, -1, 1.5, 10**30, None, True, False, [], [1], ["x"], {}, {"a": 1}, ""]


@dataclass(frozen=True)
class Case:
    """One frame to send and the answers the protocol allows for it."""

    name: str
    text: str
    expect: str = ERROR
    known: int | None = None  # the issue 16 item it fails today because of
    finding: str | None = None  # a failure outside the known items
    binary: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def dumps(value: Any) -> str:
    """JSON text as a browser's ``JSON.stringify`` would send it, lone surrogates as ``\\uXXXX`` escapes."""
    return json.dumps(value, ensure_ascii=True)


def user(text: Any = "hi", id: Any = "u-fuzz", **extra: Any) -> dict[str, Any]:
    return {"id": id, "role": "user", "parts": [{"type": "text", "text": text}], **extra}


UNSET: Any = object()


def chat(
    messages: Any = UNSET, *, request_id: Any = "r-fuzz", raw_body: Any = UNSET, init: Any = UNSET, **body: Any
) -> str:
    """A chat request frame: ``messages`` into a JSON-text body, or ``raw_body`` / ``init`` as given."""
    if init is UNSET:
        if raw_body is UNSET:
            raw_body = dumps({"messages": [user()] if messages is UNSET else messages, **body})
        init = {"method": "POST", "body": raw_body}
    frame: dict[str, Any] = {"type": CHAT_REQUEST, "init": init}
    if request_id is not ...:
        frame["id"] = request_id
    return dumps(frame)


def nested(depth: int, leaf: Any = 1) -> str:
    return "[" * depth + dumps(leaf) + "]" * depth


def _without(frame: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in frame.items() if k != key}


# ---------------------------------------------------------------------------------------------- families


def not_json() -> Iterator[Case]:
    texts = [
        "",
        " ",
        "\n",
        "not json",
        "{",
        "}",
        "[",
        '{"type": "cf_agent_chat_clear"',
        '{"type": cf_agent_chat_clear}',
        "{'type': 'cf_agent_chat_clear'}",
        '{"type": "cf_agent_chat_clear"} trailing',
        '{"type": "cf_agent_chat_clear"}{"type": "cf_agent_chat_clear"}',
        "\ufeff{}",
        "\x00",
        "undefined",
        "nul",
        "tru",
        '"unterminated',
        '{"type": "\\x41"}',  # not a JSON escape
        '{"type": "\\u12"}',
        "NaN",  # JavaScript's JSON.parse refuses these; they are not JSON
        "Infinity",
        "-Infinity",
        '{"type": "cf_agent_chat_request_cancel", "id": Infinity}',
        "x" * 100_000,
    ]
    for i, text in enumerate(texts):
        yield Case(f"not-json-{i}", text)


def non_objects() -> Iterator[Case]:
    values: list[Any] = [0, 1, -1.5, 1e308, None, True, False, "cf_agent_chat_clear", "", [], [1, 2], [{}]]
    values += [[{"type": CLEAR}], {}]
    for i, value in enumerate(values):
        yield Case(f"non-object-{i}", dumps(value))
    for depth in (10, 1_000, 100_000):
        yield Case(f"deep-list-{depth}", nested(depth))
        yield Case(f"deep-object-{depth}", '{"a":' * depth + "1" + "}" * depth)


def bad_type_field() -> Iterator[Case]:
    for i, value in enumerate([None, 1, 1.5, True, [], [CLEAR], {}, {"type": CLEAR}]):
        yield Case(f"type-wrong-type-{i}", dumps({"type": value}))
    yield Case("type-missing", dumps({"id": "x"}))
    yield Case("type-capitalised-key", dumps({"Type": CLEAR}))
    unknown = [
        "",
        " ",
        "cf_agent_",
        "cf_agent_something_else",
        "CF_AGENT_CHAT_CLEAR",
        " cf_agent_chat_clear",
        "cf_agent_chat_clear ",
        "cf_agent_chat_clear\x00",
        "cf_agent_use_chat_response",  # server-to-client types are not requests
        "cf_agent_stream_resuming",
        "cf_agent_stream_resume_none",
        "cf_agent_stream_pending",
        "cf_agent_message_updated",
        "cf_agent_identity",
        "cf_agent_mcp_servers",
        "cf_agent_session",
        "agent-tool-event",
        "think_actors_error",
        "rpc",
        "ping",
        "tøst",
        HUGE,
    ]
    for i, kind in enumerate(unknown):
        yield Case(f"type-unknown-{i}", dumps({"type": kind}))
    yield Case("type-lone-surrogate", dumps({"type": LONE}))


def chat_request_envelope() -> Iterator[Case]:
    yield Case("chat-id-missing", chat(request_id=...))
    for i, value in enumerate(WRONG_TYPES):
        yield Case(f"chat-id-wrong-type-{i}", chat(request_id=value))
    yield Case("chat-init-missing", dumps({"type": CHAT_REQUEST, "id": "r-fuzz"}))
    for i, value in enumerate(WRONG_TYPES):
        if value != {}:
            yield Case(f"chat-init-wrong-type-{i}", chat(init=value))
    yield Case("chat-init-empty", chat(init={}))
    for i, method in enumerate(["GET", "post", "PUT", "", 1, None, [], {}]):
        yield Case(f"chat-method-{i}", chat(init={"method": method, "body": dumps({"messages": [user()]})}))
    yield Case("chat-body-missing", chat(init={"method": "POST"}))
    for i, raw in enumerate([None, 1, True, [], "", "not json", "{oops", "[]", "1", "null", '"str"', "{}"]):
        yield Case(f"chat-body-{i}", chat(raw_body=raw))
    yield Case("chat-body-deep", chat(raw_body=nested(100_000)))
    for i, value in enumerate([None, "x", 1, {}, {"0": user()}, True]):
        yield Case(f"chat-messages-wrong-type-{i}", chat(raw_body=dumps({"messages": value})))
    yield Case("chat-messages-missing", chat(raw_body=dumps({"trigger": "submit-message"})))


def chat_request_messages() -> Iterator[Case]:
    for i, value in enumerate([[1], ["x"], [None], [[]], [True], [user(), 1]]):
        yield Case(f"message-not-object-{i}", chat(value))
    yield Case("message-empty-object", chat([{}]))
    # Reference §3.5 / AI SDK UIMessage: id, role and parts are required.
    yield Case("message-no-id", chat([_without(user(), "id")]))
    for i, value in enumerate([1, None, [], {}, True, ""]):
        yield Case(f"message-id-wrong-type-{i}", chat([user(id=value)]))
    yield Case("message-no-role", chat([_without(user(), "role")]))
    for i, value in enumerate(["robot", "USER", "", "tool", 1, None, [], {}]):
        yield Case(f"message-role-{i}", chat([{**user(), "role": value}]))
    yield Case("message-no-parts", chat([_without(user(), "parts")]))
    yield Case("message-parts-empty", chat([{**user(), "parts": []}]))
    for i, value in enumerate(["x", 1, {}, None, True, {"type": "text", "text": "hi"}]):
        yield Case(f"message-parts-wrong-type-{i}", chat([{**user(), "parts": value}]))
    bad_parts: list[Any] = [
        1,
        "x",
        None,
        [],
        {},
        {"type": 1},
        {"type": None},
        {"type": ["text"]},
        {"text": "no type"},
        {"type": "text"},
        {"type": "text", "text": 1},
        {"type": "text", "text": None},
        {"type": "text", "text": ["a"]},
        {"type": "text", "text": {"a": 1}},
        {"type": "text", "text": "x", "state": "bogus"},
        {"type": "unknown-kind", "text": "x"},
        {"type": "", "text": "x"},
        {"type": "TEXT", "text": "x"},
        {"type": "image", "url": "https://example.com/a.png"},
        {"type": "reasoning"},
        {"type": "reasoning", "text": 1},
        {"type": "step-start", "text": 1},
        {"type": "tool-x"},
        {"type": "tool-x", "toolCallId": "c"},
        {"type": "tool-x", "toolCallId": 1, "state": "input-available"},
        {"type": "tool-x", "toolCallId": "c", "state": "weird"},
        {"type": "dynamic-tool", "toolCallId": "c", "state": "input-available", "toolName": 1},
        {"type": "file"},
        {"type": "file", "url": 1, "mediaType": "text/plain"},
        {"type": "source-url"},
        {"type": "source-url", "sourceId": "s", "url": None},
        {"type": "source-document", "sourceId": "s"},
        {"type": "data-x", "id": 1},
        {"type": "text", "text": "x", "providerMetadata": "not an object"},
    ]
    for i, part in enumerate(bad_parts):
        yield Case(f"message-bad-part-{i}", chat([{**user(), "parts": [part]}]))
    yield Case("message-good-then-bad-part", chat([{**user(), "parts": [{"type": "text", "text": "ok"}, {"type": 1}]}]))
    # A valid message before an invalid one: nothing of the request is stored.
    yield Case("message-good-then-bad-message", chat([user(id="u-fuzz-ok"), {**user(id="u-fuzz-bad"), "role": 1}]))
    yield Case("message-huge-role", chat([{**user(), "role": HUGE}]))
    yield Case("message-deep-parts", chat([{**user(), "parts": json.loads(nested(500))}]))
    yield Case("message-deep-role", chat([{**user(), "role": json.loads(nested(500))}]))


def chat_request_no_turn() -> Iterator[Case]:
    # Reference §1.1 steps 6-9 with nothing new and an empty history: no model call, nothing stored; the turn's
    # terminal frame (the reference's "No messages to send to the model" error) or an error frame.
    yield Case("messages-empty", chat([]), expect=NO_TURN)
    yield Case("messages-empty-regenerate", chat([], trigger="regenerate-message"), expect=NO_TURN)


def client_tools() -> Iterator[Case]:
    bad: list[Any] = [
        "x",
        1,
        True,
        {"name": "a"},
        [1],
        ["x"],
        [None],
        [[]],
        [{}],
        [{"name": 1}],
        [{"name": None}],
        [{"name": ["a"]}],
        [{"name": "ok"}, {"name": 2}],
        [{"description": "no name"}],
        [{"name": "a", "parameters": "x"}],
        [{"name": "a", "parameters": 1}],
        [{"name": "a", "description": 1}],
    ]
    for i, value in enumerate(bad):
        yield Case(f"client-tools-{i}", chat(clientTools=value))


def lone_surrogates() -> Iterator[Case]:
    """A lone surrogate in every string field of every frame (item 9: refused at parse time)."""
    for name, value in [("high", LONE), ("low", LONE_LOW), ("embedded", f"a{LONE}b")]:
        yield Case(f"surrogate-{name}-request-id", chat(request_id=value))
        yield Case(f"surrogate-{name}-message-id", chat([user(id=value)]))
        yield Case(f"surrogate-{name}-text", chat([user(text=value)]))
        yield Case(f"surrogate-{name}-metadata-value", chat([user(metadata={"k": value})]))
        yield Case(f"surrogate-{name}-metadata-key", chat([user(metadata={value: 1})]))
        yield Case(f"surrogate-{name}-trigger", chat(trigger=value))
        yield Case(f"surrogate-{name}-custom-body", chat(selectedFile=value))
        yield Case(f"surrogate-{name}-client-tool", chat(clientTools=[{"name": value}]))
        yield Case(f"surrogate-{name}-message-id-field", chat(messageId=value))
        tool = {"name": "t", "description": value, "parameters": {"type": "object"}}
        yield Case(f"surrogate-{name}-client-tool-description", chat(clientTools=[tool]))
        yield Case(f"surrogate-{name}-cancel-id", dumps({"type": CANCEL, "id": value}))
        yield Case(f"surrogate-{name}-tool-call-id", dumps({"type": TOOL_RESULT, "toolCallId": value}))
        result = {"type": TOOL_RESULT, "toolCallId": "nope", "toolName": "t", "output": value}
        yield Case(f"surrogate-{name}-tool-output", dumps(result))
        yield Case(f"surrogate-{name}-error-text", dumps({**result, "errorText": value}))
        approval = {"type": TOOL_APPROVAL, "toolCallId": value, "approved": True}
        yield Case(f"surrogate-{name}-approval-id", dumps(approval))
        yield Case(f"surrogate-{name}-probe-id", dumps({"type": RESUME_REQUEST, "probeId": value}))
        yield Case(f"surrogate-{name}-ack-id", dumps({"type": RESUME_ACK, "id": value}))
        yield Case(f"surrogate-{name}-messages-frame", dumps({"type": MESSAGES, "messages": [user(text=value)]}))
        yield Case(f"surrogate-{name}-unknown-key", dumps({"type": CLEAR, value: value}))


def cancel_frames() -> Iterator[Case]:
    yield Case("cancel-no-id", dumps({"type": CANCEL}))
    for i, value in enumerate(WRONG_TYPES):
        yield Case(f"cancel-id-wrong-type-{i}", dumps({"type": CANCEL, "id": value}))
    yield Case("cancel-unknown-id", dumps({"type": CANCEL, "id": "nobody-runs-this"}), expect=IGNORED)
    yield Case("cancel-huge-id", dumps({"type": CANCEL, "id": HUGE}), expect=IGNORED)


def clear_and_messages_frames() -> Iterator[Case]:
    # Reference: a clear is broadcast to the other sockets only; a client's transcript is ignored.
    yield Case("clear-with-junk", dumps({"type": CLEAR, "id": 1, "messages": "x"}), expect=IGNORED)
    for i, value in enumerate([None, "x", 1, [1], [{}], [user()], [user(id="u-pushed")], {}]):
        yield Case(f"client-messages-{i}", dumps({"type": MESSAGES, "messages": value}), expect=IGNORED)
    yield Case("client-messages-missing", dumps({"type": MESSAGES}), expect=IGNORED)


def tool_result_frames() -> Iterator[Case]:
    base = {"type": TOOL_RESULT, "toolCallId": "no-such-call", "toolName": "ask", "output": "x"}
    yield Case("tool-result-no-call-id", dumps(_without(base, "toolCallId")))
    for i, value in enumerate(WRONG_TYPES):
        yield Case(f"tool-result-call-id-wrong-type-{i}", dumps({**base, "toolCallId": value}))
    unknown = [
        ("plain", {}),
        ("auto-continue", {"autoContinue": True}),
        ("auto-continue-false", {"autoContinue": False}),
        ("auto-continue-string", {"autoContinue": "yes"}),
        ("output-error", {"state": "output-error"}),
        ("output-error-text", {"state": "output-error", "errorText": "broke", "autoContinue": True}),
        ("bad-state", {"state": "bogus"}),
        ("tool-name-wrong-type", {"toolName": 1}),
        ("error-text-wrong-type", {"state": "output-error", "errorText": 1}),
        ("huge-output", {"output": HUGE}),
        ("deep-output", {"output": json.loads(nested(500))}),
        ("no-output", {"output": None}),
        ("client-tools", {"clientTools": [{"name": "ask", "description": "Ask"}]}),
        ("client-tools-auto", {"clientTools": [{"name": "ask"}], "autoContinue": True}),
        ("huge-call-id", {"toolCallId": HUGE}),
    ]
    for name, extra in unknown:
        yield Case(f"tool-result-unknown-{name}", dumps({**base, **extra}))
    for i, value in enumerate(["x", 1, [1], [{}], [{"name": 1}], {"name": "a"}, [None]]):
        yield Case(f"tool-result-client-tools-{i}", dumps({**base, "clientTools": value}))


def tool_approval_frames() -> Iterator[Case]:
    base = {"type": TOOL_APPROVAL, "toolCallId": "no-such-call", "approved": True}
    yield Case("approval-no-call-id", dumps(_without(base, "toolCallId")))
    for i, value in enumerate(WRONG_TYPES):
        yield Case(f"approval-call-id-wrong-type-{i}", dumps({**base, "toolCallId": value}))
    yield Case("approval-no-approved", dumps(_without(base, "approved")))
    for i, value in enumerate(["yes", "true", 1, 0, None, [], {}]):
        yield Case(f"approval-approved-wrong-type-{i}", dumps({**base, "approved": value}))
    for name, extra in [
        ("approved", {}),
        ("denied", {"approved": False}),
        ("approved-auto", {"autoContinue": True}),
        ("denied-auto", {"approved": False, "autoContinue": True}),
    ]:
        yield Case(f"approval-unknown-{name}", dumps({**base, **extra}))


def resume_frames() -> Iterator[Case]:
    yield Case("resume-plain", dumps({"type": RESUME_REQUEST}), expect=RESUME)
    for i in range(10):  # repeated: each one answered the same way
        yield Case(f"resume-repeated-{i}", dumps({"type": RESUME_REQUEST, "probeId": "again"}), expect=RESUME)
    for i, value in enumerate([*WRONG_TYPES, HUGE]):
        yield Case(f"resume-probe-{i}", dumps({"type": RESUME_REQUEST, "probeId": value}), expect=RESUME)
    yield Case("ack-no-id", dumps({"type": RESUME_ACK}), expect=ACK)
    for i, value in enumerate([*WRONG_TYPES, "never-streamed"]):
        yield Case(f"ack-id-{i}", dumps({"type": RESUME_ACK, "id": value}), expect=ACK)


def binary_frames() -> Iterator[Case]:
    for i, data in enumerate([b"", b"\x00", b"\xff\xfe", dumps({"type": CLEAR}).encode(), chat().encode()]):
        yield Case(f"binary-{i}", data.decode("latin-1"), binary=True)


def random_junk(seed: int = 16, count: int = 120) -> Iterator[Case]:
    """Seeded random frames: protocol types with random fields of random JSON values."""
    rng = random.Random(seed)
    types = [CHAT_REQUEST, CANCEL, TOOL_RESULT, TOOL_APPROVAL, RESUME_ACK, "cf_agent_x", None, 7]
    keys = ["id", "init", "toolCallId", "approved", "output", "state", "errorText", "clientTools", "messages", "z"]

    def value(depth: int = 0) -> Any:
        roll = rng.random()
        if depth > 3 or roll < 0.5:
            return rng.choice([0, -7, 2.5, None, True, False, "", "x", "POST", LONE, "no-such-call", "r"])
        if roll < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 3))}

    for i in range(count):
        kind = rng.choice(types)
        frame: dict[str, Any] = {"type": kind} if kind is not None else {}
        for key in rng.sample(keys, rng.randint(0, 4)):
            frame[key] = value()
        if kind in (TOOL_RESULT, TOOL_APPROVAL):
            frame["toolCallId"] = rng.choice([None, 1, "", "no-such-call"])  # never a call that exists
        if kind == RESUME_ACK:
            frame.pop("id", None)
        if kind == CHAT_REQUEST:
            # Never a valid request: its body is random too, so at most its messages array is valid.
            frame["init"] = rng.choice([None, {}, {"method": "POST", "body": dumps(value())}])
        if kind == CANCEL and isinstance(frame.get("id"), str):
            del frame["id"]
        text = dumps(frame)
        yield Case(f"random-{i}", text, expect=ACK if kind == RESUME_ACK else ERROR)


def non_json_numbers() -> Iterator[Case]:
    """NaN and Infinity where a frame's values are echoed back or stored: JSON has no such numbers (JSON.parse
    refuses them), so they must be refused like any text that is not JSON, never sent on to other sockets.
    (A finding of this suite until the gateway refused them at parse time.)"""
    yield Case("nan-probe-id", '{"type": "cf_agent_stream_resume_request", "probeId": NaN}')
    yield Case("infinity-probe-id", '{"type": "cf_agent_stream_resume_request", "probeId": -Infinity}')
    body = dumps({"messages": [user(metadata={"score": 1})]}).replace('"score": 1', '"score": NaN')
    yield Case("nan-message-metadata", chat(raw_body=body))
    body = dumps({"messages": [user()], "custom": 1}).replace('"custom": 1', '"custom": Infinity')
    yield Case("infinity-custom-body", chat(raw_body=body))
    tool = dumps({"messages": [user()], "clientTools": [{"name": "t", "parameters": {"maximum": 1}}]})
    yield Case("nan-client-tool-parameters", chat(raw_body=tool.replace('"maximum": 1', '"maximum": NaN')))
    yield Case("nan-tool-output", '{"type": "cf_agent_tool_result", "toolCallId": "no-such-call", "output": NaN}')


FAMILIES = {
    "not-json": not_json,
    "non-json-numbers": non_json_numbers,
    "non-objects": non_objects,
    "type-field": bad_type_field,
    "chat-envelope": chat_request_envelope,
    "chat-messages": chat_request_messages,
    "chat-no-turn": chat_request_no_turn,
    "client-tools": client_tools,
    "lone-surrogates": lone_surrogates,
    "cancel": cancel_frames,
    "clear-and-messages": clear_and_messages_frames,
    "tool-result": tool_result_frames,
    "tool-approval": tool_approval_frames,
    "resume": resume_frames,
    "binary": binary_frames,
    "random": random_junk,
}


def all_cases() -> list[Case]:
    cases = [case for family in FAMILIES.values() for case in family()]
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    return cases
