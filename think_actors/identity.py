"""Who is asking: the principal a gateway (or your own code) names as the sender of a turn.

A ``Principal`` is made by the gateway's authentication from a request (a shared token, a verified JWT, or your own
function) and rides on every turn that request starts, as server-only turn metadata a client cannot set: hooks read
it as ``ctx.principal``, each user message it sent keeps it (``metadata.turnMetadata.principal``), and the turn's
trace span carries its id. In process, ``chat(..., principal=...)`` stamps one the same way.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .errors import ConfigurationError

__all__ = ["Principal"]


class Principal(BaseModel):
    """An authenticated caller.

    Attributes:
        id: who it is, stable across sessions (a JWT's ``sub``; the shared token's holder is ``"token"``).
        roles: what it may do beyond its own agents; the built-in rule lets the role ``"admin"`` reach every agent.
        claims: everything else the authentication learned (a JWT's claims), for your hooks; never sent to a client.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1, max_length=256)
    roles: frozenset[str] = frozenset()
    claims: dict[str, Any] = Field(default_factory=dict)

    @field_validator("id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if not value.isprintable():
            raise ValueError("a principal id holds printable characters only")
        return value

    @classmethod
    def of(cls, value: Any) -> Principal | None:
        """``value`` checked as a ``principal=`` argument: a Principal or None, else a ConfigurationError."""
        if value is None or isinstance(value, Principal):
            return value
        raise ConfigurationError(f"principal must be a ta.Principal or None, not {type(value).__name__}")

    def has_role(self, role: str) -> bool:
        return role in self.roles

    def stamp(self) -> dict[str, Any]:
        """What a turn stores of it (on the user message it sent, on a submission): the id and roles."""
        return {"id": self.id, "roles": sorted(self.roles)}

    @classmethod
    def from_stamp(cls, data: Any) -> Principal | None:
        """The principal a stored stamp names, or None for anything that is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("id"), str):
            return None
        try:
            return cls(id=data["id"], roles=frozenset(r for r in data.get("roles") or () if isinstance(r, str)))
        except ValueError:
            return None
