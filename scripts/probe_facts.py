"""Process facts and a worker set-up hook for scripts/probe_wake.py; it imports nothing of think_actors itself,
so a bare actor that uses it stays bare.

Times are ``time.time()`` (one clock for every process of the machine). A process's start comes from
``/proc/self/stat`` against ``/proc/uptime`` (10 ms ticks): psutil's ``create_time`` adds the boot time, which
``/proc/stat`` gives in whole seconds, so it can be a second off.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import psutil

MODULE_IMPORTED_AT = time.time()
_HOOK: dict[str, float] = {}


def setup_hook() -> None:
    """A ``worker_process_setup_hook``: import the package's actor side before the worker takes a task."""
    _HOOK["began"] = time.time()
    import scale_agents  # noqa: F401  (the imports are the point)

    import think_actors.runtime  # noqa: F401

    _HOOK["ended"] = time.time()


def started_at() -> float:
    """When this process started, on the ``time.time()`` clock (10 ms resolution)."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))


def process_facts() -> dict[str, Any]:
    """This process: its start, the set-up hook's times, this module's import and whether litellm is loaded."""
    me = psutil.Process()
    return {
        "pid": os.getpid(),
        "created": started_at(),
        "hook_began": _HOOK.get("began"),
        "hook_ended": _HOOK.get("ended"),
        "module": MODULE_IMPORTED_AT,
        "litellm": "litellm" in sys.modules,
        "openai": "openai" in sys.modules,
        "modules": len(sys.modules),
        "uss_mib": me.memory_full_info().uss / 2**20,
    }
