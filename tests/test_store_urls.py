"""Choosing a store by URL: ``open_store``, ``Think(store=url)``, ``$THINK_STORE`` and ``ta.init(store=...)``."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import think_actors as ta
from think_actors.store import STORE_ENV, PostgresStore, SQLiteStore, check_store_url, open_store
from think_actors.store.postgres import close_pools

ACCEPTED = (
    "use postgresql://user:password@host:5432/database (or postgres://) for PostgreSQL, "
    "sqlite:///absolute/dir or sqlite:relative/dir for one SQLite file per agent under that directory"
)


@pytest.fixture(autouse=True)
async def _no_ambient_store(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    monkeypatch.delenv(STORE_ENV, raising=False)
    yield
    await close_pools()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///var/agents", "sqlite:///var/agents"),
        ("sqlite:////var/agents/", "sqlite:///var/agents"),
        ("postgresql://u:p@db.internal:5432/agents", "postgresql://u:p@db.internal:5432/agents"),
        ("postgres://db/agents", "postgres://db/agents"),
        ("postgresql:///agents?host=/run/postgresql", "postgresql:///agents?host=/run/postgresql"),
    ],
)
def test_accepted_urls(url: str, expected: str) -> None:
    assert check_store_url(url) == expected


def test_a_relative_sqlite_directory_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_store_url("sqlite:data/agents") == f"sqlite://{tmp_path}/data/agents"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mysql://u@h/db", "mysql://u@h/db"),
        ("redis://:hunter2@h:6379/0", "redis://:***@h:6379/0"),
        ("/var/agents", "/var/agents"),
        ("sqlite://", "sqlite://"),
        ("sqlite:///", "sqlite:///"),
        ("sqlite://host/dir", "sqlite://host/dir"),
        ("postgresql://", "postgresql://"),
        ("", ""),
    ],
)
def test_a_bad_url_names_the_accepted_schemes_and_hides_passwords(url: str, shown: str) -> None:
    with pytest.raises(ta.ConfigurationError) as raised:
        check_store_url(url)
    assert raised.value.message == f"unsupported store URL {shown!r}: {ACCEPTED}"


def test_a_bad_postgres_port_is_refused() -> None:
    with pytest.raises(ta.ConfigurationError, match="bad PostgreSQL store URL 'postgresql://u:\\*\\*\\*@h:x/db'"):
        check_store_url("postgresql://u:secret@h:x/db")


def test_open_store_builds_the_agents_store(tmp_path: Path) -> None:
    sqlite = open_store(f"sqlite://{tmp_path}", "lead/team-1")
    assert isinstance(sqlite, SQLiteStore) and Path(sqlite.path) == tmp_path / "lead" / "team-1.db"
    postgres = open_store("postgresql://u:secret@db/agents", "lead/team-1")
    assert isinstance(postgres, PostgresStore)
    assert (postgres.url, postgres.agent_path) == ("postgresql://u:secret@db/agents", "lead/team-1")
    assert repr(postgres) == "PostgresStore('postgresql://u:***@db/agents', 'lead/team-1')"
    with pytest.raises(ta.InvalidAgentNameError):
        open_store(f"sqlite://{tmp_path}", "../escape")


async def test_the_environment_variable_chooses_every_agents_store(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_ENV, postgres_url)
    # The URL chooses the kind of store; data_dir says only where SQLite files go when no URL is set.
    agent = ta.Think("env-1", data_dir=str(tmp_path))
    assert isinstance(agent.store, PostgresStore) and agent.store.agent_path == "think/env-1"
    await agent.add_messages(["kept in postgres"])
    assert [m.text for m in await PostgresStore(postgres_url, "think/env-1").load_messages()] == ["kept in postgres"]
    assert os.listdir(tmp_path) == []

    monkeypatch.setenv(STORE_ENV, f"sqlite://{tmp_path}/env")
    assert Path(ta.Think("env-2").store.path) == tmp_path / "env" / "think" / "env-2.db"  # type: ignore[attr-defined]
    monkeypatch.setenv(STORE_ENV, "nosuch://x")
    with pytest.raises(ta.ConfigurationError, match="unsupported store URL 'nosuch://x'"):
        ta.Think("env-3").store  # noqa: B018


async def test_an_agents_own_url_beats_the_environment_and_children_inherit_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(STORE_ENV, "postgresql://nowhere/never")
    parent = ta.Think("p1", store=f"sqlite://{tmp_path}", model=ta.testing.ScriptedModel())
    assert parent.store_url == f"sqlite://{tmp_path}"
    assert Path(parent.store.path) == tmp_path / "think" / "p1.db"  # type: ignore[attr-defined]
    child = await parent.sub_agent(ta.Think, "c1")
    assert Path(child.agent.store.path) == tmp_path / "think" / "p1" / "think" / "c1.db"
    with pytest.raises(ta.ConfigurationError, match="unsupported store URL 'ftp://x'"):
        ta.Think("p2", store="ftp://x")
    # Without a URL anywhere, the default stays one SQLite file under data_dir.
    monkeypatch.delenv(STORE_ENV)
    assert Path(ta.Think("p3", data_dir=str(tmp_path)).store.path) == tmp_path / "think" / "p3.db"  # type: ignore[attr-defined]


def test_init_refuses_a_bad_url_before_ray_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from think_actors.runtime import config as runtime

    started = ray.is_initialized()
    with pytest.raises(ta.ConfigurationError, match="unsupported store URL 'mongodb://x'"):
        ta.init(store="mongodb://x")
    monkeypatch.setenv(STORE_ENV, "sqlite://")
    with pytest.raises(ta.ConfigurationError, match="unsupported store URL 'sqlite://'"):
        ta.init()
    assert ray.is_initialized() == started
    assert runtime._config is None or runtime._config.store_url == ""  # the session's config is untouched
