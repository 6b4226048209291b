"""What crosses the gateway's sockets, as data: the messages of a chat request as ``UIMessage``s, the server's
messages as the AI SDK's, which incoming messages are new (reconciliation), and a child agent's progress frame.

Pure functions of their arguments, no socket or room: the routes and the turns use them.
"""

from __future__ import annotations

import json
from typing import Any

from ..agent import Think
from ..messages import ToolPart, UIMessage
from . import protocol

__all__ = ["reconcile", "wire_message"]

# Chunks that put nothing into the assistant message.
_NO_CONTENT = frozenset({"start", "start-step", "finish-step", "finish", "abort", "error", "message-metadata"})

# Message metadata the server writes (reference: RESERVED_MESSAGE_METADATA_KEYS); a client's copy is dropped.
_RESERVED_METADATA = ("channel", "turnMetadata")

_STRATEGIES = frozenset({"queue", "latest", "merge", "drop", "debounce", "steer"})


def wire_message(message: UIMessage | dict[str, Any]) -> dict[str, Any]:
    """A message as the AI SDK's ``UIMessage`` (which has no ``createdAt``; the store keeps the time)."""
    wire = message.to_wire() if isinstance(message, UIMessage) else dict(message)
    wire.pop("createdAt", None)
    return wire


async def _transcript_frame(agent: Any, *, connect: bool = False) -> str:
    """The agent's stored messages as a ``cf_agent_chat_messages`` frame (``connect`` on a socket's first one)."""
    messages = await agent.get_messages()
    frame: dict[str, Any] = {"type": protocol.CHAT_MESSAGES, "messages": [wire_message(m) for m in messages]}
    if connect:
        frame["connect"] = True
    return protocol.dumps(frame)


def _stamp_web(message: UIMessage) -> UIMessage:
    """A user message that came through a socket carries ``metadata.channel == "web"``, as the reference stamps it;
    a client cannot forge the server-written keys."""
    if message.role != "user":
        return message
    metadata = {k: v for k, v in (message.metadata or {}).items() if k not in _RESERVED_METADATA}
    return message.model_copy(update={"metadata": {**metadata, "channel": "web"}})


def reconcile(incoming: list[UIMessage], server: list[UIMessage]) -> list[UIMessage]:
    """The incoming messages the server does not have (reference §3.5). The server's copy always wins, so a stale
    client never overwrites a settled tool result; a client's copy of a server reply under another id is matched
    by a shared tool call id, or, for a reply without tools, by identical content, instead of being stored twice."""
    known = {m.id for m in server}
    tool_calls = {p.tool_call_id for m in server for p in m.parts if isinstance(p, ToolPart)}
    unclaimed = [m for m in server if m.role == "assistant" and not any(isinstance(p, ToolPart) for p in m.parts)]
    new = []
    for message in incoming:
        if message.id in known:
            continue
        if message.role == "assistant":
            calls = {p.tool_call_id for p in message.parts if isinstance(p, ToolPart)}
            if calls & tool_calls:
                continue  # the client's snapshot of a reply the server has (resolveToolMergeId)
            twin = next((m for m in unclaimed if not calls and _content(m) == _content(message)), None)
            if twin is not None:
                unclaimed.remove(twin)
                continue
        new.append(message)
    return new


def _content(message: UIMessage) -> str:
    parts = [p.model_dump(mode="json", exclude={"state", "provider_metadata"}) for p in message.parts]
    return json.dumps(parts, sort_keys=True)


def _agent_tool_frame(chunk: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": chunk.kind, "runId": chunk.run_id, "agent": chunk.agent}
    if chunk.chunk is not None:
        event["body"] = protocol.dumps(chunk.chunk.to_wire())
    if chunk.summary is not None:
        event["summary"] = chunk.summary
    if chunk.error is not None:
        event["error"] = chunk.error
    return {
        "type": protocol.AGENT_TOOL_EVENT,
        "parentToolCallId": chunk.parent_tool_call_id,
        "sequence": chunk.sequence,
        "event": event,
    }


def _incoming(request_id: str, body: dict[str, Any]) -> list[UIMessage]:
    """A chat request's messages as UIMessages; a request with one that is not is refused whole.

    As the AI SDK's UIMessage schema has it, a message brings its id (which the server keeps: reconciliation and
    terminal frames go by it) and its parts, at least one unless it is the assistant's; a message without is not
    given a made-up id or stored empty."""
    for n, message in enumerate(body["messages"]):
        if not isinstance(message, dict):
            continue  # validation below says what it is
        if not isinstance(message.get("id"), str) or not message["id"]:
            raise protocol.RequestError(request_id, f"messages[{n}] needs its id: a non-empty string")
        if not isinstance(message.get("parts"), list):
            raise protocol.RequestError(request_id, f"messages[{n}] needs its parts: an array")
        if not message["parts"] and message.get("role") != "assistant":
            raise protocol.RequestError(
                request_id, f"messages[{n}] needs at least one part (only an assistant's may have none)"
            )
    try:
        return [UIMessage.model_validate(m) for m in body["messages"]]
    except ValueError as err:
        raise protocol.RequestError(request_id, f"a message of the request is not a UIMessage: {err}") from None


def _branch_point(body: dict[str, Any]) -> str | None:
    """A regeneration answers the last message the client kept (it truncated its list there)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    return last.get("id") if isinstance(last, dict) and isinstance(last.get("id"), str) else None


def _concurrency(cls: type[Think] | None) -> tuple[str, float]:
    """The agent class's ``message_concurrency``: the strategy and the debounce wait in seconds."""
    value: Any = getattr(cls, "message_concurrency", "queue")
    if isinstance(value, dict):
        ms = value.get("debounce_ms", value.get("debounceMs", 750))
        return str(value.get("strategy", "queue")), (ms if isinstance(ms, int | float) and ms >= 0 else 750) / 1000
    return (value if value in _STRATEGIES else "queue"), 0.75
