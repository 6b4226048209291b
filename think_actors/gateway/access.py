"""Who may do what at a gateway, and how much: authentication, authorization and quotas in one place.

The gateway asks ``Access`` at every entry point, before it finds the agent (so a refused request creates, wakes
and writes nothing): ``principal`` for a request (401 / 503 when it cannot say), ``refusal`` for an action on an
agent (403 / an error frame), and the quota keeper before a socket or a turn is accepted (429 with
``Retry-After`` / an error frame). ``auth.py`` has the authentication and authorization rules, ``quotas`` (the
package's) the arithmetic; here are the keepers of the counts: ``LocalQuotas`` in a gateway of in-process agents
(saved in a SQLite file, so a restart keeps them), the cluster's ``QuotaKeeper`` actor on Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from typing import Any

from aiohttp import web

from .._turn.engine import DATA_DIR_ENV
from ..errors import ConfigurationError
from ..identity import Principal
from ..quotas import QuotaBook, QuotaExceeded, Quotas
from ..store import SQLiteStore
from .auth import Authenticate, Authorize, AuthUnavailable, SharedToken, Unauthenticated, allow_all, decide

__all__ = [
    "LOCAL_USER",
    "PRINCIPAL",
    "Access",
    "LocalQuotas",
    "QuotaExceeded",
    "Unauthenticated",
    "expired",
    "quota_path",
]

log = logging.getLogger("think_actors.gateway")

LOCAL_USER = Principal(id="local", roles=frozenset({"admin"}))
"""Who uses a gateway without authentication (served on loopback only): one user, who may do everything."""

PRINCIPAL = web.RequestKey("think_actors.principal", Principal)  # who sent a request, once authenticated
_KEY = "gateway-quotas:"
HEARTBEAT_S = 15.0


clock = time.time  # what expiry is checked against (tests move it)


def expired(principal: Principal) -> bool:
    """Whether the credential that proved ``principal`` has expired (its ``exp`` claim, as a JWT's): an open
    socket then takes no more frames."""
    exp = principal.claims.get("exp")
    return isinstance(exp, int | float) and not isinstance(exp, bool) and clock() >= exp


class LocalQuotas:
    """Quota counts in the gateway's process, each principal's saved in ``path`` (SQLite) when they change."""

    def __init__(self, quotas: Quotas, path: str | None = None):
        self.book = QuotaBook(quotas)
        if path:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.store = SQLiteStore(path, agent="gateway-quotas") if path else None
        self._loaded: set[str] = set()
        self._lock = asyncio.Lock()

    async def _load(self, principal_id: str) -> None:
        if self.store is None or principal_id in self._loaded:
            return
        saved = await self.store.get_kv(_KEY + principal_id)
        if isinstance(saved, dict):
            self.book.restore({principal_id: saved})
        self._loaded.add(principal_id)

    async def _save(self, principal_id: str) -> None:
        if self.store is not None:
            state = self.book.state().get(principal_id)
            if state is not None:
                await self.store.set_kv(_KEY + principal_id, state)

    async def start_turn(self, principal_id: str) -> None:
        async with self._lock:
            await self._load(principal_id)
            self.book.start_turn(principal_id)
            await self._save(principal_id)

    async def add_tokens(self, principal_id: str, tokens: int) -> None:
        async with self._lock:
            await self._load(principal_id)
            self.book.add_tokens(principal_id, tokens)
            await self._save(principal_id)

    async def open_socket(self, principal_id: str) -> None:
        self.book.open_socket(principal_id, "local")

    async def close_socket(self, principal_id: str) -> None:
        self.book.close_socket(principal_id, "local")

    async def alive(self) -> None:
        return None

    async def close(self) -> None:
        if self.store is not None:
            await self.store.close()

    async def used(self, principal_id: str) -> dict[str, int]:
        async with self._lock:
            await self._load(principal_id)
            return self.book.used(principal_id)


class Access:
    """A gateway's authentication, authorization and quotas (``Gateway(authenticate=..., authorize=...,
    quotas=...)``)."""

    def __init__(
        self,
        *,
        token: str | None = None,
        authenticate: Authenticate | None = None,
        authorize: Authorize | None = None,
        quotas: Quotas | None = None,
    ):
        if token is not None and authenticate is not None:
            raise ConfigurationError("give token= or authenticate=, not both: a token is SharedToken(token)")
        self.authenticate: Authenticate | None = SharedToken(token) if token is not None else authenticate
        self.authorize: Authorize = authorize or allow_all
        self.quotas = quotas
        self.keeper: Any = None  # set by the gateway from its directory (``AgentDirectory.quota_keeper``)
        self.gateway_id = uuid.uuid4().hex[:12]
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def required(self) -> bool:
        """Whether requests must authenticate (else the gateway serves loopback only, to ``LOCAL_USER``)."""
        return self.authenticate is not None

    async def principal(self, request: web.Request) -> Principal:
        """Who sent the request; raises ``Unauthenticated`` or ``AuthUnavailable``."""
        if self.authenticate is None:
            return LOCAL_USER
        principal = await self.authenticate(request)
        if not isinstance(principal, Principal):
            raise AuthUnavailable(
                f"the gateway's authenticate function returned {type(principal).__name__}, not a ta.Principal"
            )
        return principal

    async def refusal(self, principal: Principal, agent_path: str, action: str) -> str | None:
        return await decide(self.authorize, principal, agent_path, action)

    def exempt(self, principal: Principal) -> bool:
        return self.quotas is None or self.keeper is None or bool(self.quotas.exempt_roles & principal.roles)

    async def start_turn(self, principal: Principal) -> None:
        """Count a turn of ``principal``; raises ``QuotaExceeded``."""
        if not self.exempt(principal):
            await self.keeper.start_turn(principal.id)

    async def turn_used(self, principal: Principal, tokens: int) -> None:
        if not self.exempt(principal) and tokens > 0:
            try:
                await self.keeper.add_tokens(principal.id, tokens)
            except Exception:  # the turn happened: a lost count must not fail it
                log.warning("could not count %d tokens of %r", tokens, principal.id, exc_info=True)

    async def open_socket(self, principal: Principal) -> bool:
        """Count a socket; raises ``QuotaExceeded``. True when it was counted (``close_socket`` then)."""
        if self.exempt(principal):
            return False
        await self.keeper.open_socket(principal.id)
        return True

    async def close_socket(self, principal: Principal) -> None:
        with contextlib.suppress(Exception):
            await self.keeper.close_socket(principal.id)

    async def start(self, keeper: Any) -> None:
        self.keeper = keeper
        if keeper is not None:
            self._heartbeat = asyncio.create_task(self._beat(), name="gateway-quota-heartbeat")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            with contextlib.suppress(Exception):
                await self.keeper.alive()

    async def stop(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(BaseException):
                await self._heartbeat
        if self.keeper is not None:
            with contextlib.suppress(Exception):
                await self.keeper.close()


def quota_path(data_dir: str | None) -> str:
    """Where a gateway of in-process agents keeps its quota counts."""
    base = data_dir or os.environ.get(DATA_DIR_ENV) or ".think_actors"  # as the agents' own stores resolve it
    return os.path.join(base, "gateway", "quotas.sqlite")
