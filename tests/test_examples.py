"""Every program in ``examples/`` runs as a newcomer runs it (``python examples/NN_name.py``, in a fresh process and
working directory) and prints what its docstring promises. The Ray examples start and stop their own local Ray; each
runs in a session of its own, and the test fails if any process of that session (a raylet, a worker) outlives it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
RUN_TIMEOUT_S = 150


def run_example(name: str, cwd: Path) -> str:
    """Run ``examples/<name>`` to its end and return its stdout; fail on a non-zero exit or a leftover process."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "RAY_USAGE_STATS_ENABLED": "0", "NO_COLOR": "1"}
    env.pop("THINK_STORE", None)
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / name)],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its session id is its pid: Ray's processes inherit it
    )
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{name} did not finish within {RUN_TIMEOUT_S} s\n--- stdout\n{stdout}\n--- stderr\n{stderr}")
    left = _wait_for_session_end(process.pid)
    assert process.returncode == 0, f"{name} exited {process.returncode}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    assert left == [], f"{name} left processes running after it exited (killed now): {left}"
    return stdout


def _session_members(sid: int) -> list[str]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_text().replace("\0", " ").strip()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[3]) == sid:
            members.append(f"{entry.name} {command[:100]}")
    return members


def _wait_for_session_end(sid: int, timeout_s: float = 15.0) -> list[str]:
    """The processes of session ``sid`` still running ``timeout_s`` after its leader exited (then killed)."""
    deadline = time.monotonic() + timeout_s
    while (left := _session_members(sid)) and time.monotonic() < deadline:
        time.sleep(0.2)  # Ray's processes exit a moment after the driver's ray.shutdown()
    if left:
        os.killpg(sid, signal.SIGKILL)
    return left


def lines(stdout: str) -> list[str]:
    return stdout.rstrip("\n").split("\n")


def test_every_example_is_tested() -> None:
    tested = {name for name in globals() if name.startswith("test_0")}
    examples = sorted(path.stem for path in EXAMPLES.glob("[0-9][0-9]_*.py"))
    assert [f"test_{name}" for name in examples] == sorted(tested)


def test_01_first_agent(tmp_path: Path) -> None:
    assert lines(run_example("01_first_agent.py", tmp_path)) == [
        "[tool] search({'query': 'ray actors'})",
        "[tool result] ['Ray actors are stateful workers (ray actors)']",
        "A Ray actor is a stateful worker process.",
        "user: What is a Ray actor?",
        "assistant: A Ray actor is a stateful worker process.",
    ]
    assert list(tmp_path.iterdir()) == []  # MemoryStore: nothing written


def test_02_structured_output(tmp_path: Path) -> None:
    assert lines(run_example("02_structured_output.py", tmp_path)) == [
        "completed",
        "Weather(city='Oslo', temperature_c=4, summary='light rain')",
        "Oslo: 4 °C, light rain",
    ]


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_03_parent_and_children_on_ray(tmp_path: Path) -> None:
    out = lines(run_example("03_parent_and_children_on_ray.py", tmp_path))
    # The children run in parallel: each one's lines are in order, the two in either order.
    assert sorted(out[:4]) == [
        "  [optimist] Actors keep each agent's state in one place.",
        "  [skeptic] A process per agent costs memory.",
        "[lead] asks the optimist",
        "[lead] asks the skeptic",
    ]
    for child in ("optimist", "skeptic"):
        assert out.index(f"[lead] asks the {child}") < next(i for i, line in enumerate(out) if f"[{child}]" in line)
    assert out[4:] == [
        "Both are right: actors for isolation, shared hosts when memory is tight.",
        "lead's reply: Both are right: actors for isolation, shared hosts when memory is tight.",
    ]
    assert list(tmp_path.iterdir()) == []  # the agents' stores were in a temporary directory


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_04_actor_and_task_tools(tmp_path: Path) -> None:
    out = lines(run_example("04_actor_and_task_tools.py", tmp_path))
    agent_pid = re.fullmatch(r"agent process: (\d+)", out[0])
    assert agent_pid is not None, out
    assert out[1:3] == ["[tool] count({'item': 'widget'})", "[tool] fingerprint({'text': 'order 1234'})"]
    results = sorted(out[3:5])
    assert results[0] == "[tool result] 12"
    task = re.fullmatch(r"\[tool result\] \{'sha256': '([0-9a-f]{16})', 'pid': (\d+)\}", results[1])
    assert task is not None, results
    assert task.group(2) != agent_pid.group(1)  # the task tool ran in another process
    assert out[5:] == ["12 widgets in stock; order 1234 is recorded."]


@pytest.mark.timeout(RUN_TIMEOUT_S + 30)
def test_05_durable_submission(tmp_path: Path) -> None:
    out = lines(run_example("05_durable_submission.py", tmp_path))
    assert out[:2] == [
        "submitted: pending",
        "[tool] count_orders({'day': '2026-12-01'}) is running: killing the agent's actor",
    ]
    crash = re.fullmatch(r"after the crash: completed \(agent process (\d+), then (\d+)\)", out[2])
    assert crash is not None, out
    assert crash.group(1) != crash.group(2)  # a new process finished the turn
    assert out[3:] == [
        "user: Write the nightly report.",
        "assistant: [tool] count_orders -> output-available: 42",
        "assistant: Nightly report: 42 orders, all shipped.",
    ]


def test_06_scheduled_prompt(tmp_path: Path) -> None:
    out = lines(run_example("06_scheduled_prompt.py", tmp_path))
    assert re.fullmatch(r"scheduled: at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z -> Remind me to stretch\.", out[0])
    assert out[1:] == [
        "scheduled: every 2 seconds -> Check the inbox.",
        "[completed] Time to stretch!",
        "[completed] No new mail.",
        "[completed] One new mail, from Ada.",
        "['Remind me to stretch.', 'Check the inbox.', 'Check the inbox.']",
    ]


def test_07_mcp_tools(tmp_path: Path) -> None:
    assert lines(run_example("07_mcp_tools.py", tmp_path)) == [
        "server 'units': ready, tools ['units_to_fahrenheit']",
        "[before_tool_call] units_to_fahrenheit({'celsius': 21})",
        "[tool result] {'content': [{'type': 'text', 'text': '69.8'}], 'structuredContent': {'result': 69.8}}",
        "21 °C is 69.8 °F.",
    ]


def test_08_gateway_client(tmp_path: Path) -> None:
    out = lines(run_example("08_gateway_client.py", tmp_path))
    assert re.fullmatch(r"gateway at http://127\.0\.0\.1:\d+/", out[0])
    assert out[1:] == [
        "[transcript] 0 messages",
        "Hello from the gateway!",
        "[transcript] 2 messages",
        "[done] completed",
    ]
