"""``RedactPII``: emails, phone numbers, card numbers and IBANs out of what the model reads and what it writes.

Input: ``before_turn`` returns the turn's messages with the user's text redacted, so the model never sees it (the
stored transcript keeps what the user sent). Output: ``before_turn`` returns a ``transform`` over the model's stream,
so text and reasoning are redacted before ``on_chunk``, the caller's stream and the stored reply see them.

A streamed value may arrive split across deltas (``alice@exa`` + ``mple.com``), so the transform holds back the
last ``holdback`` characters of text, and never cuts inside a run of non-space characters or a match, until more
text or the end of the text shows where the value ends: clients see the reply that many characters late. A match
longer than ``holdback`` with spaces inside it could be cut; the shipped kinds are at most 42 characters.

Matches are checked, not only matched: card numbers by the Luhn checksum (13-19 digits), IBANs by their mod-97
check, phone numbers by their digit count (7-15, E.164) and not being a date or an IP address.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigurationError
from ..hooks import TurnConfig, TurnContext
from ..models import ReasoningDelta, TextDelta
from .base import Extension, FailurePolicy

__all__ = ["PII_KINDS", "RedactPII"]

_SEPARATED = r"[ .\-]"
PII_KINDS: dict[str, str] = {
    "credit_card": r"(?<![\w.+-])\d(?:[ \-]?\d){12,18}(?![\w-])",
    "iban": r"(?<![\w])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?!\w)",
    "email": r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,24}"
    r"(?![\w-])",
    "phone": r"(?<![\w+@])(?:(?:\+|00)\d{1,3}[ .\-]?)?(?:\(\d{1,5}\)[ .\-]?)?\d{1,5}(?:[ .\-]\d{1,5}){1,5}(?![\w@])"
    r"|(?<![\w+@])\+\d{7,15}(?!\w)",
}
"""The shipped kinds, checked in this order (an earlier kind's match wins where two overlap)."""

_DATE = re.compile(r"\d{4}[./-]\d{1,2}[./-]\d{1,2}|\d{1,2}[./-]\d{1,2}[./-]\d{2,4}")
_IP = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_SPACE = re.compile(r"\s")
_LOOKBEHIND = 64  # emitted text kept as the context of the next match (a pattern's look-behind)


def luhn_valid(digits: str) -> bool:
    """The Luhn checksum of a string of digits (card numbers)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def iban_valid(text: str) -> bool:
    """The ISO 13616 mod-97 check of an IBAN (spaces ignored)."""
    iban = text.replace(" ", "")
    if not 15 <= len(iban) <= 34:
        return False
    moved = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in moved)) % 97 == 1


_CARD_GROUPS = {(4, 4, 4, 4), (4, 4, 4, 4, 3), (4, 4, 4, 1), (4, 6, 5), (4, 6, 4)}  # how cards are printed


def _card(text: str) -> bool:
    groups = tuple(len(g) for g in re.findall(r"\d+", text))
    digits = re.sub(r"\D", "", text)
    return (len(groups) == 1 or groups in _CARD_GROUPS) and 13 <= len(digits) <= 19 and luhn_valid(digits)


def _phone(text: str) -> bool:
    digits = sum(ch.isdigit() for ch in text)
    single = sum(len(group) == 1 for group in re.findall(r"\d+", text))
    return 7 <= digits <= 15 and single <= 1 and not _DATE.fullmatch(text) and not _IP.fullmatch(text)


_CHECKS: dict[str, Callable[[str], bool]] = {"credit_card": _card, "iban": iban_valid, "phone": _phone}


@dataclass(frozen=True, slots=True)
class _Kind:
    name: str
    pattern: re.Pattern[str]
    check: Callable[[str], bool] | None


class RedactPII(Extension):
    """Redact personal data in the user's input (before the model sees it) and in the model's output stream
    (before clients, ``on_chunk`` and the store see it).

    Args:
        kinds: Which shipped kinds to redact: ``email``, ``phone``, ``credit_card``, ``iban`` (``PII_KINDS``).
        patterns: More kinds, by name: a regex (str or compiled); they are checked after the shipped ones.
        replacement: A template (``{kind}`` is the kind's name) or a function ``(kind, text) -> str``.
        input_roles: Whose messages are redacted before the model sees them (default: the user's); () for none.
        output: Whether the model's text and reasoning are redacted as they stream.
        holdback: Characters of streamed text held back while a value may still be arriving.
        failure: ``"closed"`` by default: a redactor that fails must not let text through unredacted.
    """

    def __init__(
        self,
        *,
        kinds: Sequence[str] = ("credit_card", "iban", "email", "phone"),
        patterns: Mapping[str, str | re.Pattern[str]] | None = None,
        replacement: str | Callable[[str, str], str] = "[{kind}]",
        input_roles: Sequence[str] = ("user",),
        output: bool = True,
        holdback: int = 64,
        name: str = "redact-pii",
        timeout_s: float | None = None,
        failure: FailurePolicy = "closed",
    ) -> None:
        super().__init__(name=name, timeout_s=timeout_s, failure=failure)
        unknown = [k for k in kinds if k not in PII_KINDS]
        if unknown:
            raise ConfigurationError(f"RedactPII: unknown kinds {unknown}; the shipped ones are {sorted(PII_KINDS)}")
        self.kinds = [_Kind(k, re.compile(PII_KINDS[k]), _CHECKS.get(k)) for k in kinds]
        for kind, pattern in (patterns or {}).items():
            try:
                compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
            except re.error as err:
                raise ConfigurationError(f"RedactPII: the pattern of {kind!r} is not a regex: {err}") from None
            self.kinds.append(_Kind(kind, compiled, None))
        if not isinstance(replacement, str) and not callable(replacement):
            raise ConfigurationError("RedactPII: replacement is a template str or a function (kind, text) -> str")
        if isinstance(holdback, bool) or not isinstance(holdback, int) or holdback < 1:
            raise ConfigurationError(f"RedactPII: holdback must be a positive int, got {holdback!r}")
        self.replacement = replacement
        self.input_roles = tuple(input_roles)
        self.output = output
        self.holdback = holdback

    # ------------------------------------------------------------------ text

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """The ``(start, end, kind)`` of every value to redact in ``text``, in order, none overlapping."""
        spans: list[tuple[int, int, str]] = []
        for kind in self.kinds:
            for match in kind.pattern.finditer(text):
                span = _checked(kind, text, match.start(), match.end())
                if span is not None and not any(s < span[1] and span[0] < e for s, e, _ in spans):
                    spans.append((*span, kind.name))
        return sorted(spans)

    def redact(self, text: str) -> str:
        """``text`` with every value ``find`` finds replaced."""
        return self._apply(text, self.find(text))

    def _apply(self, text: str, spans: Iterable[tuple[int, int, str]]) -> str:
        out, last = [], 0
        for start, end, kind in spans:
            out.append(text[last:start])
            value = text[start:end]
            out.append(
                self.replacement(kind, value) if callable(self.replacement) else self.replacement.format(kind=kind)
            )
            last = end
        out.append(text[last:])
        return "".join(out)

    # ------------------------------------------------------------------ the hook

    async def before_turn(self, agent: Any, ctx: TurnContext) -> TurnConfig | None:
        messages = [self._message(m) for m in ctx.messages] if self.input_roles else ctx.messages
        changed = any(a is not b for a, b in zip(messages, ctx.messages, strict=True))
        if not changed and not self.output:
            return None
        return TurnConfig(messages=messages if changed else None, transform=self.transform if self.output else None)

    def _message(self, message: dict[str, Any]) -> dict[str, Any]:
        if message.get("role") not in self.input_roles:
            return message
        content = message.get("content")
        if isinstance(content, str):
            redacted = self.redact(content)
            return message if redacted == content else {**message, "content": redacted}
        if isinstance(content, list):
            parts = [
                {**p, "text": self.redact(p["text"])}
                if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                else p
                for p in content
            ]
            if any(a != b for a, b in zip(parts, content, strict=True)):
                return {**message, "content": parts}
        return message

    async def transform(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """The model's stream with text and reasoning redacted (``TurnConfig.transform``)."""
        text, reasoning = _Held(self, TextDelta), _Held(self, ReasoningDelta)
        async for event in events:
            if isinstance(event, TextDelta):
                for held in reasoning.flush():
                    yield held
                for ready in text.feed(event.text):
                    yield ready
            elif isinstance(event, ReasoningDelta):
                for held in text.flush():
                    yield held
                for ready in reasoning.feed(event.text):
                    yield ready
            else:  # a tool call, the finish ...: the text before it is complete
                for held in (*text.flush(), *reasoning.flush()):
                    yield held
                yield event
        for held in (*text.flush(), *reasoning.flush()):
            yield held


def _checked(kind: _Kind, text: str, start: int, end: int) -> tuple[int, int] | None:
    """The match if it passes the kind's check (for an IBAN, its longest passing prefix ending at a space)."""
    if kind.check is None:
        return start, end
    if kind.name != "iban":  # an IBAN's pattern may take the next capitalised word along; the others end exactly
        return (start, end) if kind.check(text[start:end]) else None
    while end > start:
        value = text[start:end]
        if kind.check(value) and kind.pattern.fullmatch(value):
            return start, end
        cut = max(value.rfind(" "), value.rfind("-"), value.rfind("."))
        if cut <= 0:
            return None
        end = start + cut
    return None


class _Held:
    """Streamed text of one kind (text or reasoning) not yet emitted, and the emitted text just before it."""

    def __init__(self, redactor: RedactPII, event: type) -> None:
        self.redactor = redactor
        self.event = event
        self.pending = ""
        self.before = ""

    def feed(self, delta: str) -> list[Any]:
        self.pending += delta
        if len(self.pending) <= self.redactor.holdback:
            return []
        return self._emit(final=False)

    def flush(self) -> list[Any]:
        return self._emit(final=True) if self.pending else []

    def _emit(self, *, final: bool) -> list[Any]:
        text = self.pending
        spans = [
            (max(s - len(self.before), 0), e - len(self.before), k)
            for s, e, k in self.redactor.find(self.before + text)
            if e > len(self.before)
        ]
        cut = len(text)
        if not final:
            cut -= self.redactor.holdback
            # Never inside a word (an email has no space), unless the word outgrew four holdbacks.
            word = cut
            while word > 0 and not _SPACE.match(text[word - 1]) and not _SPACE.match(text[word]):
                word -= 1
            if word > 0 or len(text) <= 4 * self.redactor.holdback:
                cut = word
            for start, end, _ in spans:
                if start < cut < end:
                    cut = start
            if cut <= 0:
                return []
        ready = self.redactor._apply(text[:cut], [s for s in spans if s[1] <= cut])
        self.before = (self.before + text[:cut])[-_LOOKBEHIND:]
        self.pending = text[cut:]
        return [self.event(ready)] if ready else []
