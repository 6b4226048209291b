"""The accounts of runs that span processes: one actor per cluster keeps them (``RunAccounts``), and every agent of
a run, on any node, asks and charges its run's account there (``RemoteAccount``).

A run's account starts in its first agent's process (``LocalAccount``): a run that stays in one process never
makes a remote call. The first time an agent of the run starts a child agent in another actor, its account is copied
here (``share``) and the local one forwards every call from then on. A call is one actor call (≈1 ms of the
machine's CPU on 2 cores), so a step makes one where it can: its charge (``settle``), which in a run without
``max_requests`` also admits the request that follows the step's tool calls, as ``start_child`` admits the child's
first (``limits``: prepaid admissions). A child's end is a call only when the run caps running children. The actor
serializes the calls of a run, so admissions are atomic across the cluster.

What it does not keep: the accounts live in the actor's memory. If the actor's node dies, Ray restarts it empty; a
run's agents then go on with the account their first agent kept in its store (what it had used when the run left its
process) or, for a child, a fresh one.
"""

from __future__ import annotations

import time
from typing import Any

import ray

from ..errors import RunLimitError
from ..limits import RunUsage, past_deadline
from ..run_account import AccountBook, RunAccount, RunTicket
from .calls import _call
from .config import RuntimeConfig

__all__ = ["ACCOUNTS_NAME", "RemoteAccount", "RunAccounts", "find_account", "share_account"]

ACCOUNTS_NAME = "think_actors/run-accounts"
_FORGOTTEN_S = 24 * 3600.0  # a run untouched this long lost its first agent for good: its account is dropped


@ray.remote
class RunAccounts:
    """Every shared run's ``AccountBook``, by run id. Each method answers with what to raise, never raises: an error
    crosses back as itself."""

    def __init__(self) -> None:
        self.books: dict[str, AccountBook] = {}
        self.touched: dict[str, float] = {}
        self.calls = 0  # calls about a run so far (the benchmark's calls per turn)

    def open(self, state: dict[str, Any], in_flight: int, by_parent: dict[str, int]) -> None:
        """Take over a run's account from its first agent's process (a second call for the run is a no-op)."""
        self.calls += 1
        run_id = state["runId"]
        if run_id not in self.books:
            book = AccountBook.from_state(state)
            book.in_flight, book.by_parent = in_flight, dict(by_parent)
            self.books[run_id] = book
        self._touch(run_id)
        now = time.time()
        for stale in [r for r, at in self.touched.items() if now - at > _FORGOTTEN_S]:
            self.close(stale)

    def has(self, run_id: str) -> bool:
        return run_id in self.books

    def counted(self) -> int:
        """How many calls about a run this actor has answered."""
        return self.calls

    def _book(self, run_id: str) -> AccountBook | None:
        """The run's book; None for a run this actor does not keep (it restarted empty): its agents go on unchecked
        rather than fail."""
        self.calls += 1
        book = self.books.get(run_id)
        if book is not None:
            self._touch(run_id)
        return book

    def _touch(self, run_id: str) -> None:
        self.touched[run_id] = time.time()

    def admit_request(self, run_id: str) -> RunLimitError | None:
        book = self._book(run_id)
        try:
            if book is not None:
                book.admit_request()
        except RunLimitError as err:
            return err
        return None

    def admit_tool_calls(self, run_id: str, count: int) -> RunLimitError | None:
        book = self._book(run_id)
        try:
            if book is not None:
                book.admit_tool_calls(count)
        except RunLimitError as err:
            return err
        return None

    def settle(
        self, run_id: str, input_tokens: int, output_tokens: int, cost_usd: float, tool_calls: int, prepay: bool
    ) -> tuple[RunLimitError | None, bool, bool]:
        """``(refusal, prepaid, over)``: over when the run has reached a budget (this charge may have passed one)."""
        book = self._book(run_id)
        if book is None:
            return None, False, False
        try:
            prepaid = book.settle(input_tokens, output_tokens, cost_usd, tool_calls, prepay)
        except RunLimitError as err:
            return err, False, True
        return None, prepaid, book.exceeded is not None

    def start_child(self, run_id: str, parent: str, depth: int, prepay: bool) -> str | RunLimitError | None:
        book = self._book(run_id)
        try:
            return book.start_child(parent, depth, prepay) if book is not None else None
        except RunLimitError as err:
            return err

    def release(self, run_id: str) -> None:
        """Uncount a prepaid request that was not made."""
        book = self._book(run_id)
        if book is not None:
            book.release_request()

    def finish_child(self, run_id: str, parent: str) -> None:
        book = self._book(run_id)
        if book is not None:
            book.finish_child(parent)

    def usage(self, run_id: str) -> RunUsage:
        book = self._book(run_id)
        return book.usage if book is not None else RunUsage()

    def close(self, run_id: str) -> None:
        self.calls += 1
        self.books.pop(run_id, None)
        self.touched.pop(run_id, None)


_handles: dict[str, Any] = {}  # this process's handle to the accounts actor, by namespace (a lookup costs the GCS)


