"""Think's server-only keys on user messages: ``metadata.channel`` and ``metadata.turnMetadata``.

The server writes them when it stores a user message: the channel the turn came from, and the turn's own facts
(``chat(..., metadata={...})``) with who sent it (``{"principal": {"id": ..., "roles": [...]}}``). The gateway
drops any copy a client sends, so what is stored there is what the server said; a continuation or a recovery reads
them back from the latest user message.
"""

from __future__ import annotations

import json
from typing import Any

from .errors import ConfigurationError
from .identity import Principal
from .messages import UIMessage

__all__ = [
    "RESERVED_KEYS",
    "check_metadata",
    "latest_channel",
    "latest_principal",
    "latest_turn_metadata",
    "stamp",
    "stamp_principal",
]

RESERVED_KEYS = ("channel", "turnMetadata")


def stamp(
    message: UIMessage,
    *,
    channel: str | None = None,
    metadata: dict[str, Any] | None = None,
    principal: Principal | None = None,
) -> UIMessage:
    """A message as the server stores it. A user message gets ``metadata.channel`` when ``channel`` is given and
    ``metadata.turnMetadata`` (``metadata`` and the principal) when either is, replacing whatever the sender put
    there; any other role's copy of those keys is then dropped. With nothing given, the message is left as it is."""
    if channel is None and metadata is None and principal is None:
        return message
    own = dict(message.metadata or {})
    kept = dict(own)
    if message.role != "user":
        for key in RESERVED_KEYS:
            kept.pop(key, None)
    else:
        if channel is not None:
            kept["channel"] = channel
        if metadata is not None or principal is not None:
            facts = dict(metadata or {})
            if principal is not None:
                facts["principal"] = principal.stamp()
            kept["turnMetadata"] = facts
    if kept == own:
        return message
    return message.model_copy(update={"metadata": kept or None})


def stamp_principal(message: UIMessage, principal: Principal | None) -> UIMessage:
    """``stamp`` with the principal alone (keeping no other turn metadata of the sender's)."""
    return stamp(message, principal=principal) if principal is not None else message


def _latest_user(messages: list[UIMessage]) -> UIMessage | None:
    return next((m for m in reversed(messages) if m.role == "user"), None)


def latest_turn_metadata(messages: list[UIMessage]) -> dict[str, Any] | None:
    """The ``turnMetadata`` of the latest user message (None when it has none)."""
    latest = _latest_user(messages)
    facts = (latest.metadata or {}).get("turnMetadata") if latest is not None else None
    return dict(facts) if isinstance(facts, dict) else None


def latest_principal(messages: list[UIMessage]) -> Principal | None:
    """Who sent the latest user message, as stamped on it (None when nobody is)."""
    facts = latest_turn_metadata(messages)
    return Principal.from_stamp(facts.get("principal")) if facts is not None else None


def latest_channel(messages: list[UIMessage]) -> str | None:
    """The channel the latest user message came from, as stamped on it (None when none is)."""
    latest = _latest_user(messages)
    channel = (latest.metadata or {}).get("channel") if latest is not None else None
    return channel if isinstance(channel, str) else None


def check_metadata(value: Any) -> dict[str, Any] | None:
    """``value`` checked as a ``metadata=`` argument: None, or a dict of JSON values without ``principal``."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(f"metadata must be a dict with str keys, not {type(value).__name__}")
    if "principal" in value:
        raise ConfigurationError("metadata['principal'] is the server's: pass principal=ta.Principal(...) instead")
    try:
        json.dumps(value)
    except (TypeError, ValueError) as err:
        raise ConfigurationError(f"metadata must hold JSON values (it is stored with the message): {err}") from None
    return dict(value)
