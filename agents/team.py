"""The research team: a lead that fans out to researchers (agent tools); researchers search a library served by an
MCP server (agents/library.py, over stdio; one process per node, shared by every researcher there).

Short enough to copy. Every agent here runs as its own Ray actor when spawned with ``ta.spawn``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import think_actors as ta
from think_actors.chunks import DataChunk

from .scripted_team import ScriptedTeamModel

# ``--model`` sets this before Ray starts, so every agent actor on every node sees the same choice.
REAL_MODEL = os.environ.get("THINK_ACTORS_DEMO_MODEL") or None
# The library's MCP server: its tool ``search`` is ``library_search`` to the model. ``shared``: on Ray, one
# connection (one server process) per node, in a named actor every researcher of the node calls.
LIBRARY = ta.mcp.stdio(sys.executable, str(Path(__file__).with_name("library.py")), name="library", shared=True)


class Traced(ta.Think):
    """Puts a transient ``data-hook`` chunk into the stream at each hook, so callers can watch the pipeline."""

    def _trace(self, hook: str, **facts: Any) -> None:
        self.emit(DataChunk(type="data-hook", data={"agent": self.path, "hook": hook, **facts}, transient=True))

    async def before_turn(self, ctx: ta.TurnContext) -> ta.TurnConfig | None:
        self._trace("before_turn", tools=sorted(ctx.tools), messages=len(ctx.messages))
        return None

    async def before_tool_call(self, ctx: ta.ToolCallContext) -> Any:
        self._trace("before_tool_call", tool=ctx.tool_name, input=ctx.input)
        return None

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self._trace("after_tool_call", tool=ctx.tool_name, success=ctx.success, ms=round(ctx.duration_ms, 1))

    async def on_step_finish(self, ctx: ta.StepResult) -> None:
        self._trace(
            "on_step_finish", step=ctx.step_number, finish=ctx.finish_reason, tokens=ctx.usage.total_tokens or 0
        )


class Researcher(Traced):
    model = REAL_MODEL or ScriptedTeamModel("researcher")
    instructions = (
        "You research one question. Search the library first, then answer in two sentences, "
        "citing passage ids in brackets."
    )
    mcp_servers = (LIBRARY,)


class Lead(Traced):
    model = REAL_MODEL or ScriptedTeamModel("lead")
    instructions = (
        "You lead a research team. Split the user's question into 2-4 sub-questions and call the "
        "researcher tool once per sub-question, all in the same step. Then answer from their reports."
    )
    tools = [ta.agent_tool(Researcher, description="Research one sub-question and report with sources.")]
