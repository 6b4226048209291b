"""The per-node pool of model-server actors, at the import path it has always had (``runtime/model_pool.py``)."""

from __future__ import annotations

from .runtime.model_pool import ModelServer, PooledModel, PoolResolver, start_model_pools

__all__ = ["ModelServer", "PoolResolver", "PooledModel", "start_model_pools"]
