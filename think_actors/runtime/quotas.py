"""The quotas of every gateway of a cluster, in one actor (``QuotaKeeper``): each gateway asks it before it accepts
a chat request or a socket, and tells it the tokens each turn used, so a user's quota holds whichever gateway their
tabs reach. A gateway's restart keeps the counts (they live here, not in the gateway).

Sockets are counted per gateway: a gateway that stops saying it is alive for ``GATEWAY_SILENT_S`` (its process
died) has its sockets forgotten. The counts live in the actor's memory: if its node dies, Ray restarts it with
none (a user may then use up to one more quota's worth that minute or day).
"""

from __future__ import annotations

import time
from typing import Any

import ray

from ..quotas import QuotaBook, QuotaExceeded, Quotas
from .calls import _call
from .config import RuntimeConfig

__all__ = ["GATEWAY_SILENT_S", "QUOTAS_NAME", "QuotaKeeper", "RemoteQuotas"]

QUOTAS_NAME = "think_actors/quotas"
GATEWAY_SILENT_S = 60.0


@ray.remote
class QuotaKeeper:
    """Every principal's ``QuotaBook`` counts. Answers with the refusal, never raises it: it crosses back as is."""

    def __init__(self, quotas: Quotas):
        self.book = QuotaBook(quotas)
        self.seen: dict[str, float] = {}

    def _heard(self, gateway: str) -> None:
        now = time.time()
        self.seen[gateway] = now
        for silent in [g for g, at in self.seen.items() if now - at > GATEWAY_SILENT_S]:
            del self.seen[silent]
            self.book.forget_gateway(silent)

    def configure(self, quotas: Quotas) -> None:
        self.book.quotas = quotas  # the latest gateway's: they are started with the same options

    def start_turn(self, gateway: str, principal_id: str) -> QuotaExceeded | None:
        self._heard(gateway)
        try:
            self.book.start_turn(principal_id)
        except QuotaExceeded as refused:
            return refused
        return None

    def add_tokens(self, gateway: str, principal_id: str, tokens: int) -> None:
        self._heard(gateway)
        self.book.add_tokens(principal_id, tokens)

    def open_socket(self, gateway: str, principal_id: str) -> QuotaExceeded | None:
        self._heard(gateway)
        try:
            self.book.open_socket(principal_id, gateway)
        except QuotaExceeded as refused:
            return refused
        return None

    def close_socket(self, gateway: str, principal_id: str) -> None:
        self._heard(gateway)
        self.book.close_socket(principal_id, gateway)

    def alive(self, gateway: str) -> None:
        self._heard(gateway)

    def forget_gateway(self, gateway: str) -> None:
        self.seen.pop(gateway, None)
        self.book.forget_gateway(gateway)

    def used(self, principal_id: str) -> dict[str, int]:
        return self.book.used(principal_id)


class RemoteQuotas:
    """A gateway's way to the cluster's ``QuotaKeeper`` (started by the first gateway that needs it)."""

    def __init__(self, quotas: Quotas, config: RuntimeConfig, gateway: str):
        remote: Any = QuotaKeeper
        self.gateway = gateway
        self.actor = remote.options(
            name=QUOTAS_NAME,
            namespace=config.namespace,
            get_if_exists=True,
            lifetime="detached",
            max_restarts=-1,
            max_task_retries=-1,
            num_cpus=0,
            max_concurrency=1,  # one call at a time: a check and its count are one step
        ).remote(quotas)
        self._configured = self.actor.configure.remote(quotas)

    async def start_turn(self, principal_id: str) -> None:
        refused = await _call(self.actor.start_turn.remote(self.gateway, principal_id))
        if refused is not None:
            raise refused

    async def add_tokens(self, principal_id: str, tokens: int) -> None:
        await _call(self.actor.add_tokens.remote(self.gateway, principal_id, tokens))

    async def open_socket(self, principal_id: str) -> None:
        refused = await _call(self.actor.open_socket.remote(self.gateway, principal_id))
        if refused is not None:
            raise refused

    async def close_socket(self, principal_id: str) -> None:
        await _call(self.actor.close_socket.remote(self.gateway, principal_id))

    async def alive(self) -> None:
        await _call(self.actor.alive.remote(self.gateway))

    async def close(self) -> None:
        await _call(self.actor.forget_gateway.remote(self.gateway))

    async def used(self, principal_id: str) -> dict[str, int]:
        used: dict[str, int] = await _call(self.actor.used.remote(principal_id))
        return used
