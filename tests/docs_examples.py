"""Running the Python examples of README.md and docs/**/*.md, for test_docs_examples.py and its Ray twin.

The convention every page follows (see test_docs_examples.py's docstring): a page's ```python blocks share one
namespace and run in order, as one script would; ``<!-- skip: next -->`` before a block leaves it out. A page
whose examples call ``ta.init(`` (or ``ray.init(``) runs under tests/ray/, on the suite's Ray; every other page
runs in process.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from sybil import Document
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

ROOT = Path(__file__).resolve().parent.parent
RAY_CALL = re.compile(r"\b(?:ta|think_actors|ray)\.init\(")


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/ that exists now (pages written later are picked up then)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def parse(path: Path) -> Document:
    return Document.parse(str(path), PythonCodeBlockParser(), SkipParser())


def python_sources(document: Document) -> Iterator[str]:
    for example in document:
        if isinstance(example.parsed, str):  # code blocks parse to their source; skip directives to other values
            yield example.parsed


def page_ids(ray: bool) -> list[str]:
    """The pages with Python examples that run on Ray (``ray=True``) or in process, as paths from the root."""
    chosen = []
    for path in pages():
        sources = list(python_sources(parse(path)))
        if sources and any(RAY_CALL.search(source) for source in sources) == ray:
            chosen.append(path.relative_to(ROOT).as_posix())
    return chosen


def run_page(page: str) -> None:
    """Evaluate every example of ``page`` in order, in one namespace named ``__main__`` (as a script's)."""
    document = parse(ROOT / page)
    document.namespace["__name__"] = "__main__"
    for example in document:
        example.evaluate()
