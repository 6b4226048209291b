"""Declaring MCP servers: ``stdio(...)`` and ``http(...)`` give the ``McpServerConfig`` an agent connects to.

A config is plain data (it pickles, so it crosses actor boundaries and can sit on a class): how to reach the
server, the prefix its tool names get in the agent's tool set, the call timeout, and which of its tools need a
person's approval. ``shared=True`` asks the Ray runtime to host one connection per node for every agent that
declares the same server, instead of one per agent.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["ConnectionState", "McpServerConfig", "http", "stdio"]

ConnectionState = Literal["connecting", "ready", "failed", "closed"]
"""A server connection's state: ``failed`` also after a lost connection (the next call reconnects)."""

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,48}$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


class McpServerConfig(BaseModel):
    """How to reach one MCP server and how its tools join an agent's tool set.

    Attributes:
        name: The server's name in the agent (``[A-Za-z0-9_-]``, at most 48 characters).
        transport: ``"stdio"`` (a subprocess speaking on stdin/stdout) or ``"http"`` (streamable HTTP).
        command: The executable of a stdio server.
        args: Its arguments.
        env: Extra environment variables of a stdio server (merged over the SDK's safe defaults).
        cwd: The working directory of a stdio server.
        url: The endpoint of an HTTP server.
        headers: HTTP headers sent with every request (for example ``Authorization``).
        prefix: What each tool's name gets in front in the agent's tool set; None is ``"<name>_"``, ``""`` none.
        call_timeout_s: How long one tool call may take before it becomes a tool error.
        connect_timeout_s: How long connecting (start, handshake, first tool listing) may take.
        needs_approval: Whether a person approves each call first: True for every tool, or the server's own
            names of the tools that need it.
        shared: On Ray, one connection per node hosted by a named actor that every agent declaring this
            server calls, rather than one per agent (in-process agents ignore it).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    transport: Literal["stdio", "http"]
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] | None = None
    prefix: str | None = None
    call_timeout_s: float = Field(60.0, gt=0)
    connect_timeout_s: float = Field(30.0, gt=0)
    needs_approval: bool | tuple[str, ...] = False
    shared: bool = False

    @model_validator(mode="after")
    def _check(self) -> McpServerConfig:
        if not _NAME.match(self.name):
            raise ValueError(f"MCP server name {self.name!r} must match [A-Za-z0-9_-]{{1,48}}")
        if self.transport == "stdio" and not self.command:
            raise ValueError(f"MCP server {self.name!r}: a stdio server needs a command")
        if self.transport == "http" and not self.url:
            raise ValueError(f"MCP server {self.name!r}: an HTTP server needs a url")
        if self.prefix is not None and _UNSAFE.search(self.prefix):
            raise ValueError(f"MCP server {self.name!r}: prefix {self.prefix!r} must match [A-Za-z0-9_-]*")
        return self

    @property
    def tool_prefix(self) -> str:
        """The prefix of this server's tool names in the agent's tool set."""
        return f"{self.name}_" if self.prefix is None else self.prefix

    def tool_needs_approval(self, tool_name: str) -> bool:
        """Whether calls of the server's tool ``tool_name`` wait for a person's approval."""
        if isinstance(self.needs_approval, bool):
            return self.needs_approval
        return tool_name in self.needs_approval

    def describe(self) -> str:
        """What the server is, for messages: its command line or its URL."""
        if self.transport == "stdio":
            return " ".join([self.command or "", *self.args])
        return self.url or ""


def _default_name(text: str) -> str:
    """A name from a command's last argument or a URL's host: ``@scope/server-everything@2`` → ``server-everything``."""
    text = text.rstrip("/").split("://", 1)[-1]
    if text.startswith("@"):
        text = text.split("/", 1)[-1]
    text = text.split("@", 1)[0]
    if "/" in text and "://" not in text:
        head = text.partition("/")[0]
        text = head if "." in head else text.rsplit("/", 1)[-1]
    text = text.rsplit(".py", 1)[0] if text.endswith(".py") else text
    name = _UNSAFE.sub("_", text).strip("_")[:48]
    return name or "mcp"


def stdio(
    command: str,
    *args: str,
    name: str | None = None,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    prefix: str | None = None,
    call_timeout_s: float = 60.0,
    connect_timeout_s: float = 30.0,
    needs_approval: bool | tuple[str, ...] | list[str] = False,
    shared: bool = False,
) -> McpServerConfig:
    """An MCP server the agent starts as a subprocess, e.g. ``stdio("npx", "-y", "@modelcontextprotocol/server-x")``.

    Without ``name``, the name comes from the first argument that is not an option (or the command):
    ``server-x`` here.
    """
    return McpServerConfig(
        name=name or _default_name(next((a for a in args if not a.startswith("-")), command)),
        transport="stdio",
        command=command,
        args=tuple(args),
        env=env,
        cwd=cwd,
        prefix=prefix,
        call_timeout_s=call_timeout_s,
        connect_timeout_s=connect_timeout_s,
        needs_approval=needs_approval if isinstance(needs_approval, bool) else tuple(needs_approval),
        shared=shared,
    )


def http(
    url: str,
    *,
    name: str | None = None,
    headers: dict[str, str] | None = None,
    prefix: str | None = None,
    call_timeout_s: float = 60.0,
    connect_timeout_s: float = 30.0,
    needs_approval: bool | tuple[str, ...] | list[str] = False,
    shared: bool = False,
) -> McpServerConfig:
    """An MCP server reached over streamable HTTP: ``http("https://example.com/mcp", headers={...})``.

    Without ``name``, the name comes from the URL's host.
    """
    return McpServerConfig(
        name=name or _default_name(url),
        transport="http",
        url=url,
        headers=headers,
        prefix=prefix,
        call_timeout_s=call_timeout_s,
        connect_timeout_s=connect_timeout_s,
        needs_approval=needs_approval if isinstance(needs_approval, bool) else tuple(needs_approval),
        shared=shared,
    )
