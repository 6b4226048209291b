"""scripts/scale_model.py: the in-process counts are the ones docs/scaling.md states, and the model's arithmetic."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
sys.path.insert(0, str(SCRIPTS))

import scale_model as sm  # noqa: E402

DOC = (Path(__file__).resolve().parent.parent / "docs" / "scaling.md").read_text()


@pytest.fixture(scope="module")
def sqlite_counts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    import asyncio

    return asyncio.run(sm.count_in_process(None, str(tmp_path_factory.mktemp("scale"))))


def test_a_warm_turn_in_process_with_sqlite(sqlite_counts: dict[str, dict[str, int]]) -> None:
    turn = sqlite_counts["turn"]
    assert {k: v for k, v in turn.items() if not k.startswith("store_bytes")} == {
        "store:begin_turn": 1,
        "store:end_turn": 1,
        "sql:sqlite": 12,
    }
    assert "| warm turn, in process (SQLite) | 2 (begin_turn, end_turn) | 12 |" in DOC


def test_an_agent_start_in_process_with_sqlite(sqlite_counts: dict[str, dict[str, int]]) -> None:
    assert sqlite_counts["start"] == {
        "store:load_messages": 1,
        "store:list_turns": 2,
        "store:list_submissions": 2,
        "store:get_kv": 3,
        "sql:sqlite": 8,
    }
    assert "| agent start (store opened, history loaded) | 8 reads | 8 |" in DOC


def test_a_scheduled_fire_in_process(sqlite_counts: dict[str, dict[str, int]]) -> None:
    claim = sqlite_counts["fire_claim"]
    assert claim == {
        "schedule_store:due_tasks": 1,
        "schedule_store:class_declaration": 1,
        "schedule_store:claim": 1,
        "schedule_store:due_fires": 1,
    }
    assert sqlite_counts["fire_finish"] == {"schedule_store:finish_fire": 1}
    deliver = sm.summarize(sqlite_counts["fire_deliver"])
    assert (deliver["store_calls"], deliver["store_writes"], deliver["sql_statements"]) == (20, 9, 42)
    assert "| scheduled prompt: its delivery and turn (agent's store) | 20 (9 writes) | 42 |" in DOC


def test_the_model_on_a_tiny_workload() -> None:
    workload = sm.Workload(agents=1000, conversations=10, turns_per_s=2.0, schedules=3600, tokens_per_turn=60)
    cluster = sm.Cluster(nodes=2, cores=4, db_cores=1, db_connections=100)
    per = sm.PerOperation(
        sql_per_turn=2,
        sql_per_batch=1,
        batches_per_token=0.5,
        sql_per_wake=10,
        gcs_per_wake=6,
        gcs_per_hibernation=2,
        registry_record_bytes=1024,
        sql_per_fire=8,
        sql_per_fire_turn=30,
        gcs_per_fire=4,
    )
    caps = dict(sm.CAPACITIES)
    caps["pg_server_cpu_per_turn_ms"] = sm.Capacity(value=4.0, unit="ms", source="test")  # 1 ms a statement
    loads = {x.component: x for x in sm.model(workload, cluster, per, caps)}

    gateways = loads["gateways (one process per node)"]
    assert gateways.load == pytest.approx(2 * 60 * 0.36e-3)
    assert gateways.saturates_at == pytest.approx(2 / (60 * 0.36e-3))

    pg = loads["PostgreSQL server CPU"]
    per_turn = 2 + 1 * 0.5 * 60 + 10 / 10  # 33 statements a turn, a wake every 10 turns
    fixed = 1.0 * (8 + 30 + 10)  # one fire a second: claim and end, its turn, the agent's load
    assert pg.load == pytest.approx((fixed + per_turn * 2) / 1000)
    assert pg.saturates_at == pytest.approx((1 - fixed / 1000) / (per_turn / 1000))

    cpu = loads["node CPU (agents, gateways, model servers)"]
    assert cpu.load == pytest.approx(2 * 43.4e-3)
    assert loads["Ray process starts (wakes)"].saturates_at is None  # shared hosting starts no process
    assert loads["GCS requests (head node)"].load == pytest.approx(1.0 * 4 + 2 / 10 * 8)
    assert loads["GCS memory (agent registry)"].load == pytest.approx(1000 * 1024 / 2**30)
    assert loads["PostgreSQL connections"].load == 8 * 10
    assert loads["node memory (resident agents)"].load == pytest.approx(10 * 1.0 / 1024)
    assert sm.first_bottleneck(list(loads.values())).component == "PostgreSQL server CPU"  # 28.8 against 92.6
    assert sm.over_capacity(list(loads.values())) == []


def test_the_example_in_the_doc_is_the_models() -> None:
    workload = sm.Workload(agents=1_000_000, conversations=10_000, turns_per_s=10_000 / 3.5, schedules=100_000)
    loads = sm.model(workload, sm.Cluster(nodes=20, cores=16))
    first = sm.first_bottleneck(loads)
    assert first.component == "gateways (one process per node)"
    assert f"{first.saturates_at:,.0f} turns/s" in DOC
