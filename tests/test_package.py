"""Package hygiene: module size, one direction of imports, the public ``__all__``, picklable errors, ``py.typed``."""

from __future__ import annotations

import ast
import inspect
import json
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import grimp
import pytest

import think_actors
from think_actors import errors

PACKAGE_DIR = Path(think_actors.__file__).parent
MAX_MODULE_LINES = 600
REPO = PACKAGE_DIR.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_no_module_exceeds_the_line_limit() -> None:
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert PACKAGE_DIR / "agent.py" in modules
    too_long = {
        str(path.relative_to(PACKAGE_DIR)): lines
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"split these modules along a concept (limit {MAX_MODULE_LINES} lines): {too_long}"


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package under ``cwd`` with the contracts of the ``pyproject.toml`` there."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def test_import_contracts_are_kept() -> None:
    result = _lint_imports(REPO)
    assert result.returncode == 0, (
        f"an import breaks a contract (docs/architecture.md):\n{result.stdout}{result.stderr}"
    )
    assert "0 broken" in result.stdout


def test_import_contracts_catch_a_back_edge(tmp_path: Path) -> None:
    shutil.copytree(PACKAGE_DIR, tmp_path / "think_actors", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with (tmp_path / "think_actors" / "messages.py").open("a", encoding="utf-8") as module:
        module.write("\nfrom think_actors import runtime as _back_edge  # the lowest layer importing the runtime\n")

    result = _lint_imports(tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    assert "think_actors.messages is not allowed to import think_actors.runtime" in result.stdout


def import_circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every set of modules that import one another in a circle (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, imported = work[-1]
            for other in imported:
                if other not in index:
                    index[other] = low[other] = len(index)
                    stack.append(other)
                    on_stack.add(other)
                    work.append((other, iter(sorted(graph.find_modules_directly_imported_by(other)))))
                    break
                if other in on_stack:
                    low[module] = min(low[module], index[other])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return sorted(circles)


def test_the_package_has_no_import_circle() -> None:
    # grimp reads every import statement, inside functions and under TYPE_CHECKING too: no circle can hide there.
    circles = import_circles(grimp.build_graph("think_actors", cache_dir=None))
    assert circles == [], f"import circles (layers: docs/architecture.md): {circles}"


def test_import_circles_finds_a_circle_made_by_a_deferred_import(tmp_path: Path) -> None:
    package = tmp_path / "circlepkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import c\n")
    (package / "b.py").write_text("def later() -> None:\n    from . import a  # deferred: still an edge\n")
    (package / "c.py").write_text("import circlepkg.b\n")
    (package / "d.py").write_text("from . import a\n")
    script = textwrap.dedent(
        """
        import json, sys, grimp
        graph = grimp.build_graph("circlepkg", cache_dir=None)
        print(json.dumps(sorted([m, sorted(graph.find_modules_directly_imported_by(m))] for m in graph.modules)))
        """
    )
    listed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    graph = grimp.ImportGraph()
    for module, imported in json.loads(listed.stdout):
        graph.add_module(module)
        for other in imported:
            graph.add_import(importer=module, imported=other)

    assert import_circles(graph) == [["circlepkg.a", "circlepkg.b", "circlepkg.c"]]


def _names_bound_in_init() -> set[str]:
    """Every name ``__init__.py`` defines or imports at module level."""
    tree = ast.parse((PACKAGE_DIR / "__init__.py").read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_all_is_sorted() -> None:
    assert think_actors.__all__ == sorted(think_actors.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(think_actors.__all__) == len(set(think_actors.__all__))


def test_all_lists_every_public_name_of_init() -> None:
    public = {name for name in _names_bound_in_init() if not name.startswith("_")} - {"annotations"}
    assert public - set(think_actors.__all__) == set()


def test_every_name_in_all_exists() -> None:
    missing = [name for name in think_actors.__all__ if not hasattr(think_actors, name)]
    assert missing == []
    namespace: dict[str, Any] = {}
    exec("from think_actors import *", namespace)  # fails if a listed name is missing
    assert set(think_actors.__all__) <= set(namespace)


def _error_classes() -> list[type[errors.ThinkError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, errors.ThinkError) and cls.__module__ == errors.__name__
    ]


# Representative facts for every error class; a new error class must be added here.
ERROR_FACTS: dict[str, dict[str, Any]] = {
    "ThinkError": {"request_id": "r", "retryable": True},
    "ConfigurationError": {"request_id": "r"},
    "InvalidAgentNameError": {"name": "../etc"},
    "TurnError": {"request_id": "r", "stage": "turn", "messages_persisted": True},
    "ExtensionError": {"request_id": "r", "stage": "stream", "extension": "audit", "hook": "before_tool_call"},
    "NestedTurnError": {"stage": "turn", "messages_persisted": False},
    "RunLimitError": {"stage": "stream", "limit": "max_total_tokens", "used": 1200, "allowed": 1000, "run_id": "r"},
    "NoMessagesError": {"request_id": "r", "stage": "turn", "messages_persisted": True},
    "ModelError": {"request_id": "r", "provider": "openai", "status_code": 500, "retryable": True},
    "ContextOverflowError": {"request_id": "r", "provider": "openai", "status_code": 400, "retryable": False},
    "RateLimitError": {"provider": "anthropic", "status_code": 429, "retryable": True, "retry_after_s": 2.5},
    "ModelTimeoutError": {"provider": "openai", "retryable": True},
    "ModelConnectionError": {"provider": "openai", "retryable": True},
    "StreamStalledError": {"request_id": "r", "retryable": True},
    "ModelServerUnavailableError": {"retryable": True},
    "ProviderError": {"provider": "openai", "status_code": 503},
    "ToolExecutionError": {"tool_name": "search", "tool_call_id": "c1", "request_id": "r"},
    "StoreError": {"request_id": "r"},
    "StoreFencedError": {"agent": "lead/team-1", "generation": 3, "owner_generation": 4},
    "ScriptError": {},
    "AgentError": {"agent": "research/lead"},
    "AgentCycleError": {"agent": "a", "cycle": ["a", "b", "a"]},
    "AgentUnavailableError": {"agent": "research/lead", "retryable": True},
    "AgentHibernatedError": {"agent": "research/lead", "retryable": True},
    "StreamChannelError": {"request_id": "r", "retryable": True},
}


def test_every_error_class_has_representative_facts() -> None:
    assert sorted(cls.__name__ for cls in _error_classes()) == sorted(ERROR_FACTS)
    assert sorted(ERROR_FACTS) == sorted(errors.__all__)


@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_error_pickles_to_the_same_class_and_facts(cls: type[errors.ThinkError]) -> None:
    facts = ERROR_FACTS[cls.__name__]
    error = cls(f"{cls.__name__} happened", **facts)
    assert set(facts) <= set(error.facts())
    assert {name: getattr(error, name) for name in facts} == facts

    clone = pickle.loads(pickle.dumps(error))

    assert type(clone) is cls
    assert clone.message == error.message == f"{cls.__name__} happened"
    assert str(clone) == str(error)
    assert clone.args == error.args
    assert clone.facts() == error.facts()
    assert repr(clone) == repr(error)


def test_context_overflow_error_round_trip_keeps_every_fact() -> None:
    error = errors.ContextOverflowError("x", request_id="r", provider="openai", status_code=400, retryable=False)
    clone = pickle.loads(pickle.dumps(error))
    assert isinstance(clone, errors.ModelError)
    assert clone.facts() == {
        "request_id": "r",
        "retryable": False,
        "provider": "openai",
        "status_code": 400,
        "response_body": None,
        "in_stream": None,
        "retry_after_s": None,
    }
    assert (clone.message, clone.request_id, clone.provider, clone.status_code, clone.retryable) == (
        "x",
        "r",
        "openai",
        400,
        False,
    )


def test_error_fields_default_to_none_and_false() -> None:
    error = errors.ToolExecutionError()
    assert error.facts() == {"request_id": None, "retryable": False, "tool_name": None, "tool_call_id": None}
    assert pickle.loads(pickle.dumps(error)).facts() == error.facts()


@pytest.mark.parametrize("cls", [errors.ThinkError, errors.StoreError, errors.ModelError])
def test_unknown_error_fields_raise_type_error(cls: type[errors.ThinkError]) -> None:
    with pytest.raises(TypeError, match="unexpected fields"):
        cls("x", stage="turn", bogus=1)


def test_error_tree_matches_the_docstring() -> None:
    assert issubclass(errors.InvalidAgentNameError, errors.ConfigurationError)
    assert issubclass(errors.NestedTurnError, errors.TurnError)
    assert issubclass(errors.NoMessagesError, errors.TurnError)
    assert errors.RunLimitError.__bases__ == (errors.TurnError,)
    for cls in (
        errors.ContextOverflowError,
        errors.RateLimitError,
        errors.ModelTimeoutError,
        errors.ModelConnectionError,
        errors.ProviderError,
    ):
        assert cls.__bases__ == (errors.ModelError,)
    assert errors.StreamStalledError.__bases__ == (errors.ModelTimeoutError,)
    assert errors.ModelServerUnavailableError.__bases__ == (errors.ModelConnectionError,)
    assert errors.StoreFencedError.__bases__ == (errors.StoreError,)
    assert errors.AgentCycleError.__bases__ == (errors.AgentError,)
    assert errors.AgentUnavailableError.__bases__ == (errors.AgentError,)
    for cls in _error_classes():
        assert cls is errors.ThinkError or issubclass(cls, errors.ThinkError)
        assert cls.__name__.endswith("Error")
        assert cls.__name__ in (errors.__doc__ or "")


def test_py_typed_marker_exists() -> None:
    assert (PACKAGE_DIR / "py.typed").is_file()
