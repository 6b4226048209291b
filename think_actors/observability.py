"""Observability: the events an agent publishes about its turns, on named channels.

Every event is an ``Event`` envelope ``(type, agent, name, payload, timestamp)``. The channel follows from the
type, as in the reference::

    chat:transcript:*                      -> agents:transcript   (repairs of the transcript)
    chat:*                                 -> agents:chat         (turn start/finish, chat:request:failed,
                                                                   chat:context:compacted, ...)
    message:* | tool:* | submission:*      -> agents:message      (message:error for in-band stream errors,
    | mcp:* (anything else)                                        message:clear after clear(),
                                                                   mcp:servers:changed when an MCP server's
                                                                   state or tools change)
    stream:*                               -> agents:stream       (stream:start: a turn nothing else follows,
                                                                   attachable; chunks are kept only while
                                                                   this channel has a subscriber)

Subscribe in process with ``agent.observe("agents:chat", callback)`` (``"chat"`` works too) or on Ray through
the agent's handle (``await handle.observe(...)``); both return a function that unsubscribes. Publishing with no
subscriber costs one dict lookup.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigurationError

__all__ = ["CHANNELS", "Event", "Observers", "channel_of"]

log = logging.getLogger("think_actors")

CHANNELS = ("agents:chat", "agents:message", "agents:transcript", "agents:stream")


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    """One observability event. ``agent`` is the agent's class name, ``name`` its instance name, ``path`` its
    agent path; ``payload`` holds the event's facts (camelCase keys, as the reference sends them)."""

    type: str
    agent: str
    name: str
    payload: dict[str, Any] = field(default_factory=dict)
    timestamp: float = 0.0
    path: str = ""

    @property
    def channel(self) -> str:
        return channel_of(self.type)


def channel_of(event_type: str) -> str:
    """The channel an event type is published on."""
    if event_type.startswith("chat:transcript:"):
        return "agents:transcript"
    if event_type.startswith("chat:"):
        return "agents:chat"
    if event_type.startswith("stream:"):
        return "agents:stream"
    return "agents:message"


def normalize_channel(channel: str) -> str:
    """``"chat"`` -> ``"agents:chat"``; refuses a channel that no event is published on."""
    name = channel if channel.startswith("agents:") else f"agents:{channel}"
    if name not in CHANNELS:
        raise ConfigurationError(f"unknown observability channel {channel!r}: use one of {', '.join(CHANNELS)}")
    return name


Callback = Callable[[Event], Any]


class Observers:
    """The subscribers of one agent's channels. Callbacks run in the publisher's task; an async callback is
    scheduled as a task. A callback that raises is logged and stays subscribed."""

    def __init__(self, agent: str, name: str, path: str) -> None:
        self._agent = agent
        self._name = name
        self._path = path
        self._subscribers: dict[str, list[Callback]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def subscribe(self, channel: str, callback: Callback) -> Callable[[], None]:
        if not callable(callback):
            raise ConfigurationError(f"observe needs a callable callback, got {type(callback).__name__}")
        subscribers = self._subscribers.setdefault(normalize_channel(channel), [])
        subscribers.append(callback)

        def unsubscribe() -> None:
            if callback in subscribers:
                subscribers.remove(callback)

        return unsubscribe

    def subscribed(self, channel: str) -> bool:
        """Whether ``channel`` (a full name, ``"agents:stream"``) has a subscriber now."""
        return bool(self._subscribers.get(channel))

    def publish(self, event_type: str, payload: dict[str, Any]) -> None:
        subscribers = self._subscribers.get(channel_of(event_type))
        if not subscribers:
            return
        event = Event(
            type=event_type,
            agent=self._agent,
            name=self._name,
            path=self._path,
            payload=payload,
            timestamp=time.time(),
        )
        for callback in list(subscribers):
            try:
                result = callback(event)
            except Exception:
                log.exception("observability callback for %s raised (ignored)", event_type)
                continue
            if inspect.isawaitable(result):
                task = asyncio.ensure_future(result)
                self._tasks.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("async observability callback raised (ignored)", exc_info=task.exception())
