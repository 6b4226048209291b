"""The multi-node scenario: a head and two worker nodes on this machine (``ray.cluster_utils.Cluster``), every
agent's store in one PostgreSQL database, all the checks in one cluster lifetime.

    python tests/multinode/scenario.py postgresql://postgres@127.0.0.1:5432/db

It prints one line, ``SCENARIO-RESULT {json}``: for each check the facts it saw (or the traceback that stopped it),
which tests/test_multinode.py and tests/test_schedule_cluster.py assert. It runs in a process of its own because
the test session has its own local Ray, and one process holds one Ray. The cluster is shut down in a ``finally``;
the test also kills the process group and anything left that carries the run's marker in its environment.

Nodes are named ``head``, ``w1`` and ``w2`` in the facts. The driver (this process) is attached to the head, so
the node removed is a worker. Everything listens on 127.0.0.1: Ray replaces a loopback address by the machine's
own unless it is told the machine is no cluster host (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, read at import).

After ``spread``, the checks that do not depend on each other run side by side (most of their time is waiting for
a worker process to boot, or for the scheduler's clock): ``parent_and_child`` then ``gateway``; ``model_pools``;
the scheduler's part (schedule_checks.py) up to the node loss; ``action_pause``'s first half (a refund parked on
w2); and the start of the node loss's victim on w2. ``node_loss`` comes last: it takes w2 away, the node of its own
agents, the scheduler and the parked refund's agent; the scheduler's part and ``action_pause`` go on beside it.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)  # tree_agents: the run-limit tree the in-process and single-node tests use too
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# The nodes' raylets start their workers with this process's environment: they import the agents from here.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [HERE, TESTS, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
)
sys.path[:0] = [HERE, TESTS]

import asyncio  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections.abc import Awaitable, Callable  # noqa: E402
from typing import Any  # noqa: E402

import aiohttp  # noqa: E402
import asyncpg  # noqa: E402
import ray  # noqa: E402
import schedule_checks  # noqa: E402
import tree_agents  # noqa: E402
from multinode_agents import COUNTER, Approver, Counter, Echo, Lead, RefundDesk  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

import think_actors as ta  # noqa: E402
from think_actors.gateway.ray_server import GatewayServer  # noqa: E402
from think_actors.model_pool import start_model_pools  # noqa: E402
from think_actors.runtime import AgentHandle, _require_config  # noqa: E402

# A killed raylet is declared dead after period x threshold (the default is ~15 s); then its actors restart.
HEALTH_CHECKS = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}
CHECK_TIMEOUT_S = 120  # per check; the checks side by side share two cores
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 80 * 1024 * 1024}
# Two Python daemons fewer to boot on two cores: the autoscaler's monitor (a fixed cluster never scales) and the
# workers' log monitors (they only stream worker logs to the driver; failures reach the facts as tracebacks).
HEAD = {**NODE, "include_dashboard": False, "no_monitor": True, "_system_config": HEALTH_CHECKS}
WORKER = {**NODE, "include_log_monitor": False}


class Nodes:
    """The cluster's nodes by label, and the label of a node id."""

    def __init__(self, cluster: Cluster, workers: list[Any]):
        self.cluster = cluster
        self.workers = workers
        self.ids = {"head": cluster.head_node.node_id, **{f"w{i + 1}": w.node_id for i, w in enumerate(workers)}}
        self.labels = {node_id: label for label, node_id in self.ids.items()}

    def label(self, node_id: str) -> str:
        return self.labels.get(node_id, f"unknown:{node_id[:8]}")


