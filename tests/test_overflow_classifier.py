"""default_context_overflow_classifier against the corpus of real provider errors, in every form an error
reaches it (a text, an exception, a status plus body, the body itself), plus its edge cases and call styles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import think_actors as ta
from think_actors.hooks import ChatErrorContext
from think_actors.overflow import default_context_overflow_classifier as classify
from think_actors.testing import ScriptedModel

CORPUS = json.loads((Path(__file__).parent / "data" / "context_overflow_corpus.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = CORPUS["cases"]
OVERFLOW = "context_overflow"
PROVIDERS = {
    "openai",
    "azure",
    "anthropic",
    "gemini",
    "vertex",
    "bedrock",
    "mistral",
    "cohere",
    "groq",
    "deepseek",
    "xai",
    "openrouter",
    "together",
    "fireworks",
    "ollama",
    "vllm",
    "llamacpp",
    "lmstudio",
}
CTX = ChatErrorContext(request_id="r1", stage="stream")


def _forms(case: dict[str, Any]) -> list[tuple[str, object]]:
    """Every way this case's error can reach the classifier."""
    status, body, text = case["status"], case["body"], case["text"]
    forms: list[tuple[str, object]] = []
    if text is not None:
        forms += [
            ("str", text),
            ("exception", Exception(text)),
            ("provider-error", ta.ProviderError(text, status_code=status, response_body=body)),
        ]
    if body is not None:
        body_text = body if isinstance(body, str) else json.dumps(body)
        wrapper = f"litellm.BadRequestError: OpenAIException - {body_text}"
        forms += [
            ("status-body", ta.ProviderError("BadRequestError", status_code=status, response_body=body)),
            ("litellm-wrapper", ta.ProviderError(wrapper, status_code=status, response_body=body)),
            ("body", body),
            ("body-json-text", json.dumps(body)),
            ("body-bytes", body_text.encode()),
        ]
    return forms


FORM_CASES = [
    pytest.param(case["expected"], error, id=f"{case['id']}-{form}") for case in CASES for form, error in _forms(case)
]


@pytest.mark.parametrize(("expected", "error"), FORM_CASES)
def test_corpus_case_is_classified_as_expected_in_every_form(expected: str | None, error: object) -> None:
    assert classify(error, CTX) == expected


def test_corpus_has_enough_cited_unique_cases_for_every_provider() -> None:
    positives = [case for case in CASES if case["expected"] == OVERFLOW]
    negatives = [case for case in CASES if case["expected"] is None]
    assert len(positives) >= 60
    assert len(negatives) >= 60
    assert len(positives) + len(negatives) == len(CASES)
    assert len({case["id"] for case in CASES}) == len(CASES)
    assert all(case["source"].startswith(("https://", "http://")) for case in CASES)
    assert {case["provider"] for case in positives} >= PROVIDERS
    assert {case["form"] for case in CASES} == {"exception", "status_body", "text"}
    assert all((case["kind"] == "overflow") == (case["expected"] == OVERFLOW) for case in CASES)
    assert all(case["text"] is not None or case["body"] is not None for case in CASES)


