"""A throwaway PostgreSQL server for the store tests: initdb in a temp dir, 127.0.0.1 on a free port, trust auth.

The server runs as the ``postgres`` system user when the tests run as root (initdb refuses root), with its data
directory, log and unix socket all inside one temp dir, and ``fsync`` off: nothing in it outlives the session.
Missing binaries skip the tests that need a server, except under CI, where they fail them: CI must test the
PostgreSQL store (``scripts/install-system-deps.sh`` installs the binaries).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["PostgresServer", "PostgresUnavailable", "find_bin_dir"]

INSTALL_HINT = (
    "install PostgreSQL 15 (Debian: apt-get install postgresql-15, or postgresql) so that "
    "/usr/lib/postgresql/<version>/bin/initdb exists; scripts/install-system-deps.sh does this"
)
_SERVER_USER = "postgres"
_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    # Throwaway data: skip the flushes that make a real server durable, so the tests run at memory speed.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "200",
}


class PostgresUnavailable(RuntimeError):
    """The server cannot be started here; the message says what to install or fix."""


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<version>/bin`` holding initdb, else the directory of ``initdb`` on PATH."""
    candidates = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
        key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1]
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _server_user() -> pwd.struct_passwd | None:
    """The account the server runs as: None for the current (non-root) user, else ``postgres``, created if absent."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(_SERVER_USER)
    except KeyError:
        pass
    created = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", _SERVER_USER],
        capture_output=True,
        text=True,
    )
    if created.returncode != 0:
        raise PostgresUnavailable(
            f"the tests run as root, initdb refuses root, and there is no {_SERVER_USER!r} user to run it as "
            f"(useradd failed: {created.stderr.strip()}); create one or run the tests as another user"
        )
    return pwd.getpwnam(_SERVER_USER)


class PostgresServer:
    """One server process; ``start()`` then ``dsn(database)``; ``stop()`` kills it and removes its files.

    ``PostgresServer(root=..., port=...)`` is the server another process started in ``root`` (scripts/ start
    one for a local cluster and stop it later); ``prefix`` names a new server's temp dir.
    """

    def __init__(self, *, root: str | Path | None = None, port: int = 0, prefix: str = "think-actors-pg-") -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise PostgresUnavailable(f"no PostgreSQL server binaries (initdb, pg_ctl) found: {INSTALL_HINT}")
        self.bin_dir = bin_dir
        self.user = _server_user()
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix=prefix))
        self.data_dir = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log_file = self.root / "server.log"
        self.port = port
        self.running = (self.data_dir / "postmaster.pid").exists()

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{_SERVER_USER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.socket_dir.mkdir()
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
            os.chown(self.socket_dir, self.user.pw_uid, self.user.pw_gid)
        self._run(
            "initdb",
            ["-D", str(self.data_dir), "--username", _SERVER_USER, "--auth", "trust", "-E", "UTF8", "--locale", "C"],
        )
        # A free port can be taken between the probe and the bind: try a few.
        for _attempt in range(3):
            self.port = _free_port()
            settings = {**_SETTINGS, "port": str(self.port), "unix_socket_directories": str(self.socket_dir)}
            options = " ".join(f"-c {name}={value}" for name, value in settings.items())
            try:
                self._run(
                    "pg_ctl",
                    ["-D", str(self.data_dir), "-l", str(self.log_file), "-w", "-t", "60", "-o", options, "start"],
                )
            except PostgresUnavailable:
                if "could not bind" in self.log():
                    continue
                raise
            self.running = True
            return
        raise PostgresUnavailable(f"PostgreSQL could not bind a free port on 127.0.0.1:\n{self.log()}")

    def stop(self) -> None:
        """Stop at once (``-m immediate``: nothing to keep) and delete the temp dir."""
        try:
            if self.running:
                self._run("pg_ctl", ["-D", str(self.data_dir), "-m", "immediate", "-w", "stop"])
                self.running = False
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def _run(self, program: str, args: list[str]) -> None:
        command = [str(self.bin_dir / program), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user.pw_name, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root, timeout=120)
        if done.returncode != 0:
            raise PostgresUnavailable(
                f"{program} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}\n{self.log()}"
            )
