"""Busy processes on every core, for tests of what must hold on a loaded machine (restarts race with start-up
there: stack-notes, "The actor is restarting")."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# Ray starts its worker processes at niceness 15 (the raylet's ``worker_niceness``): spinners at the default 0
# would take nearly every cycle from them (a restart took minutes, not seconds). Spinners at the workers' own
# niceness compete with them as other work of the node's Ray jobs would, one for one; the raylet and GCS, at 0,
# keep their priority over both, as on any node.
SPIN_NICENESS = 15


@contextlib.contextmanager
def burning_cpus(count: int | None = None) -> Iterator[list[int]]:
    """Keep ``count`` processes (default: one per core) spinning for the block, at Ray's workers' niceness;
    yields their pids.

    They are killed by their pids when the block ends, however it ends.
    """
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(SPIN_NICENESS))
        for _ in range(count or cores())
    ]
    try:
        yield [p.pid for p in spinners]
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(timeout=10)
