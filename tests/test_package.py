"""Package hygiene: module size, the public ``__all__``, picklable errors, ``py.typed``."""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path
from typing import Any

import pytest

import think_actors
from think_actors import errors

PACKAGE_DIR = Path(think_actors.__file__).parent
MAX_MODULE_LINES = 1_000


def test_no_module_exceeds_the_line_limit() -> None:
    modules = sorted(PACKAGE_DIR.rglob("*.py"))
    assert PACKAGE_DIR / "agent.py" in modules
    too_long = {
        str(path.relative_to(PACKAGE_DIR)): lines
        for path in modules
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}, f"split these modules along a concept (limit {MAX_MODULE_LINES} lines): {too_long}"


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
    "NestedTurnError": {"stage": "turn", "messages_persisted": False},
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
