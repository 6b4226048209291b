"""msgpack encoding shared by the stores, so MemoryStore holds exactly the bytes SQLiteStore would write."""

from __future__ import annotations

from typing import Any

import msgpack
from pydantic import ValidationError

from ..errors import StoreError
from ..messages import UIMessage

__all__ = ["decode_message", "encode_message", "pack", "unpack"]


def pack(value: Any) -> bytes:
    """Pack a value, raising ``StoreError`` (not msgpack's TypeError) when it cannot be stored."""
    try:
        data: bytes = msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as exc:
        raise StoreError(f"cannot encode {type(value).__name__} for the store: {exc}") from exc
    return data


def unpack(data: bytes) -> Any:
    """Unpack a stored value; non-string map keys are allowed because ``set_kv`` accepts them."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (TypeError, ValueError) as exc:
        raise StoreError(f"corrupt stored value: {exc}") from exc


def encode_message(message: UIMessage) -> bytes:
    """Pack a message under its Python field names, so a change of wire alias never strands stored history."""
    return pack(message.model_dump(mode="json", by_alias=False, exclude_none=True))


def decode_message(body: bytes) -> UIMessage:
    try:
        return UIMessage.model_validate(unpack(body))
    except ValidationError as exc:
        raise StoreError(f"stored message does not match UIMessage: {exc}") from exc
