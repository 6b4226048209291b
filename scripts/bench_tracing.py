"""What tracing costs a turn: off against the code without tracing (target: at most 2 % added), and on.

The turn is bench_turn.py's (one tool call, then 200 text chunks; SQLite store, durable ledger on), in process.
Three variants, each in a fresh interpreter so no import or provider state leaks between them, in interleaved
rounds so the machine's load reaches them alike:

- ``without``: the package as it is, less the commits that wired tracing into the turn (they are reverted in an
  exported copy of HEAD: ``git archive`` + ``git apply -R``), so it makes no tracing call at all;
- ``off``: the package as it is, tracing off (the default);
- ``on``: tracing on, every span through the SDK's BatchSpanProcessor to an exporter that drops them (the cost in
  the turn's own thread; exporting over the network happens in the processor's thread).

Usage: python scripts/bench_tracing.py [--turns 300] [--rounds 7] [--json PATH]  (--json: the summary rows,
       scripts/bench_summary.py)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_summary import summary_row, write_rows

ROOT = Path(__file__).resolve().parent.parent
# The commits that put tracing calls into the turn's code (driver, loop, tool calls, journal; recovery and the
# submission drain): found by their subjects, so the script keeps working as history grows.
WIRING_SUBJECTS = (
    "Tracing wired into the turn (issue 20)",
    "Tracing: a span per submission drain",
)
CHUNKS = 200


def _git(*args: str, cwd: Path = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def without_tracing(into: Path) -> str | None:
    """HEAD's tree with the wiring commits reverted, in a detached git worktree at ``into`` (a three-way revert,
    so later changes beside the wiring's lines do not stop it); ``remove_tree`` removes it. Returns None, or why
    the variant cannot be built (a later change overlaps the wiring's lines)."""
    _git("worktree", "add", "--detach", str(into), "HEAD")
    for subject in WIRING_SUBJECTS:
        commit = _git("log", "--format=%H", "-F", f"--grep={subject}", "-1").strip()
        if not commit:
            return f"no commit with subject {subject!r}"
        patch = _git("show", "--format=", commit, "--", "think_actors/_turn")
        done = subprocess.run(
            ["git", "apply", "-R", "--3way", "-"], cwd=into, input=patch, text=True, capture_output=True
        )
        if done.returncode != 0:
            conflicted = " ".join(
                line.split()[-1] for line in (done.stdout + done.stderr).splitlines() if line.startswith("U ")
            )
            return f"reverting {commit[:10]} no longer applies (later changes overlap it in {conflicted or 'the turn'})"
    return None


def remove_tree(tree: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False, capture_output=True)


WORKER = """
import asyncio, gc, json, statistics, sys, tempfile, time
variant, turns, chunks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import think_actors as ta
from think_actors.testing import ScriptedModel, text, tool_call
if variant == "on":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    from think_actors import tracing
    tracing.configure(ta.TracingConfig(exporter="provider"))
elif variant == "off":
    from think_actors import tracing
    assert not tracing.enabled()

class BenchAgent(ta.Think):
    instructions = "You answer weather questions."

    @ta.tool
    async def lookup(self, city: str) -> dict:
        \"\"\"Weather for a city.\"\"\"
        return {"city": city, "temp_c": 21}

async def main():
    agent = BenchAgent("bench", data_dir=tempfile.mkdtemp())
    times = []
    for i in range(turns + 10):
        agent.model = ScriptedModel(
            [tool_call("lookup", {"city": "Paris"}, id="call_1"), text("abcd" * chunks, chunk_size=4)]
        )
        gc.disable()
        start = time.perf_counter()
        result = await agent.save_messages("weather in Paris?")
        elapsed = time.perf_counter() - start
        gc.enable()
        assert result.status == "completed" and len(result.message.text) == 4 * chunks
        if i >= 10:
            times.append(elapsed)
        if i % 50 == 49:
            await agent.clear()
    await agent.close()
    print(json.dumps({"median_ms": statistics.median(times) * 1000}))

asyncio.run(main())
"""


def run_variant(variant: str, turns: int, package_root: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_") and k != "THINK_ACTORS_TRACING"}
    env["PYTHONPATH"] = str(package_root)
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    done = subprocess.run(
        [sys.executable, "-c", WORKER, variant, str(turns), str(CHUNKS)],
        env=env,
        cwd=package_root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"variant {variant} failed:\n{done.stderr}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["median_ms"])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", default=None, help="append the summary rows here (scripts/bench_summary.py)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp:
        baseline = Path(tmp) / "without"
        try:
            unbuilt = without_tracing(baseline)
            roots = {"off": ROOT, "on": ROOT} if unbuilt else {"without": baseline, "off": ROOT, "on": ROOT}
            results: dict[str, list[float]] = {name: [] for name in roots}
            started = time.monotonic()
            for round_number in range(args.rounds):
                order = list(roots) if round_number % 2 == 0 else list(reversed(roots))
                for name in order:
                    results[name].append(run_variant(name, args.turns, roots[name]))
            elapsed = time.monotonic() - started
        finally:
            remove_tree(baseline)
    medians = {name: statistics.median(values) for name, values in results.items()}
    base = medians.get("without", medians["off"])
    against = "without" if "without" in medians else "off"
    print(f"bench_tracing: one in-process turn (a tool call, then {CHUNKS} chunks; SQLite, ledger on)")
    print(f"{args.rounds} interleaved rounds of {args.turns} turns per variant; median of the rounds' medians")
    if unbuilt:
        print(f"the variant without tracing is not measured: {unbuilt}; on is compared with off")
    print(f"{'variant':<34}{'turn':>10}{'vs ' + against:>14}   rounds (ms)")
    labels = {
        "without": "without tracing (wiring reverted)",
        "off": "tracing off (as shipped)",
        "on": "tracing on (spans made, dropped)",
    }
    for name in roots:
        added = (medians[name] / base - 1) * 100
        rounds = " ".join(f"{v:.3f}" for v in results[name])
        print(f"{labels[name]:<34}{medians[name]:>8.3f} ms{added:>+12.2f} %   {rounds}")
    print(f"({elapsed:.0f} s; load average {os.getloadavg()[0]:.2f})")
    rows = []
    if unbuilt:
        rows.append(
            summary_row(
                f"tracing off vs the code without tracing: not measured ({unbuilt})",
                None,
                unit="ms",
                source="bench_tracing",
            )
        )
    else:
        off_added = (medians["off"] / base - 1) * 100
        print(f"tracing off adds {off_added:+.2f} % (target <= 2 %: {'met' if off_added <= 2 else 'NOT met'})")
        rows.append(
            summary_row(
                "tracing off: in-process turn vs the code without tracing",
                medians["off"],
                base,
                unit="ms",
                source="bench_tracing",
                target="ours ≤ baseline + 2 %",
                met=off_added <= 2,
            )
        )
    rows.append(
        summary_row(
            f"tracing on (spans made, dropped): in-process turn vs {'tracing off' if unbuilt else 'without tracing'}",
            medians["on"],
            base,
            unit="ms",
            source="bench_tracing",
        )
    )
    write_rows(args.json, rows)


if __name__ == "__main__":
    asyncio.run(main())
