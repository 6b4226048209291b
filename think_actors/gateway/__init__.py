"""The WebSocket gateway: existing Cloudflare agents chat front ends (``useAgentChat``) against think_actors agents.

``think-actors serve --app MODULE`` runs it; ``Gateway(directory).app()`` is the aiohttp application. Who may use
it: ``authenticate`` (``SharedToken``, ``JWTAuth`` or your function), ``authorize`` (``OwnerRule`` or your
function) and ``Quotas`` per user.
"""

from ..quotas import QuotaExceeded, Quotas
from .app import AgentDirectory, Gateway, LocalDirectory, RayDirectory
from .auth import ACTIONS, AuthUnavailable, OwnerRule, SharedToken, Unauthenticated, allow_all, credential
from .jwt_auth import JWTAuth
from .protocol import FrameError

__all__ = [
    "ACTIONS",
    "AgentDirectory",
    "AuthUnavailable",
    "FrameError",
    "Gateway",
    "JWTAuth",
    "LocalDirectory",
    "OwnerRule",
    "QuotaExceeded",
    "Quotas",
    "RayDirectory",
    "SharedToken",
    "Unauthenticated",
    "allow_all",
    "credential",
]
