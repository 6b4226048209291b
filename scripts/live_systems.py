"""The servers scripts/bench_live.py compares and the paced provider behind them, each a process (tree) of its own.

A ``System`` starts one server, waits until it accepts sockets, measures it (CPU seconds and USS of every process
of its tree, found with psutil: for Ray the serve process, the GCS, the raylet, its agents, the gateway actor, the
model servers, idle workers and Ray's agents) and stops it: SIGINT to the serve process (it stops its gateways and
its Ray), then SIGKILL to whatever of its tree, as it stood before the stop, still runs. Its files (store, Ray's
session directory) live in a temporary directory removed afterwards.

Ray: ``think-actors serve`` without ``--address`` always starts a Ray of its own (``ray.init(address="local")``:
``RAY_ADDRESS`` is never read), but Ray keeps its sessions and its ``ray_current_cluster`` file under one directory
per machine (``/tmp/ray``), where ``ray.init("auto")`` or ``ray stop`` by someone else would find this one. Each
serve here gets ``RAY_TMPDIR`` of its own (and no ``RAY_ADDRESS``), so nobody else's Ray and this one meet; its
namespace (``think_actors``, serve has no option for another) is then private to it too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"
PYTHON = REPO / ".venv" / "bin" / "python"
BENCH_PYTHON = REPO / ".venv-bench" / "bin" / "python"
SERVE = REPO / ".venv" / "bin" / "think-actors"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
START_FAILED = "starting a gateway or a model pool failed"  # what serve logs when its gateway actor died
ERROR_WORDS = ("Error", "Traceback", "failed", "Exception")


class StartError(RuntimeError):
    """A server did not come up."""


@dataclass(frozen=True)
class Spec:
    """What a system is called and the path of a user's agent under it."""

    label: str
    slug: str  # /agents/<slug>/<user>
    ray: bool = False


SPECS = {
    "floor": Spec("floor relay (aiohttp)", "chat"),
    "peer": Spec("openai-agents peer", "chat"),
    "local": Spec("think_actors --local", "live-chat"),
    "shared": Spec('think_actors Ray, hosting="shared"', "shared-live-chat", ray=True),
    "actor": Spec("think_actors Ray, actor per agent", "live-chat", ray=True),
}

