"""The WebSocket gateway: existing Cloudflare agents chat front ends (``useAgentChat``) against think_actors agents.

``think-actors serve --app MODULE`` runs it; ``Gateway(directory).app()`` is the aiohttp application.
"""

from .app import AgentDirectory, Gateway, LocalDirectory, RayDirectory
from .protocol import FrameError

__all__ = ["AgentDirectory", "FrameError", "Gateway", "LocalDirectory", "RayDirectory"]
