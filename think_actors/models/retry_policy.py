"""When a model request is retried and how long to wait first: the openai SDK's policy, in one place.

``LiteLLMClient`` gets this behaviour from the openai SDK inside litellm (measured: ``max_retries=n`` makes
n + 1 attempts, 0.5 s doubling to at most 8 s with up to 25 % jitter, a server's ``Retry-After`` of up to two
minutes obeyed exactly). ``OpenAIWireClient`` applies the same rules itself, and both read a provider's
``Retry-After`` with ``retry_after_s`` to report it on the error.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping

__all__ = ["DEFAULT_MAX_RETRIES", "retry_after_s", "retry_delay_s", "should_retry_status"]

DEFAULT_MAX_RETRIES = 2  # the openai SDK's default, which LiteLLMClient gets when a request sets none
_INITIAL_DELAY_S = 0.5
_MAX_DELAY_S = 8.0
_MAX_RETRY_AFTER_S = 120.0  # a longer server-directed wait is not waited out: the request fails instead


def retry_after_s(headers: Mapping[str, str] | None) -> float | None:
    """The wait a response asks for, in seconds: ``retry-after-ms``, else ``Retry-After`` (seconds or a date).

    None when neither header is there or parses. ``headers`` must look names up case-insensitively (aiohttp's
    and httpx's headers do).
    """
    if not headers:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if math.isfinite(delay):
            return delay / divisor
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return float(email.utils.mktime_tz(parsed) - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def should_retry_status(status: int, headers: Mapping[str, str] | None) -> bool:
    """Whether an error status is worth another attempt: 408, 409, 429 and 5xx, unless the server says otherwise.

    A ``Retry-After`` beyond two minutes means no retry; ``x-should-retry: true|false`` overrides the status.
    """
    wait = retry_after_s(headers)
    if wait is not None and wait > _MAX_RETRY_AFTER_S:
        return False
    verdict = headers.get("x-should-retry") if headers else None
    if verdict == "true":
        return True
    if verdict == "false":
        return False
    return status in (408, 409, 429) or status >= 500


def retry_delay_s(retries_taken: int, retry_after: float | None = None) -> float:
    """How long to wait before retry number ``retries_taken + 1``.

    The server's ``Retry-After`` when it asked for 0-120 s, else 0.5 s doubling per retry up to 8 s, less a random
    0-25 % (so clients that failed together do not retry together).
    """
    if retry_after is not None and 0 < retry_after <= _MAX_RETRY_AFTER_S:
        return retry_after
    delay = min(_INITIAL_DELAY_S * 2.0 ** min(retries_taken, 1000), _MAX_DELAY_S)
    return delay * (1 - 0.25 * random.random())
