"""Think's durable entry points: submissions, schedules, answers to waiting tool calls, re-attaching to a turn.

Each one forwards to a feature built on the agent's engine (``_turn/durable.py``) or to its schedules; ``Think``
inherits them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from . import actions
from ._turn.durable import Durable
from ._turn.engine import Engine
from ._turn.spec import normalize_input
from .actions import PendingApproval
from .errors import ConfigurationError
from .identity import Principal
from .limits import RunLimits
from .schedule import AgentSchedules, RetryPolicy, ScheduledTask, TaskInfo, open_schedule_store, run_handler
from .submissions import Submission

__all__ = ["DurableEntryPoints"]


class DurableEntryPoints:
    """Entry points of a Think agent that outlive a turn (``Think`` is the class to subclass)."""

    path: str
    store_url: str | None
    data_dir: str | None
    schedules: Sequence[ScheduledTask]
    default_timezone: str | None
    _engine: Engine
    _durable: Durable
    _schedules: AgentSchedules | None
    _channel: Callable[[Any], str | None]  # Think's: a channel= argument checked against the class's channels

    async def submit_messages(
        self,
        messages: Any,
        *,
        submission_id: str | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, Any] | None = None,
        output: Any = None,
        limits: RunLimits | dict[str, Any] | None = None,
        principal: Principal | None = None,
        channel: str | None = None,
    ) -> Submission:
        """Accept ``messages`` durably and run their turn later, in order (reference §1.7).

        Returns once the submission is committed to the store (``status="pending"``, ``accepted=True``); its turn
        runs in the background through the normal turn queue, appending the messages only when it starts. A retry
        with the same ``submission_id`` or ``idempotency_key`` returns the existing submission with
        ``accepted=False`` and stores nothing. Never waits on the queue, so it is safe inside a turn, a tool and
        ``on_chat_response``. ``output`` asks for structured output as ``save_messages(output=...)`` does; the
        completed submission carries it in ``Submission.output`` (``wait_for_submission``, ``inspect_submission``).
        A model class is stored by its import path: an agent that restarts before the turn runs imports it again,
        so define it at the top level of a module. Raises ConfigurationError for empty input, an ``output`` that is
        neither a pydantic model class nor a dict, or an id and key naming two submissions. ``limits``
        (``RunLimits``) bounds the submission's turn and every agent it starts; it is stored with the submission, and
        a turn that a crash interrupted goes on with what its run had left. ``principal`` (``ta.Principal``) is who
        submits: stamped on the messages (``Submission.principal``), and the turn that runs them acts for them;
        ``channel`` is where they came from (``Submission.channel``, the turn's ``ctx.channel``).
        """
        return await self._durable.submissions.submit(
            messages,
            submission_id=submission_id,
            idempotency_key=idempotency_key,
            metadata=metadata,
            output=output,
            limits=RunLimits.of(limits),
            principal=Principal.of(principal),
            channel=self._channel(channel),
        )

    async def prompt(
        self,
        step: str,
        prompt: Any,
        *,
        output: Any = None,
        timeout_s: float | None = 300.0,
        channel: str | None = None,
        principal: Principal | None = None,
        limits: RunLimits | dict[str, Any] | None = None,
    ) -> Submission:
        """Run ``prompt`` once as the workflow step ``step`` and return its finished submission.

        Durable and idempotent by ``step``: the prompt is a submission whose id is ``step:<step>``, so calling again
        with the same step (a workflow retrying after its worker died, hours later, on another node) runs no new
        turn: it waits for the one running, or returns the stored result at once. With ``output`` (a pydantic model
        class), the answer comes as the input of a final-answer tool the turn offers and the model must call by its
        last permitted step, as Think's workflow prompts do: other tool calls may come first, the call itself is
        never stored, and ``Submission.output`` is the validated object. Raises ``TimeoutError`` when the step
        has not finished after ``timeout_s`` (it goes on; ask again to keep waiting). A step that ended ``error``
        or ``aborted`` runs again when asked again; the same step name with another prompt is a
        ``ConfigurationError`` (a step's name stands for one prompt).
        """
        if not isinstance(step, str) or not step.strip() or len(step) > 200:
            raise ConfigurationError(
                f"a workflow step is named by a non-empty str of at most 200 characters, not {step!r}"
            )
        submission_id = f"step:{step}"
        await self._engine.ensure_started()
        earlier = await self._engine.store.get_submission(submission_id)
        if earlier is not None:
            asked = [m.text for m in normalize_input(prompt)]
            if [m.text for m in earlier.messages] != asked:
                raise ConfigurationError(
                    f"the workflow step {step!r} ran with another prompt: a step's name stands for one prompt "
                    "(its result is kept under it); give this prompt a step name of its own"
                )
            if earlier.status in ("error", "aborted"):  # a failed step runs again when asked again
                await self._durable.submissions.delete(submission_id)
        await self._durable.submissions.submit(
            prompt,
            submission_id=submission_id,
            idempotency_key=None,
            metadata={"step": step},
            output=output,
            limits=RunLimits.of(limits),
            principal=Principal.of(principal),
            channel=self._channel(channel),
            final_answer=True,
        )
        try:
            return await self.wait_for_submission(submission_id, timeout_s=timeout_s)
        except TimeoutError:
            raise TimeoutError(
                f"the workflow step {step!r} did not finish in {timeout_s} s; it goes on: call prompt({step!r}, ...) "
                f"again to keep waiting, or inspect_submission({submission_id!r}) to look"
            ) from None

    async def pending_approvals(self, execution_id: str | None = None) -> list[PendingApproval]:
        """The durable-pause actions waiting for a person (``ta.action(kind="durable-pause")``), oldest first, each
        with what it would do; ``execution_id`` limits it to that one."""
        await self._engine.ensure_started()
        return await actions.pending_approvals(self, execution_id)

    async def approve_execution(self, execution_id: str, *, auto_continue: bool = True) -> Any:
        """Approve a parked action: its function runs now (through its ledger, so never twice), its output replaces
        the paused one in the conversation, and the conversation continues (``auto_continue``) with no socket
        needed. Exactly one approve or reject of an execution wins; another answers ``{"status": "error", ...}``,
        never raises."""
        return await actions.approve_execution(self, execution_id, auto_continue=auto_continue)

    async def reject_execution(
        self, execution_id: str, reason: str | None = None, *, auto_continue: bool = True
    ) -> Any:
        """Reject a parked action: its function never runs; the model sees ``{"status": "rejected", "reason"}``
        and the conversation continues (``auto_continue``) so it can adapt."""
        return await actions.reject_execution(self, execution_id, reason, auto_continue=auto_continue)

    async def inspect_submission(self, submission_id: str) -> Submission | None:
        """The submission's current state, or None when there is none."""
        await self._engine.ensure_started()
        return await self._durable.submissions.inspect(submission_id)

    async def list_submissions(self, status: str | Sequence[str] | None = None, limit: int = 50) -> list[Submission]:
        """Submissions (of a status or statuses), newest first (by acceptance time, then id, as Think lists them);
        ``limit`` (clamped to 1..100, as Think's) keeps the newest."""
        await self._engine.ensure_started()
        return await self._durable.submissions.list_some(status, limit)

    async def cancel_submission(self, submission_id: str, reason: str | None = None) -> bool:
        """Abort a pending or running submission (its status becomes ``aborted``); False if it is already final."""
        await self._engine.ensure_started()
        return await self._durable.submissions.cancel(submission_id, reason)

    async def delete_submission(self, submission_id: str) -> bool:
        """Delete a final submission; pending and running ones are kept (False)."""
        await self._engine.ensure_started()
        return await self._durable.submissions.delete(submission_id)

    async def delete_submissions(
        self, status: str | Sequence[str] | None = None, *, completed_before: float | None = None, limit: int = 100
    ) -> int:
        """Delete final submissions (of ``status``, completed before a unix time); returns how many.

        The earliest finished go first (by completion time, then acceptance time, as Think deletes them); ``limit``
        is clamped to 1..500."""
        await self._engine.ensure_started()
        return await self._durable.submissions.delete_many(status, completed_before, limit)

    async def wait_for_submission(self, submission_id: str, *, timeout_s: float | None = None) -> Submission:
        """Wait until the submission's status is final and return it."""
        await self._engine.ensure_started()
        return await self._durable.submissions.wait(submission_id, timeout_s)

    async def schedule(
        self,
        when: Any,
        prompt: str | Callable[..., Any] | None = None,
        *,
        handler: str | None = None,
        metadata: dict[str, Any] | None = None,
        task_id: str | None = None,
        retry: RetryPolicy | None = None,
        timezone: str | None = None,
        limits: RunLimits | dict[str, Any] | None = None,
    ) -> TaskInfo:
        """Schedule a prompt (a string: it becomes a submission) or a handler (a method of this agent, or its name).

        ``when``: seconds from now or a datetime (once), or a spec (``"every 2 hours"``, ``"every day at 09:00 in
        Europe/Paris"``, ``"0 9 * * mon-fri"``). See ``think_actors.schedule`` for occurrences and DST rules.
        ``limits`` (``RunLimits`` or a dict of its fields) bounds every turn the prompt starts, in place of the
        class's ``run_limits``; it is stored with the task.
        """
        if callable(prompt):
            handler, prompt = getattr(prompt, "__name__", ""), None
        return await self._schedule_binding().schedule(
            when,
            prompt,
            handler=handler,
            metadata=metadata,
            task_id=task_id,
            retry=retry,
            timezone=timezone,
            limits=limits,
        )

    async def list_schedules(self) -> list[TaskInfo]:
        """This agent's scheduled tasks, the next to run first."""
        return await self._schedule_binding().list()

    async def cancel_schedule(self, task_id: str) -> bool:
        """Remove a scheduled task (and a retry it was waiting for); False when there was none."""
        return await self._schedule_binding().cancel(task_id)

    async def run_scheduled_task(self, handler: str, facts: dict[str, Any]) -> bool:
        """Run a handler task's occurrence (the scheduler calls this); False if that occurrence already ran."""
        await self._engine.ensure_started()
        return await run_handler(self, handler, facts)

    def attach_schedules(self, schedules: AgentSchedules) -> None:
        """Keep this agent's scheduled tasks in ``schedules`` (``LocalScheduler.attach`` and the runtime call it)."""
        self._schedules = schedules

    async def sync_schedules(self) -> None:
        """Register the class's ``schedules`` in the schedule store (on Ray, when the actor starts)."""
        if self.schedules or self._schedules is not None:
            await self._schedule_binding().sync_class(self.schedules)

    def _schedule_binding(self) -> AgentSchedules:
        if self._schedules is None:
            if self._engine.runtime is None:
                raise ConfigurationError(
                    f"agent {self.path!r} runs in process without a scheduler: attach it with "
                    "`await ta.LocalScheduler().attach(agent)`, or spawn it on Ray"
                )
            store = open_schedule_store(self.store_url, self.data_dir)  # the store the cluster's scheduler reads
            self._schedules = AgentSchedules(
                store, self.path, type(self).__name__, default_timezone=self.default_timezone
            )
        return self._schedules

    async def add_tool_result(
        self, tool_call_id: str, output: Any = None, *, error: str | None = None, auto_continue: bool = False
    ) -> bool:
        """Answer a client tool's call (or any call still waiting) with ``output``, or ``error``.

        The first answer wins; False when no call waits under that id. With ``auto_continue`` the turn goes on
        after 50 ms of quiet (so a batch coalesces), unless the latest reply is mid-batch: one of its calls has its
        answer and another still waits (then the last answer of the batch continues it).
        """
        return await self._durable.interactions.add_tool_result(
            tool_call_id, output=output, error=error, auto_continue=auto_continue
        )

    async def add_tool_approval(
        self, tool_call_id: str, approved: bool, *, reason: str | None = None, auto_continue: bool = False
    ) -> bool:
        """Approve or deny a call of a ``needs_approval`` tool. Approved, the continuation runs it (through
        ``before_tool_call``, still the outer gate); denied, the model sees the denial and the tool never runs."""
        return await self._durable.interactions.add_tool_approval(
            tool_call_id, approved, reason=reason, auto_continue=auto_continue
        )

    def has_pending_interaction(self) -> bool:
        """Whether a call waits for a person (an approval) or a client (a call of a stored client tool, see
        ``set_client_tools``). A server tool's waiting call, or one of a client tool of one ``chat()``, is not:
        nothing can answer it any more, so the next turn or recovery repairs it."""
        return self._durable.interactions.pending()

    async def pending_continuation_id(self) -> str | None:
        """The request id of the auto-continuation that runs now, or that a tool answer armed and will run next
        (the gateway tells a client that asks for the stream this id before it starts); None when there is none."""
        await self._engine.ensure_started()
        return self._durable.interactions.upcoming()

    async def wait_until_stable(self, *, timeout_s: float | None = None) -> None:
        """Wait until no turn runs or waits and no auto-continuation is armed (it may never be, while a call
        waits for an answer: pass a timeout)."""
        await self._durable.interactions.wait_until_stable(timeout_s)

    async def attach(self, request_id: str, *, position: int | None = None) -> AsyncIterator[Any]:
        """Follow a turn that recovery resumed after a crash, by the request id of the interrupted turn (or a
        submission's or an auto-continuation's turn). Raises TurnError for an id with no such turn.

        Without ``position``: the chunks the turn streamed since this process followed it, then the rest. With
        ``position``, how much of the turn's stream the caller already holds (a delta counts its characters, every
        other chunk the log keeps one; ``RemoteStream.position`` counts it): every chunk after it, once, the part
        of the log written before a crash included.
        """
        await self._engine.ensure_started()
        async for chunk in self._durable.recovery.attach(request_id, position):
            yield chunk
