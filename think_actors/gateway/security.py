"""Who may use the gateway: the bearer token, the Origin rule, and keeping the token out of logs.

A browser lets any page it shows open a WebSocket to any address, 127.0.0.1 included, and send it the page's
``Origin``; a cross-site ``fetch`` runs on the server even when the page may not read the answer. So without a rule
any site the user visits could drive and read the agents of a gateway on their machine. The rules, in order:

1. With a token, every request carries it (``Authorization: Bearer <token>`` or ``?token=``), compared in constant
   time as bytes, so a header of non-UTF-8 bytes is a wrong token (401), never a server error.
2. A request with an ``Origin`` comes from a page: it is served only when that origin is the gateway's own
   (scheme, host and port of the ``Host`` it was sent to, so the chat page at ``/`` works) or is listed
   (``--origin``).
3. A request without one is a program's (Node, Python, curl), unless a browser marks it as another site's
   (``Sec-Fetch-Site``): a ``no-cors`` GET (an ``<img>``, ``fetch`` with ``mode: "no-cors"``) sends no ``Origin``
   (seen with chromium). Of those only a top-level navigation is served: a link to the gateway, not a frame of it.
4. Without a token, the ``Host`` a request names must be a loopback name (or the host of a listed origin). A page
   that re-points its own domain at 127.0.0.1 (DNS rebinding) is same-origin with itself and its fetches send no
   ``Origin``; only the ``Host`` header, which the browser writes, still names the page's domain.

Not covered: a token in a page's URL is visible to whoever sees the URL (the history, a shoulder); a deployment
behind a TLS proxy sees ``http`` and its own Host, so its public origin must be listed with ``--origin``.

The token is redacted from what aiohttp logs (the access log's request line and headers, the traceback of a request
it could not parse) and from the gateway's own records, by a filter on those loggers (``redact_logs``).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
from collections.abc import Iterable
from urllib.parse import unquote_plus

from aiohttp import web
from yarl import URL

from ..errors import ConfigurationError

__all__ = ["OriginPolicy", "RedactTokens", "redact", "redact_logs", "token_matches"]

_Origin = tuple[str, str, int]  # scheme, host (lower case), port (the scheme's default when the origin has none)


def token_sent(request: web.Request) -> bool:
    """Whether the request carries a token at all (a bearer header or ``?token=``), right or wrong."""
    header = request.headers.get("Authorization", "")
    return header[:7].lower() == "bearer " or "token" in request.query


def bearer_challenge(request: web.Request) -> str:
    """The ``WWW-Authenticate`` value of a 401 (RFC 6750 §3): ``invalid_token`` when a token was sent."""
    return 'Bearer error="invalid_token"' if token_sent(request) else "Bearer"


def token_matches(request: web.Request, token: str) -> bool:
    """Whether the request carries ``token``: the bearer header if there is one, else ``?token=``."""
    given = request.query.get("token", "")
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        given = header[7:]
    # aiohttp decodes header bytes that are not UTF-8 as surrogates: encoded back, they are the bytes sent.
    try:
        sent = given.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no byte string could have sent
        return False
    return hmac.compare_digest(sent, token.encode("utf-8", "surrogateescape"))


def _origin(value: str) -> _Origin | None:
    """``scheme://host[:port]`` as a comparable triple, or None for anything else (``null``, a path, bad bytes)."""
    try:
        url = URL(value)
        host, port = url.host, url.port
    except (ValueError, UnicodeError):
        return None
    if url.scheme not in ("http", "https") or not host or port is None:
        return None
    if url.raw_path not in ("", "/") or url.raw_query_string or url.raw_fragment or url.raw_user is not None:
        return None
    return url.scheme, host.lower(), port


