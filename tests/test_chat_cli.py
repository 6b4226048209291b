"""``think-actors chat`` and ``think-actors --version``, run as a user runs them: the console script in a
subprocess, stdin piped, the agent's history in the working directory's ``.think_actors``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import think_actors as ta

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
CLI = Path(sys.executable).with_name("think-actors")


def chat(cwd: Path, stdin: str, *args: str, app: str = "chat_app") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "NO_COLOR": "1"}
    for name in ("THINK_STORE", "THINK_ACTORS_DATA_DIR"):
        env.pop(name, None)
    return subprocess.run(
        [str(CLI), "chat", "--app", app, *args],
        input=stdin,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_version_prints_the_package_version() -> None:
    result = subprocess.run([str(CLI), "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode, result.stdout) == (0, f"think-actors {ta.__version__}\n")


def test_a_second_chat_goes_on_from_the_history_of_the_first(tmp_path: Path) -> None:
    first = chat(tmp_path, "hello\nadd 2 3\n", "--agent", "calculator/c1")

    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "chatting with calculator/c1 (in this process); Ctrl-D or /exit to quit",
        "you: hello",
        "echo: hello (1 user messages)",
        "you: add 2 3",
        '  [tool] add {"a": 2, "b": 3}',
        "  [tool result] 5",
        "The sum is 5.",
    ]
    assert [p.name for p in (tmp_path / ".think_actors").iterdir()] == ["calculator"]  # serve's store rules

    second = chat(tmp_path, "again\n/exit\nnever sent\n", "--agent", "Calculator/c1")  # the class's own name

    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        "chatting with calculator/c1 (in this process); Ctrl-D or /exit to quit",
        "you: hello",
        "assistant: echo: hello (1 user messages)",
        "you: add 2 3",
        "assistant: The sum is 5.",
        "──",
        "you: again",
        "echo: again (3 user messages)",  # the model was sent the first chat's messages too
    ]

    other = chat(tmp_path, "", "--agent", "calculator")  # NAME defaults to "default": another conversation
    assert other.stdout.splitlines() == ["chatting with calculator/default (in this process); Ctrl-D or /exit to quit"]


def test_an_unknown_agent_class_is_refused_with_the_classes_there_are(tmp_path: Path) -> None:
    result = chat(tmp_path, "", "--agent", "nobody/x")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "think-actors: no agent class 'nobody' in the --app module; its classes are: calculator"
    )


def test_the_demo_team_chats_with_its_scripted_model(tmp_path: Path) -> None:
    (tmp_path / "agents").symlink_to(REPO / "agents")  # as from a clone: `think-actors chat --app agents.team`
    result = chat(tmp_path, "What matters about Ray actors?\n", "--agent", "researcher/r1", app="agents.team")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[:3] == [
        "chatting with researcher/r1 (in this process); Ctrl-D or /exit to quit",
        "you: What matters about Ray actors?",
        '  [tool] library_search {"query": "Ray actors", "limit": 2}',
    ]
    assert out[3].startswith('  [tool result] {"content": [{"type": "text"')
    assert out[4].startswith("Ray actors are stateful workers") and out[4].endswith("[ray-scale]")


def test_with_ray_the_agent_is_an_actor_and_keeps_the_same_history(tmp_path: Path) -> None:
    on_ray = chat(tmp_path, "hello\n", "--agent", "calculator/c2", "--ray")
    assert on_ray.returncode == 0, on_ray.stderr
    assert on_ray.stdout.splitlines() == [
        "chatting with calculator/c2 (on Ray); Ctrl-D or /exit to quit",
        "you: hello",
        "echo: hello (1 user messages)",
    ]

    in_process = chat(tmp_path, "again\n", "--agent", "calculator/c2")
    assert in_process.stdout.splitlines()[-1] == "echo: again (2 user messages)"
