"""The durable features of one agent, built on its engine: submissions, recovery, interactions.

The top of the engine: each feature runs turns through the driver, and the engine below them reaches them only
through ``ports``. ``attach_durable`` builds the three and hands them to the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .engine import Engine
from .interactions import Interactions
from .recovery import Recovery
from .submissions import Submissions

__all__ = ["Durable", "attach_durable"]


@dataclass(frozen=True, slots=True)
class Durable:
    submissions: Submissions
    recovery: Recovery
    interactions: Interactions


def attach_durable(engine: Engine) -> Durable:
    """Build the engine's durable features and attach them to it."""
    durable = Durable(submissions=Submissions(engine), recovery=Recovery(engine), interactions=Interactions(engine))
    engine.attach(submissions=durable.submissions, recovery=durable.recovery, interactions=durable.interactions)
    return durable