def test_context_overflow_error_is_always_an_overflow() -> None:
    assert classify(ta.ContextOverflowError("anything")) == OVERFLOW
    assert classify(ta.ContextOverflowError("")) == OVERFLOW


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class _Hostile:
    """Every attribute read raises, as some proxy objects do."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(name)

    def __str__(self) -> str:
        raise RuntimeError("str")


UNREADABLE = [
    None,
    42,
    3.5,
    True,
    object(),
    _Unprintable(),
    _Hostile(),
    b"\xff\xfe",
    "",
    "{not json",
    [],
    {},
    Exception(),
]


@pytest.mark.parametrize("error", UNREADABLE, ids=[f"input{n}" for n in range(len(UNREADABLE))])
def test_unreadable_or_empty_input_is_no_opinion_without_raising(error: object) -> None:
    assert classify(error) is None


def test_overflow_in_the_cause_chain_is_found() -> None:
    try:
        try:
            raise Exception("prompt is too long: 208310 tokens > 200000 maximum")
        except Exception as inner:
            raise RuntimeError("turn failed") from inner
    except RuntimeError as outer:
        assert classify(outer) == OVERFLOW


def test_overflow_in_original_exception_and_response_text_is_found() -> None:
    class Response:
        status_code = 400
        text = '{"error": {"code": "context_length_exceeded"}}'

    class Wrapped(Exception):
        original_exception = ValueError("Input is too long for requested model.")

    class WithResponse(Exception):
        response = Response()

    assert classify(Wrapped("litellm.BadRequestError")) == OVERFLOW
    assert classify(WithResponse("Error code: 400")) == OVERFLOW


def test_response_json_is_used_when_text_raises() -> None:
    class Response:
        status_code = 400

        @property
        def text(self) -> str:
            raise RuntimeError("stream not read")

        def json(self) -> Any:
            return {"error": {"message": "prompt is too long: 1 tokens > 0 maximum"}}

    class WithResponse(Exception):
        response = Response()

    assert classify(WithResponse("BadRequestError")) == OVERFLOW


def test_self_referencing_chain_terminates() -> None:
    first, second = Exception("a"), Exception("b")
    first.__context__, second.__context__ = second, first
    assert classify(first) is None


def test_bare_413_is_an_overflow_and_bare_400_is_not() -> None:
    assert classify(ta.ProviderError("HTTP error", status_code=413)) == OVERFLOW
    assert classify(ta.ProviderError("HTTP error", status_code=400)) is None
    assert classify("400 status code (no body)") is None


def test_a_413_that_is_a_rate_limit_is_not_an_overflow() -> None:
    body = {"error": {"message": "Request too large on tokens per minute (TPM): Limit 6000, Requested 10338"}}
    assert classify(ta.ProviderError("APIStatusError", status_code=413, response_body=body)) is None


def test_requested_output_filling_the_window_is_not_an_overflow_but_less_is() -> None:
    template = (
        "This model's maximum context length is 8192 tokens. "
        "However, you requested {} tokens ({} in the messages, {} in the completion)."
    )
    assert classify(template.format(8256, 64, 8192)) is None
    assert classify(template.format(8256, 4160, 4096)) == OVERFLOW


def test_ctx_is_optional() -> None:
    assert classify("prompt is too long: 2 tokens > 1 maximum") == OVERFLOW


class PlainHolder:
    classify_chat_error = classify


class ClassifyingAgent(ta.Think):
    classify_chat_error = classify


def test_assigned_as_a_class_attribute_it_is_not_bound_to_the_instance() -> None:
    error = ta.ProviderError("prompt is too long: 2 tokens > 1 maximum", status_code=400)
    agent = ClassifyingAgent("c1", model=ScriptedModel([]), store=ta.MemoryStore())
    assert PlainHolder().classify_chat_error(error, CTX) == OVERFLOW
    assert PlainHolder.classify_chat_error(error, CTX) == OVERFLOW
    assert agent.classify_chat_error(error, CTX) == OVERFLOW
    assert agent.classify_chat_error("Overloaded", CTX) is None
    assert ClassifyingAgent.classify_chat_error is classify
    assert repr(classify) == "default_context_overflow_classifier"


def test_a_context_overflow_error_whose_text_says_only_the_output_is_too_big_is_not_an_overflow() -> None:
    # litellm maps these to ContextWindowExceededError; compaction cannot make a too-large max_tokens fit.
    fills = (
        "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens "
        "(64 in the messages, 8192 in the completion)."
    )
    cap = "`max_completion_tokens` must be less than or equal to `16384`, the maximum value for"
    cap += " `max_completion_tokens` is less than the `context_window` for this model"
    assert classify(ta.ContextOverflowError(fills, status_code=400)) is None
    assert classify(ta.ContextOverflowError(cap, status_code=400)) is None
    assert classify(ta.ContextOverflowError("litellm.ContextWindowExceededError")) == ("context_overflow")
