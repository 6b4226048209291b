"""cluster.yaml and scripts/cluster_demo.sh as a `ray up` head uses them (a real `ray up` needs SSH hosts; the
README says how it was run on this machine)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_cluster_yaml_runs_the_projects_ray_and_puts_it_on_the_nodes_path() -> None:
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    assert config["file_mounts"] == {"/opt/think_actors": ".", "/opt/think_actors.env": "./.think_actors/cluster.env"}
    setup = config["setup_commands"]
    assert setup[0] == "cd /opt/think_actors && make install"
    # `ray down` runs a bare `ray stop` on each node through a login shell: the project's Ray must be on its PATH.
    assert any(
        "export PATH=/opt/think_actors/.venv/bin:$PATH" in command and "~/.bashrc" in command for command in setup
    )
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        commands = " ".join(config[key])
        assert "/opt/think_actors/.venv/bin/ray start" in commands and ". /opt/think_actors.env" in commands
    assert "think-actors serve --address auto" in " ".join(config["head_start_ray_commands"])


def _checkout(tmp_path: Path) -> Path:
    """A copy of the script in a tree shaped like the project (its venv and demo linked), without cluster state."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "cluster_demo.sh", tmp_path / "scripts" / "cluster_demo.sh")
    for name in (".venv", "agents"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path / "scripts" / "cluster_demo.sh"


def _run(script: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cluster_demo_without_a_cluster_says_how_to_start_one(tmp_path: Path) -> None:
    script = _checkout(tmp_path)
    result = _run(script, {"THINK_NODE_ENV": str(tmp_path / "absent.env")})
    assert result.returncode == 1
    assert "run scripts/start_cluster.sh first" in result.stderr and "ray up cluster.yaml" in result.stderr


def test_cluster_demo_on_a_ray_up_head_reads_the_node_env(tmp_path: Path) -> None:
    script = _checkout(tmp_path)
    node_env = tmp_path / "think_actors.env"
    node_env.write_text("THINK_STORE=postgresql://agents@db.internal/agents\nRAY_AUTH_TOKEN=t\n")
    # --help: the demo parses its arguments and exits, so the test needs no cluster; the env file was read.
    result = _run(script, {"THINK_NODE_ENV": str(node_env)}, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m agents.demo" in result.stdout
