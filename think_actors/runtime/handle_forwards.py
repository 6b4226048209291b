"""The methods of an ``AgentHandle`` that forward a ``Think`` method to the agent's actor as they are: durable
submissions, workflow prompts, durable approvals, tool answers, MCP servers and schedules. Split from
``handles.py`` (the handle, its calls and streams), whose ``AgentHandle`` inherits them."""

from __future__ import annotations

from typing import Any

from .. import tracing
from ..identity import Principal
from ..limits import RunLimits
from ..mcp import McpServerConfig, McpServerState
from ..schedule import TaskInfo
from ..submissions import Submission
from .calls import _call as _call

__all__ = ["ForwardedMethods"]


class ForwardedMethods:
    """``Think``'s methods that cross to the agent's actor unchanged (``AgentHandle`` provides the transport)."""

    async def _invoke(self, method: str, *args: Any, safe: bool = False) -> Any:
        raise NotImplementedError

    async def _forward(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def _forward_safe(self, method: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

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
        """``Think.submit_messages`` on the actor: returns once the submission is committed in its store."""
        kwargs = {
            "submission_id": submission_id,
            "idempotency_key": idempotency_key,
            "metadata": metadata,
            "output": output,
            "limits": RunLimits.of(limits),
            "principal": Principal.of(principal),
            "channel": channel,
        }
        # With the caller's trace context: the drain's span links to it, whenever the submission runs.
        trace = tracing.carrier()
        keyed = submission_id is not None or idempotency_key is not None  # sent twice, still one submission
        return await self._invoke(  # type: ignore[no-any-return]
            "forward", "submit_messages", (messages,), kwargs, trace, safe=keyed
        )

    async def inspect_submission(self, submission_id: str) -> Submission | None:
        """``Think.inspect_submission`` on the actor."""
        return await self._forward_safe("inspect_submission", submission_id)  # type: ignore[no-any-return]

    async def list_submissions(self, status: Any = None, limit: int = 50) -> list[Submission]:
        """``Think.list_submissions`` on the actor."""
        return await self._forward_safe("list_submissions", status, limit)  # type: ignore[no-any-return]

    async def cancel_submission(self, submission_id: str, reason: str | None = None) -> bool:
        """``Think.cancel_submission`` on the actor."""
        return bool(await self._forward("cancel_submission", submission_id, reason))

    async def delete_submission(self, submission_id: str) -> bool:
        """``Think.delete_submission`` on the actor."""
        return bool(await self._forward("delete_submission", submission_id))

    async def delete_submissions(
        self, status: Any = None, *, completed_before: float | None = None, limit: int = 100
    ) -> int:
        """``Think.delete_submissions`` on the actor."""
        kwargs = {"completed_before": completed_before, "limit": limit}
        return int(await self._forward("delete_submissions", status, **kwargs))

    async def wait_for_submission(self, submission_id: str, *, timeout_s: float | None = None) -> Submission:
        """``Think.wait_for_submission`` on the actor: the submission once final (with its ``output``)."""
        return await self._forward_safe(  # type: ignore[no-any-return]
            "wait_for_submission", submission_id, timeout_s=timeout_s
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
        """``Think.prompt`` on the actor: the workflow step ``step``, run once, its finished submission. Sent
        again while the actor restarts: the step is idempotent by its name."""
        options = {
            "output": output,
            "timeout_s": timeout_s,
            "channel": channel,
            "principal": Principal.of(principal),
            "limits": RunLimits.of(limits),
        }
        return await self._forward_safe("prompt", step, prompt, **options)  # type: ignore[no-any-return]

    async def pending_approvals(self, execution_id: str | None = None) -> list[Any]:
        """``Think.pending_approvals`` on the actor."""
        return await self._forward_safe("pending_approvals", execution_id)  # type: ignore[no-any-return]

    async def approve_execution(self, execution_id: str, *, auto_continue: bool = True) -> Any:
        """``Think.approve_execution`` on the actor (sent again while it restarts: one approve wins)."""
        return await self._forward_safe("approve_execution", execution_id, auto_continue=auto_continue)

    async def reject_execution(
        self, execution_id: str, reason: str | None = None, *, auto_continue: bool = True
    ) -> Any:
        """``Think.reject_execution`` on the actor."""
        return await self._forward_safe("reject_execution", execution_id, reason, auto_continue=auto_continue)

    async def add_tool_result(self, tool_call_id: str, output: Any = None, **options: Any) -> bool:
        """``Think.add_tool_result`` on the actor."""
        return bool(await self._forward("add_tool_result", tool_call_id, output, **options))

    async def add_tool_approval(self, tool_call_id: str, approved: bool, **options: Any) -> bool:
        """``Think.add_tool_approval`` on the actor."""
        return bool(await self._forward("add_tool_approval", tool_call_id, approved, **options))

    async def wait_until_stable(self, *, timeout_s: float | None = None) -> None:
        """``Think.wait_until_stable`` on the actor."""
        await self._forward("wait_until_stable", timeout_s=timeout_s)

    async def pending_continuation_id(self) -> str | None:
        """``Think.pending_continuation_id`` on the actor."""
        return await self._forward_safe("pending_continuation_id")  # type: ignore[no-any-return]

    async def set_client_tools(self, client_tools: Any) -> None:
        """``Think.set_client_tools`` on the actor."""
        await self._forward("set_client_tools", client_tools)

    async def steer(self, messages: Any) -> bool:
        """``Think.steer`` on the actor."""
        return bool(await self._forward("steer", messages))

    async def chat_terminal(self) -> dict[str, Any] | None:
        """``Think.chat_terminal`` on the actor."""
        return await self._forward_safe("chat_terminal")  # type: ignore[no-any-return]

    async def remember_chat_terminal(self, record: dict[str, Any] | None) -> None:
        """``Think.remember_chat_terminal`` on the actor."""
        await self._forward("remember_chat_terminal", record)

    async def add_mcp_server(
        self, server: McpServerConfig | str, *, timeout_s: float | None = None, **options: Any
    ) -> McpServerState:
        """``Think.add_mcp_server`` on the actor (the connection lives there, or in the node's shared actor)."""
        state: McpServerState = await self._forward("add_mcp_server", server, timeout_s=timeout_s, **options)
        return state

    async def remove_mcp_server(self, name: str) -> bool:
        """``Think.remove_mcp_server`` on the actor."""
        removed: bool = await self._forward("remove_mcp_server", name)
        return removed

    async def get_mcp_servers(self) -> dict[str, McpServerState]:
        """``Think.get_mcp_servers`` on the actor."""
        states: dict[str, McpServerState] = await self._forward_safe("get_mcp_servers")
        return states

    async def wait_for_mcp_connections(self, timeout_s: float | None = 10.0) -> dict[str, McpServerState]:
        """``Think.wait_for_mcp_connections`` on the actor."""
        states: dict[str, McpServerState] = await self._forward_safe("wait_for_mcp_connections", timeout_s)
        return states

    async def schedule(self, when: Any, prompt: str | None = None, **options: Any) -> TaskInfo:
        """``Think.schedule`` in the agent (woken if it hibernates); a handler is given by name (``handler=``)."""
        info: TaskInfo = await self._forward("schedule", when, prompt, **options)
        return info

    async def list_schedules(self) -> list[TaskInfo]:
        """``Think.list_schedules`` in the agent."""
        return list(await self._forward_safe("list_schedules"))

    async def cancel_schedule(self, task_id: str) -> bool:
        """``Think.cancel_schedule`` in the agent."""
        return bool(await self._forward("cancel_schedule", task_id))

    async def run_scheduled_task(self, handler: str, facts: dict[str, Any]) -> bool:
        """``Think.run_scheduled_task`` in the agent (the cluster's scheduler calls it)."""
        return bool(await self._forward("run_scheduled_task", handler, facts))
