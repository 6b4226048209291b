"""A throwaway PostgreSQL server for a local cluster, started the way the tests start theirs.

    python scripts/local_postgres.py start STATE.json   # prints the server's URL; STATE.json says how to stop it
    python scripts/local_postgres.py stop STATE.json    # stops it and deletes its files

initdb in a temp dir, 127.0.0.1 on a free port, trust authentication, fsync off: for trying a cluster on one
machine, never for data you keep (point THINK_STORE at a real server for that). As root the server runs as the
``postgres`` user, as in tests/postgres_server.py, whose class this uses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from postgres_server import PostgresServer, PostgresUnavailable


def start(state_file: Path) -> int:
    server = PostgresServer(prefix="think-actors-cluster-pg-")
    try:
        server.start()
    except PostgresUnavailable as err:
        server.stop()
        print(f"local_postgres: {err}", file=sys.stderr)
        return 1
    state_file.write_text(json.dumps({"root": str(server.root), "port": server.port, "url": server.dsn()}))
    print(server.dsn())
    return 0


def stop(state_file: Path) -> int:
    if not state_file.exists():
        return 0
    state = json.loads(state_file.read_text())
    try:
        PostgresServer(root=state["root"], port=state["port"]).stop()  # its files go even if it was gone
    except PostgresUnavailable as err:
        print(f"local_postgres: {err}", file=sys.stderr)
    state_file.unlink()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(__doc__, file=sys.stderr)
        return 2
    return (start if argv[0] == "start" else stop)(Path(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
