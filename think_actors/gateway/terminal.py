"""``think-actors chat``: talk to one agent of an ``--app`` module from the terminal.

The agent is found the way ``think-actors serve`` finds it (``--agent researcher/r1`` is the gateway's
``/agents/researcher/r1``), in this process by default or on Ray with ``--ray``, and keeps its history where
``serve``'s agents keep theirs: ``$THINK_STORE`` when set, else a SQLite file per agent under
``$THINK_ACTORS_DATA_DIR`` (default ``./.think_actors``). So a chat goes on where the last one stopped, and the same
agent is reachable over the gateway. Text streams to stdout as it arrives; tool calls and their results, a child
agent's runs, errors and aborts are lines of their own, marked (and dimmed on a terminal).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading
from typing import Any, TextIO

from ..agent import Think, kebab_case
from ..chunks import (
    AbortChunk,
    AgentToolEventChunk,
    ErrorChunk,
    TextDeltaChunk,
    ToolInputAvailableChunk,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
)
from ..delegation import LocalAgentHandle
from ..errors import ConfigurationError
from ..messages import UIMessage
from .classes import run_app_setup
from .directory import AgentDirectory, LocalDirectory, RayDirectory

__all__ = ["EXIT_COMMANDS", "parse_agent", "run_chat"]

EXIT_COMMANDS = ("/exit", "/quit")
_HISTORY_SHOWN = 10  # earlier messages printed when a chat starts; older ones are counted


def parse_agent(spec: str, classes: list[type[Think]]) -> tuple[str, str]:
    """``CLASS/NAME`` (CLASS in kebab case, as in gateway URLs, or the class's own name; NAME default
    ``default``) as the class's slug and the agent's name. Raises ConfigurationError for an unknown class."""
    class_part, _, name = spec.partition("/")
    by_slug = {kebab_case(cls.__name__): cls for cls in classes}
    slug = class_part if class_part in by_slug else kebab_case(class_part)
    if slug not in by_slug:
        known = ", ".join(sorted(by_slug))
        raise ConfigurationError(f"no agent class {class_part!r} in the --app module; its classes are: {known}")
    return slug, name or "default"


class _Printer:
    """Writes a turn's chunks: text as it arrives, everything else on a marked line of its own."""

    def __init__(self, out: TextIO, color: bool) -> None:
        self.out = out
        self.color = color
        self.mid_line = False

    def mark(self, text: str) -> None:
        """A line of its own, after the text so far."""
        if self.mid_line:
            self.out.write("\n")
            self.mid_line = False
        self.out.write(f"\033[2m{text}\033[0m\n" if self.color else f"{text}\n")
        self.out.flush()

    def text(self, delta: str) -> None:
        self.out.write(delta)
        self.out.flush()
        self.mid_line = not delta.endswith("\n")

    def end(self) -> None:
        if self.mid_line:
            self.out.write("\n")
            self.out.flush()
            self.mid_line = False

    def chunk(self, chunk: Any, child: str | None = None) -> None:
        where = f" {child}" if child else ""
        if isinstance(chunk, TextDeltaChunk):
            if child is None:  # a child's text reaches its parent as the tool's result
                self.text(chunk.delta)
        elif isinstance(chunk, ToolInputAvailableChunk):
            self.mark(f"  [tool{where}] {chunk.tool_name} {_short(chunk.input)}")
        elif isinstance(chunk, ToolOutputAvailableChunk) and not chunk.preliminary:
            self.mark(f"  [tool result{where}] {_short(chunk.output)}")
        elif isinstance(chunk, ToolOutputErrorChunk):
            self.mark(f"  [tool error{where}] {chunk.error_text}")
        elif isinstance(chunk, AgentToolEventChunk):
            if chunk.kind == "chunk" and chunk.chunk is not None:
                self.chunk(chunk.chunk, chunk.agent)
            else:
                self.mark(f"  [agent {chunk.agent}] {chunk.kind}")
        elif isinstance(chunk, ErrorChunk):
            self.mark(f"  [error{where}] {chunk.error_text}")
        elif isinstance(chunk, AbortChunk) and child is None:
            self.mark("  [aborted]")


def _short(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _show_history(messages: list[UIMessage], printer: _Printer) -> None:
    if not messages:
        return
    older = len(messages) - _HISTORY_SHOWN
    if older > 0:
        printer.mark(f"… {older} earlier messages")
    for message in messages[-_HISTORY_SHOWN:]:
        printer.mark(f"{'you' if message.role == 'user' else message.role}: {message.text}")
    printer.mark("──")


async def _read_line(prompt: str) -> str | None:
    """One line from stdin (None at its end), read by ``input()`` (line editing on a terminal) in a daemon thread:
    Ctrl-C at the prompt then ends the chat at once, where a thread of the loop's executor would hold the exit
    until Enter."""
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not line.done():
            line.set_result(value)

    def read() -> None:
        try:
            value: str | None = input(prompt)
        except EOFError:
            value = None
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile (Ctrl-C): nobody waits any more
            loop.call_soon_threadsafe(settle, value)

    threading.Thread(target=read, name="think-actors-chat-input", daemon=True).start()
    return await line


async def run_chat(app: str, agent_spec: str, classes: list[type[Think]], *, ray: bool, address: str | None) -> int:
    """Chat with ``agent_spec`` of ``app`` until stdin ends (Ctrl-D) or ``/exit``; returns the exit status."""
    slug, name = parse_agent(agent_spec, classes)
    # No `import readline` (line editing): GNU readline reading in a thread takes Ctrl-C for itself.
    interactive = sys.stdin.isatty()
    printer = _Printer(sys.stdout, color=sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    directory: AgentDirectory
    if ray:
        from ..runtime import init, shutdown  # ray: only when agents run on it

        init(address)
        directory = RayDirectory(classes)
    else:
        directory = LocalDirectory(classes)
    agent: Any = None
    try:
        await run_app_setup(app)
        agent = await directory.get(slug, name)
        where = "on Ray" if ray else "in this process"
        printer.mark(f"chatting with {slug}/{name} ({where}); Ctrl-D or /exit to quit")
        _show_history(await agent.get_messages(), printer)
        prompt = "you> " if interactive else ""
        while (line := await _read_line(prompt)) is not None:
            message = line.strip()
            if message in EXIT_COMMANDS:
                break
            if not message:
                continue
            if not interactive:  # piped input: show what was said, so the output reads as a transcript
                printer.mark(f"you: {message}")
            async for chunk in agent.chat(message):
                printer.chunk(chunk)
            printer.end()
    finally:
        if isinstance(agent, LocalAgentHandle):
            await agent.agent.close()  # its store, its MCP servers' processes
        if ray:
            shutdown()
    return 0
