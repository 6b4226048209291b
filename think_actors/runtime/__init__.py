"""The Ray runtime: every agent a named async actor; parents stream children; tools on other actors.

The agent logic runs without Ray; this package is where it meets Ray. Rules it keeps (see stack-notes): a Ray
stream item costs ~400 µs whatever its size, so streams carry batches of chunks (``batching``); agent actors never
import litellm (string model ids are served by a per-node pool of model actors, ``model_pool``); errors are
unwrapped from ``RayTaskError`` so callers catch the project's own classes (``calls``); a call cycle A -> B -> A
fails fast instead of hanging (``host``).

Modules, lowest first: ``config`` (RuntimeConfig, ``init``, ``shutdown``), ``calls``, ``stream`` (RemoteStream),
``placement``, ``model_pool``, ``host`` (the AgentHost actor), ``handles`` (AgentHandle, starting an actor),
``spawn`` (``spawn``, ``get``, ``provision``, ``list_agents``).
"""

from __future__ import annotations

from .. import delegation
from .calls import _call as _call
from .calls import _unwrap as _unwrap
from .calls import call_actor_method
from .config import RuntimeConfig, init, is_initialized, shutdown
from .config import _require_config as _require_config
from .handles import AgentHandle
from .handles import _spawn_path as _spawn_path
from .host import AgentHost as AgentHost
from .host import _process_setup as _process_setup
from .placement import _actor_options as _actor_options
from .spawn import AgentListing, get, list_agents, provision, spawn
from .stream import RemoteStream as RemoteStream

__all__ = [
    "AgentHandle",
    "AgentListing",
    "RuntimeConfig",
    "get",
    "init",
    "is_initialized",
    "list_agents",
    "provision",
    "shutdown",
    "spawn",
]

# Actor tools of agents that run in this process (outside any actor) reach their actors through this runtime.
delegation.use_actor_calls(call_actor_method)