async def through_restarts(call: Callable[[], Awaitable[Any]], timeout_s: float = 45) -> Any:
    """``await call()``, again while the actor is dead or restarting on another node."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await call()
        except (ta.AgentUnavailableError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def info(handle: AgentHandle, nodes: Nodes) -> dict[str, Any]:
    facts = await through_restarts(handle.info)
    return {"node": nodes.label(facts["node_id"]), "messages": facts["messages"], "pid": facts["pid"]}


def handle_at(path: str, class_name: str) -> AgentHandle:
    return AgentHandle(ray.get_actor(path, namespace=_require_config().namespace), path, class_name)


async def texts(handle: AgentHandle) -> list[str]:
    return [f"{m.role}: {m.text}" for m in await through_restarts(handle.get_messages)]


# ---------------------------------------------------------------------------------------------------- the checks


async def check_spread(nodes: Nodes, state: dict[str, Any]) -> dict[str, Any]:
    """Agents spawned without a node go to different nodes (SPREAD), and each answers from there."""
    names = [f"spread-{i}" for i in range(len(nodes.ids))]
    handles = await asyncio.gather(*(ta.spawn(Echo, name) for name in names))
    results = await asyncio.gather(*(h.save_messages(f"hello {name}") for h, name in zip(handles, names, strict=True)))
    placed = {name: (await info(h, nodes))["node"] for name, h in zip(names, handles, strict=True)}
    state["spread"] = dict(zip(names, handles, strict=True))
    state["placed"] = placed
    listing = ta.list_agents()
    return {
        "placed": placed,
        "replies": [r.message.text if r.message else None for r in results],
        "resident_by_node": {nodes.label(n): c for n, c in listing.resident_by_node().items()},
    }


async def check_parent_and_child(nodes: Nodes, state: dict[str, Any]) -> dict[str, Any]:
    """A lead pinned to w1 streams its agent-tool child pinned to w2: the child's chunks reach the caller."""
    lead = await ta.spawn(Lead, "lead", node_id=nodes.ids["w1"], child_node=nodes.ids["w2"])
    chunks = [chunk async for chunk in lead.chat("ask the helper where it runs")]
    events = [c for c in chunks if c.type == "agent-tool-event"]
    child_paths = sorted({e.agent for e in events})
    forwarded = "".join(
        e.chunk.delta for e in events if e.kind == "chunk" and e.chunk is not None and e.chunk.type == "text-delta"
    )
    own = "".join(c.delta for c in chunks if c.type == "text-delta")
    child = handle_at(child_paths[0], "Helper") if len(child_paths) == 1 else None
    state["child"] = child
    return {
        "lead_node": (await info(lead, nodes))["node"],
        "child_paths": child_paths,
        "child_node": (await info(child, nodes))["node"] if child else None,
        "event_kinds": [e.kind for e in events],
        "forwarded_text": forwarded.replace(nodes.ids["w2"], "<w2>"),
        "lead_text": own.replace(nodes.ids["w2"], "<w2>"),
        "finish": chunks[-1].type if chunks else None,
    }


async def check_run_limits(nodes: Nodes) -> dict[str, Any]:
    """A three-level tree whose agents the cluster spreads over its nodes: a token limit reached below stops it,
    and a cancel at the root stops the grandchildren on their nodes (the time from the cancel to the last one)."""
    namespace = _require_config().namespace
    meter: Any = ray.remote(tree_agents.Meter).options(name=tree_agents.METER, namespace=namespace).remote()
    await meter.report.remote()
    lead = await ta.spawn(tree_agents.Lead, "limits-lead")
    result = await lead.save_messages("research it", limits=ta.RunLimits(max_total_tokens=600))
    tree = [a for a in ta.list_agents().agents if a.path.startswith("lead/limits-lead")]
    slow = await ta.spawn(tree_agents.SlowLead, "limits-cancel")
    stream = slow.chat("research it")
    await tree_agents.until_grandchildren_started(stream, 4)
    await asyncio.sleep(1.0)  # the grandchildren's models are running, or about to
    cancelled = time.time()
    await slow.cancel_chat(stream.request_id)
    await stream.collect()
    report = await meter.report.remote()
    for _ in range(200):  # until no fetcher's model still waits (one cancelled before its run came never starts)
        if not report["running"]:
            break
        await asyncio.sleep(0.1)
        report = await meter.report.remote()
    ended = [e for e in report["ended"] if "slow-fetcher/" in e[0]]
    cancel_tree = [a for a in ta.list_agents().agents if a.path.startswith("slow-lead/limits-cancel")]
    ray.kill(meter)
    return {
        "status": result.status,
        "limit": result.limit,
        "requests": result.tree_usage.requests,
        "tokens": result.tree_usage.total_tokens,
        "nodes": sorted({nodes.label(a.node_id) for a in tree + cancel_tree}),
        "agents": len(tree),
        "still_running": report["running"],
        "stopped": sorted({status for _, status, _ in ended}),
        "cancel_to_last_stopped_s": round(max(at for _, _, at in ended) - cancelled, 3) if ended else None,
    }


