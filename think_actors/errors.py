"""The think_actors error tree.

Every error pickles (Ray re-raises an actor's exception in the caller only if it does) and carries facts,
never a provider SDK type::

    ThinkError                      message, request_id, retryable
    ├── ConfigurationError          a bad class attribute, option or argument
    │   └── InvalidAgentNameError   a name that could escape its directory or key space
    ├── TurnError                   a turn could not start or run; stage, messages_persisted
    │   ├── ExtensionError          an extension's hook failed under ``failure="closed"``; extension, hook
    │   ├── NestedTurnError         a blocking turn started from inside a turn of the same agent
    │   └── NoMessagesError         nothing to send to the model
    ├── ModelError                  the model provider failed; provider, status_code, response_body, in_stream,
    │   │                           retry_after_s
    │   ├── ContextOverflowError    the prompt does not fit the model's context window
    │   ├── RateLimitError          429 / quota
    │   ├── ModelTimeoutError       the provider did not answer in time
    │   │   └── StreamStalledError  the stream went silent past chat_stream_stall_timeout_s
    │   ├── ModelConnectionError    the connection failed or the stream was cut
    │   │   └── ModelServerUnavailableError  the model-server actor died mid-stream
    │   └── ProviderError           any other provider answer (4xx/5xx, malformed stream)
    │   └── RunLimitError           a run of agents reached one of its RunLimits; limit, used, allowed, run_id
    ├── ToolExecutionError          a tool failed where the model cannot be told (e.g. a remote tool's transport)
    ├── StoreError                  the store could not read or write
    │   └── StoreFencedError        a newer generation owns the agent: this writer's turn writes are refused
    ├── ScriptError                 a ScriptedModel ran out of steps or has steps left over
    └── AgentError                  the actor runtime failed
        ├── AgentCycleError         A -> B -> A while A holds its turn lock
        └── AgentUnavailableError   an agent actor is gone or restarting
            ├── AgentHibernatedError   it was hibernating; a handle wakes it and calls again
            └── StreamChannelError     a stream's connection broke before its end (its producer went away)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentCycleError",
    "AgentError",
    "AgentHibernatedError",
    "AgentUnavailableError",
    "ConfigurationError",
    "ContextOverflowError",
    "ExtensionError",
    "InvalidAgentNameError",
    "ModelConnectionError",
    "ModelError",
    "ModelServerUnavailableError",
    "ModelTimeoutError",
    "NestedTurnError",
    "NoMessagesError",
    "ProviderError",
    "RateLimitError",
    "RunLimitError",
    "ScriptError",
    "StoreError",
    "StoreFencedError",
    "StreamChannelError",
    "StreamStalledError",
    "ThinkError",
    "ToolExecutionError",
    "TurnError",
]


class ThinkError(Exception):
    """Root of every think_actors error.

    Subclasses declare their extra fields in ``_fields``; ``__reduce__`` rebuilds them on unpickling, so an error
    raised in an actor arrives in the caller as the same class with the same fields.
    """

    _fields: tuple[str, ...] = ("request_id", "retryable")

    def __init__(self, message: str = "", *, request_id: str | None = None, retryable: bool = False, **facts: Any):
        super().__init__(message)
        self.message = message
        self.request_id = request_id
        self.retryable = retryable
        for name in self._fields:
            if name not in ("request_id", "retryable"):
                setattr(self, name, facts.pop(name, None))
        if facts:
            raise TypeError(f"{type(self).__name__} got unexpected fields: {sorted(facts)}")

    def facts(self) -> dict[str, Any]:
        """The error's fields as a dict (without the message)."""
        return {name: getattr(self, name) for name in self._fields}

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.facts()))

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.facts().items() if v not in (None, False))
        return f"{type(self).__name__}({self.message!r}{', ' + shown if shown else ''})"


def _rebuild(cls: type[ThinkError], message: str, facts: dict[str, Any]) -> ThinkError:
    return cls(message, **facts)


class ConfigurationError(ThinkError):
    """A bad class attribute, option or argument."""


class InvalidAgentNameError(ConfigurationError):
    """An agent name that could escape its directory or key space."""

    _fields = (*ThinkError._fields, "name")


