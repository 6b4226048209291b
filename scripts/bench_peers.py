"""The in-process turn of bench_turn.py in think_actors, openai-agents and pydantic-ai, against the same floor.

Runs in the bench venv only (``make bench-peers``): the peers are pinned in requirements/bench-peers.txt and are
never installed in .venv. Every path plays the same turn, in this process, interleaved in one run: step 1 streams
one tool call (``lookup`` with ``{"city": "Paris"}``, its arguments in two fragments), the framework calls the tool
(bench_turn's ``lookup``), step 2 streams N text chunks of 4 characters; the caller reads every chunk as it comes.

What each path does, per turn and per chunk:

- floor: bench_turn's ``floor_turn``, a bare asyncio loop over think_actors' ``ScriptedModel`` stream: it
  gathers the tool call's argument fragments, awaits the tool, then appends each ``TextDelta``'s text to a list.
- think_actors: ``async for chunk in agent.chat(...)`` on bench_turn's ``BenchAgent`` and the same
  ``ScriptedModel`` script, with bench_turn's headline settings: SQLite store and the durable-turn ledger on
  (turn record, chunk log, effect ledger around the tool call). Per chunk the engine builds a ``TextDeltaChunk``
  (a pydantic model), folds it into the reply message (the accumulator), adds it to the chunk log and hands it
  up through its stream generators to the caller, which keeps ``chunk.delta`` of every ``TextDeltaChunk``; the
  chunk log is written to SQLite in batches of 128 chunks (or 50 ms), the tool call's input in the same
  transaction as its effect record's start and its output in the same one as the record's end. Per turn it runs
  every hook, writes the turn record with the user message (one transaction), the effect record before and after
  the tool runs (one each), and the reply with the record's removal (one); with 200 chunks, five SQLite
  transactions in all (the text goes in one batch; the rest is still buffered when the reply is written). The
  conversation is cleared
  (untimed) before each turn, so every path starts each turn from the same single user message (bench_turn
  clears every 50 turns, so its figures carry up to 50 turns of history). Two more rows, for scale, are the same
  path with bench_turn's ``ledger_off()`` (messages still in SQLite, one write each) and with a ``MemoryStore``
  and the ledger off: no
  persistence at all, as in both peers. The target is judged on the headline row.
- openai-agents: ``Runner.run_streamed`` with a custom ``Model`` (their extension point) whose
  ``stream_response`` yields pre-built Responses events in the order their shipped ``agents.testing`` scripted
  model streams them (created, in_progress, output_item.added, deltas, done events, output_item.done, completed),
  with one ``response.output_text.delta`` per chunk. The caller iterates ``result.stream_events()`` and keeps
  the delta of every raw ``ResponseTextDeltaEvent``. The run loop is a task of its own; per chunk it passes the
  event through its retry and run-context stream wrappers, wraps it in a ``RawResponsesStreamEvent`` and puts
  it on the asyncio queue that ``stream_events()`` reads. Tracing is off (``tracing_disabled=True``):
  its default exporter would send spans to OpenAI. No session (no persistence).
- pydantic-ai: ``agent.run_stream`` with ``FunctionModel(stream_function=...)`` (their scripted model): step 1
  yields two ``DeltaToolCall`` fragments, step 2 yields each 4-character string. The caller iterates
  ``result.stream_text(delta=True, debounce_by=None)`` (no debouncing, so it gets every chunk rather than
  groups of 0.1 s). Per chunk pydantic-ai turns the string into a part delta event in its parts manager,
  estimates its tokens into the usage, and yields the text. No instrumentation, no persistence.

Every model's events are built before the turn's clock starts, as bench_turn builds the ScriptedModel's (the
openai-agents model is a bare generator over that list, leaner than their shipped ``agents.testing`` model, which
also records each call). The agents are built once per N and reused. Per-turn wall time is measured around one
turn with gc disabled (gc.collect() and gc.freeze() first, so collections settle between turns, not inside one),
10 warm-up turns per path and N excluded, the paths interleaved in rounds so a noisy neighbour hits them all
alike. Per-turn overhead is a path's median turn (N=200) minus the floor's; the per-chunk overhead is the slope
from N=200 to N=1000 minus the floor's slope. The target (issue 9): think_actors at most 0.25x the best peer's
per-turn overhead.

Usage: .venv-bench/bin/python scripts/bench_peers.py [--turns 200] [--rounds 10] [--json PATH]
       (--json: the summary rows, scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import json
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

from bench_summary import summary_row, write_rows
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseFunctionToolCall,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import Tool as PydanticTool
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

import agents as oa  # openai-agents; the repo's own agents/ (the demo) is not on sys.path when run as a script
from think_actors.chunks import TextDeltaChunk
from think_actors.store import MemoryStore
from think_actors.testing import ScriptedModel

# Imported after `agents`: bench_turn puts the repo root first on sys.path, where agents/ is the demo.
bench_turn = importlib.import_module("bench_turn")
if not hasattr(oa, "Runner"):
    raise SystemExit("`agents` here is the repo's demo package, not openai-agents: run this file from .venv-bench")

SMALL, LARGE = bench_turn.SMALL, bench_turn.LARGE
PROMPT = "weather in Paris?"
INSTRUCTIONS = "You answer weather questions."
ARGUMENTS = json.dumps({"city": "Paris"})
CALL_ID = "call_1"
HEADLINE = "think_actors"
NO_LEDGER = "think_actors, ledger off"
BARE = "think_actors, MemoryStore, ledger off"
PEERS = ("openai-agents", "pydantic-ai")
PATHS = ("floor", HEADLINE, NO_LEDGER, BARE, *PEERS)
WARMUP = 10


class TurnPath:
    """One framework's way through the turn: ``prepare`` (untimed) scripts the next turn, ``turn`` plays it."""

    async def prepare(self, chunks: int) -> None:
        raise NotImplementedError

    async def turn(self) -> str:
        raise NotImplementedError

    async def close(self) -> None:
        pass


