"""Installing think_actors into your own project: the wheel, built from the package's sources alone, installed
(not editable) beside the hash-pinned lock in a fresh venv, used from a directory outside the repository.

There the first example runs, and every example type-checks clean under ``mypy --strict`` and ``pyright``, which
read the installed package's inline types (its ``py.typed``), as a user's checker would: the programs of
``examples/``, and the Python examples of README.md and docs/**/*.md, each page's blocks as one module. Slow: the
lock installs from pip's cache in about a minute and a half, mypy's first run over ray and litellm takes half a
minute more.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from docs_examples import pages, parse

REPO = Path(__file__).resolve().parent.parent
INSTALL_TIMEOUT_S = 900

# A page's blocks redefine names as a reader pastes one example after another (most define their own
# `async def main()`), which one module may not do; so these modules, and only they, allow redefinition. Every
# other rule of both checkers holds.
DOCS_MODULE_HEADER = ['# mypy: disable-error-code="no-redef"', "# pyright: reportRedeclaration=false"]


def run(*command: str | Path, cwd: Path, timeout_s: float = 300) -> str:
    """Run ``command``; fail with its output unless it exits 0. Returns its stdout."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RAY_USAGE_STATS_ENABLED": "0"}
    for name in ("PYTHONPATH", "VIRTUAL_ENV", "MYPYPATH", "THINK_STORE"):
        env.pop(name, None)  # nothing of the repository's environment may leak into the user's
    result = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert result.returncode == 0, f"{command} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.fixture(scope="module")
def user_project() -> Iterator[tuple[Path, Path]]:
    """``(venv python, project dir)``: a fresh venv holding the lock and the wheel, and a project outside the
    repository holding a copy of ``examples/`` and the docs' examples in ``docs/``. Removed afterwards (the venv is
    over a gigabyte)."""
    root = Path(tempfile.mkdtemp(prefix="think-actors-wheel-"))
    try:
        # Build from a copy of what the wheel is made of, so the build writes nothing into the repository.
        source = root / "source"
        source.mkdir()
        shutil.copy(REPO / "pyproject.toml", source)
        shutil.copy(REPO / "README.md", source)
        shutil.copytree(REPO / "think_actors", source / "think_actors", ignore=shutil.ignore_patterns("__pycache__"))
        run(sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", root / "dist", source, cwd=root)
        (wheel,) = (root / "dist").glob("think_actors-*.whl")

        venv = root / "venv"
        run(sys.executable, "-m", "venv", venv, cwd=root)
        python = venv / "bin" / "python"
        pip = (python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps")
        run(*pip, "--require-hashes", "-r", REPO / "requirements" / "lock.txt", cwd=root, timeout_s=INSTALL_TIMEOUT_S)
        run(*pip, wheel, cwd=root)

        project = root / "project"
        project.mkdir()
        shutil.copytree(REPO / "examples", project / "examples", ignore=shutil.ignore_patterns("__pycache__"))
        write_docs_modules(project / "docs")
        yield python, project
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)
def test_the_installed_wheel_is_a_typed_package_outside_the_repository(user_project: tuple[Path, Path]) -> None:
    python, project = user_project
    site_packages = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=project)
    where = run(python, "-c", "import think_actors; print(think_actors.__file__)", cwd=project).strip()
    assert Path(where) == Path(site_packages.strip()) / "think_actors" / "__init__.py"  # the wheel, not the repo
    assert (Path(where).parent / "py.typed").exists()
    assert (Path(where).parent / "gateway" / "static" / "index.html").exists()
    assert run(python.with_name("think-actors"), "--version", cwd=project) == f"think-actors {_version(python)}\n"


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)
def test_the_first_example_runs_from_the_installed_wheel(user_project: tuple[Path, Path]) -> None:
    python, project = user_project
    out = run(python, project / "examples" / "01_first_agent.py", cwd=project)
    assert out.splitlines()[-1] == "assistant: A Ray actor is a stateful worker process."


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)
def test_every_example_type_checks_under_mypy_strict(user_project: tuple[Path, Path]) -> None:
    python, project = user_project
    out = run(python, "-m", "mypy", "--strict", "examples", cwd=project)
    assert out.splitlines()[-1].startswith("Success: no issues found in ")


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)
def test_every_example_type_checks_under_pyright(user_project: tuple[Path, Path]) -> None:
    python, project = user_project
    out = run(python.with_name("pyright"), "--pythonpath", python, "examples", cwd=project)
    assert out.splitlines()[-1] == "0 errors, 0 warnings, 0 informations"


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)
def test_every_docs_example_type_checks_under_mypy_strict(user_project: tuple[Path, Path]) -> None:
    python, project = user_project
    out = run(python, "-m", "mypy", "--strict", "docs", cwd=project)
    assert out.splitlines()[-1] == f"Success: no issues found in {_docs_modules(project)} source files"


@pytest.mark.timeout(INSTALL_TIMEOUT_S + 300)
def test_every_docs_example_type_checks_under_pyright(user_project: tuple[Path, Path]) -> None:
    python, project = user_project
    out = run(python.with_name("pyright"), "--pythonpath", python, "docs", cwd=project)
    assert out.splitlines()[-1] == "0 errors, 0 warnings, 0 informations"


def write_docs_modules(directory: Path) -> None:
    """Write each page's Python examples into ``directory`` as one module, as Sybil's parsers find them
    (docs_examples.py): the hidden blocks included, the skipped ones left out, in page order. Each block keeps its
    lines of the page, so a checker's line numbers are the page's; ``docs/guides/tools.md`` becomes
    ``docs_guides_tools.py``."""
    directory.mkdir()
    for page in pages():
        lines = list(DOCS_MODULE_HEADER)
        skipping: str | None = None  # the skip directive in force: "next", "start" (until "end") or None
        for example in parse(page):
            if not isinstance(example.parsed, str):  # a skip directive, parsed to (action, condition)
                action, _condition = example.parsed  # a conditional skip leaves its block out too
                skipping = None if action == "end" else action
                continue
            if skipping is not None:
                skipping = None if skipping == "next" else skipping
                continue
            first = example.line + example.parsed.line_offset  # the 0-based line the block's source starts on
            assert first >= len(lines), f"{page}: a block starts on line {first + 1}, inside the module's header"
            lines += [""] * (first - len(lines)) + example.parsed.splitlines()
        if len(lines) > len(DOCS_MODULE_HEADER):
            name = page.relative_to(REPO).with_suffix("").as_posix().replace("/", "_").replace("-", "_")
            (directory / f"{name}.py").write_text("\n".join(lines) + "\n")


def _docs_modules(project: Path) -> int:
    count = len(list((project / "docs").glob("*.py")))
    assert count > 1, "the README and the docs have Python examples"
    return count


def _version(python: Path) -> str:
    return run(python, "-c", "import importlib.metadata as m; print(m.version('think_actors'))", cwd=Path("/")).strip()