# Ray's process titles (argv[0]) and binaries, for the CPU breakdown of a Ray system.
_ROLES = (
    ("ray::GatewayServer", "gateway"),
    ("ray::AgentHost", "agents"),
    ("ray::SharedHost", "agents"),
    ("ray::ModelServer", "model servers"),
    ("ray::IDLE", "idle workers"),
    ("raylet", "raylet"),
    ("gcs_server", "gcs"),
    ("think-actors", "serve"),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def role(process: psutil.Process) -> str:
    """A Ray process's part, from its title; ``other`` for Ray's own helpers (dashboard agent, log monitor)."""
    try:
        argv = process.cmdline()
    except psutil.Error:
        return "gone"
    title = " ".join(argv[:2])
    return next((name for key, name in _ROLES if key in title), "other")


def _wait_for_line(log: Path, needle: str, process: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The first line of ``log`` holding ``needle``; raises if the process exits, logs ``START_FAILED`` (serve does
    not start a failed gateway again) or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if needle in line:
                return line
            if START_FAILED in line:
                raise StartError(f"the server failed to start:\n{_tail(log)}")
        if process.poll() is not None:
            raise StartError(f"the server exited ({process.returncode}) before it was ready:\n{_tail(log)}")
        time.sleep(0.1)
    raise StartError(f"the server was not ready in {timeout_s:.0f} s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


class Provider:
    """``scripts/paced_provider.py`` in a process of its own, its pace changed and its counters read over HTTP."""

    def __init__(self, *, first_token_s: float, tokens_per_s: float, tokens: int) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="bench-live-provider-"))
        self.log = self.dir / "provider.log"
        command = [str(PYTHON), str(SCRIPTS / "paced_provider.py"), "--first-token-s", str(first_token_s)]
        command += ["--tokens-per-s", str(tokens_per_s), "--tokens", str(tokens)]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.base = _wait_for_line(self.log, "listening on", self.process, 30).split()[-1]
        self.psutil = psutil.Process(self.process.pid)

    def _call(self, path: str, body: dict[str, Any] | None = None, *, post: bool = True) -> dict[str, Any]:
        data = json.dumps(body or {}).encode() if post else None
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(self.base.removesuffix("/v1") + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            return dict(json.loads(response.read()))

    def set_pace(self, tokens_per_s: float) -> None:
        self._call("/pace", {"tokens_per_s": tokens_per_s})

    def reset(self) -> None:
        self._call("/stats/reset")

    def stats(self) -> dict[str, Any]:
        return self._call("/stats", post=False)

    def cpu_s(self) -> float:
        times = self.psutil.cpu_times()
        return float(times.user + times.system)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class System:
    """One server under test: started, measured, stopped."""

    def __init__(
        self,
        name: str,
        provider_base: str,
        *,
        ray_worker_niceness: int | None = None,
        stream_latency_ms: float = 0.0,
    ) -> None:
        self.name = name
        self.ray_worker_niceness = ray_worker_niceness
        self.stream_latency_ms = stream_latency_ms  # the Ray systems' ``serve --stream-latency-ms``
        self.spec = SPECS[name]
        self.provider_base = provider_base
        self.dir = Path(tempfile.mkdtemp(prefix=f"bl-{name}-"))  # short: Ray's socket paths live under it
        self.log = self.dir / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.root: psutil.Process | None = None

    def agent_url(self, user: str) -> str:
        return f"{self.url}/agents/{self.spec.slug}/{user}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        env |= {"OPENAI_API_BASE": self.provider_base, "OPENAI_API_KEY": "sk-bench", "PYTHONUNBUFFERED": "1"}
        env |= {"RAY_USAGE_STATS_ENABLED": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["PYTHONPATH"] = os.pathsep.join([str(SCRIPTS), str(REPO)])
        env["THINK_ACTORS_DATA_DIR"] = str(self.dir / "data")
        env["RAY_TMPDIR"] = str(self.dir)
        if self.ray_worker_niceness is not None:  # Ray starts its workers (agents, gateway) at niceness 15
            env["RAY_worker_niceness"] = str(self.ray_worker_niceness)
        port = free_port()
        if self.name == "floor":
            command, ready = [str(PYTHON), str(SCRIPTS / "floor_relay.py"), "--port", "0"], "listening on"
        elif self.name == "peer":
            # Not the repo's PYTHONPATH: its agents/ (the demo) would hide openai-agents' ``agents``.
            env["PYTHONPATH"] = str(SCRIPTS)
            command, ready = [str(BENCH_PYTHON), str(SCRIPTS / "peer_relay.py"), "--port", "0"], "listening on"
        elif self.name == "local":
            command = [str(SERVE), "serve", "--local", "--app", "live_agents", "--port", str(port)]
            ready = "Running on"
        else:
            command = [str(SERVE), "serve", "--app", "live_agents", "--port", str(port)]
            command += ["--stream-latency-ms", str(self.stream_latency_ms)]
            ready = "gateway serving"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=self.dir, start_new_session=True
            )
        line = _wait_for_line(self.log, ready, self.process, START_TIMEOUT_S)
        self.url = "ws://" + line.split("http://")[1].split()[0].rstrip("/")
        self.root = psutil.Process(self.process.pid)

    def processes(self) -> list[psutil.Process]:
        """The server's process and all its descendants (for Ray: every process of its Ray)."""
        if self.root is None:
            return []
        try:
            return [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def cpu(self) -> dict[int, tuple[float, str, float]]:
        """Every process's (start time, role, CPU seconds so far), by pid."""
        out = {}
        for process in self.processes():
            try:
                with process.oneshot():
                    times = process.cpu_times()
                    out[process.pid] = (process.create_time(), role(process), times.user + times.system)
            except psutil.Error:
                pass
        return out

    @staticmethod
    def cpu_delta(before: dict[int, tuple[float, str, float]], after: dict[int, tuple[float, str, float]]) -> dict:
        """CPU seconds spent between two ``cpu()`` readings, by role (a process started between them counts whole;
        one that ended between them is lost)."""
        roles: dict[str, float] = {}
        for pid, (created, name, cpu_s) in after.items():
            earlier = before.get(pid)
            spent = cpu_s - earlier[2] if earlier is not None and earlier[0] == created else cpu_s
            roles[name] = roles.get(name, 0.0) + spent
        return roles

    def uss_mib(self) -> tuple[float, int, dict[str, float]]:
        """The USS of all the server's processes in MiB, how many processes, and the MiB by role."""
        roles: dict[str, float] = {}
        count = 0
        for process in self.processes():
            try:
                uss = process.memory_full_info().uss / 2**20
            except psutil.Error:
                continue
            name = role(process)
            roles[name] = roles.get(name, 0.0) + uss
            count += 1
        return sum(roles.values()), count, roles

    def error_lines(self, limit: int = 6) -> list[str]:
        """Distinct lines that report errors in the server's log and, for Ray, its workers' logs (the gateway
        actor's and the agents' go there): evidence for lost turns. Read before ``stop``, which removes them."""
        logs = [self.log, *sorted(self.dir.glob("ray/session_*/logs/worker-*.err"))]
        found: list[str] = []
        for log in logs:
            try:
                lines = log.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                text = line.strip()
                if any(word in text for word in ERROR_WORDS) and text[:160] not in {f[:160] for f in found}:
                    found.append(text[:300])
                    if len(found) >= limit:
                        return found
        return found

    def stop(self) -> None:
        if self.process is None:
            return
        tree = self.processes()
        with_signal = signal.SIGINT if self.name in ("local", "shared", "actor") else signal.SIGTERM
        self.process.send_signal(with_signal)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        _, alive = psutil.wait_procs([p for p in tree if p.is_running()], timeout=5)
        for process in alive:  # only this server's own tree, as it stood before the stop
            with contextlib.suppress(psutil.Error):
                process.kill()
        psutil.wait_procs(alive, timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)