class Floor(TurnPath):
    async def prepare(self, chunks: int) -> None:
        self.model = ScriptedModel(bench_turn.script(chunks))

    async def turn(self) -> str:
        return str(await bench_turn.floor_turn(self.model))


class ThinkActors(TurnPath):
    def __init__(self, chunks: int, data_dir: str, *, memory: bool = False, ledger: bool = True) -> None:
        name = f"peers-{chunks}-{'memory' if memory else 'sqlite'}-{'ledger' if ledger else 'no-ledger'}"
        store = MemoryStore() if memory else None
        self.agent = bench_turn.BenchAgent(name, data_dir=data_dir, store=store)
        self.ledger = ledger

    async def prepare(self, chunks: int) -> None:
        await self.agent.clear()
        self.agent.model = ScriptedModel(bench_turn.script(chunks))

    async def turn(self) -> str:
        texts = []
        with contextlib.nullcontext() if self.ledger else bench_turn.ledger_off():
            stream = self.agent.chat(PROMPT)
            async for chunk in stream:
                if isinstance(chunk, TextDeltaChunk):
                    texts.append(chunk.delta)
        assert stream.status == "completed", stream.outcome
        return "".join(texts)

    async def close(self) -> None:
        await self.agent.close()


class ScriptedResponses(oa.Model):
    """An openai-agents Model that streams pre-built Responses events, one list per request."""

    def __init__(self, steps: list[list[Any]]) -> None:
        self.steps = steps

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the benchmark only streams")

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        for event in self.steps.pop(0):
            yield event


