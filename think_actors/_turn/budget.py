"""A turn's place in a run with ``RunLimits``: the run it opens or joins, the run it finds again after a crash, and
the run's deadline as a timer on the turn.

The limits are ``think_actors.limits``, the account ``think_actors.run_account``; the step loop asks and
charges the account (``loop.run_steps``), agent tools admit children (``delegation.agent_tool``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ..errors import RunLimitError
from ..limits import RunLimits
from ..run_account import AccountBook, LocalAccount, RunAccount, RunTicket
from .engine import Engine
from .spec import TurnSpec

__all__ = ["deadline_timer", "open_run", "reopen_run"]

log = logging.getLogger("think_actors")

_ACCOUNT_KEY = "run-account:"  # kv of the run's first agent: its in-process account's state after every charge


def _saver(engine: Engine, run_id: str) -> Any:
    async def saved(state: dict[str, Any] | None) -> None:
        await engine.store.set_kv(_ACCOUNT_KEY + run_id, state)

    return saved


def open_run(engine: Engine, spec: TurnSpec) -> RunTicket | None:
    """The run of a turn that starts now: the one a parent gave it, else a new one when the turn (or its agent's
    class, ``run_limits``) has limits; None for a turn without limits."""
    own = RunLimits.of(getattr(engine.agent, "run_limits", None))
    if spec.run is not None:  # a parent's run: the agent's own deadline still holds when it comes sooner
        spec.run = spec.run.within(own.timeout_s if own is not None else None)
        return spec.run
    limits = spec.limits if spec.limits is not None else own
    if limits is None:
        return None
    book = AccountBook(run_id=spec.request_id, limits=limits)
    spec.run = RunTicket(
        run_id=spec.request_id,
        depth=0,
        limits=limits,
        started_at=book.started_at,
        account=LocalAccount(book, _saver(engine, spec.request_id)),
    )
    return spec.run


async def reopen_run(engine: Engine, data: dict[str, Any]) -> RunTicket | None:
    """The run of an interrupted turn (its record's ``data["run"]``), with what the run had used: the account the
    runtime keeps for it (the run spans processes), else the state its first agent kept in its store."""
    recorded = data.get("run")
    if not isinstance(recorded, dict):
        return None
    run_id = str(recorded["runId"])
    limits = RunLimits.model_validate(recorded.get("limits") or {})
    started_at = float(recorded["startedAt"])
    account: RunAccount | None = None
    runtime = engine.runtime
    if runtime is not None:
        account = await runtime.find_account(run_id)
        if account is not None:
            account = account.for_turn(started_at, limits.timeout_s)  # this turn's own instance
    if account is None:
        state = await engine.store.get_kv(_ACCOUNT_KEY + run_id)
        if isinstance(state, dict):
            book = AccountBook.from_state(state)
        else:  # a child whose run's account is gone (its process was the run's first): what it uses from now on
            book = AccountBook(run_id=run_id, limits=limits, started_at=started_at)
        account = LocalAccount(book, _saver(engine, run_id))
    own = recorded.get("ownDeadline")
    return RunTicket(
        run_id=run_id,
        depth=int(recorded.get("depth", 0)),
        limits=limits,
        started_at=started_at,
        account=account,
        own_deadline=float(own) if own is not None else None,
    )


def deadline_timer(spec: TurnSpec) -> asyncio.TimerHandle | None:
    """Stop the turn at its run's deadline (its waits are cancelled, like an abort), ending it with
    ``RunLimitError``; None when the run has no deadline."""
    ticket = spec.run
    remaining = ticket.remaining_s() if ticket is not None else None
    if ticket is None or remaining is None:
        return None
    deadline = ticket.deadline or 0.0
    own = ticket.own_deadline is not None and ticket.own_deadline == deadline  # the agent's own comes first

    def expire() -> None:
        timeout = round(deadline - ticket.started_at, 3) if not own else round(deadline - started, 3)
        failure = RunLimitError(
            f"the run {ticket.run_id!r} reached its timeout_s limit ({timeout:g} s). Raise the limit in RunLimits, "
            "or give the agent less to do",
            limit="timeout_s",
            used=timeout,
            allowed=timeout,
            run_id=ticket.run_id,
            stage="stream",
            messages_persisted=True,
        )
        spec.signal.abort(f"the run's deadline (timeout_s={timeout:g}) passed", failure=failure)

    started = time.time()
    return asyncio.get_running_loop().call_later(remaining, expire)
