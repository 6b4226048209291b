"""A frozen agent process whose agent was taken over runs none of the user's hooks when it runs again.

The shape of a node that froze while its agent ran a tool: Ray (or an operator) gave the agent to a newer process,
whose store claimed the agent's lease, and the frozen process later resumes (SIGSTOP, then SIGCONT, of the real
actor process here; the newer owner is a store this test opens, as a restarted actor's would). Its writes are
refused, and its turn ends at that write without ``after_tool_call``, ``on_chat_response`` or ``on_chat_error``: the
newer owner finishes the turn and runs them. (A step that ends before the process's next write still gets its
``on_step_finish`` there: learning of the takeover takes a store write.)
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import think_actors as ta
from think_actors.runtime import RuntimeConfig
from think_actors.store import SQLiteStore
from think_actors.testing import ScriptedModel, delay, step, text, tool_call

WAIT_S = 30.0


class Freezable(ta.Think):
    """Charges in a tool that waits for a file; writes each hook it runs to ``hooks.log``."""

    model = ScriptedModel([tool_call("charge", {"amount": 7}, id="c1"), text("charged")])

    def __init__(self, name: str, *, log_dir: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.log_dir = Path(log_dir)

    def _hook(self, name: str) -> None:
        with (self.log_dir / "hooks.log").open("a") as f:
            f.write(name + "\n")

    @ta.tool
    async def charge(self, amount: int) -> str:
        """Charge the card."""
        (self.log_dir / "in_tool").write_text(str(os.getpid()))
        await _file(self.log_dir / "release")  # another process says when: a file, polled
        return f"charged {amount}"

    async def after_tool_call(self, ctx: ta.ToolCallResultContext) -> None:
        self._hook("after_tool_call")

    async def on_step_finish(self, result: ta.StepResult) -> None:
        self._hook("on_step_finish")

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        self._hook("on_chat_response")

    async def on_chat_error(self, error: BaseException, ctx: ta.ChatErrorContext) -> Any:
        self._hook("on_chat_error")
        return None


async def _file(path: Path) -> str:
    """The text of ``path`` once another process wrote it."""
    deadline = time.monotonic() + WAIT_S
    while (text := _read(path)) is None:
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)
    return text


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


def _hooks(log_dir: Path) -> list[str]:
    return (_read(log_dir / "hooks.log") or "").split()


async def test_a_frozen_process_resumed_after_a_takeover_runs_no_user_hook(
    ray_runtime: RuntimeConfig, unique: str, tmp_path: Path
) -> None:
    agent = await ta.spawn(Freezable, unique, log_dir=str(tmp_path))
    turn = asyncio.ensure_future(agent.save_messages("charge 7"))
    pid = int(await _file(tmp_path / "in_tool"))
    os.kill(pid, signal.SIGSTOP)  # the node freezes mid-tool
    try:
        newer = SQLiteStore.for_agent(ray_runtime.data_dir, agent.path)  # the agent's new owner claims its lease
        await newer.load_messages()
        (tmp_path / "release").write_text("")
    finally:
        os.kill(pid, signal.SIGCONT)  # and runs again
    try:
        outcome: Any = await asyncio.wait_for(turn, WAIT_S)
    except Exception as err:  # the superseded turn ends at its refused write
        outcome = err
    assert "owned by another writer" in str(outcome), outcome
    assert _hooks(tmp_path) == []
    await newer.close()


class FreezableStream(Freezable):
    """Streams its answer slowly; says its process id at its first token."""

    model = ScriptedModel([step(text("partial "), delay(1.0), text("answer"))])

    async def on_chunk(self, ctx: ta.ChunkContext) -> None:
        if ctx.type == "text-delta" and _read(self.log_dir / "in_tool") is None:
            (self.log_dir / "in_tool").write_text(str(os.getpid()))


async def test_a_process_frozen_mid_stream_and_taken_over_ends_its_stream_without_hooks(
    ray_runtime: RuntimeConfig, unique: str, tmp_path: Path
) -> None:
    agent = await ta.spawn(FreezableStream, unique, log_dir=str(tmp_path))
    received: list[Any] = []

    async def read() -> None:
        async for chunk in agent.chat("hi"):
            received.append(chunk)

    reading = asyncio.ensure_future(read())
    pid = int(await _file(tmp_path / "in_tool"))
    os.kill(pid, signal.SIGSTOP)
    try:
        newer = SQLiteStore.for_agent(ray_runtime.data_dir, agent.path)
        await newer.load_messages()
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        await asyncio.wait_for(reading, WAIT_S)
        failure: BaseException | None = None
    except Exception as err:
        failure = err
    await asyncio.sleep(1.0)  # what the old process would still run after its stream ended
    hooks = [hook for hook in _hooks(tmp_path) if hook != "on_step_finish"]  # the step ended before any write
    assert hooks == [], (failure, [(c.type, getattr(c, "delta", None)) for c in received])
    assert "answer" not in [getattr(c, "delta", None) for c in received]  # nothing after the takeover got out
    await newer.close()
