"""Shared fixtures (helpers live in tests/helpers.py, importable as ``helpers``)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import think_actors as ta
from think_actors.testing import ScriptedModel


@pytest.fixture
def scripted() -> ScriptedModel:
    return ScriptedModel()


@pytest.fixture
async def memory_store() -> AsyncIterator[ta.MemoryStore]:
    store = ta.MemoryStore()
    yield store
    await store.close()
