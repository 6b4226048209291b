"""Keeping the stream of a turn nothing else follows, so a gateway can relay it to the agent's sockets.

Think broadcasts every turn's chunks to all of the agent's connections, whatever started the turn (reference §1.0:
``chat()`` and ``saveMessages()`` turns go to the WebSocket too). Here the sockets live in a gateway, possibly in
another process: while it has sockets for the agent it subscribes to ``agents:stream``, and a turn that no other
mechanism keeps (auto-continuations, submissions and recovered turns are kept by ``Recovery.follow``) is kept the
same way and announced by ``stream:start``, so ``agent.attach(request_id)`` gives the gateway all of its chunks.

Without a subscriber a turn's chunks pass straight through: one check per turn, none per chunk. The kept chunks
are pruned with the other followed turns' (``recovery.MAX_KEPT_RESULTS``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from .engine import Engine

__all__ = ["STREAM_CHANNEL", "relayed"]

STREAM_CHANNEL = "agents:stream"


def relayed(engine: Engine, spec: Any, body: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    """``body``, the chunks of the turn of ``spec``; kept for ``attach`` while a gateway follows the agent."""
    if not engine.observers.subscribed(STREAM_CHANNEL):
        return body
    followed = engine.recovery.live.get(spec.request_id)
    if followed is not None and not followed.done:
        return body  # a background turn: its starter keeps its chunks, and chat:turn:start announces it
    return _kept(engine, spec, body)


async def _kept(engine: Engine, spec: Any, body: AsyncGenerator[Any, None]) -> AsyncGenerator[Any, None]:
    live = engine.recovery.follow(spec.request_id)
    # Announced once it can be attached to: an attach from now on gets every chunk from the first.
    engine.publish(
        "stream:start",
        {"requestId": spec.request_id, "trigger": spec.trigger, "continuation": spec.continuation},
    )
    try:
        async with aclosing(body) as chunks:
            async for chunk in chunks:
                live.chunks.append(chunk)
                live.changed.set()
                yield chunk
    finally:
        live.end(spec.outcome.status)
