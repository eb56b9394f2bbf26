"""The farm's Kubernetes manifests (ops/k8s), rendered and validated with no cluster.

Every overlay is rendered by ops/k8s/render.py (the kustomize subset the manifests use); each built-in
document is validated by kubernetes-validate against the Kubernetes schemas it ships, strictly (an
unknown field is an error), and each ScaledObject against KEDA's CRD schema vendored in
ops/k8s/schemas, closed the same way. Then what the farm needs of them: the API non-root on a
read-only root filesystem with probes on /api/v1/health and its tokens from a Secret; each worker
pool's queues, as mlscope itself derives them from the pool's capability and frameworks, equal to
what KEDA scales it on; a GPU per GPU worker; workers reaching only DNS, the API, the broker and the
store. The CLI flags and settings the manifests pass are mlscope's own (click parses them).
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from mlscope.cli.api import api as api_command
from mlscope.cli.worker import worker as worker_command
from mlscope.contract.queues import agent_queue, check_agent_id, check_capability, queues_for
from mlscope.contract.settings import Settings
from mlscope.runtime.frameworks import get_framework

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "ops" / "k8s"
OVERLAYS = ("base", "overlays/in-cluster", "overlays/external")
DEPLOYABLE = ("overlays/in-cluster", "overlays/external")
# The oldest Kubernetes the manifests are written for, and the newest whose schemas the pinned
# kubernetes-validate carries.
KUBERNETES_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
KEDA_CRD = K8S / "schemas" / "keda.sh_scaledobjects.yaml"
WORKER = {"app.kubernetes.io/name": "mlscope-worker"}
DNS_PORT, API_PORT, REDIS_PORT, POSTGRES_PORT = 53, 8000, 6379, 5432
# The only pods a worker's port leads to.
PEERS = {API_PORT: "mlscope-api", REDIS_PORT: "mlscope-redis", POSTGRES_PORT: "mlscope-postgres"}


def load_renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("k8s_render", K8S / "render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


renderer = load_renderer()


def rendered(overlay: str) -> list[dict[str, Any]]:
    return renderer.render(K8S / overlay)


def source_files() -> dict[tuple[str, str], Path]:
    """(kind, name) → the file under ops/k8s that defines it, for failure messages."""
    found: dict[tuple[str, str], Path] = {}
    for path in sorted(K8S.rglob("*.yaml")):
        if path.name == "kustomization.yaml" or path.parent.name == "schemas":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                found[(document["kind"], document["metadata"]["name"])] = path.relative_to(REPO)
    return found


# ----- validation ---------------------------------------------------------------------------------


def _closed(schema: Any) -> Any:
    """The schema with every object that lists its properties closed to others, as the API server's
    strict field validation (kubectl's default) treats a custom resource: an unknown field is an
    error, not silently pruned."""
    if isinstance(schema, dict):
        closed = {key: _closed(value) for key, value in schema.items()}
        if (
            "properties" in closed
            and "additionalProperties" not in closed
            and not closed.get("x-kubernetes-preserve-unknown-fields")
        ):
            closed["additionalProperties"] = False
        return closed
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    return schema


def keda_validator() -> jsonschema.protocols.Validator:
    crd = next(d for d in yaml.safe_load_all(KEDA_CRD.read_text()) if d)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema = _closed(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


KEDA = keda_validator()


def validation_errors(document: dict[str, Any], kubernetes_version: str) -> str | None:
    """None when the document validates, else one line: kind/name, the field's path, the validator's
    message."""
    where = f"{document['kind']} {document['metadata']['name']}"
    if document["apiVersion"] == "keda.sh/v1alpha1" and document["kind"] == "ScaledObject":
        error = jsonschema.exceptions.best_match(KEDA.iter_errors(document))
        if error is None:
            return None
        field = ".".join(str(p) for p in error.absolute_path) or "(document)"
        return f"{where}: {field}: {error.message} (KEDA v2.20.2's CRD schema)"
    try:
        kubernetes_validate.validate(document, kubernetes_version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        field = ".".join(str(p) for p in exc.path) or "(document)"
        return f"{where}: {field}: {exc.message} (Kubernetes {kubernetes_version})"
    return None


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_document_validates_against_its_schema(overlay: str, version: str) -> None:
    # Given every document the overlay renders to
    documents = rendered(overlay)
    sources = source_files()
    # When each is validated against its kind's schema
    failures = [
        f"{sources.get((d['kind'], d['metadata']['name']), '?')}: {message}"
        for d in documents
        if (message := validation_errors(d, version)) is not None
    ]
    # Then none fails, and a failure names the file and the field
    assert not failures, "\n".join(failures)
    assert {d["kind"] for d in documents} >= {"Deployment", "Service", "ScaledObject", "NetworkPolicy"}


def test_a_broken_document_is_refused_naming_its_field() -> None:
    # Given documents broken the ways a hand edit breaks them
    documents = {(d["kind"], d["metadata"]["name"]): d for d in rendered("overlays/in-cluster")}
    port_as_text = copy.deepcopy(documents[("Deployment", "mlscope-api")])
    port_as_text["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "8000"
    misspelt = copy.deepcopy(documents[("Deployment", "mlscope-worker-cpu")])
    misspelt["spec"]["template"]["spec"]["nodeSelecter"] = {"a": "b"}
    keda_misspelt = copy.deepcopy(documents[("ScaledObject", "mlscope-worker-cpu")])
    keda_misspelt["spec"]["minReplicaCunt"] = 0
    keda_wrong_type = copy.deepcopy(documents[("ScaledObject", "mlscope-worker-cpu")])
    keda_wrong_type["spec"]["minReplicaCount"] = "zero"
    keda_no_trigger_type = copy.deepcopy(documents[("ScaledObject", "mlscope-worker-cpu")])
    del keda_no_trigger_type["spec"]["triggers"][0]["type"]
    # When they are validated, Then each is refused with the field named
    expected = {
        "spec.template.spec.containers.0.ports.0.containerPort": port_as_text,
        "nodeSelecter": misspelt,
        "minReplicaCunt": keda_misspelt,
        "spec.minReplicaCount": keda_wrong_type,
        "spec.triggers.0": keda_no_trigger_type,
    }
    for field, document in expected.items():
        message = validation_errors(document, KUBERNETES_VERSIONS[0])
        assert message is not None and field in message, (field, message)


# ----- the API --------------------------------------------------------------------------------------


def by_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents if d["kind"] == kind}


def containers(document: dict[str, Any]) -> list[dict[str, Any]]:
    return list(document["spec"]["template"]["spec"]["containers"])


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_the_api_runs_non_root_read_only_with_probes_on_health(overlay: str) -> None:
    documents = rendered(overlay)
    deployment = by_kind(documents, "Deployment")["mlscope-api"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = containers(deployment)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    for probe in ("startupProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/api/v1/health", probe
    # What the root filesystem's owner would have written goes to volumes: the cache and /tmp.
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/var/cache/mlscope", "/tmp"}
    # The Service reaches the container's port.
    service = by_kind(documents, "Service")["mlscope-api"]
    assert service["spec"]["selector"] == deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    # The flags are `mlscope api`'s own.
    api_command.make_context("api", list(container["args"][1:]))
    assert container["args"][0] == "api"


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_tokens_and_urls_come_from_a_secret_and_no_manifest_holds_one(overlay: str) -> None:
    documents = rendered(overlay)
    assert not by_kind(documents, "Secret"), "a Secret with its values must not be committed"
    secret_names = ("MLSCOPE_API_TOKENS", "MLSCOPE_BROKER_URL", "MLSCOPE_STORE_URL")
    for name, deployment in by_kind(documents, "Deployment").items():
        for container in containers(deployment):
            env = env_of(container)
            for variable in secret_names:
                assert "value" not in env[variable], (name, variable)
                assert env[variable]["valueFrom"]["secretKeyRef"]["name"] == "mlscope", (name, variable)
    for config in by_kind(documents, "ConfigMap").values():
        assert not set(config["data"]) & set(secret_names)


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_every_mlscope_setting_named_is_a_real_one(overlay: str) -> None:
    documents = rendered(overlay)
    known = {f"MLSCOPE_{f.name.upper()}" for f in fields(Settings)}
    named = {key for c in by_kind(documents, "ConfigMap").values() for key in c["data"]}
    for deployment in by_kind(documents, "Deployment").values():
        for container in containers(deployment):
            named |= set(env_of(container))
    mlscope_names = {name for name in named if name.startswith("MLSCOPE_")}
    assert mlscope_names and mlscope_names <= known, sorted(mlscope_names - known)


# ----- the worker pools -----------------------------------------------------------------------------


def worker_pools(documents: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each worker Deployment with its container."""
    for deployment in by_kind(documents, "Deployment").values():
        if deployment["spec"]["selector"]["matchLabels"].items() >= WORKER.items():
            (container,) = containers(deployment)
            yield deployment, container


def expand(arguments: list[str], env: dict[str, str]) -> list[str]:
    """The container's arguments as Kubernetes passes them: `$(NAME)` replaced by the variable."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], argument) for argument in arguments]


def resolve_env(deployment: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    """The container's variables the Downward API or a literal fills (others as placeholders)."""
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    values = {}
    for name, variable in env_of(container).items():
        field = variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", field)
        if label:
            values[name] = labels[label.group(1)]
        elif field == "metadata.name":
            values[name] = f"{deployment['metadata']['name']}-5d8f9c7b6-x2x7q"
        else:
            values[name] = str(variable.get("value", f"<{name}>"))
    return values


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_each_pool_is_scaled_on_the_queues_mlscope_derives_from_its_labels(overlay: str) -> None:
    documents = rendered(overlay)
    scaled_objects = by_kind(documents, "ScaledObject")
    pools = list(worker_pools(documents))
    assert len(pools) >= 2
    assert len(scaled_objects) == len(pools)
    for deployment, container in pools:
        name = deployment["metadata"]["name"]
        template = deployment["spec"]["template"]
        # Given the pool's capability: its pods' label, the label of the nodes it runs on
        capability = check_capability(template["metadata"]["labels"]["mlscope.org/capability"])
        assert template["spec"]["nodeSelector"] == {"mlscope.org/capability": capability}, name
        # When the worker's arguments are expanded as Kubernetes does and parsed by `mlscope worker`
        env = resolve_env(deployment, container)
        arguments = expand(container["args"], env)
        assert arguments[0] == "worker"
        options = worker_command.make_context("worker", arguments[1:]).params
        # Then the worker serves exactly that capability, with frameworks mlscope knows, by process
        assert options["capabilities"] == (capability,), name
        frameworks = options["frameworks"].split(",")
        for framework in frameworks:
            get_framework(framework)
        assert options["runners"] == "process", name
        # And KEDA scales that Deployment, from zero, on every queue mlscope derives for the pool
        agent_id = check_agent_id(options["agent_id"])
        derived = queues_for(frameworks, [capability], agent_id)
        assert derived[-1] == agent_queue(agent_id)
        spec = scaled_objects[name]["spec"]
        assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}
        assert spec["minReplicaCount"] == 0
        assert spec["maxReplicaCount"] >= 1
        assert sorted(t["metadata"]["listName"] for t in spec["triggers"]) == sorted(derived[:-1]), name
        for trigger in spec["triggers"]:
            assert trigger["type"] == "redis"
            # KEDA reads the broker's address from the scale target's container.
            assert trigger["metadata"]["addressFromEnv"] in env_of(container)
        # And no replica count fights KEDA's on a later apply
        assert "replicas" not in deployment["spec"]


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_a_gpu_pool_runs_one_worker_per_gpu(overlay: str) -> None:
    pools = list(worker_pools(rendered(overlay)))
    gpu_pools = [
        (d, c)
        for d, c in pools
        if d["spec"]["template"]["metadata"]["labels"]["mlscope.org/capability"].startswith("gpu.")
    ]
    assert gpu_pools
    for deployment, container in pools:
        resources = container["resources"]
        gpus = resources.get("limits", {}).get("nvidia.com/gpu")
        if (deployment, container) in gpu_pools:
            assert gpus == "1" and resources["requests"]["nvidia.com/gpu"] == "1"
        else:
            assert gpus is None


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_every_worker_runs_non_root_on_a_read_only_root(overlay: str) -> None:
    for deployment, container in worker_pools(rendered(overlay)):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["automountServiceAccountToken"] is False
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert mounts == {"/var/cache/mlscope", "/tmp"}
        # Every $(NAME) in the arguments is a variable of the container: Kubernetes passes an
        # unknown one on verbatim, and the worker would get the text "$(NAME)".
        for reference in re.findall(r"\$\((\w+)\)", " ".join(container["args"])):
            assert reference in env_of(container), reference


