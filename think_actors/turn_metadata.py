"""Think's server-only turn metadata on user messages: ``metadata.turnMetadata``, which a client can never set.

The server writes it when it stores a user message (``chat(..., principal=...)``, the gateway, a submission):
today it holds who sent the message (``{"principal": {"id": ..., "roles": [...]}}``). The gateway drops any copy a
client sends, so what is stored there is what the server said.
"""

from __future__ import annotations

from .identity import Principal
from .messages import UIMessage

__all__ = ["latest_principal", "stamp_principal"]


def stamp_principal(message: UIMessage, principal: Principal | None) -> UIMessage:
    """A user message as the server stores it: ``metadata.turnMetadata`` (Think's server-only key) holds who sent
    it, replacing whatever the sender put there; any other role's copy of the key is dropped."""
    metadata = {k: v for k, v in (message.metadata or {}).items() if k != "turnMetadata"}
    if principal is not None and message.role == "user":
        metadata["turnMetadata"] = {"principal": principal.stamp()}
    if metadata == (message.metadata or {}):
        return message
    return message.model_copy(update={"metadata": metadata or None})


def latest_principal(messages: list[UIMessage]) -> Principal | None:
    """Who sent the latest user message, as stamped on it (None when nobody is)."""
    for message in reversed(messages):
        if message.role == "user":
            stamped = (message.metadata or {}).get("turnMetadata")
            return Principal.from_stamp(stamped.get("principal")) if isinstance(stamped, dict) else None
    return None
