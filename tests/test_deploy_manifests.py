"""The Kubernetes manifests under deploy/ describe the cluster cluster.yaml describes, in fields KubeRay documents.

No Kubernetes here: these read the YAML. They hold the manifests to three sources: KubeRay's ray.io/v1 API reference
(the RayCluster, HeadGroupSpec, WorkerGroupSpec and AutoscalerOptions fields below are the ones it lists),
cluster.yaml (the image's layout, Ray's port, the environment, the `think-actors serve` command) and
docs/guides/deploying.md (the image it names, how to apply them).
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from think_actors.gateway.ray_server import forget_dead

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBERAY = DEPLOY / "kuberay"
SECRET_EXAMPLE = KUBERAY / "secret.example.yaml"
GATEWAY_PORT = 8787

# Fields of KubeRay's ray.io/v1 API reference (RayClusterSpec, HeadGroupSpec, WorkerGroupSpec, AutoscalerOptions).
RAY_CLUSTER_SPEC_FIELDS = {
    "suspend", "managedBy", "autoscalerOptions", "headServiceAnnotations", "enableInTreeAutoscaling",
    "gcsFaultToleranceOptions", "headGroupSpec", "rayVersion", "workerGroupSpecs",
}  # fmt: skip
HEAD_GROUP_FIELDS = {"template", "headService", "enableIngress", "rayStartParams", "serviceType"}
WORKER_GROUP_FIELDS = {
    "suspend", "groupName", "replicas", "minReplicas", "maxReplicas", "idleTimeoutSeconds", "rayStartParams",
    "template", "scaleStrategy", "numOfHosts",
}  # fmt: skip
AUTOSCALER_FIELDS = {
    "resources", "image", "imagePullPolicy", "securityContext", "idleTimeoutSeconds", "upscalingMode", "version",
    "env", "envFrom", "volumeMounts",
}  # fmt: skip


def _documents() -> dict[Path, list[dict[str, Any]]]:
    return {path: list(yaml.safe_load_all(path.read_text())) for path in sorted(DEPLOY.rglob("*.yaml"))}


def _one(kind: str) -> dict[str, Any]:
    found = [doc for docs in _documents().values() for doc in docs if doc.get("kind") == kind]
    assert len(found) == 1, f"expected one {kind} under deploy/, found {len(found)}"
    return found[0]


def _cluster() -> dict[str, Any]:
    return _one("RayCluster")


def _groups() -> list[dict[str, Any]]:
    """The head group, then every worker group."""
    spec = _cluster()["spec"]
    return [spec["headGroupSpec"], *spec["workerGroupSpecs"]]


def _ray_containers() -> list[dict[str, Any]]:
    """The first container of each group: the one KubeRay runs Ray in."""
    return [group["template"]["spec"]["containers"][0] for group in _groups()]


def _all_containers() -> list[dict[str, Any]]:
    return [container for group in _groups() for container in group["template"]["spec"]["containers"]]


def _launcher() -> dict[str, Any]:
    launcher: dict[str, Any] = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    return launcher


def _launcher_text() -> str:
    return (ROOT / "cluster.yaml").read_text()


def _launcher_env() -> dict[str, str | None]:
    """Every variable cluster.yaml gives its nodes: cluster.env's names (value None: a secret) and the ones its
    start commands set inline, with their values."""
    env: dict[str, str | None] = {}
    for name, value in re.findall(r"^#\s+([A-Z][A-Z0-9_]*)=(\S+)", _launcher_text(), flags=re.MULTILINE):
        env[name] = None if value.startswith("<") or "@" in value else value  # a placeholder or a password
    commands = " ".join(_launcher()["head_start_ray_commands"] + _launcher()["worker_start_ray_commands"])
    env.update(dict(re.findall(r"(?<![\w$])([A-Z][A-Z0-9_]*)=([^\s;&]+)", commands)))
    return env


def _launcher_serve_command() -> list[str]:
    command = next(c for c in _launcher()["head_start_ray_commands"] if "think-actors serve" in c)
    words = shlex.split(command.split(".venv/bin/think-actors", 1)[1])
    return words[: words.index(">~/think-actors-serve.log")] if ">~/think-actors-serve.log" in words else words


def _flags(words: list[str]) -> dict[str, str | None]:
    """``--name value`` and bare ``--name`` options of a command line."""
    flags: dict[str, str | None] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else None
            flags[word] = None if following is None or following.startswith("--") else following
    return flags


def _container_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in container.get("ports", []) if p.get("name") == port))


_UNITS = {"": 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _quantity(value: str | int | float) -> float:
    number, unit = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", str(value)).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def test_every_manifest_is_well_formed_yaml_naming_its_kind() -> None:
    """Guards against a manifest kubectl cannot read: every document parses and says what it is."""
    documents = _documents()
    assert {path.name for path in documents} >= {
        "raycluster.yaml", "gateway-service.yaml", "secret.example.yaml", "kustomization.yaml",
    }  # fmt: skip
    for path, docs in documents.items():
        for doc in docs:
            assert isinstance(doc, dict), path
            assert doc.get("apiVersion") and doc.get("kind"), path
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], path


def test_the_raycluster_uses_only_fields_kuberay_documents() -> None:
    """Guards the RayCluster against misspelt or invented fields, which KubeRay's CRD would drop or refuse."""
    cluster = _cluster()
    assert cluster["apiVersion"] == "ray.io/v1"
    assert set(cluster["spec"]) <= RAY_CLUSTER_SPEC_FIELDS
    head = cluster["spec"]["headGroupSpec"]
    assert set(head) <= HEAD_GROUP_FIELDS
    assert head["template"]["spec"]["containers"]
    assert set(cluster["spec"]["autoscalerOptions"]) <= AUTOSCALER_FIELDS
    for group in _groups():
        params = group["rayStartParams"]
        assert isinstance(params, dict)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in params.items()), params
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert set(group) <= WORKER_GROUP_FIELDS
        assert group["groupName"]
        assert group["template"]["spec"]["containers"]


