"""The chain of agents whose turns are active up the current call stack; it travels with each actor call.

Kept in its own module: Ray pickles actor classes by value, and a ContextVar cannot be pickled, so actor
code reaches it through this (importable) module instead of holding it as a global.
"""

from __future__ import annotations

import contextvars

CHAIN: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("think_actors_chain", default=())
