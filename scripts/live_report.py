"""The rows and the summary of scripts/bench_live.py: a markdown row per measured step as it ends, and the summary
table (figure, system, value; the project's targets marked met or not) that the JSON output carries too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CLIENT_CORE_WARN = 0.8  # a row whose clients used more of a core than this says so
PROVIDER_LATE_SHARE = 0.01  # a row says so when more of the provider's tokens than this were late


@dataclass
class Result:
    """One system's rows and what its ramp found."""

    name: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    largest: int = 0  # largest passing N at 50 tokens/s
    capped: bool = False  # the ramp passed the cap
    stopped_by: str = ""
    baseline_mib: float = 0.0  # USS with no conversation
    warm_mib: float = 0.0  # USS once the warm-up's WARM_USERS conversations had a turn each (lazy start-up done)
    idle_cores: float | None = None  # the system's CPU with no conversation (None: not measured)
    took_s: float = 0.0


HEADER = (
    "| system | phase | tok/s | N | turns | lost | unfin. | first p50 | first p99 | added p99 | gap p50 | gap p99 "
    "| CPU/turn | CPU/token | server cores | USS MiB | MiB/conv (marginal) | client core | client lag p99 "
    "| load1 | step s | pass |"
)


def print_row(row: dict[str, Any]) -> None:
    cells = [
        row["system"],
        row["phase"],
        f"{row['tokens_per_s']:.0f}",
        str(row["n"]),
        str(row["turns"]),
        str(row["lost"]),
        str(row["unfinished"]),
        f"{row['first_p50_ms']:.0f} ms",
        f"{row['first_p99_ms']:.0f} ms",
        f"{row['added_first_p99_ms']:.0f} ms",
        f"{row['gap_p50_ms']:.1f} ms",
        f"{row['gap_p99_ms']:.1f} ms",
        f"{row['cpu_ms_per_turn']:.1f} ms",
        f"{row['cpu_ms_per_token']:.3f} ms",
        f"{row['server_cores']:.2f}",
        f"{row['uss_mib']:.0f} ({row['processes']} proc)",
        f"{row['mib_per_conversation']:.2f} ({row['mib_per_added_conversation']:.2f})",
        f"{row['client_cores']:.2f}" + (" BUSY" if row["client_cores"] > CLIENT_CORE_WARN else ""),
        f"{row['client_lag_p99_ms']:.0f} ms",
        f"{row['load1']:.1f}",
        f"{row['step_s']:.0f}",
        "yes" if row["passed"] else "no" + ("" if row["ready"] else " (not all ready)"),
    ]
    print("| " + " | ".join(cells) + " |", flush=True)
    if row["lost_examples"]:
        print(f"    lost: {'; '.join(row['lost_examples'])}", flush=True)
    if row["provider_late_share"] > PROVIDER_LATE_SHARE:
        late = f"{row['provider_late_share']:.0%} of its tokens > 5 ms late, worst {row['provider_late_ms_max']:.0f} ms"
        print(
            f"    the provider itself was late ({late}, its CPU {row['provider_cores']:.2f} cores): the machine was "
            "short of CPU, the gaps and delays are not all the system's",
            flush=True,
        )
    if row["system"] in ("shared", "actor"):
        roles = ", ".join(f"{k} {v:.2f}" for k, v in row["cpu_s_by_role"].items())
        memory = ", ".join(f"{k} {v:.0f}" for k, v in row["uss_mib_by_role"].items())
        print(f"    CPU s by role: {roles}; USS MiB by role: {memory}", flush=True)


def same_n_rows(a: Result, b: Result) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Two systems' rows at 50 tokens/s and one N, to compare their CPU: their pace steps' (``--pace-n`` users),
    else the largest N both passed in their ramps, else each one's largest passing N."""
    a_paced = {r["n"]: r for r in a.rows if r["phase"] == "pace" and r["tokens_per_s"] == 50}
    b_paced = {r["n"]: r for r in b.rows if r["phase"] == "pace" and r["tokens_per_s"] == 50}
    a_passed = {r["n"]: r for r in a.rows if r["phase"] == "ramp" and r["passed"]}
    b_passed = {r["n"]: r for r in b.rows if r["phase"] == "ramp" and r["passed"]}
    for first, second in ((a_paced, b_paced), (a_passed, b_passed)):
        common = sorted(set(first) & set(second))
        if common:
            return first[common[-1]], second[common[-1]]
    return pass_row(a), pass_row(b)


def cores(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.3f} cores"


def pass_row(result: Result) -> dict[str, Any] | None:
    rows = [r for r in result.rows if r["phase"] == "ramp" and r["passed"] and r["n"] == result.largest]
    return rows[-1] if rows else None


