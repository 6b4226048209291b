"""What a gateway serves: the ``Think`` subclasses of an ``--app`` module, and the module's ``setup()``.

Its own module because both the command line (``cli``) and the gateway actors on Ray (``ray_server``, which import
the module again in their own process) need it, and neither may import the other for it.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from ..agent import Think
from ..errors import ConfigurationError
from ..quotas import Quotas

__all__ = ["ACCESS_NAMES", "DEFAULT_APP", "SETUP_FUNCTION", "agent_classes", "app_access", "run_app_setup"]

DEFAULT_APP = "agents.team"
SETUP_FUNCTION = "setup"
# What an --app module may define at its top level for the gateway: Gateway's options of the same names.
ACCESS_NAMES = ("authenticate", "authorize", "quotas")


async def run_app_setup(module_name: str) -> bool:
    """Call the ``--app`` module's ``setup()`` (a plain or an ``async`` function), if it defines one; whether it did.

    ``think-actors serve`` calls it once, in its own process, before it serves: on Ray after ``ta.init()``, so it
    can start the actors the agents' ``actor_tool`` calls reach (named, in the runtime's namespace) or provision
    agents. Only a function defined in the module itself counts (an imported ``setup``, such as setuptools', is
    not called). Whatever it raises stops ``serve``.
    """
    module = importlib.import_module(module_name)
    setup = vars(module).get(SETUP_FUNCTION)
    if not inspect.isfunction(setup) or setup.__module__ != module.__name__:
        return False
    result = setup()
    if inspect.isawaitable(result):
        await result
    return True


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


def app_access(module_name: str) -> dict[str, Any]:
    """The gateway options the ``--app`` module defines at its top level: ``authenticate`` (an async function of
    the request returning a ``ta.Principal``, or a ``JWTAuth``), ``authorize`` (a function of the principal, the
    agent path and the action, or an ``OwnerRule``) and ``quotas`` (``Quotas`` or a dict of its fields).

    Read again in every process that serves (each gateway actor on Ray imports the module itself), so they need
    not pickle."""
    module = importlib.import_module(module_name)
    found = {name: vars(module)[name] for name in ACCESS_NAMES if vars(module).get(name) is not None}
    for name in ("authenticate", "authorize"):
        if name in found and not callable(found[name]):
            raise ConfigurationError(
                f"--app module {module_name!r}: {name} must be a function (or JWTAuth / OwnerRule), not "
                f"{type(found[name]).__name__}"
            )
    if "quotas" in found and not isinstance(found["quotas"], Quotas | dict):
        raise ConfigurationError(
            f"--app module {module_name!r}: quotas must be think_actors.gateway.Quotas or a dict of its fields"
        )
    return found
