"""The warm pool's decisions (``think_actors/_warm.py``): when it boots processes, how many, and its memory cap."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from think_actors import _warm
from think_actors._warm import QUIET_S, PoolView, memory_cap, refill_count, surplus_count

MIB = 2**20


def view(**changes: object) -> PoolView:
    facts: dict[str, object] = {"size": 40, "ready": 0, "booting": 0, "since_take_s": 60.0, "boots_at_once": 1}
    facts.update(changes)
    return PoolView(**facts)  # type: ignore[arg-type]


def test_no_refill_while_a_wake_may_be_in_flight_and_the_pool_can_serve_it() -> None:
    assert refill_count(view(ready=5, since_take_s=0.0)) == 0
    assert refill_count(view(ready=5, since_take_s=QUIET_S - 0.01)) == 0
    assert refill_count(view(ready=5, since_take_s=QUIET_S)) == 1


def test_an_empty_pool_refills_at_once() -> None:
    assert refill_count(view(ready=0, since_take_s=0.0)) == 1


def test_refills_boot_at_most_boots_at_once_processes_cold_wakes_included() -> None:
    assert refill_count(view(boots_at_once=1)) == 1
    assert refill_count(view(boots_at_once=1, booting=1)) == 0  # a cold wake's process is booting
    assert refill_count(view(boots_at_once=4, booting=1)) == 3


def test_refills_stop_at_the_pool_size() -> None:
    assert refill_count(view(size=3, ready=2, boots_at_once=4)) == 1
    assert refill_count(view(size=3, ready=2, booting=1, boots_at_once=4)) == 0
    assert refill_count(view(size=3, ready=3, boots_at_once=4)) == 0
    assert refill_count(view(size=0, boots_at_once=4)) == 0


def test_processes_past_the_size_are_ended_once_no_wake_is_in_flight() -> None:
    assert surplus_count(view(size=3, ready=3)) == 0
    assert surplus_count(view(size=1, ready=3)) == 2
    assert surplus_count(view(size=1, ready=1, booting=1)) == 0  # a booting process may be a cold wake's
    assert surplus_count(view(size=1, ready=3, since_take_s=QUIET_S - 0.01)) == 0  # a wake takes them first


@pytest.mark.parametrize(
    ("share", "available_mib", "held_mib", "cap"),
    [
        (0.2, 10_000, 0, 38),  # 2,000 MiB at 52 MiB each
        (0.2, 8_000, 2_000, 38),  # the pool's own processes count as available: the cap holds as it fills
        (0.1, 1_000, 0, 1),
        (0.0, 10_000, 0, 0),
    ],
)
def test_the_memory_cap_is_a_share_of_available_memory(
    share: float, available_mib: int, held_mib: int, cap: int
) -> None:
    assert memory_cap(share, available_mib * MIB, 52 * MIB, held_mib * MIB) == cap


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes are read in /proc")
def test_a_marker_names_its_process_for_as_long_as_it_lives(tmp_path: Path) -> None:
    # A worker that ran Ray tasks and is idle again keeps its marker (it is warm); a marker left by a process that
    # is gone is removed, and one whose pid a new process reused does not count for the new process.
    me, gone = os.getpid(), 2**22 + 7  # past any pid_max Linux allows: no such process
    (tmp_path / str(me)).write_text(_warm._started(me) or "")
    (tmp_path / str(gone)).write_text("12345")
    cache: dict[int, str] = {}
    markers = _warm._markers(str(tmp_path), cache)
    assert set(markers) == {me}
    assert not (tmp_path / str(gone)).exists()
    assert _warm._marked({me}, markers) == {me}
    assert _warm._marked({me}, {me: "1"}) == set()  # an earlier process with this pid left it
