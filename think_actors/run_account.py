"""The account of a run of agents: what every agent of the run asks and charges (its limits: ``limits.py``).

The run's ``RunAccount`` adds up what they use. Every model request and every tool call asks it first
(``admit_request``); every step's tokens and cost are charged to it, and its tool calls admitted, when the step
ends (``settle``); every child agent is admitted by it (``start_child``). ``AccountBook`` is the arithmetic, the same
wherever the account lives: in the root agent's process (``LocalAccount``) until the run crosses into another process,
then in the cluster's accounts actor (``think_actors.runtime.accounts``), which ``LocalAccount.share`` moves it to.

Tokens and cost are known only when a step ends, so a step already running when the run reaches a token or cost
limit finishes and is counted: a run may end above such a limit by what its agents had in flight at that moment, at
most one model step per agent then running. Requests, tool calls and children are admitted one at a time against
the account, so those counts never pass their limits.

On Ray every question to the account is an actor call, so a run without ``max_requests`` *prepays* the requests it
knows will follow: a step's ``settle`` that admits tool calls also admits the agent's next request, and
``start_child`` admits the child's first. The account instance of the turn that was prepaid keeps the admission
(``LocalAccount``, or the child's own ``RemoteAccount``) and its next ``admit_request`` uses it without a call,
checking only the deadline. A prepaid admission the turn does not use is given back (``release``), so
``RunUsage.requests`` counts the requests made. A run with ``max_requests`` asks at every request: a prepaid one
would count against the limit before it is made and could refuse another agent's.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError, RunLimitError
from .limits import RunLimits, RunUsage, child_refusal, counts_children, limit_error, past_deadline, prepays

__all__ = ["AccountBook", "LocalAccount", "RunAccount", "RunTicket"]


@dataclass(slots=True)
class _Counts:
    requests: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    agents: int = 0


class AccountBook:
    """A run's account: its limits, what it used, the children running. Synchronous: whoever holds it serializes
    the calls (one event loop, or the accounts actor), so admissions are atomic."""

    __slots__ = ("_counts", "_limits_state", "by_parent", "exceeded", "in_flight", "limits", "run_id", "started_at")

    def __init__(
        self, *, run_id: str, limits: RunLimits, started_at: float | None = None, usage: RunUsage | None = None
    ) -> None:
        self.run_id = run_id
        self.limits = limits
        self.started_at = time.time() if started_at is None else started_at  # wall clock: holds across machines
        used = usage or RunUsage()
        self._counts = _Counts(
            used.requests, used.tool_calls, used.input_tokens, used.output_tokens, used.cost_usd, used.agents
        )
        self.in_flight = 0
        self.by_parent: dict[str, int] = {}
        self.exceeded: RunLimitError | None = None
        self._limits_state = limits.model_dump(exclude_none=True)

    @property
    def usage(self) -> RunUsage:
        counts = self._counts
        return RunUsage(
            requests=counts.requests,
            tool_calls=counts.tool_calls,
            input_tokens=counts.input_tokens,
            output_tokens=counts.output_tokens,
            cost_usd=counts.cost_usd,
            agents=counts.agents,
        )

    @property
    def deadline(self) -> float | None:
        timeout = self.limits.timeout_s
        return None if timeout is None else self.started_at + timeout

    def _exceed(self, limit: str, used: float, allowed: float, what: str) -> RunLimitError:
        if self.exceeded is None:
            self.exceeded = limit_error(self.run_id, limit, used, allowed, what)
        return self.exceeded

    def check(self) -> None:
        """Raise ``RunLimitError`` when the run has reached a budget (tokens, cost, the deadline)."""
        if self.exceeded is not None:
            raise copy.copy(self.exceeded)
        limits, counts = self.limits, self._counts
        for limit, allowed, used in (
            ("max_input_tokens", limits.max_input_tokens, counts.input_tokens),
            ("max_output_tokens", limits.max_output_tokens, counts.output_tokens),
            ("max_total_tokens", limits.max_total_tokens, counts.input_tokens + counts.output_tokens),
        ):
            if allowed is not None and used >= allowed:
                raise self._exceed(limit, used, allowed, f"{used} tokens used")
        if limits.max_cost_usd is not None and counts.cost_usd >= limits.max_cost_usd:
            raise self._exceed("max_cost_usd", counts.cost_usd, limits.max_cost_usd, f"{counts.cost_usd:.6f} USD spent")
        late = past_deadline(self.run_id, self.started_at, limits.timeout_s)
        if late is not None:
            if self.exceeded is None:
                self.exceeded = late
            raise late

    def admit_request(self) -> None:
        self.check()
        allowed, counts = self.limits.max_requests, self._counts
        if allowed is not None and counts.requests >= allowed:
            raise self._exceed("max_requests", counts.requests, allowed, f"{counts.requests} model requests")
        counts.requests += 1

    def admit_tool_calls(self, count: int) -> None:
        self.check()
        allowed, counts = self.limits.max_tool_calls, self._counts
        if allowed is not None and counts.tool_calls + count > allowed:
            raise self._exceed(
                "max_tool_calls",
                counts.tool_calls + count,
                allowed,
                f"{counts.tool_calls} tool calls made, {count} more asked for",
            )
        counts.tool_calls += count

    def release_request(self) -> None:
        """Give back a prepaid request its turn did not make."""
        self._counts.requests = max(self._counts.requests - 1, 0)

    def charge(self, input_tokens: int, output_tokens: int, cost_usd: float) -> None:
        """Count a finished step. Passing a budget here stops the run at its next admission, anywhere."""
        counts = self._counts
        counts.input_tokens += input_tokens
        counts.output_tokens += output_tokens
        counts.cost_usd += cost_usd
        with contextlib.suppress(RunLimitError):  # recorded in ``exceeded``: the step that passed it has finished
            self.check()

    def settle(
        self, input_tokens: int, output_tokens: int, cost_usd: float, tool_calls: int, prepay: bool = False
    ) -> bool:
        """Charge a finished step, then admit its ``tool_calls`` (none: the charge alone). With ``prepay``, tool calls
        and a run that ``prepays``, also admit the agent's next request and answer True; False when not prepaid."""
        self.charge(input_tokens, output_tokens, cost_usd)
        if tool_calls:
            self.admit_tool_calls(tool_calls)
            if prepay and prepays(self.limits):  # admit_tool_calls has checked the budgets: the admission holds
                self._counts.requests += 1
                return True
        return False

    def start_child(self, parent: str, depth: int, prepay: bool = False) -> str | None:
        """Admit a child agent at ``depth`` under ``parent``: None, or why it may not start (a tool error). With
        ``prepay`` and a run that ``prepays``, an admitted child's first request is admitted too. Raises
        ``RunLimitError`` when the run has reached a budget."""
        self.check()
        limits = self.limits
        if limits.max_depth is not None and depth > limits.max_depth:
            return (
                f"the run's max_depth ({limits.max_depth}) does not let {parent} start a child agent: answer without it"
            )
        if limits.max_agents_in_flight is not None and self.in_flight >= limits.max_agents_in_flight:
            return f"the run's max_agents_in_flight ({limits.max_agents_in_flight}) child agents are running"
        cap = limits.max_concurrent_agent_tools
        if cap is not None and self.by_parent.get(parent, 0) >= cap:
            return child_refusal(cap)
        if counts_children(limits):  # without a cap no one asks, and no finish_child comes
            self.in_flight += 1
            self.by_parent[parent] = self.by_parent.get(parent, 0) + 1
        self._counts.agents += 1
        if prepay and prepays(limits):
            self._counts.requests += 1
        return None

    def finish_child(self, parent: str) -> None:
        self.in_flight = max(self.in_flight - 1, 0)
        left = self.by_parent.get(parent, 0) - 1
        if left > 0:
            self.by_parent[parent] = left
        else:
            self.by_parent.pop(parent, None)

    def state(self) -> dict[str, Any]:
        """What survives a restart of the agent that holds the account (kept in its store)."""
        return {
            "runId": self.run_id,
            "limits": self._limits_state,
            "startedAt": self.started_at,
            "usage": self.usage.as_dict(),
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> AccountBook:
        return cls(
            run_id=state["runId"],
            limits=RunLimits.model_validate(state.get("limits") or {}),
            started_at=float(state["startedAt"]),
            usage=RunUsage.from_dict(state.get("usage")),
        )


class RunAccount:
    """The account of a run, where the run's turns charge and ask. ``LocalAccount`` in the root agent's process;
    the runtime's remote account (the cluster's accounts actor) once the run spans processes.

    An instance that holds a prepaid admission (``prepaid``, see the module docstring) belongs to one turn: the
    root's ``LocalAccount`` on Ray, or a child's own remote account. ``over`` says the instance has seen the run
    reach a budget (a refusal, or a charge that passed one)."""

    prepaid: bool = False
    over: bool = False

    async def admit_request(self) -> None:
        """Admit the turn's next model request: a prepaid admission if the instance holds one (only the deadline is
        checked), else the account's."""
        raise NotImplementedError

    async def admit_tool_calls(self, count: int) -> None:
        raise NotImplementedError

    async def settle(
        self, input_tokens: int, output_tokens: int, cost_usd: float, tool_calls: int, prepay: bool = False
    ) -> None:
        """Charge a finished step and admit its tool calls (``AccountBook.settle``), in one call; with ``prepay``
        (another request follows the calls) the instance may come back holding that request's admission."""
        raise NotImplementedError

    async def start_child(self, parent: str, depth: int, prepay: bool = False) -> str | None:
        """Admit a child agent (``AccountBook.start_child``); with ``prepay``, in a run that ``prepays``, the
        child's first request too (the caller hands it to the child with ``for_turn``, or gives it back)."""
        raise NotImplementedError

    async def finish_child(self, parent: str) -> None:
        raise NotImplementedError

    async def usage(self) -> RunUsage:
        raise NotImplementedError

    def give_back(self) -> None:
        """Uncount one prepaid request that will not be made (without waiting)."""
        raise NotImplementedError

    def release(self) -> None:
        """The turn ends: give back the prepaid admission it did not use, if it holds one."""
        if self.prepaid:
            self.prepaid = False
            self.give_back()

    def learn_over(self) -> None:
        """Another agent of the run saw it reach a budget (a child's result says so): the prepaid admission is given
        back, so the turn's next request asks the account, which refuses it."""
        self.over = True
        self.release()

    def for_turn(self, started_at: float, timeout_s: float | None, prepaid: bool = False) -> RunAccount:
        """This account as another turn uses it, holding a prepaid admission when ``prepaid`` (a child's first
        request); the run's start and ``timeout_s`` are the deadline a prepaid admission checks."""
        return self

    async def close(self) -> None:
        """The run is over: forget its account."""
        raise NotImplementedError


class LocalAccount(RunAccount):
    """A run's account in its root agent's process. ``saved`` (if given) is called with the book's state after
    every charge (the root keeps it in its store, for a recovered turn); ``share`` moves the account to where other
    processes reach it, after which every call goes there. ``close`` forgets it (``saved(None)``).

    In process the children's turns use this instance too, so only a root hosted on Ray prepays (its children are
    actors with accounts of their own)."""

    def __init__(self, book: AccountBook, saved: Callable[[dict[str, Any] | None], Awaitable[None]] | None = None):
        self.book = book
        self.saved = saved
        self.shared: RunAccount | None = None
        self._sharing: asyncio.Future[RunAccount] | None = None
        self.prepaid = False
        self._over = False

    @property
    def over(self) -> bool:
        shared = self.shared
        return self._over or self.book.exceeded is not None or (shared is not None and shared.over)

    @over.setter
    def over(self, value: bool) -> None:
        self._over = value

    async def share(self, publish: Callable[[AccountBook], Awaitable[RunAccount]]) -> RunAccount:
        """The account other processes use: ``publish(book)`` the first time (it copies the book there; callers
        that come meanwhile wait for the same copy)."""
        if self.shared is None:
            if self._sharing is None:
                self._sharing = asyncio.ensure_future(publish(self.book))
            sharing = self._sharing
            try:
                self.shared = await asyncio.shield(sharing)
            finally:
                if sharing.done() and sharing.exception() is not None and self._sharing is sharing:
                    self._sharing = None  # failed: the next caller tries again
        return self.shared

    async def _shared_now(self) -> RunAccount | None:
        """The shared account, once a copy under way has landed (so nothing counted here is lost)."""
        if self.shared is None and self._sharing is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._sharing)
        return self.shared

    async def admit_request(self) -> None:
        if self.prepaid:
            self.prepaid = False
            book = self.book
            try:
                if self.shared is None:
                    book.check()  # the book is here: every budget, as an admission checks them
                else:
                    late = past_deadline(book.run_id, book.started_at, book.limits.timeout_s)
                    if late is not None:
                        raise late
            except RunLimitError:
                self.over = True
                self.give_back()
                raise
            return
        if self.shared is not None:
            return await self.shared.admit_request()
        self.book.admit_request()

    async def admit_tool_calls(self, count: int) -> None:
        if self.shared is not None:
            return await self.shared.admit_tool_calls(count)
        self.book.admit_tool_calls(count)

    async def settle(
        self, input_tokens: int, output_tokens: int, cost_usd: float, tool_calls: int, prepay: bool = False
    ) -> None:
        if self.shared is not None:
            return await self.shared.settle(input_tokens, output_tokens, cost_usd, tool_calls, prepay)
        try:
            if self.book.settle(input_tokens, output_tokens, cost_usd, tool_calls, prepay):
                self.prepaid = True
        finally:
            if self.saved is not None:
                await self.saved(self._state())

    def _state(self) -> dict[str, Any]:
        """The book's state as a recovered turn should find it: without a prepaid request not yet made."""
        state = self.book.state()
        if self.prepaid:
            state["usage"]["requests"] -= 1
        return state

    async def start_child(self, parent: str, depth: int, prepay: bool = False) -> str | None:
        shared = await self._shared_now()
        if shared is not None:
            return await shared.start_child(parent, depth, prepay)
        return self.book.start_child(parent, depth, prepay)

    async def finish_child(self, parent: str) -> None:
        if self.shared is not None:
            return await self.shared.finish_child(parent)
        self.book.finish_child(parent)

    async def usage(self) -> RunUsage:
        if self.shared is not None:
            return await self.shared.usage()
        return self.book.usage

    def give_back(self) -> None:
        if self.shared is not None:
            self.shared.give_back()  # the book moved there with the prepaid request counted
        else:
            self.book.release_request()

    def release(self) -> None:
        super().release()
        if self.shared is not None:
            self.shared.release()

    async def close(self) -> None:
        if self.shared is not None:
            await self.shared.close()
        if self.saved is not None:
            await self.saved(None)

    def __reduce__(self) -> Any:
        raise ConfigurationError(
            "a run's in-process account cannot leave its process: the runtime shares it first (a bug if you see this)"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RunTicket:
    """What a turn knows of the run it belongs to: the run's id (its first turn's request id), this agent's depth
    in it (0 for the run's first agent), its limits and its account. ``ToolContext.run`` gives it to tools."""

    run_id: str
    depth: int
    limits: RunLimits
    started_at: float
    account: RunAccount
    own_deadline: float | None = None  # an agent's own, sooner deadline (its class's run_limits.timeout_s)

    @property
    def deadline(self) -> float | None:
        """This turn's deadline as a wall-clock time (``time.time()``): the run's, or the agent's own when that
        comes first; None without either."""
        timeout = self.limits.timeout_s
        deadlines = [d for d in (None if timeout is None else self.started_at + timeout, self.own_deadline) if d]
        return min(deadlines) if deadlines else None

    def within(self, timeout_s: float | None) -> RunTicket:
        """This ticket for a turn that must also end within ``timeout_s`` from now (None: unchanged)."""
        if timeout_s is None:
            return self
        own = time.time() + timeout_s
        return dataclasses.replace(self, own_deadline=min(own, self.own_deadline or own))

    def remaining_s(self) -> float | None:
        """Seconds left before the run's deadline (never below 0), or None without one."""
        deadline = self.deadline
        return None if deadline is None else max(deadline - time.time(), 0.0)

    def child(self, account: RunAccount | None = None) -> RunTicket:
        """The ticket of a child agent's turn (one level deeper; ``account`` where the child reaches it)."""
        return RunTicket(
            run_id=self.run_id,
            depth=self.depth + 1,
            limits=self.limits,
            started_at=self.started_at,
            account=account or self.account,
            own_deadline=self.own_deadline,  # what remains of the parent's time bounds the child's
        )

    def facts(self) -> dict[str, Any]:
        """What a tool's ``run_context`` parameter gets: ``{"runId", "depth", "remainingS"}``."""
        return {"runId": self.run_id, "depth": self.depth, "remainingS": self.remaining_s()}

    def record(self) -> dict[str, Any]:
        """What a turn's record keeps of its run (a recovered turn rebuilds the ticket from it)."""
        return {
            "runId": self.run_id,
            "depth": self.depth,
            "limits": self.limits.model_dump(exclude_none=True),
            "startedAt": self.started_at,
            "ownDeadline": self.own_deadline,
        }