async def gateway_chat(url: str, name: str, text: str) -> dict[str, Any]:
    """One chat request over the gateway's WebSocket: the transcript on connect and the one after the turn."""
    async with aiohttp.ClientSession() as session, session.ws_connect(f"{url}/agents/echo/{name}") as ws:

        async def frame() -> dict[str, Any]:
            message = await asyncio.wait_for(ws.receive(), 30)
            data: dict[str, Any] = json.loads(message.data)
            return data

        greeting = await frame()
        body = {"messages": [{"id": f"u-{name}", "role": "user", "parts": [{"type": "text", "text": text}]}]}
        init = {"method": "POST", "body": json.dumps(body)}
        request = {"type": "cf_agent_use_chat_request", "id": f"r-{name}", "init": init}
        await ws.send_str(json.dumps(request))
        transcript: list[dict[str, Any]] = []
        while True:
            data = await frame()
            if data["type"] == "cf_agent_chat_messages":
                transcript = data["messages"]
            if data["type"] == "cf_agent_use_chat_response" and data.get("done"):
                break

    def flat(messages: list[dict[str, Any]]) -> list[str]:
        return [
            f"{m['role']}: " + "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text") for m in messages
        ]

    return {"before": flat(greeting.get("messages", [])), "after": flat(transcript), "outcome": data.get("outcome")}


async def check_gateway(nodes: Nodes, state: dict[str, Any]) -> dict[str, Any]:
    """A gateway actor on the head serves the spread agents that live on the workers, over a WebSocket."""
    config = _require_config()
    gateway = GatewayServer.options(  # type: ignore[attr-defined]
        namespace=config.namespace,
        scheduling_strategy=NodeAffinitySchedulingStrategy(nodes.ids["head"], soft=False),
    ).remote(config, "multinode_agents", {})
    url = await gateway.start.remote("127.0.0.1", 0)
    try:
        chats = {}
        for name, label in sorted(state["placed"].items()):
            if label != "head":
                chats[name] = {"node": label, **await gateway_chat(url, name, f"through the gateway to {name}")}
    finally:
        await gateway.stop.remote()
        ray.kill(gateway)
    return {"gateway_node": "head", "url_host": url.split("//")[1].split(":")[0], "chats": chats}


async def check_model_pools(nodes: Nodes) -> dict[str, Any]:
    """``start_model_pools`` starts one pool per node, on that node (named after it), and only once."""
    config = _require_config()
    started: set[str] = set()
    fresh = await start_model_pools(config, started)
    again = await start_model_pools(config, started)
    prefix = "think_actors/model-server/"
    servers = [
        actor
        for actor in ray._private.state.actors().values()  # GCS's actor table: no dashboard needed
        if actor["State"] == "ALIVE" and (actor.get("Name") or "").startswith(prefix)
    ]
    placed = {
        actor["Name"].removeprefix(prefix).replace(node_id, nodes.label(node_id)): nodes.label(
            actor["Address"]["NodeID"]
        )
        for actor in servers
        for node_id in [actor["Name"].removeprefix(prefix).split("/")[0]]
    }
    for actor in servers:  # they would restart after w2's loss and slow the next check down
        ray.kill(ray.get_actor(actor["Name"], namespace=config.namespace), no_restart=True)
    return {"started": sorted(nodes.label(n) for n in fresh), "again": again, "placed": placed}


