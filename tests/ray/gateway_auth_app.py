"""An ``--app`` module for two gateways on Ray (``tests/ray/test_two_gateways_on_ray.py``): one agent class, and
the authentication, authorization and quotas every gateway process reads from it itself (nothing pickled)."""

from __future__ import annotations

from ray_agents import EchoModel

import think_actors as ta
from think_actors.gateway import JWTAuth, OwnerRule, Quotas

SECRET = "two-gateways-secret-" + "k" * 32  # HS256 wants 32 bytes or more

authenticate = JWTAuth(algorithms=["HS256"], key=SECRET)
authorize = OwnerRule()
quotas = Quotas(turns_per_minute=3, sockets=2)


class Journal(ta.Think):
    """Answers ``echo: <last user text>``."""

    model = EchoModel()