# ----- the network policy ---------------------------------------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return selector.get("matchLabels", {}).items() <= labels.items()


@pytest.mark.parametrize("overlay", DEPLOYABLE)
def test_workers_reach_only_dns_the_api_the_broker_and_the_store(overlay: str) -> None:
    documents = rendered(overlay)
    policies = [
        p for p in by_kind(documents, "NetworkPolicy").values() if selects(p["spec"]["podSelector"], WORKER)
    ]
    # Kubernetes allows the union of the policies that select a pod.
    assert any("Ingress" in p["spec"]["policyTypes"] for p in policies)
    assert not [rule for p in policies for rule in p["spec"].get("ingress", [])], "workers accept nothing"
    allowed = {
        (port["protocol"], port["port"])
        for p in policies
        for rule in p["spec"]["egress"]
        for port in rule["ports"]
    }
    assert allowed == {
        ("UDP", DNS_PORT),
        ("TCP", DNS_PORT),
        ("TCP", API_PORT),
        ("TCP", REDIS_PORT),
        ("TCP", POSTGRES_PORT),
    }
    rules = [rule for p in policies for rule in p["spec"]["egress"]]
    for rule in rules:
        assert rule.get("to"), "a rule without `to` would allow every address"
    # Each port leads only to its own peer.
    pods = {
        name: d["spec"]["template"]["metadata"]["labels"]
        for name, d in {**by_kind(documents, "Deployment"), **by_kind(documents, "StatefulSet")}.items()
    }
    for rule in rules:
        ports = {port["port"] for port in rule["ports"]}
        for peer in rule["to"]:
            if "podSelector" in peer and "namespaceSelector" not in peer:
                chosen = [n for n, labels in pods.items() if selects(peer["podSelector"], labels)]
                assert [chosen] == [[PEERS[p]] for p in ports], (ports, chosen)
            elif "ipBlock" in peer:
                assert peer["ipBlock"]["cidr"].endswith("/32") and ports <= {REDIS_PORT, POSTGRES_PORT}
            else:
                assert ports == {DNS_PORT}, peer


