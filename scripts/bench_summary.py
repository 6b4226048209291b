"""Run benchmark scripts one after another, show their output as it comes, and end with one table of their figures.

Each command is a benchmark script's invocation (a string, split like a shell's words). ``--json PATH`` is added
to it, PATH a file of its own in a temporary directory, and the script writes its summary rows there: a JSON list
of dicts made by ``summary_row`` (figure, ours, baseline, ratio, target, met, unit, source), numbers as numbers
(the scripts import ``summary_row`` and ``write_rows`` from here).
The ratio is ours / baseline, the baseline being the comparison system measured side by side in the same run (the
bare loop, the peer frameworks, bare Ray actors, the floor relay). The table at the end has one row per figure, in
the order of the commands, under a line naming each command and how long it took.

Nothing is shown as measured that was not measured in this run:
- a command that fails (exit status not 0, or killed at ``--timeout-s``) becomes a row saying so, with its last
  line of output, beside whatever rows it wrote before failing, and this script then exits 1;
- a script that does not know ``--json`` yet (argparse refuses it) is run again without it, and its row says
  "no summary rows (script has no --json yet)"; its own output above the table still has its figures;
- ``--not-run "FIGURE: REASON"`` adds a row "not measured in this run" (a part left to a longer target), and so
  does each command not reached when Ctrl-C stops the run (the table is still printed; exit status 130).

Usage: python scripts/bench_summary.py [--timeout-s 3600] [--not-run "FIGURE: REASON"]... "CMD" ["CMD"...]
       python scripts/bench_summary.py --read FILE [FILE...]   (the table of rows written earlier)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COLUMNS = ("figure", "ours", "baseline (same run)", "ratio", "target", "met")
NOT_MEASURED = "not measured in this run"
NO_JSON = "no summary rows (script has no --json yet)"
DASH = "—"


def summary_row(
    figure: str,
    ours: float | str | None,
    baseline: float | str | None = None,
    *,
    unit: str,
    source: str,
    target: str | None = None,
    met: bool | None = None,
    ratio: float | None = None,
) -> dict[str, Any]:
    """One figure of a benchmark's summary: ``ours`` beside ``baseline``, both in ``unit``.

    ``ratio`` defaults to ours / baseline when both are positive numbers. ``target`` says what ``met`` judges
    (e.g. "ours - baseline ≤ 7 µs"); leave both None for a figure that is only reported.
    """
    if (
        ratio is None
        and isinstance(ours, int | float)
        and isinstance(baseline, int | float)
        and min(ours, baseline) > 0
    ):
        ratio = ours / baseline
    return {
        "figure": figure,
        "ours": ours,
        "baseline": baseline,
        "ratio": ratio,
        "target": target,
        "met": met,
        "unit": unit,
        "source": source,
    }


def write_rows(path: str | None, rows: list[dict[str, Any]]) -> None:
    """Add ``rows`` to the JSON list in ``path`` (created if missing); nothing when ``path`` is None."""
    if not path:
        return
    file = Path(path)
    existing = json.loads(file.read_text(encoding="utf-8")) if file.exists() and file.stat().st_size else []
    file.write_text(json.dumps([*existing, *rows], indent=1, default=str), encoding="utf-8")


def read_rows(path: Path, source: str) -> list[dict[str, Any]]:
    """The rows of a file a script wrote: a list of ``summary_row`` dicts, or a document with a "summary" list.

    A row without "ours" (a script's own older format: figure, system, value, met) is shown with its value as
    ours and no baseline, never dropped.
    """
    document = json.loads(path.read_text(encoding="utf-8"))
    rows = document.get("summary", []) if isinstance(document, dict) else document
    out = []
    for item in rows:
        if "ours" not in item:
            system = f" ({item['system']})" if item.get("system") else ""
            item = summary_row(
                f"{item.get('figure', '?')}{system}".strip(),
                item.get("value"),
                unit="",
                source=source,
                target="(in the figure)" if item.get("met") is not None else None,
                met=item.get("met"),
            )
        out.append({**item, "source": item.get("source") or source})
    return out


def number(value: Any, unit: str = "") -> str:
    """A cell: numbers to three or four significant figures with their unit, None as a dash."""
    if value is None or value == "":
        return DASH
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    size = abs(value)
    if isinstance(value, int) or size >= 100:
        text = f"{value:,.0f}"
    elif size >= 10:
        text = f"{value:.1f}"
    elif size >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3f}"
    return f"{text} {unit}".strip()


def cells(row: dict[str, Any]) -> list[str]:
    unit = row.get("unit") or ""
    ratio = row.get("ratio")
    met = row.get("met")
    return [
        str(row.get("figure", "?")),
        number(row.get("ours"), unit),
        number(row.get("baseline"), unit),
        f"{ratio:.2f}x" if isinstance(ratio, int | float) else number(ratio),
        str(row.get("target") or DASH),
        DASH if met is None else "yes" if met else "NO",
    ]


@dataclass
class Outcome:
    """What one command gave: its rows, or the row saying why there are none."""

    label: str
    seconds: float
    failed: bool = False
    rows: list[dict[str, Any]] = field(default_factory=list)


def label_of(argv: list[str]) -> str:
    """The script's name and its arguments (no interpreter, no --json)."""
    scripts = [i for i, word in enumerate(argv) if word.endswith(".py")]
    words = argv[scripts[0] :] if scripts else argv
    return " ".join([Path(words[0]).stem, *words[1:]]) if words else "?"


class Child:
    """A command run in a process group of its own, its output echoed line by line and its last lines kept."""

    def __init__(self, argv: list[str], timeout_s: float) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.tail: collections.deque[str] = collections.deque(maxlen=30)
        self.timed_out = False
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True, process_group=0
        )
        self.timer = threading.Timer(timeout_s, self._time_out) if timeout_s > 0 else None
        if self.timer:
            self.timer.start()

    def _time_out(self) -> None:
        self.timed_out = True
        self.stop(signal.SIGTERM)

    def stop(self, first: signal.Signals) -> None:
        """Send ``first`` to the command's process group, then SIGKILL if it is still running 20 s later."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, first)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)

    def wait(self) -> int:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
                self.tail.append(line.rstrip())
            return self.process.wait()
        except KeyboardInterrupt:
            # The command is in a process group of its own, so the terminal's Ctrl-C reached only this script.
            self.stop(signal.SIGINT)
            raise
        finally:
            if self.timer:
                self.timer.cancel()


def refused_json(child: Child, status: int) -> bool:
    """Whether argparse refused the --json this script added (exit status 2, "unrecognized arguments")."""
    return status == 2 and any("unrecognized arguments" in line and "--json" in line for line in child.tail)


def failure_row(label: str, child: Child, status: int) -> dict[str, Any]:
    why = "timed out" if child.timed_out else f"failed (exit {status})"
    last = next((line for line in reversed(child.tail) if line.strip()), "")
    return summary_row(f"{label}: {last[:100]}" if last else label, why, unit="", source=label)


def run(command: str, index: int, total: int, directory: Path, timeout_s: float) -> Outcome:
    argv = shlex.split(command)
    label = label_of(argv)
    path = directory / f"{index:02d}-{Path(label.split()[0]).name}.json"
    print(f"\n=== [{index}/{total}] {command} --json {path}", flush=True)
    began = time.perf_counter()
    try:
        child = Child([*argv, "--json", str(path)], timeout_s)
        status = child.wait()
        if refused_json(child, status):
            print(f"=== {label} has no --json yet: run again without it", flush=True)
            child = Child(argv, timeout_s)
            status = child.wait()
            if status == 0:
                row = summary_row(label, NO_JSON, unit="", source=label)
                return Outcome(label, time.perf_counter() - began, rows=[row])
    except OSError as err:
        row = summary_row(f"{label}: {err}", "failed (did not start)", unit="", source=label)
        return Outcome(label, time.perf_counter() - began, failed=True, rows=[row])
    seconds = time.perf_counter() - began
    rows: list[dict[str, Any]] = []
    if path.exists() and path.stat().st_size:
        try:
            rows = read_rows(path, label)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            rows = [summary_row(f"{label}: its --json file is unreadable ({err})", "failed", unit="", source=label)]
            return Outcome(label, seconds, failed=True, rows=rows)
    if status != 0:
        return Outcome(label, seconds, failed=True, rows=[*rows, failure_row(label, child, status)])
    if not rows:
        rows = [summary_row(label, "no summary rows (the script wrote none)", unit="", source=label)]
    return Outcome(label, seconds, rows=rows)


def not_run_row(spec: str) -> dict[str, Any]:
    """The row of ``--not-run "FIGURE: REASON"``; the reason is what follows the last colon."""
    figure, colon, reason = spec.rpartition(":")
    figure = f"{figure.strip()} ({reason.strip()})" if colon else spec.strip()
    return summary_row(figure, NOT_MEASURED, unit="", source="not run")


def print_table(outcomes: list[Outcome], not_run: list[str]) -> None:
    lines: list[list[str]] = []
    for outcome in outcomes:
        lines.append([f"**{outcome.label}** ({outcome.seconds:.0f} s)", "", "", "", "", ""])
        lines.extend(cells(row) for row in outcome.rows)
    if not_run:
        lines.append(["**left out of this run**", "", "", "", "", ""])
        lines.extend(cells(not_run_row(spec)) for spec in not_run)
    widths = [max(len(cell) for cell in column) for column in zip(COLUMNS, *lines, strict=True)]
    print("\n| " + " | ".join(name.ljust(w) for name, w in zip(COLUMNS, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for line in lines:
        print("| " + " | ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("commands", nargs="*", help='benchmark invocations, each one quoted: "python scripts/x.py"')
    parser.add_argument("--not-run", action="append", default=[], metavar="FIGURE: REASON", help="a row not measured")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="per command; 0: none")
    parser.add_argument("--read", nargs="+", default=None, metavar="FILE", help="print the table of these files")
    args = parser.parse_args()
    if args.read:
        outcomes = [Outcome(Path(p).stem, 0.0, rows=read_rows(Path(p), Path(p).stem)) for p in args.read]
        print_table(outcomes, args.not_run)
        return 0
    if not args.commands:
        parser.error("give at least one command, or --read FILE")
    began = time.perf_counter()
    load_start = os.getloadavg()[0]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="bench-summary-") as directory:
        try:
            for i, command in enumerate(args.commands, 1):
                outcomes.append(run(command, i, len(args.commands), Path(directory), args.timeout_s))
        except KeyboardInterrupt:
            left = [f"{label_of(shlex.split(c))}: interrupted" for c in args.commands[len(outcomes) :]]
            print("\ninterrupted: the commands that did not finish are rows not measured", flush=True)
            print_table(outcomes, [*args.not_run, *left])
            return 130
    print_table(outcomes, args.not_run)
    failed = [o.label for o in outcomes if o.failed]
    commands = f"{len(outcomes)} command{'' if len(outcomes) == 1 else 's'}"
    print(
        f"\n{commands} in {(time.perf_counter() - began) / 60:.1f} min; {os.cpu_count()} cores, "
        f"1-minute load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
        + (f"; FAILED: {', '.join(failed)}" if failed else ""),
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