class TurnError(ThinkError):
    """A turn could not start or run."""

    _fields = (*ThinkError._fields, "stage", "messages_persisted")


class ExtensionError(TurnError):
    """An extension's hook raised or timed out and the extension fails closed (``failure="closed"``).

    ``extension`` is the extension's name, ``hook`` the hook that failed. Raised where the agent's own hook raising
    would be: a tool call fails with it (``before_tool_call``), else the turn does.
    """

    _fields = (*TurnError._fields, "extension", "hook")
    extension: str
    hook: str


class NestedTurnError(TurnError):
    """A blocking turn was started from inside a turn of the same agent (it would wait for itself forever)."""


class NoMessagesError(TurnError):
    """The transcript left nothing to send to the model."""


class RunLimitError(TurnError):
    """A run of agents (a turn and every agent it started, on any node) reached one of its ``RunLimits``.

    ``limit`` names the field (``max_total_tokens``, ``timeout_s``, ...), ``used`` is what the run had used when it
    was checked, ``allowed`` the limit, ``run_id`` the request id of the run's first turn. No new model request,
    tool call or child agent starts anywhere in the run once it is raised."""

    _fields = (*TurnError._fields, "limit", "used", "allowed", "run_id")


class ModelError(ThinkError):
    """The model provider failed.

    ``status_code`` is the HTTP status when there was one; ``response_body`` the provider's error body (the
    parsed JSON object, else its text); ``in_stream`` is True when the provider reported the error as an event
    inside an already started stream rather than as the answer to the request; ``retry_after_s`` is the wait the
    provider asked for (its ``Retry-After`` header, in seconds), None when it named none.
    """

    _fields = (*ThinkError._fields, "provider", "status_code", "response_body", "in_stream", "retry_after_s")
    provider: str | None
    status_code: int | None
    response_body: Any
    in_stream: bool | None
    retry_after_s: float | None


class ContextOverflowError(ModelError):
    """The prompt does not fit the model's context window."""


class RateLimitError(ModelError):
    """The provider rate-limited the request."""


class ModelTimeoutError(ModelError):
    """The provider did not answer in time."""


class ModelConnectionError(ModelError):
    """The connection failed or the stream was cut before it finished."""


class StreamStalledError(ModelTimeoutError):
    """The model's stream sent nothing for longer than ``chat_stream_stall_timeout_s``; the turn is resumed."""


class ModelServerUnavailableError(ModelConnectionError):
    """The model-server actor serving the stream died; the turn is resumed by recovery."""


class ProviderError(ModelError):
    """Any other provider failure (an error status, a malformed stream)."""


class ToolExecutionError(ThinkError):
    """A tool failed in a way that is not a tool result (its transport failed)."""

    _fields = (*ThinkError._fields, "tool_name", "tool_call_id")


class StoreError(ThinkError):
    """The store could not read or write."""


class StoreFencedError(StoreError):
    """Another store instance opened this agent after this one did, so this one may no longer write its turns.

    Opening a store for an agent claims the next ``generation``; every write that belongs to a turn checks that
    its writer still holds the newest one. ``agent`` is the agent path, ``generation`` this writer's and
    ``owner_generation`` the newest (None when the agent's lease row is gone). Never retryable: the newer owner
    (typically the restarted actor) carries on, and this writer should stop.
    """

    _fields = (*StoreError._fields, "agent", "generation", "owner_generation")


class ScriptError(ThinkError):
    """A ScriptedModel was asked for a step it does not have, or finished with steps left over."""


class AgentError(ThinkError):
    """The actor runtime failed."""

    _fields = (*ThinkError._fields, "agent")


class AgentCycleError(AgentError):
    """A call cycle (A -> B -> A) while A holds its turn lock; ``cycle`` lists the agent paths."""

    _fields = (*AgentError._fields, "cycle")


class AgentUnavailableError(AgentError):
    """An agent actor is gone or restarting."""


class StreamChannelError(AgentUnavailableError):
    """A streamed call's connection (``ta.init(stream_channels=True)``) broke, or its last frames never came,
    before the stream's end: the producer's process or node went away, or the network between them failed."""


class AgentHibernatedError(AgentUnavailableError):
    """The call reached an agent actor that is hibernating (exiting for want of work); handles wake it again."""
