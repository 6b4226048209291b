"""Metrics on the node's Prometheus endpoint and the log context inside agent actors."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from typing import Any

import ray
from ray_agents import LoggingAgent, MeteredAgent

import think_actors as ta
from think_actors.models import Usage
from think_actors.testing import ScriptedModel, step, text, tool_call

_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _scrape() -> str:
    """The Prometheus text of this node's metrics agent (the suite's Ray runs one node, no dashboard)."""
    (node,) = [n for n in ray.nodes() if n["Alive"]]
    url = f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        body: bytes = response.read()
    return body.decode()


def _values(text: str, agent_class: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``think_actors`` samples of one agent class, by name and their own labels, summed over workers."""
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or not match["name"].startswith("ray_think_actors_"):
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        if labels.pop("agent_class", None) != agent_class:
            continue
        own = tuple(sorted((k, v) for k, v in labels.items() if k in {"status", "tool", "outcome", "stage", "le"}))
        key = (match["name"], own)
        values[key] = values.get(key, 0.0) + float(match["value"])
    return values


async def test_a_turn_on_an_agent_actor_shows_on_the_nodes_metrics_endpoint(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel(
        [
            step(tool_call("lookup", {"city": "Paris"}), usage=Usage(input_tokens=20, output_tokens=4)),
            step(text("sunny"), usage=Usage(input_tokens=30, output_tokens=2), cost_usd=0.5),
            step(text("again"), usage=Usage(input_tokens=40, output_tokens=3), cost_usd=0.25),
        ]
    )
    agent = await ta.spawn(MeteredAgent, unique, model=model)
    assert (await agent.save_messages("weather in Paris?")).status == "completed"
    assert (await agent.save_messages("and now?")).status == "completed"

    expected = {
        ("ray_think_actors_turns_total", (("status", "completed"),)): 2.0,
        ("ray_think_actors_steps_total", ()): 3.0,
        ("ray_think_actors_input_tokens_total", ()): 90.0,
        ("ray_think_actors_output_tokens_total", ()): 9.0,
        ("ray_think_actors_cost_usd_total", ()): 0.75,
        ("ray_think_actors_tool_calls_total", (("outcome", "ok"), ("tool", "lookup"))): 1.0,
        ("ray_think_actors_turn_duration_seconds_count", ()): 2.0,
        ("ray_think_actors_time_to_first_chunk_seconds_count", ()): 2.0,
    }
    # Workers report to the node's metrics agent periodically (Ray's default: every 10 s; the process's own
    # batch waits up to 1 s more).
    deadline = time.monotonic() + 60
    while True:
        values = await asyncio.to_thread(lambda: _values(_scrape(), "MeteredAgent"))
        seen = {key: values.get(key) for key in expected}
        if seen == expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert seen == expected
    assert values[("ray_think_actors_turn_duration_seconds_bucket", (("le", "+Inf"),))] == 2.0


async def test_records_inside_an_agent_actors_turn_carry_its_path_and_request_id(ray_runtime: Any, unique: str) -> None:
    model = ScriptedModel([tool_call("where", {}, id="w1"), text("done")])
    agent = await ta.spawn(LoggingAgent, unique, model=model)

    stream = agent.chat("where are you?")
    chunks = await stream.collect()

    (output,) = [c.output for c in chunks if c.type == "tool-output-available"]
    path = f"logging-agent/{unique}"
    assert output == {
        "agent": path,
        "request_id": stream.request_id,
        "formats": [ta.logs.LOG_FORMAT],  # the actor's own log set-up: no handler was configured in the worker
        "lines": [f"[think_actors.tests agent={path} request={stream.request_id}] inside the tool"],
    }