def test_in_cluster_services_are_on_the_ports_the_policy_opens() -> None:
    documents = rendered("overlays/in-cluster")
    services = by_kind(documents, "Service")
    assert services["mlscope-redis"]["spec"]["ports"][0]["port"] == REDIS_PORT
    assert services["mlscope-postgres"]["spec"]["ports"][0]["port"] == POSTGRES_PORT
    for name in ("mlscope-redis", "mlscope-postgres"):
        statefulset = by_kind(documents, "StatefulSet")[name]
        assert selects(
            {"matchLabels": services[name]["spec"]["selector"]},
            statefulset["spec"]["template"]["metadata"]["labels"],
        )


# ----- the documentation and the renderer -----------------------------------------------------------


def test_the_guide_creates_every_secret_key_the_manifests_read() -> None:
    # Given the Secret the guide's commands create, for each overlay
    guide = (REPO / "docs" / "kubernetes.md").read_text()
    for overlay in DEPLOYABLE:
        assert f"kubectl apply -k ops/k8s/{overlay}" in guide, overlay
    created = set(re.findall(r"--from-literal=([a-z-]+)=", guide))
    # When the manifests' secretKeyRefs are collected, Then the guide makes each
    for overlay in DEPLOYABLE:
        read = set()
        for kind in ("Deployment", "StatefulSet"):
            for document in by_kind(rendered(overlay), kind).values():
                for container in containers(document):
                    for variable in container.get("env", []):
                        reference = variable.get("valueFrom", {}).get("secretKeyRef")
                        if reference:
                            assert reference["name"] == "mlscope"
                            read.add(reference["key"])
        assert read <= created, (overlay, sorted(read - created))


