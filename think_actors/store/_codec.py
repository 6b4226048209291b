"""Encoding shared by the stores, so MemoryStore holds exactly the values SQLiteStore would write.

Messages and every free-form value (metadata, data, input, output, chunks) are msgpack. A record becomes a row of
column values through one table of encoders per record type; the encoders check what SQLite's column types and
NOT NULL constraints would, so a record that cannot be stored fails in both stores, before anything is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgpack
from pydantic import ValidationError

from ..errors import ConfigurationError, StoreError
from ..messages import UIMessage
from .records import EffectRecord, SubmissionRecord, TurnRecord

__all__ = [
    "EFFECT_COLUMNS",
    "SUBMISSION_COLUMNS",
    "TURN_COLUMNS",
    "check_limit",
    "chunk_batch",
    "chunk_log",
    "decode_message",
    "effect_finish",
    "effect_record",
    "effect_row",
    "encode_message",
    "existing_submission",
    "pack",
    "quoted_names",
    "status_set",
    "submission_fields",
    "submission_record",
    "submission_row",
    "turn_record",
    "turn_row",
    "unpack",
]


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


def chunk_batch(chunks: Sequence[dict[str, Any]]) -> bytes:
    """One row of a chunk log (SQLite and PostgreSQL): a write's batch of wire-form chunks, as a msgpack list."""
    return pack(list(chunks))


def chunk_log(bodies: Iterable[bytes]) -> list[dict[str, Any]]:
    """A request's chunk log from its rows in order. A row of one chunk (SQLite's schema 3 and older wrote a row
    per chunk) reads as that chunk."""
    chunks: list[dict[str, Any]] = []
    for body in bodies:
        value = unpack(body)
        if isinstance(value, list):
            chunks.extend(value)
        else:
            chunks.append(value)
    return chunks


def _dump(message: UIMessage) -> dict[str, Any]:
    # Python field names, so a change of wire alias never strands stored history.
    return message.model_dump(mode="json", by_alias=False, exclude_none=True)


def _validate(data: Any) -> UIMessage:
    try:
        return UIMessage.model_validate(data)
    except ValidationError as exc:
        raise StoreError(f"stored message does not match UIMessage: {exc}") from exc


def encode_message(message: UIMessage) -> bytes:
    """Pack a message under its Python field names."""
    return pack(_dump(message))


def decode_message(body: bytes) -> UIMessage:
    return _validate(unpack(body))


# -- records as rows -----------------------------------------------------------------------------------------------
# Column names are the record's field names. Each encoder takes (value, field name) and returns the stored value.

_Encoder = Callable[[Any, str], Any]


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise StoreError(f"cannot store {name}={value!r}: expected a str")
    return value


def _opt_text(value: Any, name: str) -> str | None:
    return None if value is None else _text(value, name)


def _real(value: Any, name: str) -> float:
    # float() as SQLite's REAL affinity would, so both stores hand back 5.0 for 5; bools are refused, not 1.0.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StoreError(f"cannot store {name}={value!r}: expected a number")
    return float(value)


def _opt_real(value: Any, name: str) -> float | None:
    return None if value is None else _real(value, name)


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StoreError(f"cannot store {name}={value!r}: expected an int")
    return value


def _flag(value: Any, name: str) -> int:
    if not isinstance(value, bool):
        raise StoreError(f"cannot store {name}={value!r}: expected a bool")
    return int(value)


def _packed(value: Any, name: str) -> bytes:
    return pack(value)


def _messages(value: Any, name: str) -> bytes:
    if not isinstance(value, Sequence) or not all(isinstance(m, UIMessage) for m in value):
        raise StoreError(f"cannot store {name}: expected a list of UIMessage")
    return pack([_dump(m) for m in value])


def _strings(value: Any, name: str) -> bytes:
    if not isinstance(value, Sequence) or isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise StoreError(f"cannot store {name}={value!r}: expected a list of str")
    return pack(list(value))


def _decode_messages(body: bytes) -> list[UIMessage]:
    return [_validate(item) for item in unpack(body)]


def _encode(encoders: Mapping[str, _Encoder], record: Any) -> dict[str, Any]:
    return {name: encode(getattr(record, name), name) for name, encode in encoders.items()}


_SUBMISSION: dict[str, _Encoder] = {
    "submission_id": _text,
    "request_id": _text,
    "status": _text,
    "messages": _messages,
    "created_at": _real,
    "idempotency_key": _opt_text,
    "metadata": _packed,
    "error": _opt_text,
    "started_at": _opt_real,
    "completed_at": _opt_real,
    "messages_applied_at": _opt_real,
    "traceparent": _opt_text,
}
SUBMISSION_COLUMNS: tuple[str, ...] = ("seq", *_SUBMISSION)
"""Every stored column of a submission; ``seq`` is assigned by the store."""

