"""Scheduled prompts: a prompt that arrives by itself, once or on a schedule.

A class declares recurring prompts in ``schedules`` (``ta.every("1 hour", ...)``, ``ta.cron("0 9 * * mon-fri",
...)``, or a handler method instead of a prompt); ``agent.schedule(when, prompt)`` adds one at run time. When one
is due, the scheduler submits the prompt to the agent as a durable submission (``submit_messages``), keyed by the
occurrence, so it runs once even if two schedulers race or one restarts.

In process a ``ta.LocalScheduler`` does the scheduling; on Ray it is one actor for the whole cluster
(``await ta.start_scheduler()``). Real time here, in short intervals; ``ta.ManualClock`` moves time by hand in tests.

Run it:  python examples/06_scheduled_prompt.py   (about 5 seconds)
"""

import asyncio

import think_actors as ta
from think_actors.testing import ScriptedModel, text

replies: asyncio.Queue[str] = asyncio.Queue()  # what the agent answered, for main() to wait on


class Inbox(ta.Think):
    instructions = "You watch the inbox."
    schedules = [ta.every("2 seconds", "Check the inbox.")]

    async def on_chat_response(self, result: ta.ChatResponseResult) -> None:
        """Runs after every turn, whoever started it: here, the scheduler."""
        print(f"[{result.status}] {result.message.text}")
        replies.put_nowait(result.message.text)


async def main() -> None:
    model = ScriptedModel([text("Time to stretch!"), text("No new mail."), text("One new mail, from Ada.")])
    agent = Inbox("me", model=model, store=ta.MemoryStore())
    scheduler = ta.LocalScheduler(poll_s=0.2)
    await scheduler.attach(agent)  # registers the class's schedules
    await agent.schedule(1, "Remind me to stretch.")  # once, in one second
    for task in await agent.list_schedules():
        print("scheduled:", task.schedule, "->", task.prompt)

    scheduler.start()  # runs in the background until stopped
    for _ in range(3):  # the reminder at 1 s, the inbox check at 2 s and 4 s
        await replies.get()
    await scheduler.stop()

    print([m.text for m in agent.get_messages() if m.role == "user"])
    await agent.close()


if __name__ == "__main__":
    asyncio.run(main())
