"""Awaiting Ray calls with the project's errors: ``RayTaskError`` unwrapped, a dead actor ``AgentUnavailableError``."""

from __future__ import annotations

from typing import Any

import ray
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayActorError, RayTaskError

from .. import registry
from ..errors import (
    AgentHibernatedError,
    AgentUnavailableError,
)
from .config import _require_config


def _unwrap(err: BaseException) -> BaseException:
    """The project's error inside a Ray error (the same class, the same fields), else a clear one."""
    if isinstance(err, RayTaskError):
        cause = err.cause
        if isinstance(cause, BaseException):
            return _unwrap(cause)
    if isinstance(err, ActorDiedError | ActorUnavailableError | RayActorError):
        return AgentUnavailableError(f"agent actor unavailable: {err}", retryable=True)
    return err


async def _call(ref: Any) -> Any:
    try:
        return await ref
    except (RayTaskError, RayActorError, ActorUnavailableError) as err:
        raise _unwrap(err) from None


def _hibernated(err: BaseException, path: str) -> bool:
    """Whether a failed call never reached a live agent because the agent hibernates (safe to wake and resend)."""
    if isinstance(err, RayTaskError) and isinstance(err.cause, AgentHibernatedError):
        return True
    if isinstance(err, ActorDiedError | RayActorError) and not isinstance(err, RayTaskError):
        record = registry.lookup(_require_config().namespace, path)
        return record is not None and not record.resident
    return False


async def call_actor_method(target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
    """Call ``method`` of an actor handle or named actor and await it, unwrapping Ray errors."""
    actor = target
    if isinstance(target, str):
        try:
            actor = ray.get_actor(target, namespace=namespace or _require_config().namespace)
        except ValueError:
            raise AgentUnavailableError(f"no actor named {target!r}", agent=target) from None
    return await _call(getattr(actor, method).remote(**kwargs))