async def sql_rows(url: str, path: str) -> dict[str, Any]:
    """The agent's lease generation and message roles, read with plain SQL (a store would claim the agent)."""
    conn = await asyncpg.connect(url)
    try:
        generation = await conn.fetchval("SELECT generation FROM think_actors.agents WHERE path = $1", path)
        roles = await conn.fetch("SELECT role FROM think_actors.messages WHERE agent = $1 ORDER BY seq", path)
        statuses = await conn.fetch("SELECT status FROM think_actors.submissions WHERE agent = $1 ORDER BY seq", path)
    finally:
        await conn.close()
    return {"generation": generation, "roles": [r[0] for r in roles], "submissions": [r[0] for r in statuses]}


async def victim_before_the_loss(nodes: Nodes) -> tuple[AgentHandle, Any, dict[str, Any]]:
    """The node loss's victim, pinned to w2, and its first turn there (started beside the other checks: a worker
    process boots on w2 for it); the handle, that turn's result and where it ran."""
    victim = await ta.spawn(Echo, "victim", node_id=nodes.ids["w2"])
    first = await victim.save_messages("before the loss")
    return victim, first, await info(victim, nodes)


async def desk_before_the_loss(nodes: Nodes) -> dict[str, Any]:
    """``action_pause``'s first half, beside the other checks: the counter of refunds on the head (it outlives w2),
    a desk pinned to w2 whose refund parks, and the agent that will approve it on w1 (its worker boots now)."""
    head = NodeAffinitySchedulingStrategy(nodes.ids["head"], soft=False)
    named = {"name": COUNTER, "namespace": _require_config().namespace, "scheduling_strategy": head}
    counter: Any = Counter.options(**named).remote()  # type: ignore[attr-defined]
    desk = await ta.spawn(RefundDesk, "desk", node_id=nodes.ids["w2"])
    approver, first, count = await asyncio.gather(
        ta.spawn(Approver, "approver", node_id=nodes.ids["w1"], desk=desk),
        desk.save_messages("Please refund order A-1."),  # returns once the refund has parked
        counter.count.remote(),
    )
    pending = await desk.pending_approvals()
    return {
        "desk": desk,
        "approver": approver,
        "counter": counter,
        "first_reply": first.message.text if first.message else None,
        "count_before": count,
        "pending": [p.execution_id for p in pending],
        "info": await info(desk, nodes),
    }


async def check_action_pause(nodes: Nodes, state: dict[str, Any], store_url: str) -> dict[str, Any]:
    """A durable-pause action parked by an agent on w2 outlives w2: the agent comes back on another node (its
    store in PostgreSQL), where another agent approves the action through its handle; it runs once (a second
    approve is refused), its output replaces the paused one, and the conversation continues on its own."""
    before = await state["desk_before"]
    if not await state["w2_gone"]:
        raise RuntimeError("the node_loss check stopped before it removed w2")
    desk: AgentHandle = before["desk"]
    after = await info(desk, nodes)
    deadline = time.monotonic() + 45
    while after["node"] == "w2" and time.monotonic() < deadline:  # its process answers until it sees w2 is gone
        await asyncio.sleep(0.2)
        after = await info(desk, nodes)
    pending_after_loss = [p.execution_id for p in await through_restarts(desk.pending_approvals)]
    [execution_id] = before["pending"] or [None]
    approved = await before["approver"].save_messages(f"approve {execution_id}")
    second = await through_restarts(lambda: desk.approve_execution(execution_id))
    await through_restarts(lambda: desk.wait_until_stable(timeout_s=30))
    messages = await through_restarts(desk.get_messages)
    approver_messages = await before["approver"].get_messages()
    return {
        "first_reply": before["first_reply"],
        "node_before": before["info"]["node"],
        "node_after": after["node"],
        "pid_changed": after["pid"] != before["info"]["pid"],
        "approver_node": (await info(before["approver"], nodes))["node"],
        "pending_before_loss": before["pending"],
        "pending_after_loss": pending_after_loss,
        "pending_after_approval": [p.execution_id for p in await through_restarts(desk.pending_approvals)],
        "approver_tool_outputs": [p.output for m in approver_messages for p in m.parts if isinstance(p, ta.ToolPart)],
        "approver_reply": approved.message.text if approved.message else None,
        "second_approve": second,
        "count_before": before["count_before"],
        "count": await before["counter"].count.remote(),
        "desk_tool_outputs": [p.output for m in messages for p in m.parts if isinstance(p, ta.ToolPart)],
        "desk_last_text": messages[-1].text if messages else None,
        "sql": await sql_rows(store_url, desk.path),
    }