def _accounts(config: RuntimeConfig) -> Any:
    handle = _handles.get(config.namespace)
    if handle is None:
        handle = _handles[config.namespace] = _start(config)
    return handle


def _named(namespace: str) -> Any:
    handle = _handles.get(namespace)
    if handle is None:
        handle = _handles[namespace] = ray.get_actor(ACCOUNTS_NAME, namespace=namespace)
    return handle


def _start(config: RuntimeConfig) -> Any:
    remote: Any = RunAccounts
    return remote.options(
        name=ACCOUNTS_NAME,
        namespace=config.namespace,
        get_if_exists=True,
        lifetime="detached",
        max_restarts=-1,
        max_task_retries=-1,  # its calls are safe to resend after a restart: a lost account is known as lost
        num_cpus=0,
        max_concurrency=1,  # one call at a time: a run's admissions are atomic
    ).remote()


class RemoteAccount(RunAccount):
    """A run's account in the cluster's accounts actor (what a child in another actor is given). It pickles by name,
    with its prepaid admission (a child's first request) and the run's deadline, which that admission checks."""

    def __init__(
        self,
        run_id: str,
        namespace: str,
        actor: Any = None,
        started_at: float = 0.0,
        timeout_s: float | None = None,
        prepaid: bool = False,
    ):
        self.run_id = run_id
        self.namespace = namespace
        self._actor = actor
        self.started_at = started_at
        self.timeout_s = timeout_s
        self.prepaid = prepaid
        self.over = False

    @property
    def actor(self) -> Any:
        if self._actor is None:  # crossed to another process: by name (an actor handle does not pickle plainly)
            self._actor = _named(self.namespace)
        return self._actor

    def __reduce__(self) -> Any:
        return (RemoteAccount, (self.run_id, self.namespace, None, self.started_at, self.timeout_s, self.prepaid))

    def for_turn(self, started_at: float, timeout_s: float | None, prepaid: bool = False) -> RunAccount:
        return RemoteAccount(self.run_id, self.namespace, self._actor, started_at, timeout_s, prepaid)

    def _refused(self, err: RunLimitError) -> RunLimitError:
        self.over = True
        return err

    async def admit_request(self) -> None:
        if self.prepaid:
            self.prepaid = False
            late = past_deadline(self.run_id, self.started_at, self.timeout_s)
            if late is not None:
                self.give_back()
                raise self._refused(late)
            return
        refused = await _call(self.actor.admit_request.remote(self.run_id))
        if refused is not None:
            raise self._refused(refused)

    async def admit_tool_calls(self, count: int) -> None:
        refused = await _call(self.actor.admit_tool_calls.remote(self.run_id, count))
        if refused is not None:
            raise self._refused(refused)

    async def settle(
        self, input_tokens: int, output_tokens: int, cost_usd: float, tool_calls: int, prepay: bool = False
    ) -> None:
        refused, prepaid, over = await _call(
            self.actor.settle.remote(self.run_id, input_tokens, output_tokens, cost_usd, tool_calls, prepay)
        )
        self.over = self.over or over
        if refused is not None:
            raise self._refused(refused)
        if prepaid:
            self.prepaid = True

    async def start_child(self, parent: str, depth: int, prepay: bool = False) -> str | None:
        answer = await _call(self.actor.start_child.remote(self.run_id, parent, depth, prepay))
        if isinstance(answer, RunLimitError):
            raise self._refused(answer)
        return answer  # type: ignore[no-any-return]

    async def finish_child(self, parent: str) -> None:
        self.actor.finish_child.remote(self.run_id, parent)  # not awaited: Ray keeps one caller's calls in order

    def give_back(self) -> None:
        self.actor.release.remote(self.run_id)  # not awaited, as finish_child

    async def usage(self) -> RunUsage:
        found: RunUsage = await _call(self.actor.usage.remote(self.run_id))
        return found

    async def close(self) -> None:
        self.actor.close.remote(self.run_id)  # not awaited, as finish_child


async def share_account(ticket: RunTicket, config: RuntimeConfig) -> RunAccount:
    """The account of ``ticket``'s run as other actors reach it: moved to the accounts actor the first time."""
    account = ticket.account
    if isinstance(account, RemoteAccount):
        return account
    share = getattr(account, "share", None)
    if share is None:
        return account

    async def publish(book: AccountBook) -> RunAccount:
        actor = _accounts(config)
        await _call(actor.open.remote(book.state(), book.in_flight, book.by_parent))
        return RemoteAccount(book.run_id, config.namespace, actor, book.started_at, book.limits.timeout_s)

    shared: RunAccount = await share(publish)
    return shared


async def find_account(run_id: str, config: RuntimeConfig) -> RunAccount | None:
    """The accounts actor's account of ``run_id``, if it keeps one."""
    try:
        actor = _named(config.namespace)
    except ValueError:
        return None
    if not await _call(actor.has.remote(run_id)):
        return None
    return RemoteAccount(run_id, config.namespace, actor)
