"""Agents for the live-chat benchmarks (scripts/bench_live.py, scripts/probe_live.py): a string model id served by
``scripts/paced_provider.py`` (its address in ``$OPENAI_API_BASE``), one tool that answers at once."""

from __future__ import annotations

import cProfile
import os
import time

import think_actors as ta


class LiveChat(ta.Think):
    """A chat agent with an actor of its own (the default hosting)."""

    model = "openai/paced"
    max_steps = 4

    @ta.tool
    async def lookup(self, query: str) -> str:
        """Look a query up."""
        return f"found {query}"


class SharedLiveChat(LiveChat):
    """``LiveChat`` hosted many to a process."""

    hosting = "shared"


class ProfiledLiveChat(LiveChat):
    """``LiveChat`` that profiles its event loop's thread (cProfile) from its first turn over
    ``$LIVE_PROFILE_TURNS`` turns and writes ``$LIVE_PROFILE_DIR/<pid>.prof`` (scripts/probe_live.py)."""

    _profile: cProfile.Profile | None = None
    _turns = 0

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        if self._profile is None and self._turns == 0 and os.environ.get("LIVE_PROFILE_DIR"):
            self._profile = cProfile.Profile(time.thread_time)  # CPU time of this thread, not wall time
            self._profile.enable()
        return None

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self._turns += 1
        if self._profile is not None and self._turns >= int(os.environ.get("LIVE_PROFILE_TURNS", "10")):
            self._profile.disable()
            self._profile.dump_stats(os.path.join(os.environ["LIVE_PROFILE_DIR"], f"{os.getpid()}.prof"))
            self._profile = None