async def check_node_loss(nodes: Nodes, state: dict[str, Any], store_url: str) -> dict[str, Any]:
    """w2 dies while an agent on it runs an accepted submission: Ray re-creates w2's agents on the other nodes,
    their history is intact in PostgreSQL, and the submission finishes there. The scheduler on w2 goes with it:
    the scheduler's part follows its restart beside this check (``state["schedule_after"]``)."""
    w2 = nodes.ids["w2"]
    victim, first, before = await state["victim"]
    submission = await victim.submit_messages(f"hold on {w2}", idempotency_key="hold")
    deadline = time.monotonic() + 20
    status = submission.status
    while status != "running" and time.monotonic() < deadline:  # its turn is in the model, which holds on w2
        await asyncio.sleep(0.05)
        found = await victim.inspect_submission(submission.submission_id)
        status = found.status if found else "missing"
    bystanders: dict[str, AgentHandle] = {n: h for n, h in state["spread"].items() if state["placed"][n] == "w2"}
    if state.get("child") is not None:
        bystanders["helper"] = state["child"]
    kept = {name: await texts(h) for name, h in bystanders.items()}

    schedule = None
    with contextlib.suppress(Exception):  # the scheduler's part reports its own failure, not this check
        schedule = await state["schedule_before"]  # three occurrences ran before the loss
    with contextlib.suppress(Exception):  # so does action_pause
        await state["desk_before"]  # its refund has parked on w2
    progress("removing w2")
    removed_at = time.monotonic()
    removed_at_wall = time.time()
    await asyncio.to_thread(nodes.cluster.remove_node, nodes.workers[1], allow_graceful=False)
    state["w2_gone"].set_result(True)
    if schedule is not None:
        after = schedule_checks.after_the_loss(nodes.ids, store_url, schedule, removed_at_wall)
        state["schedule_after"] = asyncio.ensure_future(after)
    final = await through_restarts(lambda: victim.wait_for_submission(submission.submission_id, timeout_s=5))
    progress(f"submission {final.status}")
    finished_s = time.monotonic() - removed_at
    after = await info(victim, nodes)
    history = await texts(victim)
    next_turn = await through_restarts(lambda: victim.save_messages("after the loss"))
    moved = {}
    for name, handle in bystanders.items():
        facts = await info(handle, nodes)
        moved[name] = {"node": facts["node"], "history_kept": await texts(handle) == kept[name]}
    return {
        "first_reply": first.message.text if first.message else None,
        "node_before": before["node"],
        "status_when_removed": status,
        "final_status": final.status,
        "final_error": final.error,
        "finished_s": round(finished_s, 2),
        "node_after": after["node"],
        "pid_changed": after["pid"] != before["pid"],
        "history": [t.replace(w2, "<w2>") for t in history],
        "next_reply": next_turn.message.text if next_turn.message else None,
        "sql": await sql_rows(store_url, victim.path),
        "bystanders": moved,
        "live_nodes": sorted(nodes.label(n["NodeID"]) for n in ray.nodes() if n["Alive"]),
    }


# ---------------------------------------------------------------------------------------------------- the run


async def run_check(
    name: str,
    check: Callable[[], Awaitable[dict[str, Any]]],
    results: dict[str, Any],
    timeout_s: float = CHECK_TIMEOUT_S,
) -> None:
    """Run one check into ``results[name]``: its facts, or the traceback that stopped it; and its seconds."""
    progress(f"check {name}")
    started = time.monotonic()
    try:
        results[name] = await asyncio.wait_for(check(), timeout_s)
    except Exception:
        results[name] = {"error": traceback.format_exc()}
    results[name]["seconds"] = round(time.monotonic() - started, 2)
    progress(f"check {name} done")