def test_workers_autoscale_within_bounds() -> None:
    """Guards worker autoscaling: KubeRay's in-tree autoscaler is on and each group's bounds are consistent."""
    spec = _cluster()["spec"]
    assert spec["enableInTreeAutoscaling"] is True
    options = spec["autoscalerOptions"]
    assert options["upscalingMode"] in {"Default", "Aggressive", "Conservative"}
    assert options["idleTimeoutSeconds"] == _launcher()["idle_timeout_minutes"] * 60
    for group in spec["workerGroupSpecs"]:
        assert 0 <= group["minReplicas"] <= group.get("replicas", group["minReplicas"]) <= group["maxReplicas"]
        assert group["minReplicas"] < group["maxReplicas"], "no room to scale"


def test_the_ray_version_is_the_one_the_project_pins() -> None:
    """Guards rayVersion: KubeRay reads it, and every node must run the Ray that pyproject.toml pins."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pinned = next(re.fullmatch(r"ray(\[[\w,]+\])?==([\d.]+)", d).group(2) for d in dependencies if d.startswith("ray"))  # type: ignore[union-attr]
    assert _cluster()["spec"]["rayVersion"] == pinned


def test_every_container_runs_the_one_image_the_docs_name() -> None:
    """Guards "same image everywhere": head and workers run one image, the one the deploying guide builds."""
    images = {container["image"] for container in _all_containers()}
    assert len(images) == 1, images
    (image,) = images
    assert ":" in image.rsplit("/", 1)[-1], "pin a tag: every node must run the same build"
    guide = (ROOT / "docs/guides/deploying.md").read_text()
    assert f"-t {image} " in guide, "the guide's docker build command names another image"
    assert "image" not in _cluster()["spec"]["autoscalerOptions"], "the autoscaler runs the same image (default)"


def test_the_image_installs_the_project_as_cluster_yaml_does() -> None:
    """Guards the image against drifting from cluster.yaml's nodes: project at the same path, `make install`."""
    launcher = _launcher()
    (project_dir,) = [target for target, source in launcher["file_mounts"].items() if source == "."]
    assert any(command.startswith(f"cd {project_dir} && make install") for command in launcher["setup_commands"])
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    assert f"WORKDIR {project_dir}\n" in dockerfile
    assert "\nRUN make install\n" in dockerfile
    assert f"PATH={project_dir}/.venv/bin:$PATH" in dockerfile
    ignored = (KUBERAY / "Dockerfile.dockerignore").read_text().split()
    assert {".think_actors", ".venv", ".git"} <= set(ignored), "cluster.env (a secret) or the venv in the image"
    for container in _ray_containers():
        assert container["workingDir"] == project_dir


