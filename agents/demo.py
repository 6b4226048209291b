"""The multi-agent demo: a lead fans out to researchers in parallel on Ray; researchers search a library that an
MCP server serves (agents/library.py, one stdio process per node behind a shared connection actor).

python -m agents.demo                       # local Ray, scripted model
python -m agents.demo --model openai/gpt-4o-mini "Compare Ray actors and asyncio"
python -m agents.demo --address auto        # against a running cluster (scripts/start_cluster.sh)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

QUESTION = "Compare Ray actors and asyncio for serving many agents"


class Renderer:
    """Prints the stream readably: text tagged by agent, tool calls and results, hook events."""

    COLORS = ["\033[36m", "\033[33m", "\033[35m", "\033[32m", "\033[34m", "\033[91m"]

    def __init__(self, color: bool, root: str = ""):
        self.color = color
        self.root = root
        self.line_owner: str | None = None
        self.palette: dict[str, str] = {}
        self.agents: set[str] = set()
        self.turns = 0
        self.tool_calls = 0
        self.searches = 0
        self.tokens = 0

    def _tag(self, agent: str) -> str:
        # Children are shown relative to the lead: "researcher/run-call_81ab" rather than the whole path.
        if self.root and agent.startswith(self.root + "/"):
            agent = "└ " + agent[len(self.root) + 1 :]
        if not self.color:
            return f"[{agent}]"
        color = self.palette.setdefault(agent, self.COLORS[len(self.palette) % len(self.COLORS)])
        return f"{color}[{agent}]\033[0m"

    def _dim(self, text: str) -> str:
        return f"\033[2m{text}\033[0m" if self.color else text

    def _line(self, agent: str, text: str) -> None:
        self._end_text()
        print(f"{self._tag(agent)} {text}", flush=True)

    def _end_text(self) -> None:
        if self.line_owner is not None:
            print(flush=True)
            self.line_owner = None

    def _text(self, agent: str, delta: str) -> None:
        if self.line_owner != agent:
            self._end_text()
            print(f"{self._tag(agent)} ", end="")
            self.line_owner = agent
        print(delta.replace("\n", "\n    "), end="", flush=True)

    def show(self, agent: str, chunk: Any) -> None:
        self.agents.add(agent)
        kind = chunk.type
        if kind == "agent-tool-event":
            if chunk.kind == "chunk" and chunk.chunk is not None:
                self.show(chunk.agent, chunk.chunk)
            elif chunk.kind == "started":
                self._line(agent, f"→ started child {chunk.agent}")
            else:
                self._line(chunk.agent, self._dim(f"■ {chunk.kind}"))
        elif kind == "start":
            self.turns += 1
        elif kind == "text-delta":
            self._text(agent, chunk.delta)
        elif kind == "tool-input-available":
            self.tool_calls += 1
            self.searches += chunk.tool_name == "library_search"
            self._line(agent, f"⚙ {chunk.tool_name}({_short(chunk.input)})")
        elif kind == "tool-output-available" and not chunk.preliminary:
            self._line(agent, f"✓ result {_short(chunk.output)}")
        elif kind in ("tool-output-error", "tool-input-error"):
            self._line(agent, f"✗ tool error: {chunk.error_text}")
        elif kind == "data-hook":
            data = dict(chunk.data)
            hook = data.pop("hook")
            data.pop("agent", None)
            self.tokens += data.get("tokens", 0) if hook == "on_step_finish" else 0
            self._line(agent, self._dim(f"· {hook} {_short(data, 90)}"))
        elif kind == "error":
            self._line(agent, f"✗ error: {chunk.error_text}")
        elif kind == "abort":
            self._line(agent, "✗ aborted")

    def finish(self) -> None:
        self._end_text()


def _short(value: Any, limit: int = 70) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


async def run(args: argparse.Namespace) -> int:
    import ray

    import think_actors as ta

    from .team import Lead

    started = time.perf_counter()
    config = ta.init(args.address, data_dir=args.data_dir, quiet=not args.verbose)
    lead = await ta.spawn(Lead, args.name)
    ready_s = time.perf_counter() - started
    model = args.model or "scripted team model"
    print(f"think_actors demo — Ray ready in {ready_s:.1f}s, model: {model}\n", flush=True)
    renderer = Renderer(color=sys.stdout.isatty() and not os.environ.get("NO_COLOR"), root=lead.path)
    print(f"{renderer._tag('you')} {args.question}", flush=True)
    turn_started = time.perf_counter()
    status = "completed"
    async for chunk in lead.chat(args.question):
        if chunk.type in ("error", "abort"):
            status = chunk.type
        renderer.show(lead.path, chunk)
    renderer.finish()
    wall = time.perf_counter() - turn_started
    actors = (
        [a for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == config.namespace]
        if hasattr(ray.util, "list_named_actors")
        else []
    )
    children = sorted(a for a in renderer.agents if a != lead.path)
    nodes = {}
    for path in [lead.path, *children]:
        info = await ta.AgentHandle(ray.get_actor(path, namespace=config.namespace), path, "").info()
        nodes[path] = info["node_id"][:8]
    print("\n── summary " + "─" * 50)
    print(f"  status       {status}")
    print(f"  agents       {len(renderer.agents)} ({lead.path} + {len(children)} researchers)")
    print(
        f"  actors       {len(actors)} named in namespace {config.namespace!r} "
        "(agents, the library's MCP connection, model servers)"
    )
    print(
        f"  nodes        {len(set(nodes.values()))} used: "
        + ", ".join(f"{'lead' if p == lead.path else p.rsplit('/', 1)[-1]}@{n}" for p, n in nodes.items())
    )
    print(f"  turns        {renderer.turns}")
    print(f"  tool calls   {renderer.tool_calls} ({renderer.searches} library searches, by its MCP server)")
    print(f"  tokens       {renderer.tokens}" + (" (estimated by the scripted model)" if not args.model else ""))
    print(f"  wall time    {wall:.2f}s for the turn, {time.perf_counter() - started:.1f}s in all")
    if args.address is None:
        ta.shutdown()
    return 0 if status == "completed" else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m agents.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("question", nargs="?", default=QUESTION)
    parser.add_argument("--model", help="a litellm model id for every agent (default: the scripted model)")
    parser.add_argument("--address", help="Ray address to join (e.g. auto); default: start local Ray")
    parser.add_argument("--name", default=None, help="the lead agent's name (default: a fresh one per run)")
    parser.add_argument("--data-dir", default=None, help="where agents' SQLite stores live")
    parser.add_argument("--verbose", action="store_true", help="show Ray's logs")
    args = parser.parse_args(argv)
    if args.model:
        os.environ["THINK_ACTORS_DEMO_MODEL"] = args.model  # read by agents/team.py in every actor
    if args.name is None:
        args.name = "team-" + time.strftime("%Y%m%d-%H%M%S")
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
