"""One Ray for the whole session (address="local", no dashboard).

``ta.shutdown()`` stops the local cluster this session started. No ``ray stop --force`` here: it would also kill
every other Ray on the machine (a concurrent benchmark, another test run); CI runs it after the suite instead.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator

import pytest

import think_actors as ta


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[object]:
    data_dir = tempfile.mkdtemp(prefix="think-actors-ray-")
    config = ta.init(num_cpus=2, data_dir=data_dir, model_pool_size=1)
    try:
        yield config
    finally:
        ta.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def unique() -> str:
    """A fresh agent name: detached actors outlive a test, so every test names its own."""
    return "t-" + uuid.uuid4().hex[:10]