def test_every_ray_container_has_cluster_yaml_environment() -> None:
    """Guards the environment: each Ray pod gets every variable cluster.yaml gives a node, with the same values,
    secrets from the Secret; the autoscaler gets Ray's token too."""
    launcher_env = _launcher_env()
    assert {"THINK_STORE", "THINK_GATEWAY_TOKEN", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "PYTHONPATH"} <= set(launcher_env)
    for container in _ray_containers():
        env = {entry["name"]: entry for entry in container["env"]}
        assert set(env) == set(launcher_env), container["name"]
        for name, value in launcher_env.items():
            if value is None:
                assert "secretKeyRef" in env[name].get("valueFrom", {}), name
            else:
                assert env[name]["value"] == value, name
    autoscaler = {entry["name"]: entry for entry in _cluster()["spec"]["autoscalerOptions"]["env"]}
    assert autoscaler["RAY_AUTH_MODE"]["value"] == launcher_env["RAY_AUTH_MODE"] == "token"
    assert "secretKeyRef" in autoscaler["RAY_AUTH_TOKEN"]["valueFrom"]


def test_the_head_runs_the_gateway_as_cluster_yaml_does_and_workers_do_not() -> None:
    """Guards the gateway's start: one `think-actors serve` per cluster, on the head, with cluster.yaml's flags
    (it puts a gateway on every node itself), after KubeRay's own `ray start`."""
    overwrite = _cluster()["metadata"]["annotations"]["ray.io/overwrite-container-cmd"]
    assert overwrite == "true"
    head, *workers = _ray_containers()
    script = head["args"][0]
    serve = script[script.index("think-actors serve") :].split("\n", 2)
    words = shlex.split((serve[0].rstrip("\\") + " " + serve[1]).replace("think-actors serve", "", 1))
    assert _flags(words) == _flags(_launcher_serve_command())
    assert _flags(words)["--port"] == str(GATEWAY_PORT)
    for container in _ray_containers():
        assert container["command"] == ["/bin/bash", "-c", "--"]
        lines = [line.strip() for line in container["args"][0].strip().splitlines()]
        assert lines[0] == "ulimit -n 65536"
        assert lines[-1] == "$KUBERAY_GEN_RAY_START_CMD", "Ray must be the container's foreground process"
    for worker in workers:
        assert "think-actors serve" not in worker["args"][0]


def test_ports_match_cluster_yaml() -> None:
    """Guards the ports: Ray's GCS on cluster.yaml's --port, the gateway on 8787 in every Ray container."""
    gcs_port = int(re.search(r"ray start --head --port=(\d+)", _launcher_text()).group(1))  # type: ignore[union-attr]
    head, *workers = _ray_containers()
    assert gcs_port in {p["containerPort"] for p in head["ports"]}
    assert "port" not in _cluster()["spec"]["headGroupSpec"]["rayStartParams"]  # KubeRay's default: 6379
    assert gcs_port == 6379
    for container in (head, *workers):
        assert _container_port(container, "gateway") == GATEWAY_PORT