def _response(output: list[Any], status: str, output_tokens: int) -> Response:
    usage = ResponseUsage(
        input_tokens=5,
        output_tokens=output_tokens,
        total_tokens=5 + output_tokens,
        input_tokens_details=InputTokensDetails(cache_write_tokens=0, cached_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
    )
    return Response(
        id="resp_scripted",
        created_at=0,
        model="scripted",
        object="response",
        output=output,
        tool_choice="auto",
        tools=[],
        top_p=None,
        parallel_tool_calls=False,
        status=status,  # type: ignore[arg-type]
        usage=usage if status == "completed" else None,
    )


def _framed(items: list[Any], output: Any, output_tokens: int) -> list[Any]:
    """``items`` between the events a Responses stream opens and closes one output item with."""
    opening = [
        ResponseCreatedEvent(type="response.created", response=_response([], "in_progress", 0), sequence_number=0),
        ResponseInProgressEvent(
            type="response.in_progress", response=_response([], "in_progress", 0), sequence_number=1
        ),
    ]
    closing = [
        ResponseOutputItemDoneEvent(type="response.output_item.done", item=output, output_index=0, sequence_number=0),
        ResponseCompletedEvent(
            type="response.completed", response=_response([output], "completed", output_tokens), sequence_number=0
        ),
    ]
    events = [*opening, *items, *closing]
    for number, event in enumerate(events):
        event.sequence_number = number
    return events


def openai_agents_script(chunks: int) -> list[list[Any]]:
    call = ResponseFunctionToolCall(
        id="fc_1", call_id=CALL_ID, type="function_call", name="lookup", arguments=ARGUMENTS, status="completed"
    )
    half = len(ARGUMENTS) // 2
    tool_step = _framed(
        [
            ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                item=call.model_copy(update={"arguments": "", "status": "in_progress"}),
                output_index=0,
                sequence_number=0,
            ),
            *(
                ResponseFunctionCallArgumentsDeltaEvent(
                    type="response.function_call_arguments.delta",
                    item_id="fc_1",
                    output_index=0,
                    delta=fragment,
                    sequence_number=0,
                )
                for fragment in (ARGUMENTS[:half], ARGUMENTS[half:])
            ),
            ResponseFunctionCallArgumentsDoneEvent(
                type="response.function_call_arguments.done",
                item_id="fc_1",
                output_index=0,
                arguments=ARGUMENTS,
                name="lookup",
                sequence_number=0,
            ),
        ],
        call,
        len(ARGUMENTS) // 4 + 1,
    )
    full = "abcd" * chunks
    message = ResponseOutputMessage(
        id="msg_1",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=full, annotations=[], logprobs=[])],
    )
    empty = ResponseOutputText(type="output_text", text="", annotations=[], logprobs=[])
    text_step = _framed(
        [
            ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                item=message.model_copy(update={"content": [], "status": "in_progress"}),
                output_index=0,
                sequence_number=0,
            ),
            ResponseContentPartAddedEvent(
                type="response.content_part.added",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                part=empty,
                sequence_number=0,
            ),
            *(
                ResponseTextDeltaEvent(
                    type="response.output_text.delta",
                    item_id="msg_1",
                    output_index=0,
                    content_index=0,
                    delta="abcd",
                    logprobs=[],
                    sequence_number=0,
                )
                for _ in range(chunks)
            ),
            ResponseTextDoneEvent(
                type="response.output_text.done",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                text=full,
                logprobs=[],
                sequence_number=0,
            ),
            ResponseContentPartDoneEvent(
                type="response.content_part.done",
                item_id="msg_1",
                output_index=0,
                content_index=0,
                part=message.content[0],  # type: ignore[arg-type]
                sequence_number=0,
            ),
        ],
        message,
        chunks + 1,
    )
    return [tool_step, text_step]


class OpenAIAgents(TurnPath):
    def __init__(self) -> None:
        self.calls = 0

        async def lookup(city: str) -> dict[str, Any]:
            self.calls += 1
            return await bench_turn.lookup(city)  # type: ignore[no-any-return]

        self.agent = oa.Agent(name="bench", instructions=INSTRUCTIONS, tools=[oa.function_tool(lookup)])
        self.run_config = oa.RunConfig(tracing_disabled=True)

    async def prepare(self, chunks: int) -> None:
        self.agent.model = ScriptedResponses(openai_agents_script(chunks))
        self.calls = 0

    async def turn(self) -> str:
        texts = []
        result = oa.Runner.run_streamed(self.agent, PROMPT, run_config=self.run_config)
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent):
                texts.append(event.data.delta)
        assert self.calls == 1 and result.final_output == "".join(texts), result
        return "".join(texts)


