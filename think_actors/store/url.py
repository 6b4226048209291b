"""Choosing a store by URL: ``postgresql://...`` for a cluster, ``sqlite:///dir`` for one SQLite file per agent.

The URL comes from ``Think(store=url)``, ``ta.init(store=url)`` (which ships it to every actor) or the
``THINK_STORE`` environment variable; with none of them an agent keeps a SQLite file under its ``data_dir``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from .redact import redact_url
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .protocol import Store

__all__ = ["STORE_ENV", "check_store_url", "open_store", "redact_url"]

STORE_ENV = "THINK_STORE"
"""The environment variable holding the default store URL."""

_POSTGRES_SCHEMES = ("postgresql", "postgres")
ACCEPTED = (
    "postgresql://user:password@host:5432/database (or postgres://) for PostgreSQL, "
    "sqlite:///absolute/dir or sqlite:relative/dir for one SQLite file per agent under that directory"
)


def _sqlite_dir(url: str) -> str | None:
    """The directory a ``sqlite:`` URL names (made absolute), or None when it names none."""
    rest = url[len("sqlite:") :]
    if rest.startswith("//"):
        rest = rest[2:]
        if not rest.startswith("/"):  # sqlite://host/...: SQLite has no host
            return None
        rest = "/" + rest.lstrip("/")
    if rest.strip("/") == "":
        return None
    return os.path.abspath(rest)


def check_store_url(url: str) -> str:
    """Return ``url`` in the form actors get (a ``sqlite:`` directory made absolute), or raise ``ConfigurationError``
    naming the accepted schemes."""
    if isinstance(url, str):
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme in _POSTGRES_SCHEMES:
            try:
                parts = urlsplit(url)
                parts.port  # noqa: B018 (parsing the port is the check)
            except ValueError as exc:
                raise ConfigurationError(f"bad PostgreSQL store URL {redact_url(url)!r}: {exc}") from None
            if parts.netloc or parts.query or parts.path.strip("/"):
                return url
        elif scheme == "sqlite" and (directory := _sqlite_dir(url)) is not None:
            return f"sqlite://{directory}"
    shown = redact_url(url) if isinstance(url, str) else repr(url)
    raise ConfigurationError(f"unsupported store URL {shown!r}: use {ACCEPTED}")


def open_store(url: str, agent_path: str) -> Store:
    """The store of the agent ``agent_path`` that ``url`` names (nothing connects until its first use)."""
    url = check_store_url(url)
    if url.startswith("sqlite:"):
        return SQLiteStore.for_agent(url[len("sqlite://") :], agent_path)
    # Imported here: asyncpg loads only in processes that use PostgreSQL.
    from .postgres import PostgresStore

    return PostgresStore(url, agent_path)
