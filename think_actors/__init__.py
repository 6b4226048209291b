"""think_actors: LLM chat agents as Ray actors, with Cloudflare Think's turn and hook semantics.

The package's layers, and what may import what, are drawn in ``docs/architecture.md``.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import logs, mcp, metrics, testing
from ._turn.spec import TurnOutcome
from ._turn.tool_calls import ToolRepairContext
from .actions import ActionTool, PendingApproval, action
from .agent import ChatStream, Think, kebab_case
from .channels import Channel
from .chunks import (
    AbortChunk,
    AgentToolEventChunk,
    DataChunk,
    ErrorChunk,
    FinishChunk,
    FinishStepChunk,
    MessageAccumulator,
    StartChunk,
    StartStepChunk,
    TextDeltaChunk,
    TextEndChunk,
    TextStartChunk,
    ToolInputAvailableChunk,
    ToolInputErrorChunk,
    ToolInputStartChunk,
    ToolOutputAvailableChunk,
    ToolOutputErrorChunk,
    UIChunk,
    parse_chunk,
)
from .context_providers import HistorySearch, Skill, SkillSet
from .delegation import AgentRunResult, LocalAgentHandle, actor_tool, agent_tool
from .errors import (
    AgentCycleError,
    AgentError,
    AgentHibernatedError,
    AgentUnavailableError,
    ConfigurationError,
    ContextOverflowError,
    ExtensionError,
    InvalidAgentNameError,
    ModelConnectionError,
    ModelError,
    ModelServerUnavailableError,
    ModelTimeoutError,
    NestedTurnError,
    NoMessagesError,
    ProviderError,
    RateLimitError,
    RunLimitError,
    ScriptError,
    StoreError,
    StoreFencedError,
    StreamChannelError,
    StreamStalledError,
    ThinkError,
    ToolExecutionError,
    TurnError,
)
from .extensions import AuditLog, Extension, HookDecision, RedactPII
from .hooks import (
    ActionAuthorization,
    ActionAuthorizationContext,
    Allow,
    Block,
    ChatErrorContext,
    ChatRecoveryConfig,
    ChatRecoveryContext,
    ChatResponseResult,
    ChunkContext,
    ContextOverflowConfig,
    Fail,
    Proactive,
    ReconcileDecision,
    RecoveryDecision,
    Rerun,
    StepConfig,
    StepContext,
    StepResponse,
    StepResult,
    Substitute,
    ToolCall,
    ToolCallContext,
    ToolCallResultContext,
    ToolReconcileContext,
    ToolResult,
    TurnConfig,
    TurnContext,
    TurnResult,
    has_tool_call,
    step_count_is,
)
from .identity import Principal
from .limits import RunLimits, RunUsage
from .logs import LogContext, LogContextFilter, log_context
from .messages import TextPart, ToolPart, UIMessage, user_message
from .models import ModelClient, ModelRequest, Usage
from .observability import Event
from .overflow import default_context_overflow_classifier
from .run_account import RunTicket
from .schedule import (
    LocalScheduler,
    ManualClock,
    RetryPolicy,
    ScheduledTask,
    ScheduledTaskContext,
    TaskInfo,
    cron,
    every,
)
from .session import Session
from .store import MemoryStore, MessageHit, SQLiteStore, Store, open_store
from .submissions import Submission
from .tools import ClientToolSchema, Tool, ToolContext, tool
from .tracing import TracingConfig

if _TYPE_CHECKING:  # what the lazy names below are, for type checkers and IDEs; at run time __getattr__ loads them
    from .runtime import AgentHandle, AgentListing, get, init, list_agents, provision, shutdown, spawn
    from .runtime.scheduler_actor import start_scheduler
    from .store.postgres import PostgresStore

__version__ = "0.1.0"

_RUNTIME_NAMES = ("AgentHandle", "AgentListing", "get", "init", "list_agents", "provision", "shutdown", "spawn")


def __getattr__(name: str) -> object:
    """Load ``init``, ``spawn``, ``AgentHandle`` ... (the Ray runtime), ``start_scheduler`` and ``PostgresStore``
    when first used."""
    # The runtime imports ray (~0.4 s, 75 MiB): load it when first used, so in-process use stays light.
    if name in _RUNTIME_NAMES:
        from . import runtime

        return getattr(runtime, name)
    if name == "start_scheduler":  # the cluster's scheduler actor: ray, like the runtime
        from .runtime.scheduler_actor import start_scheduler

        return start_scheduler
    if name == "PostgresStore":  # asyncpg loads only in processes that use PostgreSQL
        from .store.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'think_actors' has no attribute {name!r}")


__all__ = [
    "AbortChunk",
    "ActionAuthorization",
    "ActionAuthorizationContext",
    "ActionTool",
    "AgentCycleError",
    "AgentError",
    "AgentHandle",
    "AgentHibernatedError",
    "AgentListing",
    "AgentRunResult",
    "AgentToolEventChunk",
    "AgentUnavailableError",
    "Allow",
    "AuditLog",
    "Block",
    "Channel",
    "ChatErrorContext",
    "ChatRecoveryConfig",
    "ChatRecoveryContext",
    "ChatResponseResult",
    "ChatStream",
    "ChunkContext",
    "ClientToolSchema",
    "ConfigurationError",
    "ContextOverflowConfig",
    "ContextOverflowError",
    "DataChunk",
    "ErrorChunk",
    "Event",
    "Extension",
    "ExtensionError",
    "Fail",
    "FinishChunk",
    "FinishStepChunk",
    "HistorySearch",
    "HookDecision",
    "InvalidAgentNameError",
    "LocalAgentHandle",
    "LocalScheduler",
    "LogContext",
    "LogContextFilter",
    "ManualClock",
    "MemoryStore",
    "MessageAccumulator",
    "MessageHit",
    "ModelClient",
    "ModelConnectionError",
    "ModelError",
    "ModelRequest",
    "ModelServerUnavailableError",
    "ModelTimeoutError",
    "NestedTurnError",
    "NoMessagesError",
    "PendingApproval",
    "PostgresStore",
    "Principal",
    "Proactive",
    "ProviderError",
    "RateLimitError",
    "ReconcileDecision",
    "RecoveryDecision",
    "RedactPII",
    "Rerun",
    "RetryPolicy",
    "RunLimitError",
    "RunLimits",
    "RunTicket",
    "RunUsage",
    "SQLiteStore",
    "ScheduledTask",
    "ScheduledTaskContext",
    "ScriptError",
    "Session",
    "Skill",
    "SkillSet",
    "StartChunk",
    "StartStepChunk",
    "StepConfig",
    "StepContext",
    "StepResponse",
    "StepResult",
    "Store",
    "StoreError",
    "StoreFencedError",
    "StreamChannelError",
    "StreamStalledError",
    "Submission",
    "Substitute",
    "TaskInfo",
    "TextDeltaChunk",
    "TextEndChunk",
    "TextPart",
    "TextStartChunk",
    "Think",
    "ThinkError",
    "Tool",
    "ToolCall",
    "ToolCallContext",
    "ToolCallResultContext",
    "ToolContext",
    "ToolExecutionError",
    "ToolInputAvailableChunk",
    "ToolInputErrorChunk",
    "ToolInputStartChunk",
    "ToolOutputAvailableChunk",
    "ToolOutputErrorChunk",
    "ToolPart",
    "ToolReconcileContext",
    "ToolRepairContext",
    "ToolResult",
    "TracingConfig",
    "TurnConfig",
    "TurnContext",
    "TurnError",
    "TurnOutcome",
    "TurnResult",
    "UIChunk",
    "UIMessage",
    "Usage",
    "__version__",
    "action",
    "actor_tool",
    "agent_tool",
    "cron",
    "default_context_overflow_classifier",
    "every",
    "get",
    "has_tool_call",
    "init",
    "kebab_case",
    "list_agents",
    "log_context",
    "logs",
    "mcp",
    "metrics",
    "open_store",
    "parse_chunk",
    "provision",
    "schedule",
    "shutdown",
    "spawn",
    "start_scheduler",
    "step_count_is",
    "testing",
    "tool",
    "user_message",
]
