"""What a gateway serves: the ``Think`` subclasses of an ``--app`` module, and the module's ``setup()``.

Its own module because both the command line (``cli``) and the gateway actors on Ray (``ray_server``, which import
the module again in their own process) need it, and neither may import the other for it.
"""

from __future__ import annotations

import importlib
import inspect

from ..agent import Think
from ..errors import ConfigurationError

__all__ = ["DEFAULT_APP", "SETUP_FUNCTION", "agent_classes", "run_app_setup"]

DEFAULT_APP = "agents.team"
SETUP_FUNCTION = "setup"


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