_TURN: dict[str, _Encoder] = {
    "request_id": _text,
    "trigger": _text,
    "status": _text,
    "started_at": _real,
    "updated_at": _real,
    "continuation": _flag,
    "input_ids": _strings,
    "message_id": _opt_text,
    "attempts": _int,
    "progress": _int,
    "submission_id": _opt_text,
    "data": _packed,
}
TURN_COLUMNS: tuple[str, ...] = tuple(_TURN)

_EFFECT: dict[str, _Encoder] = {
    "key": _text,
    "request_id": _text,
    "tool_call_id": _text,
    "tool_name": _text,
    "status": _text,
    "started_at": _real,
    "input": _packed,
    "output": _packed,
    "error": _opt_text,
    "finished_at": _opt_real,
}
EFFECT_COLUMNS: tuple[str, ...] = tuple(_EFFECT)


def submission_row(record: SubmissionRecord) -> dict[str, Any]:
    """The columns of a new submission, ``seq`` left out; raises ``StoreError`` for a value it cannot store."""
    return _encode(_SUBMISSION, record)


def submission_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Encode ``update_submission``'s fields as columns, refusing unknown fields and ``seq``."""
    for name in fields:
        # submission_id cannot reach here: it is update_submission's first parameter.
        if name == "seq":
            raise ConfigurationError("update_submission cannot set 'seq': the store assigns it")
        if name not in _SUBMISSION:
            raise ConfigurationError(f"update_submission cannot set {name!r}: SubmissionRecord has no such field")
    return {name: _SUBMISSION[name](value, name) for name, value in fields.items()}


def submission_record(row: Mapping[str, Any]) -> SubmissionRecord:
    """A fresh record from a row holding every column of ``SUBMISSION_COLUMNS``."""
    values = dict(row)
    values["messages"] = _decode_messages(values["messages"])
    values["metadata"] = unpack(values["metadata"])
    return SubmissionRecord(**values)


def existing_submission(
    record: SubmissionRecord,
    by_id: Mapping[str, Any] | None,
    by_key: Mapping[str, Any] | None,
    *,
    id_given: bool = True,
) -> Mapping[str, Any] | None:
    """The row that ``record`` repeats (None for a new submission), given the rows found by its id and by its key.

    Raises ``ConfigurationError`` when the caller gave an id and the key's row has another, or the id's row has
    another non-null key. A generated id (``id_given=False``) just yields to the key's row.
    """
    sid, key = record.submission_id, record.idempotency_key
    if by_key is not None and by_key["submission_id"] != sid and id_given:
        raise ConfigurationError(
            "submission_id and idempotency_key refer to different submissions: "
            f"key {key!r} belongs to submission {by_key['submission_id']!r}, not {sid!r}"
        )
    if by_id is not None and key is not None and by_id["idempotency_key"] not in (None, key):
        raise ConfigurationError(
            "submission_id and idempotency_key refer to different submissions: "
            f"submission {sid!r} has key {by_id['idempotency_key']!r}, not {key!r}"
        )
    return by_id if by_id is not None else by_key


def quoted_names(columns: Sequence[str]) -> str:
    """Column names for SQL, quoted: "trigger" and "key" are SQL keywords. They are constants, never user input."""
    return ", ".join(f'"{c}"' for c in columns)


def check_limit(limit: int | None) -> None:
    """Refuse a negative ``limit``: SQLite reads it as "no limit", a list slice as "all but the last"."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ConfigurationError(f"limit must be None or an int >= 0, got {limit!r}")


def status_set(statuses: Sequence[str] | None) -> tuple[str, ...] | None:
    """The statuses to match as a tuple; a bare str is one status (not its letters), None matches every status."""
    if statuses is None:
        return None
    return (statuses,) if isinstance(statuses, str) else tuple(statuses)


def turn_row(record: TurnRecord) -> dict[str, Any]:
    """The columns of a turn record; raises ``StoreError`` for a value it cannot store."""
    return _encode(_TURN, record)


def turn_record(row: Mapping[str, Any]) -> TurnRecord:
    values = dict(row)
    values["continuation"] = bool(values["continuation"])
    values["input_ids"] = unpack(values["input_ids"])
    values["data"] = unpack(values["data"])
    return TurnRecord(**values)


def effect_row(record: EffectRecord) -> dict[str, Any]:
    """The columns of an effect; raises ``StoreError`` for a value it cannot store."""
    return _encode(_EFFECT, record)


def effect_finish(output: Any, error: str | None) -> dict[str, Any]:
    """The columns ``finish_effect`` sets, ``finished_at`` aside."""
    return {"status": "finished", "output": pack(output), "error": _opt_text(error, "error")}


def effect_record(row: Mapping[str, Any]) -> EffectRecord:
    values = dict(row)
    values["input"] = unpack(values["input"])
    values["output"] = unpack(values["output"])
    return EffectRecord(**values)
