"""Every agent a cluster has started, resident or hibernated, in Ray's GCS key-value store.

An agent's record holds how to start it again (its class, name and constructor options, pickled as Ray pickles
them to create the actor), the node it last ran on, and whether its actor is resident. The actor writes its own
record when it starts and when it hibernates, so a handle, ``get`` or the gateway can wake it without knowing
how it was created. The GCS lives on the head node and is shared by every node, like the agents' names.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import msgpack
from ray import cloudpickle
from ray.experimental import internal_kv

__all__ = [
    "AgentRecord",
    "list_records",
    "lookup",
    "mark_hibernated",
    "record_provisioned",
    "record_resident",
    "spawn_args",
]

_PREFIX = "agents/"
_KV_NAMESPACE = "think_actors"


@dataclass(frozen=True, slots=True)
class AgentRecord:
    """One agent the cluster knows: ``resident`` when its actor runs (on ``node_id``), else hibernated."""

    path: str
    agent_class: str
    node_id: str
    resident: bool
    since: float
    host: str = ""  # the shared host that holds it (a class with ``hosting = "shared"``), "" for its own actor


def _key(namespace: str, path: str) -> bytes:
    return f"{_PREFIX}{namespace}/{path}".encode()


def _decode(path: str, raw: bytes) -> tuple[AgentRecord, bytes]:
    value = msgpack.unpackb(raw)
    record = AgentRecord(path, value["class"], value["node"], value["resident"], value["since"], value.get("host", ""))
    return record, value["args"]


def _put(
    namespace: str, path: str, agent_class: str, node_id: str, resident: bool, args: bytes, host: str = ""
) -> None:
    value = {
        "class": agent_class,
        "node": node_id,
        "resident": resident,
        "since": time.time(),
        "args": args,
        "host": host,
    }
    internal_kv._internal_kv_put(_key(namespace, path), msgpack.packb(value), namespace=_KV_NAMESPACE)


def _spawn(agent_class: type[Any], name: str, options: dict[str, Any]) -> tuple[str, bytes]:
    """The record's class name and how to start the agent again (``spawn_args`` reads it back)."""
    args = cloudpickle.dumps((agent_class, name, options))  # type: ignore[no-untyped-call]
    return f"{agent_class.__module__}.{agent_class.__qualname__}", args


def record_resident(
    namespace: str,
    path: str,
    agent_class: type[Any],
    name: str,
    options: dict[str, Any],
    node_id: str,
    *,
    host: str = "",
) -> None:
    """The agent's actor (or the shared ``host`` that holds it) is up on ``node_id``; remember how to start it
    again."""
    class_name, args = _spawn(agent_class, name, options)
    _put(namespace, path, class_name, node_id, True, args, host)


def record_provisioned(namespace: str, path: str, agent_class: type[Any], name: str, options: dict[str, Any]) -> bool:
    """Make an agent addressable before it ever ran (its first call starts it); False if it already exists."""
    if internal_kv._internal_kv_exists(_key(namespace, path), namespace=_KV_NAMESPACE):
        return False
    class_name, args = _spawn(agent_class, name, options)
    _put(namespace, path, class_name, "", False, args)
    return True


def _get(namespace: str, path: str) -> tuple[AgentRecord, bytes] | None:
    raw = internal_kv._internal_kv_get(_key(namespace, path), namespace=_KV_NAMESPACE)
    return None if raw is None else _decode(path, raw)


def mark_hibernated(namespace: str, path: str) -> None:
    """The agent's actor is exiting for want of work; its record stays, so it can be woken."""
    found = _get(namespace, path)
    if found is not None:
        record, args = found
        _put(namespace, path, record.agent_class, record.node_id, False, args, record.host)


def lookup(namespace: str, path: str) -> AgentRecord | None:
    found = _get(namespace, path)
    return None if found is None else found[0]


def spawn_args(namespace: str, path: str) -> tuple[type[Any], str, dict[str, Any]] | None:
    """``(agent_class, name, options)`` the agent was started with, or None for an agent never started."""
    found = _get(namespace, path)
    if found is None:
        return None
    agent_class, name, options = cloudpickle.loads(found[1])
    return agent_class, name, options


def list_records(namespace: str) -> list[AgentRecord]:
    """Every agent of ``namespace``, ordered by path."""
    from ray._private.worker import global_worker

    prefix = f"{_PREFIX}{namespace}/".encode()
    keys = internal_kv._internal_kv_list(prefix, namespace=_KV_NAMESPACE)
    if not keys:
        return []
    values = global_worker.gcs_client.internal_kv_multi_get(keys, _KV_NAMESPACE.encode())  # type: ignore[attr-defined]
    records = [_decode(key[len(prefix) :].decode(), raw)[0] for key, raw in values.items() if raw is not None]
    return sorted(records, key=lambda r: r.path)
