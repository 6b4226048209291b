"""The public names a user's type checker sees: the lazily loaded runtime (``ta.init``, ``ta.spawn``, the handle and
its stream) has real signatures under mypy --strict and pyright, not ``object`` or ``Any``.

This checks the repository's package; the wheel installed in a fresh environment is checked over ``examples/``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PYRIGHT = Path(sys.executable).with_name("pyright")

USER_CODE = textwrap.dedent(
    """
    from __future__ import annotations

    from typing import reveal_type

    import ray
    from pydantic import BaseModel

    import think_actors as ta


    class Answer(BaseModel):
        text: str


    @ray.remote
    class Adder:
        def add(self, a: int, b: int) -> int:
            '''Add two numbers.'''
            return a + b


    class Helper(ta.Think):
        model = "openai/gpt-4o-mini"
        tools = [ta.actor_tool("adder", "add", actor_class=Adder)]  # a @ray.remote class, as Ray made it


    async def main() -> None:
        config = ta.init(num_cpus=2)
        handle = await ta.spawn(Helper, "h1")
        stream = handle.chat("hi")
        chunks = await stream.collect()
        result = await handle.save_messages("again", output=Answer)
        submission = await handle.submit_messages("later", output=Answer)
        agents = ta.list_agents()
        found = await ta.get(Helper, "h1")
        reveal_type(ta.init)
        reveal_type(ta.spawn)
        reveal_type(ta.shutdown)
        reveal_type(config)
        reveal_type(handle)
        reveal_type(stream)
        reveal_type(stream.request_id)
        reveal_type(stream.status)
        reveal_type(stream.outcome)
        reveal_type(chunks)
        reveal_type(result)
        reveal_type(submission)
        reveal_type(agents)
        reveal_type(found)
        ta.shutdown()
    """
)

# What each reveal_type names (mypy spells it out in full, pyright in short: a substring of either).
EXPECTED = [
    "def (address: str | None =",  # ta.init
    "def (agent_class: type[think_actors.agent.Think], name: str, *, node_id: str | None =",  # ta.spawn
    "def ()",  # ta.shutdown
    "RuntimeConfig",
    "AgentHandle",
    "RemoteStream",
    "str",
    "str",
    "TurnOutcome",
    "list[Any]",
    "TurnResult",
    "Submission",
    "AgentListing",
    "AgentHandle",
]


def _revealed(output: str, pattern: str) -> list[str]:
    return [m.group(1) for m in re.finditer(pattern, output)]


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "user_code.py"
    path.write_text(USER_CODE)
    return path


def test_mypy_strict_sees_the_lazy_runtime_names(user_file: Path) -> None:
    # In the repository, so mypy reads the package's sources (with the project's config and pydantic plugin).
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", str(user_file)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert errors == []
    revealed = _revealed(result.stdout, r'Revealed type is "(.*)"')
    assert len(revealed) == len(EXPECTED)
    for shown, expected in zip(revealed, EXPECTED, strict=True):
        assert expected in shown.replace("builtins.", ""), (shown, expected)
        assert shown not in ("builtins.object", "Any")


@pytest.mark.skipif(not PYRIGHT.exists(), reason="pyright is not installed in this environment")
def test_pyright_sees_the_lazy_runtime_names(user_file: Path) -> None:
    result = subprocess.run(
        [str(PYRIGHT), "--pythonpath", sys.executable, str(user_file)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in result.stdout.splitlines() if " - error:" in line]
    assert errors == [], result.stdout
    revealed = _revealed(result.stdout, r'Type of "[^"]*" is "(.*)"')
    assert len(revealed) == len(EXPECTED), result.stdout
    for shown in revealed:
        assert shown not in ("object", "Any"), result.stdout
    assert "RemoteStream" in revealed[5] and revealed[8] == "TurnOutcome"
    assert revealed[10] == "TurnResult" and revealed[11] == "Submission"
    assert revealed[0].startswith("(address: str | None = None, *, namespace: str =")
