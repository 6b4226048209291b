"""A durable submission survives a crash: the agent's actor is killed mid-turn, and comes back to finish it.

``submit_messages`` stores the request before it returns and runs it later through the agent's turn queue. Every
turn writes a record of itself, a log of its stream and a ledger entry per tool call as it goes, so when the
agent's process dies, Ray restarts the actor and the agent finishes what it had accepted on its own: it rebuilds
the partial reply, re-runs the tool call that was cut short (allowed here: ``idempotent=True``; a tool that is not
gets an error result saying its outcome is unknown, so nothing is ever done twice), and continues the reply.

Run it:  python examples/05_durable_submission.py
"""

import asyncio
import tempfile
from collections.abc import AsyncIterator

import think_actors as ta
from think_actors.models import ModelEvent
from think_actors.testing import ScriptedModel, text, tool_call


class ReportModel:
    """A stand-in model that answers from the request alone.

    A ``ScriptedModel`` counts its steps in memory, and the restarted actor gets a fresh copy: this one looks at
    the conversation instead, like a real model. It calls ``count_orders`` first, then writes the report.
    """

    model_id = "report-model"

    def stream(self, request: ta.ModelRequest) -> AsyncIterator[ModelEvent]:
        if request.messages[-1]["role"] == "tool":  # the tool has answered: write the report
            return ScriptedModel([text("Nightly report: 42 orders, all shipped.", chunk_size=8)]).stream(request)
        return ScriptedModel([tool_call("count_orders", {"day": "2026-12-01"})]).stream(request)


class Reporter(ta.Think):
    instructions = "You write the nightly report."
    model = ReportModel()

    @ta.tool(idempotent=True)  # safe to run again after a crash
    async def count_orders(self, day: str) -> int:
        """Count the day's orders (slowly: the actor is killed while this runs).

        Args:
            day: The day, as YYYY-MM-DD.
        """
        await asyncio.sleep(2)
        return 42


async def main() -> None:
    with tempfile.TemporaryDirectory() as data_dir:
        ta.init(data_dir=data_dir)  # history in SQLite files under data_dir: they outlive the process
        try:
            agent = await ta.spawn(Reporter, "nightly")
            before = (await agent.info())["pid"]
            submission = await agent.submit_messages("Write the nightly report.", idempotency_key="2026-12-01")
            print("submitted:", submission.status)  # pending: stored, the turn runs in the background

            # Follow the submission's turn; kill the actor as soon as the tool call starts.
            async for chunk in agent.attach(submission.request_id):
                if isinstance(chunk, ta.ToolInputAvailableChunk):
                    print(f"[tool] {chunk.tool_name}({chunk.input}) is running: killing the agent's actor")
                    await agent.kill()  # Ray restarts it (restart=True by default)
                    break

            while True:  # while Ray restarts the actor, calls fail with a retryable AgentUnavailableError
                try:
                    done = await agent.wait_for_submission(submission.submission_id, timeout_s=60)
                    break
                except ta.AgentUnavailableError as err:
                    if not err.retryable:
                        raise
                    await asyncio.sleep(0.2)
            after = (await agent.info())["pid"]
            print(f"after the crash: {done.status} (agent process {before}, then {after})")
            for message in await agent.get_messages():  # the history, read from the restarted actor
                for part in message.parts:
                    if isinstance(part, ta.ToolPart):
                        print(f"{message.role}: [tool] {part.name} -> {part.state}: {part.output}")
                    elif isinstance(part, ta.TextPart):
                        print(f"{message.role}: {part.text}")
        finally:
            ta.shutdown()


if __name__ == "__main__":
    asyncio.run(main())
