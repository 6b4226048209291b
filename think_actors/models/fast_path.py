"""Which requests may take the OpenAI-wire fast path: the provider allow-list and the switch, in one place.

Imports nothing heavy (no litellm), so the driver can read the setting without loading litellm.
"""

from __future__ import annotations

import os

__all__ = ["FAST_PATH_ENV", "FAST_PATH_PROVIDERS", "fast_path_enabled"]

# litellm provider names whose requests take the fast path. Each is here because litellm sends it the OpenAI
# chat-completions wire and reads its stream as OpenAI's, and a test compares the body, headers and endpoint this
# client sends with what litellm sends (tests/test_model_client_conformance.py). ``openai`` covers every
# OpenAI-compatible server reached as ``openai/<model>`` with an ``api_base`` (vLLM, SGLang, Ray Serve LLM, Ollama's
# and llama.cpp's /v1). Left to litellm: ``azure`` (deployment URLs, ``api-version``, Azure AD tokens come from
# litellm's Azure client), and every provider with another wire.
FAST_PATH_PROVIDERS = frozenset(
    {
        "cerebras",
        "deepseek",
        "fireworks_ai",
        "groq",
        "hosted_vllm",
        "mistral",
        "openai",
        "openrouter",
        "together_ai",
        "xai",
    }
)

FAST_PATH_ENV = "THINK_FAST_MODEL_PATH"


def fast_path_enabled(setting: bool | None = None) -> bool:
    """``setting`` when given, else ``$THINK_FAST_MODEL_PATH`` (on unless ``0``, ``false``, ``no`` or ``off``)."""
    if setting is not None:
        return setting
    return os.environ.get(FAST_PATH_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
