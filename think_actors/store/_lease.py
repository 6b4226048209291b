"""The generation lease that fences two writers of one agent (DESIGN §8), shared by SQLiteStore and PostgresStore.

Opening a store for an agent claims the next generation (an atomic increment of the agent's lease row). Every
write that belongs to a turn (messages, turn records, the chunk log, effects, kv) checks, in the same statement or
transaction, that its store still holds the newest generation. So when an old actor is still draining while its
restart begins, the restarted actor's first open fences the old one: none of the old turn's later writes land
between the new owner's.

The submissions ledger is not fenced: inserts are idempotent by id and key (the uniqueness constraints decide)
and every status change is a compare-and-set on the status, so any process may accept a submission. A superseded
writer must still not settle one: the newer owner's start has already recovered the rows it found ``running``
(resumed their turns, or put them back to ``pending``), and a final status written by the old writer (its turn
failed on the fence) would end what the new owner is running. So the drain asks ``holds_lease`` before it claims a
row and before it writes a final status. What it does not cover: a newer store opened between that read and the
write (microseconds, against a turn's seconds); the row the old writer claimed then stays ``running`` until the
agent's next start sets it back to ``pending``.
"""

from __future__ import annotations

from typing import Any

from ..errors import StoreFencedError

__all__ = ["fenced_error", "holds_lease", "superseded"]


async def holds_lease(store: Any) -> bool:
    """Whether ``store`` may still write its agent's turns: False once a newer store opened the agent. A store
    without a lease (a user's own ``Store``) always may."""
    check = getattr(store, "holds_lease", None)
    return True if check is None else bool(await check())


def superseded(store: Any) -> StoreFencedError | None:
    """The error of the first write of ``store`` refused because a newer store owns its agent, or None (free: no
    store call). Once set, the process's turns of that agent stop at their next hook instead of running the user's
    hooks for a turn the newer owner finishes. A store without a lease never is."""
    fenced = getattr(store, "superseded", None)
    return fenced if isinstance(fenced, StoreFencedError) else None


def fenced_error(agent: str, generation: int, owner_generation: int | None) -> StoreFencedError:
    """The error a write of a superseded store raises."""
    if owner_generation is None:
        why = f"its lease row is gone (this store holds generation {generation})"
    else:
        why = f"a newer store claimed generation {owner_generation} (this one holds {generation})"
    return StoreFencedError(
        f"agent {agent!r} is owned by another writer: {why}, so this store may no longer write the agent's turns. "
        "Another process opened the agent's store after this one, typically its restarted actor while this one "
        "was still draining. Stop using this store and let the newer owner carry on; open a new store for the "
        "agent only to take it over again.",
        agent=agent,
        generation=generation,
        owner_generation=owner_generation,
    )