async def run_schedule(nodes: Nodes, store_url: str, state: dict[str, Any], results: dict[str, Any]) -> None:
    """The scheduler's part: started beside the checks after ``spread``, finished after the node loss."""

    async def schedule() -> dict[str, Any]:
        before = asyncio.ensure_future(schedule_checks.before_the_loss(nodes.ids, store_url))
        state["schedule_before"] = before
        await state["node_loss_done"].wait()  # node_loss awaits ``before``, removes w2, starts the rest
        if "schedule_after" not in state:
            await before  # raises what stopped it, else node_loss failed before the removal
            raise RuntimeError("the node_loss check stopped before it removed w2")
        facts: dict[str, Any] = await state["schedule_after"]
        return facts

    await run_check("schedule", schedule, results, timeout_s=4 * CHECK_TIMEOUT_S)  # it spans the other checks


async def run_checks(nodes: Nodes, store_url: str, results: dict[str, Any]) -> None:
    state: dict[str, Any] = {"node_loss_done": asyncio.Event(), "w2_gone": asyncio.get_running_loop().create_future()}
    await run_check("spread", lambda: check_spread(nodes, state), results)
    if "error" in results["spread"]:
        return  # every later check uses its agents
    schedule = asyncio.ensure_future(run_schedule(nodes, store_url, state, results))
    state["victim"] = asyncio.ensure_future(victim_before_the_loss(nodes))  # node_loss awaits it
    state["desk_before"] = asyncio.ensure_future(desk_before_the_loss(nodes))  # and this, before it removes w2
    action_pause = asyncio.ensure_future(
        run_check(
            "action_pause",
            lambda: check_action_pause(nodes, state, store_url),
            results,
            timeout_s=4 * CHECK_TIMEOUT_S,  # it spans the other checks
        )
    )

    async def parent_then_gateway() -> None:
        await run_check("parent_and_child", lambda: check_parent_and_child(nodes, state), results)
        await run_check("gateway", lambda: check_gateway(nodes, state), results)

    await asyncio.gather(
        parent_then_gateway(),
        run_check("model_pools", lambda: check_model_pools(nodes), results, timeout_s=2 * CHECK_TIMEOUT_S),
        run_check("run_limits", lambda: check_run_limits(nodes), results, timeout_s=2 * CHECK_TIMEOUT_S),
    )  # three server processes boot beside the other checks
    try:
        await run_check("node_loss", lambda: check_node_loss(nodes, state, store_url), results)  # takes w2 away
    finally:
        state["node_loss_done"].set()
        if not state["w2_gone"].done():
            state["w2_gone"].set_result(False)  # action_pause reports that w2 was never removed
    await schedule
    await action_pause


STARTED = time.monotonic()


def progress(what: str) -> None:
    print(f"[scenario {time.monotonic() - STARTED:6.2f}s] {what}", file=sys.stderr, flush=True)


def main(store_url: str) -> int:
    started = time.monotonic()
    results: dict[str, Any] = {}
    data_dir = tempfile.mkdtemp(prefix="think-actors-mn-")  # unused with PostgreSQL, but never the caller's
    progress("starting the head")
    cluster = Cluster(initialize_head=True, head_node_args=HEAD)
    try:
        workers = []
        for i in range(2):
            progress(f"starting worker w{i + 1}")
            workers.append(cluster.add_node(**WORKER))
        cluster.wait_for_nodes()
        progress("connecting")
        ta.init(address=cluster.address, store=store_url, data_dir=data_dir, model_pool_size=1)
        nodes = Nodes(cluster, workers)
        results["cluster"] = {
            "address": cluster.address,
            "nodes": sorted(nodes.ids),
            "seconds": round(time.monotonic() - started, 2),
        }
        asyncio.run(run_checks(nodes, store_url, results))
    except Exception:
        results["setup"] = {"error": traceback.format_exc()}
    finally:
        progress("shutting down")
        ta.shutdown()
        cluster.shutdown()
        shutil.rmtree(data_dir, ignore_errors=True)
        progress("shut down")
        results["total_seconds"] = round(time.monotonic() - started, 2)
        print("SCENARIO-RESULT " + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
