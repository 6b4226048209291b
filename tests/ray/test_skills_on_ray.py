"""Skill blocks on Ray (issue 21; reference §5): an agent actor's model loads and unloads a skill, the unload
rewrites the stored history to ``[skill unloaded: key]``, and across hibernation the loaded skills are read back
from the history while the frozen system prompt stays as rendered until ``refresh_system_prompt``.

The model (``SkillCommandModel``) answers from what it is sent, so a woken actor plays on where the last one
stopped; its ``show`` answer is what the model saw: the system prompt, the tool results, the loaded skills."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ray_agents import PIRATE, SkillKeeper, SkillSleeper
from test_hibernation import resident, until_hibernated

import think_actors as ta
from think_actors.messages import UIMessage

pytestmark = [pytest.mark.usefixtures("ray_runtime"), pytest.mark.timeout(180)]


def load_outputs(messages: list[UIMessage]) -> list[Any]:
    return [p.output for m in messages for p in m.tool_parts if p.name == "load_context"]


async def say(agent: ta.AgentHandle, text: str) -> str:
    result = await agent.save_messages(text)
    assert result.status == "completed", result
    assert result.message is not None
    return result.message.text


async def seen(agent: ta.AgentHandle) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(await say(agent, "show"))
    return answer


async def test_the_model_loads_and_unloads_a_skill_and_the_stored_history_keeps_the_marker(unique: str) -> None:
    agent = await ta.spawn(SkillKeeper, unique)
    assert await say(agent, "load pirate") == "done"
    assert load_outputs(await agent.get_messages()) == [PIRATE]
    assert (await seen(agent))["unload_description"].endswith("Currently loaded: skills:pirate.")

    assert await say(agent, "unload pirate") == "done"
    [unload] = [p for m in await agent.get_messages() for p in m.tool_parts if p.name == "unload_context"]
    assert unload.output == "Unloaded 'pirate' from skills; its content left the conversation."
    assert load_outputs(await agent.get_messages()) == ["[skill unloaded: pirate]"]
    # What the store holds: a new actor, started with no memory of this one, reads the rewritten output.
    pid = (await agent.info())["pid"]
    await agent.kill(restart=False)
    assert load_outputs(await agent.get_messages()) == ["[skill unloaded: pirate]"]
    assert (await agent.info())["pid"] != pid

    after = await seen(agent)
    assert after["unload_description"].endswith("No skill is loaded now.")
    assert "[skill unloaded: pirate]" in after["tool_results"]
    assert not any(PIRATE in result for result in after["tool_results"])


async def test_loaded_skills_and_the_frozen_prompt_survive_hibernation_until_a_refresh(unique: str) -> None:
    # Provisioned, so that every start (the first too) is a wake through the handle: an agent that hibernates
    # half a second after starting may be gone before a spawn's first call reaches it on a loaded machine.
    agent = ta.provision(SkillSleeper, unique)
    assert await say(agent, "load pirate") == "done"
    first_pid = (await agent.info())["pid"]
    assert await say(agent, "note The project is written in Rust.") == "done"
    before = await seen(agent)
    assert "SKILLS (how-tos) [loadable]" in before["system"]
    assert "- pirate: Pirate speech" in before["system"]
    assert "Rust" not in before["system"]  # a block write leaves the frozen prompt as it was

    # Woken: the skill is still loaded (the history says so), the prompt is the persisted frozen one.
    await until_hibernated(agent.path)
    woken = await seen(agent)
    assert (await agent.info())["pid"] != first_pid
    assert woken["system"] == before["system"]
    assert woken["unload_description"].endswith("Currently loaded: skills:pirate.")
    assert PIRATE in woken["tool_results"]

    # Unloaded in one actor, read as unloaded by the next; the prompt is still the frozen one.
    assert await say(agent, "unload pirate") == "done"
    await until_hibernated(agent.path)
    unloaded = await seen(agent)
    assert unloaded["unload_description"].endswith("No skill is loaded now.")
    assert "[skill unloaded: pirate]" in unloaded["tool_results"]
    assert not any(PIRATE in result for result in unloaded["tool_results"])
    assert load_outputs(await agent.get_messages()) == ["[skill unloaded: pirate]"]
    assert unloaded["system"] == before["system"]

    # refresh_system_prompt renders the note; the refreshed prompt is the one a woken actor keeps.
    assert await say(agent, "refresh") == "done"
    refreshed = await seen(agent)
    assert "The project is written in Rust." in refreshed["system"]
    assert refreshed["system"].startswith("You follow skills.")
    await until_hibernated(agent.path)
    assert not resident(agent.path)
    assert (await seen(agent))["system"] == refreshed["system"]
