"""Print how many corpus cases default_context_overflow_classifier and Think's original regex get right, per provider.

Positives are errors that mean a context-window overflow, negatives the near misses (rate limits, output caps,
quotas, ...). Think's regex sees the error text, or the body's JSON text when there is no text; ours sees the error
as the engine hands it over (a ProviderError with status and body, or the bare in-stream text).
Run: ``.venv/bin/python scripts/overflow_corpus_report.py [--misses]``.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from think_actors.errors import ProviderError
from think_actors.overflow import default_context_overflow_classifier

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "data" / "context_overflow_corpus.json"

# cloudflare/agents, packages/think: the classifier Think ships.
THINK_REGEX = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|exceeds the maximum number of tokens"
    r"|input token count|reduce the length of|input is too long|too many (?:input )?tokens|context window",
    re.IGNORECASE,
)


def ours(case: dict[str, Any]) -> bool:
    if case["form"] == "text":
        error: object = case["text"]
    else:
        message = case["text"] if case["text"] is not None else "BadRequestError"
        error = ProviderError(message, status_code=case["status"], response_body=case["body"])
    return default_context_overflow_classifier(error) == "context_overflow"


def think(case: dict[str, Any]) -> bool:
    body = case["body"]
    text = case["text"] if case["text"] is not None else body if isinstance(body, str) else json.dumps(body)
    return THINK_REGEX.search(text) is not None


def main() -> int:
    cases = json.loads(CORPUS.read_text(encoding="utf-8"))["cases"]
    # provider -> [positives, ours right, think right, negatives, ours right, think right]
    rows: dict[str, list[int]] = defaultdict(lambda: [0] * 6)
    misses: list[str] = []
    for case in cases:
        positive = case["expected"] == "context_overflow"
        row = rows[case["provider"]]
        offset = 0 if positive else 3
        right_ours, right_think = ours(case) == positive, think(case) == positive
        row[offset] += 1
        row[offset + 1] += right_ours
        row[offset + 2] += right_think
        if not right_ours or not right_think:
            who = "+".join(name for name, right in (("ours", right_ours), ("think", right_think)) if not right)
            misses.append(f"  {who:10} {'pos' if positive else 'neg'}  {case['id']}")
    header = f"{'provider':18} {'positives':>9} {'ours':>5} {'think':>5}   {'negatives':>9} {'ours':>5} {'think':>5}"
    print(header)
    print("-" * len(header))
    totals = [0] * 6
    for provider in sorted(rows):
        row = rows[provider]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        print(f"{provider:18} {row[0]:9} {row[1]:5} {row[2]:5}   {row[3]:9} {row[4]:5} {row[5]:5}")
    print("-" * len(header))
    print(f"{'total':18} {totals[0]:9} {totals[1]:5} {totals[2]:5}   {totals[3]:9} {totals[4]:5} {totals[5]:5}")
    all_cases = totals[0] + totals[3]
    print(
        f"\nours: {totals[1] + totals[4]}/{all_cases} right "
        f"({totals[1]}/{totals[0]} overflows caught, {totals[3] - totals[4]} false positives)"
    )
    print(
        f"think's regex: {totals[2] + totals[5]}/{all_cases} right "
        f"({totals[2]}/{totals[0]} overflows caught, {totals[3] - totals[5]} false positives)"
    )
    if "--misses" in sys.argv[1:]:
        print("\nwrong answers (who got it wrong, expected, case id):", *misses, sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
