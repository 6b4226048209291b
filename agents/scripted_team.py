"""The demo's default model: a scripted stand-in for an LLM that plays the research-team script.

It is not an LLM. It reads the request the way the agents' prompts ask a real model to act, so the whole
actor system (fan-out, tool actors, hooks, streaming) runs for real without a provider key: the lead splits
the question and calls one researcher per part in parallel, then writes the answer from their reports; a
researcher searches the library (``library_search``, the library MCP server's ``search``), then reports what it
found. ``--model`` replaces it with a real model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from think_actors.models import FinishEvent, ModelEvent, ModelRequest, TextDelta, ToolCallDelta, Usage


def _words(text: str, size: int = 3) -> list[str]:
    """Split text into streamed pieces of a few words (roughly what providers send)."""
    tokens = re.findall(r"\S+\s*", text)
    return ["".join(tokens[i : i + size]) for i in range(0, len(tokens), size)]


def _sub_questions(question: str) -> list[str]:
    parts = [p.strip(" ?.") for p in re.split(r"\band\b|\bvs\.?\b|\bversus\b|,", question) if p.strip(" ?.")]
    topic = re.sub(r"^(compare|contrast|explain|how do|what are)\s+", "", parts[0], flags=re.I) if parts else ""
    parts = [topic, *parts[1:]] if parts else [question]
    if len(parts) == 1:
        parts = [parts[0], f"how {parts[0]} scales"]
    return [f"What matters about {p}?" for p in parts[:4]]


def _passages(content: Any) -> list[dict[str, str]]:
    """The passages of a ``library_search`` result: the MCP tool's structured content ``{"passages": [...]}``."""
    with contextlib.suppress(ValueError, TypeError):
        output = json.loads(content) if isinstance(content, str) else content
        structured = output.get("structuredContent") if isinstance(output, dict) else None
        if isinstance(structured, dict) and isinstance(structured.get("passages"), list):
            return [p for p in structured["passages"] if isinstance(p, dict)]
    return []


class ScriptedTeamModel:
    """A ModelClient for the demo team. ``role`` is ``lead`` or ``researcher``; ``pace_s`` paces the stream."""

    def __init__(self, role: str, pace_s: float = 0.01):
        self.role = role
        self.pace_s = pace_s
        self.model_id = f"scripted-{role}"

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        messages = request.messages
        results = [m for m in messages if m.get("role") == "tool"]
        question = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
        plan = self._lead(question, results) if self.role == "lead" else self._researcher(question, results)
        out_chars = 0
        for item in plan:
            await asyncio.sleep(self.pace_s)
            out_chars += len(str(item))
            yield item
        in_chars = sum(len(str(m.get("content") or "")) for m in messages)
        calls = any(isinstance(e, ToolCallDelta) for e in plan)
        yield FinishEvent(
            "tool_calls" if calls else "stop", Usage(in_chars // 4, out_chars // 4, (in_chars + out_chars) // 4)
        )

    def _lead(self, question: str, results: list[dict[str, Any]]) -> list[Any]:
        if not results:
            subs = _sub_questions(str(question))
            intro = [TextDelta(p) for p in _words(f"I will research {len(subs)} parts in parallel. ")]
            calls = [
                ToolCallDelta(i, f"call_{uuid.uuid4().hex[:12]}", "researcher", json.dumps({"input": q}))
                for i, q in enumerate(subs)
            ]
            return intro + calls
        lines = ["Here is what the team found:\n"]
        for r in results:
            report = str(r.get("content", ""))
            with contextlib.suppress(ValueError):
                report = json.loads(report)
            lines.append(f"- {str(report).strip()}\n")
        lines.append("In short: keep state in actors, stream in batches, and persist before acknowledging.")
        return [TextDelta(p) for p in _words("".join(lines))]

    def _researcher(self, question: str, results: list[dict[str, Any]]) -> list[Any]:
        if not results:
            query = re.sub(r"^What matters about\s+", "", str(question)).rstrip("?")
            return [
                ToolCallDelta(
                    0, f"call_{uuid.uuid4().hex[:12]}", "library_search", json.dumps({"query": query, "limit": 2})
                )
            ]
        found = _passages(results[-1].get("content"))
        if not found:
            return [TextDelta(p) for p in _words("The library has nothing on this; no claim made.")]
        summary = " ".join(f"{d['passage']} [{d['id']}]" for d in found[:2])
        return [TextDelta(p) for p in _words(summary)]
