"""Test kit shipped with the package: test your agents the way think_actors tests itself.

``ScriptedModel`` plays scripted model steps in-process; ``ScriptedOpenAIServer`` is a real OpenAI-compatible
HTTP server on 127.0.0.1 for driving the litellm client end to end.
"""

from .scripted import (
    ScriptedModel,
    Step,
    StepLike,
    delay,
    error,
    file,
    reasoning,
    source,
    step,
    text,
    tool_call,
)

__all__ = [
    "ScriptedModel",
    "ScriptedOpenAIServer",
    "Step",
    "StepLike",
    "delay",
    "error",
    "file",
    "reasoning",
    "source",
    "step",
    "text",
    "tool_call",
]


def __getattr__(name: str) -> object:
    # The HTTP server pulls in aiohttp; load it only for tests that use it.
    if name == "ScriptedOpenAIServer":
        from .openai_server import ScriptedOpenAIServer

        return ScriptedOpenAIServer
    raise AttributeError(name)
