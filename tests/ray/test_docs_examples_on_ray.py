"""The Python examples of the pages that start Ray (they call ``ta.init(``), on the suite's Ray.

The convention is test_docs_examples.py's. Here a page's ``ta.init(...)`` finds Ray running and only sets this
process's runtime config, which the test puts back afterwards; ``ta.shutdown()`` leaves the suite's Ray up. The
named actors a page started are killed after it, so two pages may use the same agent names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import ray
from docs_examples import page_ids, run_page

from think_actors import registry, runtime
from think_actors.runtime import config


@pytest.fixture
def runtime_kept(ray_runtime: config.RuntimeConfig, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(runtime, "shutdown", lambda: None)
    saved = config.current_config() or ray_runtime
    before = _named_actors()
    try:
        yield
    finally:
        config._set_current(saved)
        for name, namespace in _named_actors() - before:
            if name.startswith("think_actors/"):  # the runtime's own: model servers, warm pools, the scheduler
                continue
            try:
                ray.kill(ray.get_actor(name, namespace=namespace), no_restart=True)
            except ValueError:
                continue
            if registry.lookup(namespace, name) is not None:
                registry.mark_hibernated(namespace, name)


def _named_actors() -> set[tuple[str, str]]:
    return {(a["name"], a["namespace"]) for a in ray.util.list_named_actors(all_namespaces=True)}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", page_ids(ray=True))
def test_the_examples_of_the_page_run_on_ray(
    page: str, runtime_kept: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THINK_ACTORS_DATA_DIR", str(tmp_path))
    run_page(page)
