"""Channels: where a turn came from (the web page, an e-mail bridge, a Slack bot, a scheduled job), and what that
changes about it.

Every turn has a channel: the one its caller names (``chat(..., channel="email")``), else the channel of the
latest user message in the conversation (a continuation, a recovery, a submission go on where the conversation
is), else ``"web"``. The user messages a turn stores carry it as ``metadata.channel``, which, like
``metadata.turnMetadata``, only the server writes: the gateway stamps ``"web"`` and drops a client's own.

A class lists the channels it answers on (``channels = [ta.Channel("email", instructions=..., max_steps=4)]``);
``"web"`` is always there. A channel's ``instructions`` go before the system prompt, its ``tools`` narrow what the
turn offers (before ``before_turn``, which may add tools back), and its ``max_steps`` bounds the turn unless
``before_turn`` sets one. Think's channel policy, with Python names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any

from .errors import ConfigurationError

__all__ = ["DEFAULT_CHANNEL", "Channel", "channel_table", "check_channel"]

DEFAULT_CHANNEL = "web"
_NAME = re.compile(r"[a-z0-9][a-z0-9_.:-]{0,63}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Channel:
    """A channel an agent answers on, and what it changes about the turns that come from it.

    Attributes:
        name: 1-64 lower-case letters, digits or ``_ . : -``, starting with a letter or digit.
        instructions: text put before the system prompt of every turn from this channel (how to write for it).
        tools: the names of the tools a turn from this channel may offer, or a function of the set of tool names
            returning the ones to keep; None keeps them all.
        max_steps: the turn's step bound (``before_turn``'s ``TurnConfig.max_steps`` still wins).
    """

    name: str
    instructions: str | None = None
    tools: Collection[str] | Callable[[set[str]], Iterable[str]] | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigurationError(
                f"channel name {self.name!r}: use 1-64 lower-case letters, digits or _ . : - starting with a letter "
                "or digit, such as 'email' or 'slack:support'"
            )
        if self.max_steps is not None and (not isinstance(self.max_steps, int) or self.max_steps < 1):
            raise ConfigurationError(f"Channel({self.name!r}, max_steps=...) must be a whole number >= 1")
        if self.tools is not None and not callable(self.tools) and isinstance(self.tools, str):
            raise ConfigurationError(f"Channel({self.name!r}, tools=...) is a list of tool names, not one string")

    def keeps(self, names: set[str]) -> set[str]:
        """The tool names a turn from this channel may offer, of ``names``."""
        if self.tools is None:
            return set(names)
        kept = self.tools(set(names)) if callable(self.tools) else self.tools
        return set(names) & set(kept)


def channel_table(owner: str, declared: Any) -> dict[str, Channel]:
    """The channels a class answers on, by name (``web`` always among them); ConfigurationError for an entry that
    is not a ``Channel`` or a name given twice."""
    table: dict[str, Channel] = {}
    for entry in declared or ():
        if not isinstance(entry, Channel):
            raise ConfigurationError(f"{owner}.channels holds {entry!r}: list ta.Channel(...) entries")
        if entry.name in table:
            raise ConfigurationError(f"{owner}.channels names the channel {entry.name!r} twice")
        table[entry.name] = entry
    table.setdefault(DEFAULT_CHANNEL, Channel(name=DEFAULT_CHANNEL))
    return table


def check_channel(owner: str, table: dict[str, Channel], name: Any) -> str | None:
    """``name`` checked as a ``channel=`` argument of an agent of class ``owner``: None, or one of ``table``."""
    if name is None or name in table:
        return name  # type: ignore[no-any-return]
    raise ConfigurationError(
        f"{owner} answers on no channel {name!r}: its channels are {', '.join(sorted(table))} (declare more with "
        "channels = [ta.Channel(...)])"
    )
