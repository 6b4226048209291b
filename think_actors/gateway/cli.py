"""``think-actors serve``: the gateway in front of the agent classes of a module (with ``--mcp``, also their MCP
server at ``/mcp``; with ``--mcp-stdio``, only the MCP server, on stdin/stdout), and ``think-actors chat``: one agent
in the terminal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import ipaddress
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from ..errors import ConfigurationError
from .app import Gateway
from .classes import DEFAULT_APP, agent_classes, app_access, run_app_setup
from .directory import AgentDirectory, LocalDirectory, RayDirectory
from .security import OriginPolicy
from .terminal import run_chat

__all__ = ["DEFAULT_APP", "agent_classes", "check_binding", "main"]

_WATCH_S = 5.0  # how often ``serve`` looks for machines and nodes that joined the cluster


def check_binding(host: str, token: str | None, authenticate: Any = None) -> None:
    """Refuse to expose agents beyond this machine without authentication."""
    loopback = host in ("localhost", "") or _is_loopback(host)
    if not loopback and not token and authenticate is None:
        raise ConfigurationError(
            f"refusing to serve on {host!r} without authentication: pass --token, define authenticate in the --app "
            "module, or serve on 127.0.0.1"
        )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="think-actors", description="think_actors command line")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    chat = commands.add_parser(
        "chat",
        help="chat with one agent in the terminal",
        description="Chat with one agent of --app: its replies stream as they arrive, tool calls are marked lines, "
        "and its history is kept where `serve` keeps it ($THINK_STORE, else a SQLite file per agent under "
        "$THINK_ACTORS_DATA_DIR, default ./.think_actors). Ctrl-D or /exit quits.",
    )
    chat.add_argument("--app", default=DEFAULT_APP, help="module whose Think subclasses may be chatted with")
    chat.add_argument(
        "--agent", required=True, help="CLASS/NAME: the class in kebab case (as in gateway URLs), the agent's name"
    )
    chat.add_argument("--ray", action="store_true", help="run the agent on Ray instead of in this process")
    chat.add_argument("--address", default=None, help="with --ray, the Ray address to join (default: local Ray)")
    serve = commands.add_parser("serve", help="run the WebSocket gateway")
    serve.add_argument(
        "--app", default=DEFAULT_APP, help=f"module whose Think subclasses are served (default: {DEFAULT_APP})"
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; any other needs --token)"
    )
    serve.add_argument("--port", type=int, default=8787, help="port to listen on (default 8787); Ctrl-C stops")
    serve.add_argument("--token", default=None, help="bearer token every request must carry")
    serve.add_argument("--local", action="store_true", help="run agents in this process instead of on Ray")
    serve.add_argument("--address", default=None, help="Ray address to join (default: start local Ray)")
    serve.add_argument(
        "--origin",
        action="append",
        default=None,
        help="a site whose pages may use the gateway, as scheme://host[:port] (repeat; default: its own pages only)",
    )
    serve.add_argument("--max-frame-bytes", type=int, default=4 * 1024 * 1024, help="largest frame accepted")
    serve.add_argument(
        "--mcp", action="store_true", help="also serve the agent classes as MCP tools at /mcp (streamable HTTP)"
    )
    serve.add_argument(
        "--client-limits",
        action="store_true",
        help="let a chat request's body carry runLimits (RunLimits fields), which can only lower the agent class's",
    )
    serve.add_argument(
        "--mcp-stdio",
        action="store_true",
        help="serve only the agent classes' MCP server, on stdin/stdout (how Claude Desktop starts a server)",
    )
    serve.add_argument(
        "--model-pools",
        action="store_true",
        help="start every node's model-server pool now, and on nodes that join (default: at a node's first use)",
    )
    serve.add_argument(
        "--gateways-per-node",
        type=int,
        default=1,
        help="gateway processes on each machine, sharing the port (default 1; one relays about a core's worth of "
        "tokens: see docs/scaling.md)",
    )
    serve.add_argument(
        "--stream-latency-ms",
        type=float,
        default=0.0,
        help="how long each process may hold a stream's chunks to send them together (default 0; see ta.init)",
    )
    args = parser.parse_args(argv)
    # On stderr: with --mcp-stdio, stdout carries the protocol and nothing else.
    level = logging.WARNING if args.command == "chat" else logging.INFO  # a chat's terminal is for the chat
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK logs every stateless request at INFO
    if "" not in sys.path and os.getcwd() not in sys.path:
        # As `python -m` does: --app names a module of the directory serve runs in (the console script's own
        # sys.path has only its bin directory, so `think-actors serve --app agents.team` found no agents).
        sys.path.insert(0, os.getcwd())
    if args.command == "chat":
        return _chat(args)
    try:
        classes = agent_classes(args.app)
        access = app_access(args.app)
        if args.token is not None and "authenticate" in access:
            raise ConfigurationError(
                f"--token and the --app module's authenticate both say who may use the gateway: keep one "
                f"({args.app}.authenticate, or --token)"
            )
        check_binding(args.host, args.token, access.get("authenticate"))
        if args.gateways_per_node < 1:
            raise ConfigurationError(f"--gateways-per-node must be 1 or more, not {args.gateways_per_node}")
        OriginPolicy(args.origin)  # a bad --origin fails here, not in every gateway actor
    except ConfigurationError as err:
        print(f"think-actors: {err.message}", file=sys.stderr)
        return 2
    if args.mcp_stdio:
        return _serve_mcp_stdio(args, classes)
    options = {"token": args.token, "allowed_origins": args.origin, "max_frame_bytes": args.max_frame_bytes}
    if args.mcp:
        options["mcp"] = True
    if args.client_limits:
        options["client_limits"] = True
    if args.local:
        app = Gateway(LocalDirectory(classes), **options, **access).app()

        async def setup(_: web.Application) -> None:  # the module's setup(), in the loop that serves
            await run_app_setup(args.app)

        app.on_startup.append(setup)
        web.run_app(app, host=args.host, port=args.port)
        return 0
    # Imported only for Ray: ray costs ~0.4 s and 75 MiB, which --local does not need (no circle: neither
    # module imports this one).
    from ..model_pool import start_model_pools
    from ..runtime import init
    from .ray_server import start_gateways

    try:
        config = init(args.address, stream_latency_ms=args.stream_latency_ms)
    except ConfigurationError as err:
        print(f"think-actors: {err.message}", file=sys.stderr)
        return 2

    async def run() -> None:
        # One gateway actor per machine of the cluster, and with --model-pools every node's model servers; this
        # process looks again every few seconds, so machines and nodes that join later get theirs (Ctrl-C stops).
        gateways: list[Any] = []
        served: dict[str, str] = {}  # node address -> the node whose gateway serves it
        pooled: set[str] = set()
        await run_app_setup(args.app)  # once, before any gateway: the actors its agents' tools reach
        try:
            while True:
                try:
                    for actor, url in await start_gateways(
                        args.app,
                        host=args.host,
                        port=args.port,
                        options=options,
                        served=served,
                        per_node=args.gateways_per_node,
                    ):
                        gateways.append(actor)
                        print(f"think-actors: gateway serving {args.app} at {url}", flush=True)
                    if args.model_pools:
                        for node in await start_model_pools(config, pooled):
                            print(f"think-actors: model-server pool up on node {node}", flush=True)
                except Exception as err:  # one machine's failure must not stop the others' gateways
                    logging.getLogger("think_actors").error("starting a gateway or a model pool failed: %s", err)
                await asyncio.sleep(_WATCH_S)
        finally:
            for actor in gateways:
                await actor.stop.remote()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


def _chat(args: argparse.Namespace) -> int:
    """``think-actors chat``: one agent in the terminal (``terminal.py``)."""
    try:
        classes = agent_classes(args.app)
        with contextlib.suppress(KeyboardInterrupt):
            return asyncio.run(run_chat(args.app, args.agent, classes, ray=args.ray, address=args.address))
    except ConfigurationError as err:
        print(f"think-actors: {err.message}", file=sys.stderr)
        return 2
    return 130  # Ctrl-C


def _version() -> str:
    try:
        return importlib.metadata.version("think_actors")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


def _serve_mcp_stdio(args: argparse.Namespace, classes: list[Any]) -> int:
    """``--mcp-stdio``: the agents' MCP server on stdin/stdout, agents in this process or on Ray."""
    # Imported only here: the MCP SDK costs a second or more to import.
    from .mcp_server import run_stdio

    directory: AgentDirectory
    if args.local:
        directory = LocalDirectory(classes)
    else:
        from ..runtime import init  # ray: only when agents run on it

        with contextlib.redirect_stdout(sys.stderr):  # stdout is the protocol's: whatever Ray prints goes aside
            init(args.address, quiet=True)
        directory = RayDirectory(classes)

    async def serve() -> None:
        with contextlib.redirect_stdout(sys.stderr):  # what setup() prints must not reach the protocol
            await run_app_setup(args.app)
        await run_stdio(directory)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