def summary(results: dict[str, Result], cap: int) -> list[dict[str, Any]]:
    """The summary table's rows: figure, system, value as text (and for targets, whether met), with the figure's
    number as ``ours`` (beside ``baseline``, ``ratio``, ``target``, ``unit``: scripts/bench_summary.py's row)."""
    out: list[dict[str, Any]] = []

    def add(figure: str, system: str, value: str, met: bool | None = None, **number: Any) -> None:
        row = {"figure": figure, "system": system, "value": value, "met": met}
        out.append(row | {"ours": value, "baseline": None, "ratio": None, "target": None, "unit": ""} | number)

    for name, result in results.items():
        row = pass_row(result)
        n = f"{result.largest}" + (f" (the cap: at least {cap})" if result.capped else "")
        add(
            "largest N (added first-token p99 < 100 ms, nothing lost), 50 tok/s",
            name,
            n,
            ours=result.largest,
            unit="conversations",
        )
        if row is None:
            continue
        add(
            "  first token p50 / p99 (added p99) at that N",
            name,
            f"{row['first_p50_ms']:.0f} / {row['first_p99_ms']:.0f} ms ({row['added_first_p99_ms']:.0f} ms)",
            ours=row["first_p99_ms"],
            unit="ms",
        )
        add(
            "  inter-token gap p50 / p99 at that N (provider: 20 ms)",
            name,
            f"{row['gap_p50_ms']:.1f} / {row['gap_p99_ms']:.1f} ms",
            ours=row["gap_p99_ms"],
            unit="ms",
        )
        add(
            "  CPU per turn / per token at that N",
            name,
            f"{row['cpu_ms_per_turn']:.1f} ms / {row['cpu_ms_per_token']:.3f} ms ({row['server_cores']:.2f} cores)",
            ours=row["cpu_ms_per_token"],
            unit="ms/token",
        )
        add(
            "  USS per conversation at that N (marginal: over the warm-up's); baseline, no conversation",
            name,
            f"{row['mib_per_conversation']:.2f} ({row['mib_per_added_conversation']:.2f}) MiB; "
            f"{result.baseline_mib:.0f} MiB, {cores(result.idle_cores)}",
            ours=row["mib_per_conversation"],
            unit="MiB",
        )
        for side in result.rows:
            if side["phase"] == "pace":
                add(
                    f"  at {side['tokens_per_s']:.0f} tok/s, N={side['n']}: CPU/token, gap p99",
                    name,
                    f"{side['cpu_ms_per_token']:.3f} ms, {side['gap_p99_ms']:.1f} ms "
                    f"(provider {1e3 / side['tokens_per_s']:.1f} ms){'' if side['passed'] else ', FAILED'}",
                    ours=side["cpu_ms_per_token"],
                    unit="ms/token",
                )
            elif side["phase"] == "tool":
                add(
                    f"  tool turn, N={side['n']}: first text token p99 (added), lost",
                    name,
                    f"{side['first_p99_ms']:.0f} ms ({side['added_first_p99_ms']:.0f} ms), {side['lost']}",
                    ours=side["first_p99_ms"],
                    unit="ms",
                )

    def ratio(a: str, b: str) -> float | None:
        if a not in results or b not in results or not results[b].largest:
            return None
        return results[a].largest / results[b].largest

    def target(label: str, a: str, b: str, bound: float, at_least: bool) -> None:
        value = ratio(a, b)
        if value is None:
            add(label, f"{a} / {b}", "not measured")
            return
        met = value >= bound if at_least else value <= bound
        note = ""
        if results[b].capped and not results[a].capped:
            note = f" ({b} hit the cap: the true ratio is lower)"
        elif results[a].capped and not results[b].capped:
            note = f" ({a} hit the cap: the true ratio is higher)"
        bounds = f"{'>=' if at_least else '<='} {bound:g}"
        add(label, f"{a} / {b}", f"{value:.2f}{note}", met, ours=results[a].largest, baseline=results[b].largest)
        out[-1] |= {"ratio": value, "target": f"{a} N / {b} N {bounds}", "unit": "conversations"}

    target("target: shared N / floor N >= 0.5", "shared", "floor", 0.5, True)
    target("target: shared N / peer N >= 5", "shared", "peer", 5.0, True)
    target("target: actor N / floor N >= 0.25", "actor", "floor", 0.25, True)
    target("target: local N / floor N >= 0.8", "local", "floor", 0.8, True)
    if "actor" in results and "local" in results:
        a_row, l_row = same_n_rows(results["actor"], results["local"])
        if a_row and l_row:
            value = a_row["cpu_ms_per_token"] / l_row["cpu_ms_per_token"]
            at = f"N={a_row['n']}" if a_row["n"] == l_row["n"] else f"N={a_row['n']} vs {l_row['n']}"
            add(
                "target: actor CPU/token / local CPU/token <= 2",
                "actor / local",
                f"{value:.2f} ({at})",
                value <= 2,
                ours=a_row["cpu_ms_per_token"],
                baseline=l_row["cpu_ms_per_token"],
                ratio=value,
                target="actor / local <= 2",
                unit="ms/token",
            )
    for name in ("local", "shared", "actor"):
        row = pass_row(results[name]) if name in results else None
        if row is not None:
            added = row["added_gap_p99_ms"]
            add(
                "target: inter-token p99 - provider's 20 ms <= 10 ms (at largest N)",
                name,
                f"{added:.1f} ms",
                added <= 10,
                ours=row["gap_p99_ms"],
                baseline=20.0,
                target="p99 - 20 ms <= 10 ms",
                unit="ms",
            )
    return out


def print_summary(rows: list[dict[str, Any]]) -> None:
    print("\n| figure | system | value | target |\n|---|---|---|---|")
    for row in rows:
        met = "" if row["met"] is None else "met" if row["met"] else "NOT MET"
        print(f"| {row['figure']} | {row['system']} | {row['value']} | {met} |")


def summary_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The summary's rows for ``--json``: scripts/bench_summary.py's fields, the system in the figure."""
    return [{**row, "figure": f"{row['figure'].strip()} [{row['system']}]", "source": "bench_live.py"} for row in rows]