def _own_origin(request: web.Request) -> _Origin | None:
    """The origin of the page this gateway served: the request's scheme and the ``Host`` it was sent to."""
    host = request.headers.get("Host")
    return None if host is None else _origin(f"{request.scheme}://{host}")


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class OriginPolicy:
    """Rules 2 to 4: which pages may use the gateway, and which ``Host`` a gateway without a token answers."""

    def __init__(self, allowed: Iterable[str] | None = None):
        self.allowed: frozenset[_Origin] = frozenset(self._parse(value) for value in allowed or ())
        self._hosts = frozenset(host for _, host, _ in self.allowed)

    @staticmethod
    def _parse(value: str) -> _Origin:
        parsed = _origin(value.rstrip("/")) if isinstance(value, str) else None
        if parsed is None:
            raise ConfigurationError(
                f"--origin {value!r} is not an origin: give scheme://host[:port], e.g. http://localhost:5173"
            )
        return parsed

    def refusal(self, request: web.Request, *, token_required: bool) -> str | None:
        """Why the request may not be served (the reason says how to allow it), or None to serve it."""
        origin = request.headers.get("Origin")
        if origin is not None:
            parsed = _origin(origin)
            if parsed is None or (parsed != _own_origin(request) and parsed not in self.allowed):
                return (
                    f"origin {origin!r} may not use this gateway: only its own pages and the origins listed with "
                    f"--origin may (think-actors serve --origin {origin}, or Gateway(allowed_origins=[...]))"
                )
        elif request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site") and not (
            request.headers.get("Sec-Fetch-Mode") == "navigate" and request.headers.get("Sec-Fetch-Dest") == "document"
        ):
            return (
                "a page of another site may not use this gateway; a page of a site listed with --origin may, from "
                "script that sends its Origin (fetch in its default cors mode, or a WebSocket)"
            )
        host = request.headers.get("Host")
        if not token_required and host is not None:
            own = _own_origin(request)
            if own is None or not (_loopback(own[1]) or own[1] in self._hosts):
                return (
                    f"this gateway has no token, so it answers only requests sent to a loopback host (localhost, "
                    f"127.0.0.1, [::1]), not to {host!r}: serve with --token, or list the site with --origin"
                )
        return None


# ?token=... or &token=... (the key percent-decoded, as aiohttp reads it), and "Bearer <credential>".
_PARAM = re.compile(r"([?&])([^=&#\s\"']*)=([^&#\s\"']*)")
_BEARER = re.compile(r"(?i)\b(bearer\s+)[^\s\"',]+")


def _hide(match: re.Match[str]) -> str:
    return f"{match[1]}{match[2]}=***" if unquote_plus(match[2]).lower() == "token" else match[0]


def redact(text: str) -> str:
    """``text`` with every ``token`` query parameter's value, and every bearer credential, replaced by ``***``."""
    if "=" in text:
        text = _PARAM.sub(_hide, text)
    return _BEARER.sub(r"\1***", text) if "earer" in text else text


class RedactTokens(logging.Filter):
    """Redacts tokens from a record: its message, its traceback, and the fields aiohttp's access log adds."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot format says so when a handler formats it
            return True
        hidden = redact(message)
        if hidden != message:
            record.msg, record.args = hidden, None
        if record.exc_info:
            text = record.exc_text or logging.Formatter().formatException(record.exc_info)
            hidden = redact(text)
            if hidden != text:  # the exception itself would show it: only the redacted text is kept
                record.exc_text, record.exc_info = hidden, None
        line = getattr(record, "first_request_line", None)
        if isinstance(line, str):
            record.first_request_line = redact(line)
        headers = getattr(record, "request_header", None)
        if isinstance(headers, dict):
            record.request_header = {
                k: "***" if k.lower() == "authorization" else redact(v) if isinstance(v, str) else v
                for k, v in headers.items()
            }
        return True


# aiohttp's access log and its request errors, and the gateway's own records.
_LOGGERS = ("aiohttp.access", "aiohttp.server", "think_actors.gateway")


def redact_logs() -> None:
    """Put ``RedactTokens`` on the loggers that may see a request's URL or headers (once per process)."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
