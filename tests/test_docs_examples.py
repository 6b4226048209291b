"""Every Python example of README.md and docs/**/*.md runs, in process, with the scripted model.

The convention for writing a page (Sybil's Markdown parsers read it):

- Every ```python block runs. The blocks of one page share one namespace and run in order, top to bottom, as one
  script would; its ``__name__`` is ``"__main__"``. Write ``asyncio.run(main())`` at the end of an async example
  (there is no top-level ``await``).
- ``<!-- skip: next -->`` on the line before a block leaves that block out. Use it only for code that needs a real
  provider key or a cluster's address; everything else uses ``think_actors.testing.ScriptedModel``. A string model
  id that is actually called fails the test: examples never reach a provider. Sybil's hidden blocks
  (``<!-- invisible-code-block: python`` ... ``-->``) run without being shown on the site.
- Blocks in other languages (```sh, ```text) are not run.
- A page whose examples call ``ta.init(`` runs on the suite's Ray instead (tests/ray/test_docs_examples_on_ray.py):
  its ``ta.init()`` joins the running Ray and ``ta.shutdown()`` leaves it up.
- Each page runs in a fresh temporary directory (the working directory and ``THINK_ACTORS_DATA_DIR``), so the
  default SQLite stores of its agents start empty.

A page under docs/ is picked up as soon as it exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docs_examples import page_ids, run_page

from think_actors import models


def _no_provider(model_id: str) -> Any:
    raise AssertionError(f"a docs example called the real model {model_id!r}: use ScriptedModel (or skip the block)")


@pytest.mark.parametrize("page", page_ids(ray=False))
def test_the_examples_of_the_page_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THINK_ACTORS_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(models, "_resolver", _no_provider)
    run_page(page)
