"""One Ray for the whole session (address="local", no dashboard); ``ray stop --force`` at the end."""

from __future__ import annotations

import shutil
import subprocess
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
        subprocess.run(["ray", "stop", "--force"], capture_output=True, check=False)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def unique() -> str:
    """A fresh agent name: detached actors outlive a test, so every test names its own."""
    return "t-" + uuid.uuid4().hex[:10]