def test_the_guide_builds_every_image_the_manifests_run_from_files_that_exist() -> None:
    guide = (REPO / "docs" / "kubernetes.md").read_text()
    builds = re.findall(r"docker build -f (\S+) .*?-t (\S+) ([^\s`]+)", guide)
    built = {tag for _, tag, _ in builds}
    for dockerfile, _, context in builds:
        assert (REPO / dockerfile).is_file() and (REPO / context).is_dir(), (dockerfile, context)
    for overlay in DEPLOYABLE:
        documents = rendered(overlay)
        images = {
            c["image"]
            for kind in ("Deployment", "StatefulSet")
            for d in by_kind(documents, kind).values()
            for c in containers(d)
        }
        assert images <= built, (overlay, sorted(images - built))


def test_the_renderer_refuses_what_it_does_not_render(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\npatches:\n  - path: p.yaml\n")
    with pytest.raises(renderer.KustomizeError, match="patches"):
        renderer.render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("resources: [a.yaml, a.yaml]\n")
    (tmp_path / "a.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")
    with pytest.raises(renderer.KustomizeError, match="two resources are ConfigMap a"):
        renderer.render(tmp_path)
    # From the command line: one line, exit 2
    done = subprocess.run(
        [sys.executable, str(K8S / "render.py"), str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "ConfigMap a" in done.stderr


def test_the_renderer_sets_the_namespace_and_labels_as_kustomize_does() -> None:
    documents = rendered("overlays/in-cluster")
    for document in documents:
        metadata = document["metadata"]
        assert metadata["labels"]["app.kubernetes.io/part-of"] == "mlscope"
        if document["kind"] == "Namespace":
            assert "namespace" not in metadata and metadata["name"] == "mlscope"
        else:
            assert metadata["namespace"] == "mlscope"
    # Labels go to metadata only, never to selectors (which a Deployment may not change).
    api = by_kind(documents, "Deployment")["mlscope-api"]
    assert "app.kubernetes.io/part-of" not in api["spec"]["selector"]["matchLabels"]