def test_the_service_sends_gateway_traffic_to_pods_that_run_a_gateway() -> None:
    """Guards the Service: its selector picks the head and worker pods (each runs a gateway) and its target port
    is their gateway port."""
    service = _one("Service")
    selector = service["spec"]["selector"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == GATEWAY_PORT
    for group in _groups():
        labels = group["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), labels
        assert _container_port(group["template"]["spec"]["containers"][0], port["targetPort"]) == GATEWAY_PORT


def test_readiness_is_the_gateways_healthz() -> None:
    """Guards readiness: a pod joins the Service only once its gateway answers /healthz on the gateway port."""
    for container in _ray_containers():
        probe = container["readinessProbe"]["httpGet"]
        assert probe["path"] == "/healthz"
        assert _container_port(container, probe["port"]) == GATEWAY_PORT


def test_the_disruption_budget_covers_workers_only() -> None:
    """Guards voluntary evictions: one worker pod at a time, and the budget does not select the head."""
    budget = _one("PodDisruptionBudget")
    selector = budget["spec"]["selector"]["matchLabels"]
    head, *workers = _groups()
    assert not selector.items() <= head["template"]["metadata"]["labels"].items()
    for group in workers:
        assert selector.items() <= group["template"]["metadata"]["labels"].items()
    assert budget["spec"]["maxUnavailable"] == 1


def test_secrets_are_referenced_never_inlined() -> None:
    """Guards the credentials: the store URL and tokens come from a Secret the pods reference; only the example
    Secret holds values, placeholders, and kustomize never applies it."""
    example = yaml.safe_load(SECRET_EXAMPLE.read_text())
    secret_name, keys = example["metadata"]["name"], set(example["stringData"])
    assert all("CHANGE-ME" in value for value in example["stringData"].values())
    for path, docs in _documents().items():
        if path != SECRET_EXAMPLE:
            assert all(doc["kind"] != "Secret" for doc in docs), path
            assert not re.search(r"postgres(ql)?://\w+:[^@\s<]+@", path.read_text()), path
    secret_like = {name for name, value in _launcher_env().items() if value is None}
    assert secret_like == {"THINK_STORE", "THINK_GATEWAY_TOKEN", "RAY_AUTH_TOKEN"}
    envs = [c["env"] for c in _ray_containers()] + [_cluster()["spec"]["autoscalerOptions"]["env"]]
    for env in envs:
        for entry in env:
            if entry["name"] in secret_like or re.search(r"TOKEN|PASSWORD|KEY|SECRET", entry["name"]):
                assert "value" not in entry, entry["name"]
                ref = entry["valueFrom"]["secretKeyRef"]
                assert ref["name"] == secret_name and ref["key"] in keys, ref
    for container in _ray_containers():
        assert container["envFrom"] == [{"secretRef": {"name": secret_name}}]
    kustomization = yaml.safe_load((KUBERAY / "kustomization.yaml").read_text())
    assert SECRET_EXAMPLE.name not in kustomization["resources"]


def test_kustomization_applies_every_manifest_but_the_example() -> None:
    """Guards `kubectl apply -k deploy/kuberay`: it lists every manifest there, each file existing."""
    listed = yaml.safe_load((KUBERAY / "kustomization.yaml").read_text())["resources"]
    manifests = {p.name for p in KUBERAY.glob("*.yaml")} - {"kustomization.yaml", SECRET_EXAMPLE.name}
    assert set(listed) == manifests


@pytest.mark.parametrize("quantity", ["500m", "2", "4Gi", "512Mi", 2, "1.5"])
def test_quantity_reads_kubernetes_units(quantity: str | int) -> None:
    """Guards the comparison below: the quantities the manifests use parse."""
    assert _quantity(quantity) > 0


def test_resource_requests_do_not_exceed_limits() -> None:
    """Guards scheduling: every container (and the autoscaler) asks for at most its limit, for CPU and memory."""
    resources = [c["resources"] for c in _all_containers()] + [_cluster()["spec"]["autoscalerOptions"]["resources"]]
    for entry in resources:
        assert set(entry["requests"]) == set(entry["limits"]) == {"cpu", "memory"}
        for name, request in entry["requests"].items():
            assert _quantity(request) <= _quantity(entry["limits"][name]), (name, entry)


def test_the_guide_shows_how_to_apply_them() -> None:
    """Guards the docs: the deploying guide's Kubernetes section applies these files and names the Secret."""
    guide = (ROOT / "docs/guides/deploying.md").read_text()
    assert "## On Kubernetes (KubeRay)" in guide
    assert "kubectl apply -k deploy/kuberay" in guide
    assert yaml.safe_load(SECRET_EXAMPLE.read_text())["metadata"]["name"] in guide


def test_serve_starts_a_gateway_again_where_a_node_restarted_at_the_same_address() -> None:
    """A Ray container restarting in its pod is a new node at the old address: its address must be served again,
    while an address whose node lives on keeps its gateway."""
    served = {"10.0.0.5": "old-node", "10.0.0.6": "steady-node"}
    nodes = [
        {"NodeID": "old-node", "NodeManagerAddress": "10.0.0.5", "Alive": False},
        {"NodeID": "new-node", "NodeManagerAddress": "10.0.0.5", "Alive": True},
        {"NodeID": "steady-node", "NodeManagerAddress": "10.0.0.6", "Alive": True},
    ]
    forget_dead(served, nodes)
    assert served == {"10.0.0.6": "steady-node"}
