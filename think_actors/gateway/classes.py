"""The agent classes a gateway serves: the ``Think`` subclasses of an ``--app`` module.

Its own module because both the command line (``cli``) and the gateway actors on Ray (``ray_server``, which import
the module again in their own process) need it, and neither may import the other for it.
"""

from __future__ import annotations

import importlib
import inspect

from ..agent import Think
from ..errors import ConfigurationError

__all__ = ["DEFAULT_APP", "agent_classes"]

DEFAULT_APP = "agents.team"


def agent_classes(module_name: str) -> list[type[Think]]:
    """The ``Think`` subclasses a module defines (or imports) at its top level."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigurationError(f"cannot import --app module {module_name!r}: {err}") from None
    found = [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, Think) and v is not Think]
    if not found:
        raise ConfigurationError(f"--app module {module_name!r} defines no Think subclass to serve")
    return found
