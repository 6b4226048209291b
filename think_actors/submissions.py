"""What ``submit_messages`` and the submission APIs return: ``Submission``, a snapshot of one ledger row."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .identity import Principal
from .messages import UIMessage
from .store.records import SubmissionRecord
from .turn_metadata import latest_channel, latest_principal

__all__ = ["Submission"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Submission:
    """One durable submission (reference §1.7).

    ``status`` is ``pending`` (accepted, waiting), ``running`` (its turn is queued or running), or a final
    ``completed`` / ``aborted`` / ``skipped`` / ``error``. ``accepted`` is True only in the answer to the
    ``submit_messages`` call that created the row; a retry with the same id or idempotency key gets the existing
    row with ``accepted=False``. ``request_id`` is the id of the turn that runs it (the submission id).
    ``output``: the structured output of a completed submission made with ``submit_messages(output=...)``, as
    ``TurnResult.output`` has it (an instance of the model class, or the parsed JSON); ``inspect_submission`` and
    ``wait_for_submission`` fill it in, listings and ``on_submission_status`` leave it None.
    ``message``: the reply of a completed submission, as the user saw it: the assistant messages its turn stored
    after its input, one message (a turn a crash interrupted and recovery continued stored two: the partial reply,
    then the continuation; here their parts are joined, as web clients join them). ``inspect_submission`` and
    ``wait_for_submission`` fill it in while the transcript holds it (not after ``clear()``).
    """

    submission_id: str
    request_id: str
    status: str
    accepted: bool = False
    idempotency_key: str | None = None
    metadata: dict[str, Any] | None = None
    error: str | None = None
    created_at: float = 0.0
    started_at: float | None = None
    completed_at: float | None = None
    message_ids: tuple[str, ...] = ()
    output: Any = None
    message: UIMessage | None = None
    principal: Principal | None = None
    channel: str | None = None

    @property
    def text(self) -> str:
        """The text of ``message`` ("" when there is none)."""
        return self.message.text if self.message is not None else ""

    @property
    def done(self) -> bool:
        """Whether the status is final."""
        return self.status in ("completed", "aborted", "skipped", "error")

    @classmethod
    def of(cls, record: SubmissionRecord, *, accepted: bool = False) -> Submission:
        return cls(
            submission_id=record.submission_id,
            request_id=record.request_id,
            status=record.status,
            accepted=accepted,
            idempotency_key=record.idempotency_key,
            metadata=record.metadata,
            error=record.error,
            created_at=record.created_at,
            started_at=record.started_at,
            completed_at=record.completed_at,
            message_ids=tuple(m.id for m in record.messages),
            principal=latest_principal(record.messages),
            channel=latest_channel(record.messages),
        )
