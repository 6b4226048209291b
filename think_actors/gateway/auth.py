"""Who is asking, and what they may do: the gateway's authentication and authorization.

1. **Authentication** turns a request into a ``Principal``. It is one async function of the aiohttp request
   (headers, query, cookies, ``request.remote``) that returns the principal, or raises ``Unauthenticated`` (a 401
   with ``WWW-Authenticate``) or ``AuthUnavailable`` (a 503: the identity provider could not be reached). Built in:
   ``SharedToken`` (one token, whose holder may do everything: the gateway's default with ``token=``) and
   ``JWTAuth`` (``jwt_auth.py``). A credential is read from ``Authorization: Bearer``, else the
   ``think_actors_token`` cookie, else ``?token=`` (a browser's WebSocket can send no header).
2. **Authorization** decides, for every action on an agent, whether the principal may: one function
   ``authorize(principal, agent_path, action)`` returning True, or False / a reason to refuse (a 403, or an error
   frame on an open socket). ``agent_path`` is ``"<class-slug>/<name>"``; the actions are ``ACTIONS``. Built in:
   ``allow_all`` (the default) and ``OwnerRule`` (each principal owns the agents named after it).

Both run before the gateway finds the agent, so a refused request creates, wakes and writes nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..identity import Principal

__all__ = [
    "ACTIONS",
    "AuthUnavailable",
    "Authenticate",
    "Authorize",
    "OwnerRule",
    "SharedToken",
    "Unauthenticated",
    "allow_all",
    "credential",
]

# What a request or frame does to an agent:
#   read     open its socket (and resume a stream), get-messages, list it as an MCP tool
#   chat     send a chat request (a new message or a regenerate), call it as an MCP tool
#   respond  answer a tool call: a client tool's result, an approval
#   cancel   cancel a running turn
#   clear    clear its history
ACTIONS = ("read", "chat", "respond", "cancel", "clear")

COOKIE = "think_actors_token"

Authenticate = Callable[[web.Request], Awaitable[Principal]]
Authorize = Callable[[Principal, str, str], "bool | str | Awaitable[bool | str]"]


class Unauthenticated(Exception):
    """The request carries no credential, or one that does not prove who it is: a 401.

    ``reason`` is said to the client (never the credential itself); ``sent`` tells whether a credential came at
    all, for the ``WWW-Authenticate`` challenge (RFC 6750: ``invalid_token`` only when one did).
    """

    def __init__(self, reason: str, *, sent: bool = True):
        super().__init__(reason)
        self.reason = reason
        self.sent = sent


class AuthUnavailable(Exception):
    """The credential could not be checked now (the identity provider's keys could not be fetched): a 503."""

    def __init__(self, reason: str, *, retry_after_s: int = 5):
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


def credential(request: web.Request) -> str | None:
    """The credential the request carries: the bearer header, else the cookie, else ``?token=``; None if none."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    cookie = request.cookies.get(COOKIE)
    if cookie:
        return cookie
    return request.query.get("token") or None


def _bytes(text: str) -> bytes | None:
    # aiohttp decodes header bytes that are not UTF-8 as surrogates: encoded back, they are the bytes sent.
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate no byte string could have sent
        return None


class SharedToken:
    """Authentication by one shared token: its holder is the principal ``"token"`` with the role ``"admin"``."""

    def __init__(self, token: str, *, principal: Principal | None = None):
        self._token = token.encode("utf-8", "surrogateescape")
        self.principal = principal or Principal(id="token", roles=frozenset({"admin"}))

    async def __call__(self, request: web.Request) -> Principal:
        given = credential(request)
        if given is None:
            raise Unauthenticated(
                "missing token: send Authorization: Bearer <token>, the think_actors_token cookie, or ?token=",
                sent=False,
            )
        sent = _bytes(given)
        if sent is None or not hmac.compare_digest(sent, self._token):
            raise Unauthenticated("wrong token")
        return self.principal


def allow_all(principal: Principal, agent_path: str, action: str) -> bool:
    """Every authenticated principal may do everything (the default: one shared token, one user)."""
    return True


_SAFE_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_@+\-]{0,63}")


class OwnerRule:
    """Each principal owns the agents whose name is its owner key, or starts with the key and ``":"``.

    The owner key is the principal's id when that is 1-64 letters, digits or ``_ @ + -`` (``alice``,
    ``alice@example.com`` is not: it holds a ``.``), else ``h=`` and 32 hex digits of its SHA-256 (``owner_key``
    says which). ``":"``, ``"."`` and ``"="`` never appear in a plain key, so no principal's agents lie under
    another's prefix. Principals with one of ``admin_roles`` may do everything; ``shared`` maps class slugs to the
    actions every principal may take on any agent of that class (e.g. ``{"docs-bot": {"read", "chat"}}``).
    """

    def __init__(self, *, admin_roles: frozenset[str] | set[str] = frozenset({"admin"}), shared: Any = None):
        self.admin_roles = frozenset(admin_roles)
        self.shared: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in (shared or {}).items()}

    @staticmethod
    def owner_key(principal: Principal) -> str:
        if _SAFE_OWNER.fullmatch(principal.id):
            return principal.id
        return "h=" + hashlib.sha256(principal.id.encode("utf-8", "surrogateescape")).hexdigest()[:32]

    @classmethod
    def name_for(cls, principal: Principal, suffix: str = "") -> str:
        """The agent name ``principal`` owns: its key, or ``key:suffix``."""
        key = cls.owner_key(principal)
        return f"{key}:{suffix}" if suffix else key

    def __call__(self, principal: Principal, agent_path: str, action: str) -> bool | str:
        if self.admin_roles & principal.roles:
            return True
        slug, _, name = agent_path.partition("/")
        if action in self.shared.get(slug, ()):
            return True
        key = self.owner_key(principal)
        if name == key or name.startswith(key + ":"):
            return True
        return f"{principal.id!r} may not {action} the agent {agent_path!r}: it is not theirs"


async def decide(authorize: Authorize, principal: Principal, agent_path: str, action: str) -> str | None:
    """Why ``principal`` may not take ``action`` on ``agent_path``, or None when it may."""
    verdict = authorize(principal, agent_path, action)
    if inspect.isawaitable(verdict):
        verdict = await verdict
    if verdict is True:
        return None
    if isinstance(verdict, str) and verdict:
        return verdict
    return f"{principal.id!r} may not {action} the agent {agent_path!r}"
