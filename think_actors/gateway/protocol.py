"""The Cloudflare agents chat protocol (``cf_agent_*`` frames, reference §1.1): names, parsing, frame builders.

Every frame is a JSON text message with a ``type``. Parsing never raises anything but ``FrameError``, whose
message says what was wrong and what a valid frame looks like, so a bad frame costs the sender an error frame and
never the socket or the agent.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = [
    "AGENT_TOOL_EVENT",
    "CHAT_CLEAR",
    "CHAT_MESSAGES",
    "CHAT_RECOVERING",
    "CHAT_REQUEST",
    "CHAT_REQUEST_CANCEL",
    "CHAT_RESPONSE",
    "ERROR",
    "IDENTITY",
    "MCP_SERVERS",
    "MESSAGE_UPDATED",
    "SESSION",
    "STREAM_PENDING",
    "STREAM_RESUME_ACK",
    "STREAM_RESUME_NONE",
    "STREAM_RESUME_REQUEST",
    "STREAM_RESUMING",
    "TOOL_APPROVAL",
    "TOOL_RESULT",
    "FrameError",
    "RequestError",
    "chat_request",
    "client_tools",
    "dumps",
    "mcp_servers_state",
    "origin_message_ids",
    "parse_frame",
    "response_frame",
    "skipped_frame",
]

CHAT_REQUEST = "cf_agent_use_chat_request"
CHAT_RESPONSE = "cf_agent_use_chat_response"
CHAT_REQUEST_CANCEL = "cf_agent_chat_request_cancel"
CHAT_CLEAR = "cf_agent_chat_clear"
CHAT_MESSAGES = "cf_agent_chat_messages"
IDENTITY = "cf_agent_identity"
MCP_SERVERS = "cf_agent_mcp_servers"
EMPTY_MCP_STATE: dict[str, Any] = {"prompts": [], "resources": [], "servers": {}, "tools": []}
# Our connection states by the reference's ``MCPConnectionState`` names; ``closed`` (no live connection) is sent
# as ``not-connected``, what the reference sends for a server it has no connection to.
_MCP_STATE_NAMES = {"connecting": "connecting", "ready": "ready", "failed": "failed", "closed": "not-connected"}


def mcp_servers_state(states: dict[str, Any]) -> dict[str, Any]:
    """The ``mcp`` field of a ``cf_agent_mcp_servers`` frame (the reference's ``MCPServersState``) from
    ``get_mcp_servers()``: each server by its name as id; its tools as ``{name, serverId}`` (the names the model
    calls them by; no schemas: the state does not carry them). No prompts or resources: they are not used."""
    servers: dict[str, Any] = {}
    tools: list[dict[str, Any]] = []
    for server_id, state in states.items():
        servers[server_id] = {
            "auth_url": None,
            "capabilities": None,
            "error": state.error,
            "instructions": None,
            "name": state.name,
            "server_url": state.target,
            "state": _MCP_STATE_NAMES.get(state.state, state.state),
        }
        tools.extend({"name": name, "serverId": server_id} for name in state.tools)
    return {"prompts": [], "resources": [], "servers": servers, "tools": tools}


MESSAGE_UPDATED = "cf_agent_message_updated"
TOOL_RESULT = "cf_agent_tool_result"
TOOL_APPROVAL = "cf_agent_tool_approval"
STREAM_RESUME_REQUEST = "cf_agent_stream_resume_request"
STREAM_RESUME_ACK = "cf_agent_stream_resume_ack"
STREAM_RESUMING = "cf_agent_stream_resuming"
STREAM_RESUME_NONE = "cf_agent_stream_resume_none"
STREAM_PENDING = "cf_agent_stream_pending"
AGENT_TOOL_EVENT = "agent-tool-event"
CHAT_RECOVERING = "cf_agent_chat_recovering"
SESSION = "cf_agent_session"
ERROR = "think_actors_error"  # not a protocol frame: stock clients ignore it, people and tests read it

KNOWN = frozenset(
    {
        CHAT_REQUEST,
        CHAT_REQUEST_CANCEL,
        CHAT_CLEAR,
        CHAT_MESSAGES,
        TOOL_RESULT,
        TOOL_APPROVAL,
        STREAM_RESUME_REQUEST,
        STREAM_RESUME_ACK,
    }
)


class FrameError(ValueError):
    """A frame the gateway cannot act on; the message is sent back in a ``think_actors_error`` frame."""


class RequestError(FrameError):
    """A chat request refused before anything of it is stored. It has a usable id, so the answer is what the
    reference sends for a request whose turn cannot run: ``{id, body: <why>, done: true, error: true}``, which
    ends the sender's stream with that error."""

    def __init__(self, request_id: str, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id


def parse_frame(text: str | bytes) -> dict[str, Any]:
    """The frame as a dict with a str ``type``; one holding a lone surrogate, NaN or Infinity is refused whole."""
    try:
        frame = json.loads(text, parse_constant=_not_json)
    except ValueError as err:
        raise FrameError(f'a frame must be JSON text ({err}); e.g. {{"type": "{CHAT_REQUEST}", ...}}') from None
    if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
        raise FrameError('a frame must be a JSON object with a string "type"')
    if _lone_surrogate(text, frame):
        raise FrameError(_SURROGATE)
    return frame


def chat_request(frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The request id and the parsed ``init.body`` of a chat request (``init.method`` must be POST)."""
    request_id = frame.get("id")
    if not isinstance(request_id, str) or not request_id:
        raise FrameError(f"{CHAT_REQUEST} needs a string id")
    init = frame.get("init")
    if not isinstance(init, dict) or init.get("method", "POST") != "POST":
        raise FrameError(f'{CHAT_REQUEST} needs init: {{"method": "POST", "body": "<JSON text>"}}')
    raw = init.get("body")
    try:
        body = json.loads(raw, parse_constant=_not_json) if isinstance(raw, str) else raw
    except ValueError as err:
        raise RequestError(request_id, f"{CHAT_REQUEST} init.body is not JSON: {err}") from None
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise RequestError(request_id, f"{CHAT_REQUEST} init.body needs a messages array")
    if isinstance(raw, str) and _lone_surrogate(raw, body):
        raise RequestError(request_id, f"{CHAT_REQUEST} init.body: {_SURROGATE}")
    client_tools(body.get("clientTools"), request_id)
    return request_id, body


def client_tools(value: Any, request_id: str | None = None) -> list[dict[str, Any]] | None:
    """A request's (or a tool result's) ``clientTools``: None when absent or null, else checked whole, so a bad
    schema is refused with the frame instead of failing the turn it would have started."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(map(_tool_schema, value)):
        text = (
            "clientTools must be a list of {name, description?, parameters?} (name a non-empty string, "
            f"description a string, parameters a JSON schema object); got {dumps(value)[:200]}"
        )
        raise FrameError(text) if request_id is None else RequestError(request_id, text)
    return list(value)


def _not_json(constant: str) -> Any:
    """``json.loads`` reads ``NaN``, ``Infinity`` and ``-Infinity`` as numbers; JSON has none (``JSON.parse``
    refuses them), and a frame holding one would be stored, or echoed to a browser as text it cannot parse."""
    raise ValueError(f"{constant} is not a JSON number (JSON has no NaN or Infinity)")


# JSON text may escape half a surrogate pair (\ud800) where no character can stand; Python keeps it in the str,
# and storing or encoding it later fails. Valid pairs were joined by json.loads, so any surrogate left is lone.
_SURROGATE = (
    "a frame must be valid Unicode: it holds a lone surrogate escape (\\ud800-\\udfff without its pair); "
    "send whole characters"
)
_SURROGATES = re.compile("[\ud800-\udfff]")


def _lone_surrogate(text: str | bytes, value: Any) -> bool:
    """Whether any string (key or value) in the parsed ``value`` of JSON ``text`` holds a lone surrogate."""
    if "\\u" not in (text if isinstance(text, str) else text.decode("utf-8", "replace")):
        return False  # no escapes: the text came in as UTF-8, which cannot hold one
    stack = [value]
    while stack:  # a loop, not recursion: the nesting is the client's
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATES.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _tool_schema(tool: Any) -> bool:
    return (
        isinstance(tool, dict)
        and isinstance(tool.get("name"), str)
        and bool(tool["name"])
        and isinstance(tool.get("description"), str | None)
        and isinstance(tool.get("parameters"), dict | None)
    )


def dumps(frame: Any) -> str:
    """A frame as compact JSON text, as the reference's ``JSON.stringify`` writes it: a float that is NaN or
    infinite (a tool's output may hold one) becomes null, so a frame is always JSON a browser can parse."""
    try:
        return json.dumps(frame, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:  # rare: the walk below runs only for a frame that holds one
        return json.dumps(_finite(frame), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None, as ``JSON.stringify`` writes them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def origin_message_ids(messages: list[Any]) -> list[str] | None:
    """The ids of the trailing run of user messages of a request (reference: terminal frames echo them)."""
    ids: list[str] = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            break
        if isinstance(message.get("id"), str) and message["id"]:
            ids.insert(0, message["id"])
    return ids or None


def response(request_id: str, body: str, *, done: bool, error: bool = False, **flags: bool) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": CHAT_RESPONSE, "id": request_id, "body": body, "done": done}
    if error:
        frame["error"] = True
    frame.update((k, v) for k, v in flags.items() if v)
    return frame


def response_frame(request_id: str, body: str, *, done: bool, error: bool = False, **flags: bool) -> str:
    return dumps(response(request_id, body, done=done, error=error, **flags))


def skipped_frame(request_id: str, body: dict[str, Any]) -> str:
    """The terminal frame of a request that did not start a turn of its own (dropped, superseded, steered)."""
    frame = response(request_id, "", done=True)
    frame["outcome"] = "skipped"
    if origin := origin_message_ids(body["messages"]):
        frame["messageIds"] = origin
    return dumps(frame)


def tool_call_id(frame: dict[str, Any]) -> str:
    value = frame.get("toolCallId")
    if not isinstance(value, str) or not value:
        raise FrameError(f"{frame['type']} needs a string toolCallId")
    return value