class PydanticAI(TurnPath):
    def __init__(self) -> None:
        self.calls = 0
        self.steps: list[list[Any]] = []

        async def lookup(city: str) -> dict[str, Any]:
            self.calls += 1
            return await bench_turn.lookup(city)  # type: ignore[no-any-return]

        async def stream_function(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
            for item in self.steps.pop(0):
                yield item

        self.model = FunctionModel(stream_function=stream_function)
        self.agent = PydanticAgent(self.model, instructions=INSTRUCTIONS, tools=[PydanticTool(lookup, takes_ctx=False)])

    async def prepare(self, chunks: int) -> None:
        half = len(ARGUMENTS) // 2
        self.steps = [
            [
                {0: DeltaToolCall(name="lookup", json_args=ARGUMENTS[:half], tool_call_id=CALL_ID)},
                {0: DeltaToolCall(json_args=ARGUMENTS[half:])},
            ],
            ["abcd"] * chunks,
        ]
        self.calls = 0

    async def turn(self) -> str:
        texts = []
        async with self.agent.run_stream(PROMPT) as result:
            async for delta in result.stream_text(delta=True, debounce_by=None):
                texts.append(delta)
        assert self.calls == 1 and not self.steps, self.steps
        return "".join(texts)


async def timed_turn(path: TurnPath, chunks: int) -> float:
    await path.prepare(chunks)
    gc.disable()
    start = time.perf_counter()
    out = await path.turn()
    elapsed = time.perf_counter() - start
    gc.enable()
    assert out == "abcd" * chunks, (type(path).__name__, len(out))
    return elapsed


def build(name: str, chunks: int, data_dir: str) -> TurnPath:
    if name == "floor":
        return Floor()
    if name == HEADLINE:
        return ThinkActors(chunks, data_dir)
    if name == NO_LEDGER:
        return ThinkActors(chunks, data_dir, ledger=False)
    if name == BARE:
        return ThinkActors(chunks, data_dir, memory=True, ledger=False)
    if name == "openai-agents":
        return OpenAIAgents()
    return PydanticAI()


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200, help="timed turns per path and N")
    parser.add_argument("--rounds", type=int, default=10, help="interleaving rounds the turns are split into")
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    sizes = (SMALL, LARGE)
    times: dict[tuple[str, int], list[float]] = {(name, n): [] for name in PATHS for n in sizes}
    with tempfile.TemporaryDirectory() as data_dir:
        paths = {(name, n): build(name, n, data_dir) for name in PATHS for n in sizes}
        for (_name, n), path in paths.items():
            for _ in range(WARMUP):
                await timed_turn(path, n)
        gc.collect()
        gc.freeze()
        per_round = max(1, args.turns // args.rounds)
        for _ in range(args.rounds):
            for n in sizes:
                for name in PATHS:
                    for _ in range(per_round):
                        times[name, n].append(await timed_turn(paths[name, n], n))
        for path in paths.values():
            await path.close()

    turns = per_round * args.rounds
    median = {key: statistics.median(values) for key, values in times.items()}
    p90 = {key: quantile(values, 0.9) for key, values in times.items()}
    slope = {name: (median[name, LARGE] - median[name, SMALL]) / (LARGE - SMALL) for name in PATHS}
    fixed = {name: median[name, SMALL] - SMALL * slope[name] for name in PATHS}
    overhead = {name: median[name, SMALL] - median["floor", SMALL] for name in PATHS}
    print(
        f"in-process turn, tool call + N text chunks of 4 chars, {turns} turns per path and N"
        f" ({args.rounds} interleaved rounds); {HEADLINE}: SQLite store, durable-turn ledger on"
    )
    print(
        f"  {'':38s} {'N=' + str(SMALL) + ' median':>13s} {'p90':>9s} {'N=' + str(LARGE) + ' median':>14s} {'p90':>9s}"
    )
    for name in PATHS:
        print(
            f"  {name:38s} {median[name, SMALL] * 1e3:10.3f} ms {p90[name, SMALL] * 1e3:6.3f} ms"
            f" {median[name, LARGE] * 1e3:11.3f} ms {p90[name, LARGE] * 1e3:6.3f} ms"
        )
    best = min(PEERS, key=lambda name: overhead[name])
    print(f"  {'over the floor':38s} {'turn N=' + str(SMALL):>10s} {'per chunk':>10s} {'fixed':>9s}   vs {best}")
    for name in PATHS[1:]:
        print(
            f"  {name:38s} {overhead[name] * 1e3:7.3f} ms {(slope[name] - slope['floor']) * 1e6:7.2f} µs"
            f" {(fixed[name] - fixed['floor']) * 1e3:6.3f} ms   {overhead[name] / overhead[best]:5.2f}x"
        )
    ratio = overhead[HEADLINE] / overhead[best]
    chunk_ratio = (slope[HEADLINE] - slope["floor"]) / (slope[best] - slope["floor"])
    print(
        f"  {HEADLINE} / best peer ({best}): per-turn overhead {ratio:.2f}x"
        f" (target ≤ 0.25x: {'met' if ratio <= 0.25 else 'NOT met'}), per-chunk overhead {chunk_ratio:.2f}x"
    )
    source = "bench_peers"
    rows = [
        summary_row(
            f"peers: overhead over the bare loop per {SMALL}-chunk turn, vs {best} (the best peer)",
            overhead[HEADLINE] * 1e3,
            overhead[best] * 1e3,
            unit="ms",
            source=source,
            target="ratio ≤ 0.25",
            met=ratio <= 0.25,
        ),
        summary_row(
            f"peers: overhead over the bare loop per chunk, vs {best}",
            (slope[HEADLINE] - slope["floor"]) * 1e6,
            (slope[best] - slope["floor"]) * 1e6,
            unit="µs",
            source=source,
        ),
    ]
    rows += [
        summary_row(
            f"peers: {SMALL}-chunk turn, vs {peer}",
            median[HEADLINE, SMALL] * 1e3,
            median[peer, SMALL] * 1e3,
            unit="ms",
            source=source,
        )
        for peer in PEERS
    ]
    write_rows(args.json, rows)


if __name__ == "__main__":
    asyncio.run(main())
