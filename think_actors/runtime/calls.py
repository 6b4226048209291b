"""Awaiting Ray calls with the project's errors: ``RayTaskError`` unwrapped, a dead actor ``AgentUnavailableError``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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


def _restarting(err: BaseException) -> bool:
    """Whether a call failed because the agent's actor was down (crashed, restarting), not because of the call:
    one that is safe to send again may wait for the restart."""
    return isinstance(err, ActorUnavailableError | RayActorError) and not isinstance(err, RayTaskError)


class RestartWait:
    """The pauses before a safe call is sent again while its agent's actor restarts: 50 ms, doubling up to 1 s,
    for at most ``wait_s`` from the first pause; past that, ``pause`` raises ``AgentUnavailableError``."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self._deadline: float | None = None
        self._pause = 0.05

    async def pause(self, err: BaseException, request_id: str | None = None) -> None:
        loop = asyncio.get_running_loop()
        if self._deadline is None:
            self._deadline = loop.time() + self.wait_s
        remaining = self._deadline - loop.time()
        if remaining <= 0:
            raise AgentUnavailableError(
                f"the agent's actor did not come back within {self.wait_s:g} s (ta.init(restart_wait_s=...)): {err}",
                request_id=request_id,
                retryable=True,
            ) from None
        await asyncio.sleep(min(self._pause, remaining))
        self._pause = min(self._pause * 2, 1.0)


async def _until_restarted(send: Callable[[], Awaitable[Any]], first: BaseException, wait_s: float) -> Any:
    """Send a call that is safe to repeat again and again until the restarted actor answers or ``wait_s`` passed
    (then ``AgentUnavailableError`` says so); an error of the call itself is raised at once."""
    wait, err = RestartWait(wait_s), first
    while True:
        await wait.pause(err)
        try:
            return await send()
        except (RayTaskError, RayActorError, ActorUnavailableError) as again:
            if not _restarting(again):
                raise _unwrap(again) from None
            err = again


def _hibernated(err: BaseException, path: str, actor: Any = None) -> bool:
    """Whether a failed call never reached a live agent because the agent hibernates (safe to wake and resend).

    Also when the caller's ``actor`` is an incarnation that hibernated and another caller has woken the agent since
    (the registry says resident, but the actor of that name is a new one): a hibernated actor was idle when it
    exited, so nothing of the call ran, and waking adopts the running successor.
    """
    if isinstance(err, RayTaskError) and isinstance(err.cause, AgentHibernatedError):
        return True
    if isinstance(err, ActorDiedError | RayActorError) and not isinstance(err, RayTaskError):
        namespace = _require_config().namespace
        record = registry.lookup(namespace, path)
        if record is None:
            return False
        if not record.resident:
            return True
        return actor is not None and _successor_of(actor, path, namespace)
    return False


def _successor_of(actor: Any, path: str, namespace: str) -> bool:
    """Whether the live actor named ``path`` is another actor than ``actor`` (a later incarnation)."""
    try:
        current = ray.get_actor(path, namespace=namespace)
    except ValueError:
        return False
    return bool(current._actor_id != actor._actor_id)


async def call_actor_method(target: Any, method: str, kwargs: dict[str, Any], namespace: str | None) -> Any:
    """Call ``method`` of an actor handle or named actor and await it, unwrapping Ray errors."""
    actor = target
    if isinstance(target, str):
        namespace = namespace or _require_config().namespace
        try:
            actor = ray.get_actor(target, namespace=namespace)
        except ValueError:
            raise AgentUnavailableError(
                f"no actor named {target!r} in Ray namespace {namespace!r}: start it there before the tool is "
                f"called, e.g. MyActor.options(name={target!r}, namespace={namespace!r}, lifetime='detached')"
                ".remote() (with `think-actors serve`, in the app module's setup()), or give actor_tool(..., "
                "namespace=...) the namespace it runs in",
                agent=target,
            ) from None
    return await _call(getattr(actor, method).remote(**kwargs))
