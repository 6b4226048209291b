"""One Ray for the whole session (address="local", no dashboard).

``ta.shutdown()`` stops the local cluster this session started. Under CI (``CI`` set) the teardown also runs
``ray stop --force`` so nothing survives a crashed worker; on a developer's machine it does not, since it would
kill every other Ray there (a benchmark, another test run). ``.ci/run`` runs it again after the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import think_actors as ta


@pytest.fixture(scope="session")
def ray_runtime() -> Iterator[object]:
    data_dir = tempfile.mkdtemp(prefix="think-actors-ray-")
    # Workers report metrics every second, not every ten: the metrics test reads them back without a long wait.
    config = ta.init(
        num_cpus=2, data_dir=data_dir, model_pool_size=1, _system_config={"metrics_report_interval_ms": 1000}
    )
    try:
        yield config
    finally:
        ta.shutdown()
        if os.environ.get("CI"):
            ray_cli = Path(sys.executable).with_name("ray")
            subprocess.run([str(ray_cli), "stop", "--force"], capture_output=True, check=False, timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def unique() -> str:
    """A fresh agent name: detached actors outlive a test, so every test names its own."""
    return "t-" + uuid.uuid4().hex[:10]
