"""deploy/: the Kubernetes manifests, the Prometheus alert rules and the Grafana dashboard, checked offline.

- Built-in kinds are validated with the PyPI ``kubernetes-validate --strict`` against Kubernetes 1.33
  (it bundles the schemas). Custom resources it has no schema for (KEDA ScaledObject, Strimzi
  KafkaTopic, CloudNativePG Cluster, PodMonitor, Kustomization) are checked structurally here.
- The manifests are tied to the code: ports, consumer groups and topics are read from the services,
  the ConfigMap's keys from ``shared.settings``, the Strimzi topics from ``shared.kafka.topics``, the metric
  names in the alerts and the dashboard from what the services really export.
- Where ``kubectl`` is on the PATH, ``kubectl kustomize`` builds the base and the example overlay and
  the rendered output is validated too; without it, every file a kustomization names must exist.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml

from shared.kafka import topics as topic_names
from shared.service import DEFAULT_PORTS
from shared.settings import settings_table

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
BASE = K8S / "base"
OVERLAY = K8S / "overlays" / "example"
SEARCH_REPLICA = K8S / "components" / "search-replica"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
DASHBOARD = DEPLOY / "grafana" / "evidentia.json"
K8S_VERSION = "1.33.0"

CONSUMERS = ("fetcher", "parser", "embedder", "retriever", "synthesizer")
SERVICES = (*CONSUMERS, "gateway")
GATEWAY_PORT = 8000
SECRET_VARIABLES = {
    "EVIDENTIA_DATABASE_URL",
    "EVIDENTIA_DATABASE_SEARCH_URL",
    "ANTHROPIC_API_KEY",
    "EVIDENTIA_NCBI_API_KEY",
    "EVIDENTIA_OPENFDA_API_KEY",
    "EVIDENTIA_GATEWAY_API_KEY_HASHES",
    "EVIDENTIA_KAFKA_SASL_PASSWORD",
}

# apiVersion group -> (kind, required top-level spec fields) for the kinds kubernetes-validate lacks.
CUSTOM_KINDS: dict[str, tuple[str, ...]] = {
    "keda.sh/v1alpha1": ("ScaledObject", "TriggerAuthentication"),
    "kafka.strimzi.io/v1beta2": ("KafkaTopic", "KafkaUser"),
    "postgresql.cnpg.io/v1": ("Cluster",),
    "monitoring.coreos.com/v1": ("PodMonitor", "PrometheusRule"),
    "kustomize.config.k8s.io/v1beta1": ("Kustomization",),
    "kustomize.config.k8s.io/v1alpha1": ("Component",),
}


# ---------------------------------------------------------------------------------------------------
# Loading


@cache
def patch_files() -> frozenset[Path]:
    """Files a kustomization names under `patches`: partial resources, checked through the build."""
    return frozenset(
        (k.parent / patch["path"]).resolve()
        for k in K8S.rglob("kustomization.yaml")
        for patch in (yaml.safe_load(k.read_text()).get("patches") or [])
    )


def manifest_files() -> list[Path]:
    """Every whole-resource YAML file under deploy/k8s (kustomize patches excluded)."""
    return sorted(p for p in K8S.rglob("*.yaml") if p.resolve() not in patch_files())


def load_docs(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert all(isinstance(d, dict) for d in docs), f"{path}: every YAML document must be a mapping"
    return docs


@cache
def all_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path in manifest_files() for doc in load_docs(path)]


def is_custom(doc: dict[str, Any]) -> bool:
    return doc.get("apiVersion") in CUSTOM_KINDS


def base_docs(kind: str) -> dict[str, dict[str, Any]]:
    """Every resource of ``kind`` in the base (its files, not the rendered output), by name."""
    found: dict[str, dict[str, Any]] = {}
    for path, doc in all_docs():
        if path.parent == BASE and doc["kind"] == kind and path.name != "secret.example.yaml":
            name = doc["metadata"]["name"]
            assert name not in found, f"two {kind}s named {name}"
            found[name] = doc
    return found


def base_config() -> dict[str, str]:
    data: dict[str, str] = base_docs("ConfigMap")["evidentia-config"]["data"]
    return data


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, "one container per service pod"
    return containers[0]


def kubectl() -> str | None:
    return shutil.which("kubectl")


@cache
def kustomize_build(folder: Path) -> list[dict[str, Any]]:
    exe = kubectl()
    assert exe is not None
    out = subprocess.run([exe, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"kubectl kustomize {folder} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


# ---------------------------------------------------------------------------------------------------
# What the code says: consumer groups, subscribed topics, exported metric names


def consumed_by(service: str) -> tuple[str, set[str]]:
    """(consumer group, topics subscribed) of a service, read from its modules (handlers.py, or the routers of
    a service split into FastStream routers) without importing them."""
    folder = REPO / "services" / service
    modules = [folder / "handlers.py"] if (folder / "handlers.py").exists() else sorted(folder.rglob("*.py"))
    nodes = [node for module in modules for node in ast.walk(ast.parse(module.read_text()))]
    group: str | None = None
    subscribed: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "GROUP_ID" for t in node.targets):
            assert isinstance(node.value, ast.Constant)
            group = str(node.value.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "subscriber"
            and node.args
        ):
            arg = node.args[0]
            if isinstance(arg, ast.Name):
                subscribed.add(getattr(topic_names, arg.id))
            elif isinstance(arg, ast.Constant):
                subscribed.add(str(arg.value))
    assert group is not None and subscribed, f"no GROUP_ID or subscriber found in services/{service}"
    return group, subscribed


@cache
def exported_metrics() -> frozenset[str]:
    """Every sample name the services can export: shared.metrics plus FastStream's middleware."""
    from faststream.kafka.prometheus import KafkaPrometheusMiddleware
    from prometheus_client import CollectorRegistry

    from shared import metrics

    faststream_registry = CollectorRegistry()
    KafkaPrometheusMiddleware(registry=faststream_registry, app_name="test", metrics_prefix="evidentia")
    names = set(metrics.registry._names_to_collectors) | set(faststream_registry._names_to_collectors)
    return frozenset(n for n in names if n.startswith("evidentia_"))


METRIC_NAME = re.compile(r"\b(evidentia_[a-z0-9_]+)\b")


def check_promql(expr: str, where: str) -> None:
    """Cheap sanity of a PromQL expression: balanced brackets and quotes, known evidentia metrics."""
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    in_string = False
    for ch in expr:
        if ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs:
            assert stack and stack[-1] == pairs[ch], f"{where}: unbalanced {ch!r} in {expr!r}"
            stack.pop()
    assert not stack and not in_string, f"{where}: unbalanced brackets or quotes in {expr!r}"
    unknown = set(METRIC_NAME.findall(expr)) - exported_metrics()
    assert not unknown, f"{where}: metrics no service exports: {sorted(unknown)}"


# ---------------------------------------------------------------------------------------------------
# Schema validation


def test_every_manifest_parses_and_has_kind() -> None:
    assert manifest_files(), "no manifests under deploy/k8s"
    for path, doc in all_docs():
        assert doc.get("apiVersion") and doc.get("kind"), f"{path}: apiVersion and kind are required"
        if doc["kind"] not in ("Kustomization", "Component"):
            assert doc.get("metadata", {}).get("name"), f"{path}: {doc['kind']} without metadata.name"


def test_builtin_kinds_validate_strictly_with_kubernetes_validate() -> None:
    """The real CLI, strict, on every file; it only warns on kinds it has no schema for, so the
    test demands a pass line for every built-in resource and a warning only for the custom ones."""
    files = [str(p) for p in manifest_files()]
    out = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", K8S_VERSION, *files],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    lines = out.stdout.splitlines()
    errors = [line for line in lines if line.startswith(("ERROR", "FATAL"))]
    assert out.returncode == 0 and not errors, "\n".join(errors) or out.stderr
    passed = [line for line in lines if line.startswith("INFO") and " passed " in line]
    builtin = [doc for _, doc in all_docs() if not is_custom(doc)]
    assert len(passed) == len(builtin), f"{len(builtin)} resources, {len(passed)} passed:\n{out.stdout}"
    warned = [line for line in lines if line.startswith("WARN")]
    custom = [doc for _, doc in all_docs() if is_custom(doc)]
    assert len(warned) == len(custom), f"unexpected warnings:\n{chr(10).join(warned)}"
    assert {doc["kind"] for doc in builtin} >= {
        "Namespace",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "Job",
        "Ingress",
    }


def test_strict_validation_rejects_an_unknown_field() -> None:
    """Control: the strict schemas do catch a misspelt field, so the test above means something."""
    from kubernetes_validate.utils import ValidationError, validate

    deployment = json.loads(json.dumps(base_docs("Deployment")["parser"]))
    validate(deployment, K8S_VERSION, strict=True)
    container(deployment)["readinesProbe"] = container(deployment).pop("readinessProbe")
    with pytest.raises(ValidationError):
        validate(deployment, K8S_VERSION, strict=True)


def test_custom_resources_are_well_formed() -> None:
    for path, doc in all_docs():
        if not is_custom(doc):
            continue
        assert doc["kind"] in CUSTOM_KINDS[doc["apiVersion"]], f"{path}: {doc['kind']} in {doc['apiVersion']}"
        where = f"{path.relative_to(REPO)}: {doc['kind']}"
        if doc["kind"] in ("Kustomization", "Component"):
            assert set(doc) <= {
                "apiVersion",
                "kind",
                "namespace",
                "resources",
                "components",
                "images",
                "patches",
                "replacements",
                "labels",
                "configMapGenerator",
                "secretGenerator",
            }, where
            continue
        spec = doc["spec"]
        if doc["kind"] == "ScaledObject":
            assert spec["scaleTargetRef"]["name"], where
            assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"], where
            for trigger in spec["triggers"]:
                assert trigger["type"] == "kafka", where
                meta = trigger["metadata"]
                for key in ("bootstrapServers", "consumerGroup", "topic", "lagThreshold"):
                    assert isinstance(meta.get(key), str) and meta[key], f"{where}: trigger {key}"
                assert int(meta["lagThreshold"]) > 0, where
                # KEDA reads every metadata value as a string.
                assert all(isinstance(v, str) for v in meta.values()), f"{where}: non-string metadata"
        elif doc["kind"] == "KafkaTopic":
            assert doc["metadata"]["labels"]["strimzi.io/cluster"], where
            assert spec["partitions"] >= 1 and spec["replicas"] >= 1, where
            assert all(isinstance(v, str) for v in spec["config"].values()), where
        elif doc["kind"] == "TriggerAuthentication":
            assert spec.get("env") or spec.get("secretTargetRef"), where
        elif doc["kind"] == "KafkaUser":
            assert doc["metadata"]["labels"]["strimzi.io/cluster"], where
            assert spec["authentication"]["type"] in ("scram-sha-512", "tls"), where
        elif doc["kind"] == "Cluster":
            assert spec["instances"] >= 1 and spec["imageName"] and spec["storage"]["size"], where
        elif doc["kind"] == "PodMonitor":
            assert spec["selector"]["matchLabels"] and spec["podMetricsEndpoints"], where
        elif doc["kind"] == "PrometheusRule":
            assert all(g["name"] and g["rules"] for g in spec["groups"]), where


# ---------------------------------------------------------------------------------------------------
# Kustomize


def kustomizations() -> list[Path]:
    return sorted(K8S.rglob("kustomization.yaml"))


def test_kustomization_files_exist() -> None:
    assert {p.parent for p in kustomizations()} >= {BASE, OVERLAY, K8S / "strimzi"}
    for path in kustomizations():
        k = load_docs(path)[0]
        for entry in k.get("resources", []):
            target = (path.parent / entry).resolve()
            assert target.is_file() or (target / "kustomization.yaml").is_file(), f"{path}: {entry} missing"
        for entry in k.get("components", []):
            component = load_docs(path.parent / entry / "kustomization.yaml")[0]
            assert component["kind"] == "Component", f"{path}: {entry} is not a kustomize Component"
        for patch in k.get("patches", []):
            assert (path.parent / patch["path"]).is_file(), f"{path}: patch {patch['path']} missing"


def test_base_applies_every_file_but_the_secret_example() -> None:
    listed = set(load_docs(BASE / "kustomization.yaml")[0]["resources"])
    present = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert "secret.example.yaml" not in listed, "apply -k must never overwrite the real Secret"
    assert present - listed == {"secret.example.yaml"}, f"files the base forgets: {present - listed}"


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with its kustomize) is not on the PATH")
@pytest.mark.parametrize("folder", [BASE, OVERLAY, K8S / "strimzi", K8S / "monitoring"], ids=lambda p: p.name)
def test_kustomize_build(folder: Path) -> None:
    from kubernetes_validate.utils import validate

    rendered = kustomize_build(folder)
    assert rendered
    for doc in rendered:
        if not is_custom(doc):
            validate(doc, K8S_VERSION, strict=True)
    if folder in (BASE, OVERLAY):
        config = next(d for d in rendered if d["kind"] == "ConfigMap")["data"]
        partitions = int(config["EVIDENTIA_KAFKA_TOPIC_PARTITIONS"])
        for so in (d for d in rendered if d["kind"] == "ScaledObject"):
            assert so["metadata"]["namespace"] == "evidentia"
            assert so["spec"]["maxReplicaCount"] <= partitions, so["metadata"]["name"]
            for trigger in so["spec"]["triggers"]:
                assert trigger["metadata"]["bootstrapServers"] == config["EVIDENTIA_KAFKA_BOOTSTRAP"]
    if folder == OVERLAY:
        images = {
            c["image"]
            for d in rendered
            if d["kind"] in ("Deployment", "Job")
            for c in d["spec"]["template"]["spec"]["containers"]
        }
        assert not any(i.endswith(":latest") or ":" not in i for i in images), f"unpinned images: {images}"


# ---------------------------------------------------------------------------------------------------
# Deployments


def test_a_deployment_per_service() -> None:
    assert set(base_docs("Deployment")) == set(SERVICES)


@pytest.mark.parametrize("name", SERVICES)
def test_deployment(name: str) -> None:
    deployment = base_docs("Deployment")[name]
    pod = deployment["spec"]["template"]["spec"]
    c = container(deployment)
    port = GATEWAY_PORT if name == "gateway" else DEFAULT_PORTS[name]

    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= template_labels.items()
    assert c["command"] == ["python", "-m", f"services.{name}"]
    assert c["image"].split(":")[0] == f"evidentia-{name}"  # its own image (Dockerfile SERVICE build-arg)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert port in ports.values()
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == str(port)

    probes = (("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"))
    for probe, path in probes:
        get = c[probe]["httpGet"]
        assert get["path"] == path, f"{name} {probe}"
        assert ports.get(get["port"], get["port"]) == port, f"{name} {probe} probes the wrong port"
    # Readiness pings the broker with a 5 s timeout (3 s at the gateway): the probe must wait longer.
    assert c["readinessProbe"]["timeoutSeconds"] > (3 if name == "gateway" else 5)

    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][kind]), f"{name}: {kind} need cpu and memory"

    refs = {(k, next(iter(v.values()))) for e in c["envFrom"] for k, v in e.items()}
    assert ("configMapRef", "evidentia-config") in refs and ("secretRef", "evidentia-secrets") in refs

    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["terminationGracePeriodSeconds"] >= 30
    assert pod["serviceAccountName"] == "evidentia"
    # Autoscalers own the replica count: a `replicas` here would fight them on every apply.
    assert "replicas" not in deployment["spec"]
    if name == "gateway":
        assert base_config()["EVIDENTIA_GATEWAY_HOST"] == "0.0.0.0", "the gateway must listen beyond loopback"


def test_startup_probe_allows_the_model_load() -> None:
    for name in ("embedder", "retriever"):
        probe = container(base_docs("Deployment")[name])["startupProbe"]
        assert probe["periodSeconds"] * probe["failureThreshold"] >= 120, name


def test_only_the_embedder_requests_a_gpu() -> None:
    for name, deployment in base_docs("Deployment").items():
        pod = deployment["spec"]["template"]["spec"]
        resources = container(deployment)["resources"]
        gpu = {k: v for part in resources.values() for k, v in part.items() if k.startswith("nvidia.com/")}
        if name == "embedder":
            assert resources["limits"]["nvidia.com/gpu"] in ("1", 1)
            assert pod["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
        else:
            assert not gpu, f"{name} asks for a GPU"
            assert "nodeSelector" not in pod and "tolerations" not in pod, name
    embedder = container(base_docs("Deployment")["embedder"])
    assert embedder["resources"]["requests"]["memory"] == max(
        (container(d)["resources"]["requests"]["memory"] for d in base_docs("Deployment").values()),
        key=lambda m: int(m.rstrip("GiM")) * (1024 if m.endswith("Gi") else 1),
    )


# ---------------------------------------------------------------------------------------------------
# Configuration


def test_configmap_keys_are_real_settings_and_not_secrets() -> None:
    known = {row[0] for row in settings_table()}
    config = base_config()
    assert set(config) <= known, f"unknown settings: {set(config) - known}"
    assert not set(config) & SECRET_VARIABLES
    assert all(isinstance(v, str) for v in config.values()), "ConfigMap values must be strings"
    overlay_config = load_docs(OVERLAY / "config-patch.yaml")[0]["data"]
    assert set(overlay_config) <= known


def test_secret_example_is_placeholders_only() -> None:
    docs = load_docs(BASE / "secret.example.yaml")
    assert [d["kind"] for d in docs] == ["Secret"] and docs[0]["metadata"]["name"] == "evidentia-secrets"
    data = docs[0]["stringData"]
    assert set(data) == SECRET_VARIABLES
    assert all("CHANGE-ME" in v for v in data.values())


# ---------------------------------------------------------------------------------------------------
# Scaling


@pytest.mark.parametrize("name", CONSUMERS)
def test_consumer_scales_on_its_consumer_group_lag(name: str) -> None:
    group, subscribed = consumed_by(name)
    so = base_docs("ScaledObject")[name]
    assert so["spec"]["scaleTargetRef"]["name"] == name
    assert so["spec"].get("scaleTargetRef", {}).get("kind", "Deployment") == "Deployment"
    triggers = [t["metadata"] for t in so["spec"]["triggers"]]
    assert {t["consumerGroup"] for t in triggers} == {group}
    assert {t["topic"] for t in triggers} == subscribed
    config = base_config()
    assert all(t["bootstrapServers"] == config["EVIDENTIA_KAFKA_BOOTSTRAP"] for t in triggers)
    assert all(t.get("offsetResetPolicy") == "earliest" for t in triggers)
    assert so["spec"]["maxReplicaCount"] <= int(config["EVIDENTIA_KAFKA_TOPIC_PARTITIONS"])


def test_no_scaled_object_for_the_gateway_but_a_cpu_hpa() -> None:
    assert set(base_docs("ScaledObject")) == set(CONSUMERS)
    hpa = base_docs("HorizontalPodAutoscaler")["gateway"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "gateway"}
    assert hpa["spec"]["minReplicas"] >= 2
    assert [m["resource"]["name"] for m in hpa["spec"]["metrics"]] == ["cpu"]
    service = base_docs("Service")["gateway"]
    assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_every_service_has_a_disruption_budget() -> None:
    pdbs = base_docs("PodDisruptionBudget")
    assert set(pdbs) == set(SERVICES)
    for name, pdb in pdbs.items():
        assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == name


# ---------------------------------------------------------------------------------------------------
# Topics, migrations, Postgres


def test_setup_jobs() -> None:
    jobs = base_docs("Job")
    commands = sorted(container(job)["command"] for job in jobs.values())
    # The images carry no CLI: the set-up runs from the runtime library, in a service image.
    assert commands == [["python", "-m", "shared.setup", "migrate"], ["python", "-m", "shared.setup", "topics"]]
    assert {container(job)["image"] for job in jobs.values()} == {"evidentia-gateway:latest"}
    for job in jobs.values():
        assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")
        assert job["spec"]["ttlSecondsAfterFinished"] > 0


def test_strimzi_topics_match_evidentia_topics() -> None:
    partitions = int(base_config()["EVIDENTIA_KAFKA_TOPIC_PARTITIONS"])
    expected = {s.name: s for s in topic_names.standard_topics(partitions)}
    kafka_topics = {d["spec"]["topicName"]: d for d in load_docs(K8S / "strimzi" / "kafkatopics.yaml")}
    assert set(kafka_topics) == set(expected)
    for name, spec in expected.items():
        kt = kafka_topics[name]["spec"]
        assert kt["partitions"] == spec.partitions, name
        assert {k: kt["config"][k] for k in spec.config} == spec.config, name
    for service in CONSUMERS:
        for topic in consumed_by(service)[1]:
            assert topic_names.dlq(topic) in kafka_topics


def test_cloudnativepg_cluster_creates_the_vector_extension() -> None:
    [cluster] = [d for d in load_docs(K8S / "examples" / "cloudnativepg-cluster.yaml") if d["kind"] == "Cluster"]
    assert (cluster["apiVersion"], cluster["kind"]) == ("postgresql.cnpg.io/v1", "Cluster")
    assert "standard" in cluster["spec"]["imageName"], "only the CNPG standard images ship pgvector"
    initdb = cluster["spec"]["bootstrap"]["initdb"]
    assert initdb["database"] == "evidentia"
    assert any(
        re.search(r"create extension if not exists vector", sql, re.I) for sql in initdb["postInitApplicationSQL"]
    )


def test_gpu_time_slicing_example_shares_each_gpu_between_embedders() -> None:
    [config_map] = load_docs(K8S / "examples" / "gpu-time-slicing.yaml")
    assert (config_map["apiVersion"], config_map["kind"]) == ("v1", "ConfigMap")
    plugin = yaml.safe_load(config_map["data"]["evidentia-embedder"])  # the device plugin's own format
    assert plugin["version"] == "v1"
    [resource] = plugin["sharing"]["timeSlicing"]["resources"]
    assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] >= 2
    # The embedder asks for exactly one (shared) GPU: more than one would defeat the sharing.
    embedder = next(d for d in load_docs(BASE / "embedder.yaml") if d["kind"] == "Deployment")
    [container] = embedder["spec"]["template"]["spec"]["containers"]
    assert str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1"


# ---------------------------------------------------------------------------------------------------
# Prometheus rules and Grafana dashboard


def alert_rules() -> Iterator[dict[str, Any]]:
    rules = yaml.safe_load(ALERTS.read_text())
    assert set(rules) == {"groups"}
    for group in rules["groups"]:
        assert group["name"] and group["rules"]
        yield from group["rules"]


def test_alert_rules() -> None:
    rules = list(alert_rules())
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)), "alert names must be unique"
    for rule in rules:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations", "keep_firing_for"}
        assert isinstance(rule["expr"], str) and rule["expr"].strip()
        assert rule["labels"]["severity"] in ("warning", "critical", "info")
        assert rule["annotations"]["summary"]
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"])
        check_promql(rule["expr"], rule["alert"])
    exprs = " ".join(r["expr"] for r in rules)
    for needle in (
        "kafka_consumergroup_lag",
        "evidentia_dead_letters_total",
        "evidentia_request_timeouts_total",
        'evidentia_received_processed_messages_total{status=~"error',
        'status=~"5.."',
        "histogram_quantile(0.95",
        "up{",
    ):
        assert needle in exprs, f"no alert on {needle}"


def dashboard_panels() -> list[dict[str, Any]]:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"]
    panels: list[dict[str, Any]] = dashboard["panels"]
    return [p for p in panels if p["type"] != "row"]


def test_dashboard() -> None:
    panels = dashboard_panels()
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["title"] and panel["gridPos"]["w"] > 0 and panel["targets"], panel.get("title")
        for target in panel["targets"]:
            expr = target["expr"]
            assert "evidentia_" in expr or "kafka_consumergroup_lag" in expr, f"{panel['title']}: {expr}"
            check_promql(expr, panel["title"])
    exprs = " ".join(t["expr"] for p in panels for t in p["targets"])
    for metric in (
        "evidentia_received_messages_total",
        "evidentia_published_messages_total",
        "evidentia_received_processed_messages_duration_seconds_bucket",
        "evidentia_dead_letters_total",
        "evidentia_batch_size_bucket",
        "evidentia_request_reply_seconds_bucket",
        "evidentia_time_to_first_token_seconds_bucket",
        "evidentia_http_requests_total",
        "evidentia_http_request_seconds_bucket",
        "evidentia_ncbi_requests_total",
        "evidentia_embedded_passages_total",
        "evidentia_llm_tokens_total",
        "evidentia_llm_calls_total",
        "kafka_consumergroup_lag",
    ):
        assert metric in exprs, f"the dashboard shows no {metric}"


# ---------------------------------------------------------------------------------------------------
# Security: who may connect, what is secret, how Kafka is reached


def policies() -> dict[str, dict[str, Any]]:
    return base_docs("NetworkPolicy")


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels and matchExpressions) selects ``labels``."""
    if not (selector.get("matchLabels") or {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions") or []:
        value = labels.get(expr["key"])
        if expr["operator"] == "In" and value not in expr["values"]:
            return False
        if expr["operator"] == "NotIn" and value in expr["values"]:
            return False
        if expr["operator"] == "Exists" and value is None:
            return False
    return True


def pod_labels(name: str) -> dict[str, str]:
    labels: dict[str, str] = base_docs("Deployment")[name]["spec"]["template"]["metadata"]["labels"]
    return labels


def open_ports(
    labels: dict[str, str],
    ports_by_name: dict[str, int],
    from_anywhere: bool,
    docs: list[dict[str, Any]] | None = None,
) -> set[int]:
    """Ports of a pod with ``labels`` the NetworkPolicies open (to any source, or to some source)."""
    opened: set[int] = set()
    for policy in docs if docs is not None else list(policies().values()):
        spec = policy["spec"]
        if "Ingress" not in spec["policyTypes"] or not selects(spec["podSelector"], labels):
            continue
        for rule in spec.get("ingress") or []:
            if from_anywhere and rule.get("from"):
                continue
            for port in rule.get("ports") or []:
                number = ports_by_name.get(port["port"], port["port"])
                if isinstance(number, int):
                    opened.add(number)
    return opened


def test_network_policies_deny_by_default_and_open_only_the_gateway() -> None:
    deny = policies()["default-deny-ingress"]["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and not deny.get("ingress")
    for name in SERVICES:
        c = container(base_docs("Deployment")[name])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        from_anywhere = open_ports(pod_labels(name), ports, from_anywhere=True)
        if name == "gateway":
            assert from_anywhere == {GATEWAY_PORT}
        else:
            assert not from_anywhere, f"{name} is reachable from anywhere on {from_anywhere}"
            # Prometheus (the monitoring namespace) reaches the metrics port, and nothing else does.
            assert open_ports(pod_labels(name), ports, from_anywhere=False) == {DEFAULT_PORTS[name]}
    metrics = policies()["metrics-from-monitoring"]["spec"]["ingress"]
    assert all(peer.keys() == {"namespaceSelector"} for rule in metrics for peer in rule["from"])


def test_the_policy_checker_sees_an_open_port() -> None:
    # Guards the guard: a rule without `from` opens a worker to every source, and the checker says so.
    labels = pod_labels("retriever")
    leaky = {"spec": {"podSelector": {"matchLabels": labels}, "policyTypes": ["Ingress"],
                      "ingress": [{"ports": [{"port": "metrics"}]}]}}  # fmt: skip
    docs = [*policies().values(), leaky]
    assert open_ports(labels, {"metrics": 9104}, from_anywhere=True, docs=docs) == {9104}
    assert not open_ports(labels, {"metrics": 9104}, from_anywhere=True)


def test_postgres_policy_admits_only_evidentia_pods() -> None:
    docs = load_docs(K8S / "examples" / "cloudnativepg-cluster.yaml")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    cluster = next(d for d in docs if d["kind"] == "Cluster")
    assert policy["spec"]["podSelector"]["matchLabels"] == {"cnpg.io/cluster": cluster["metadata"]["name"]}
    to_5432 = [peer for rule in policy["spec"]["ingress"] if any(p["port"] == 5432 for p in rule["ports"])
               for peer in rule["from"]]  # fmt: skip
    jobs = {d["metadata"]["name"]: d for d in base_docs("Job").values()}
    clients = [pod_labels(n) for n in SERVICES] + [j["spec"]["template"]["metadata"]["labels"] for j in jobs.values()]
    for labels in clients:
        assert any("podSelector" in p and selects(p["podSelector"], labels) for p in to_5432), labels
    stranger = {"app.kubernetes.io/name": "debug-shell", "app.kubernetes.io/part-of": "evidentia"}
    assert not any("podSelector" in p and selects(p["podSelector"], stranger) for p in to_5432)
    assert not any(p.get("namespaceSelector") == {} or not p for p in to_5432), "5432 open to every namespace"


def test_secret_example_carries_key_hashes_and_the_kafka_password() -> None:
    data = load_docs(BASE / "secret.example.yaml")[0]["stringData"]
    assert data["EVIDENTIA_GATEWAY_API_KEY_HASHES"]
    assert "EVIDENTIA_KAFKA_SASL_PASSWORD" in data


def test_example_overlay_is_not_at_debug_and_speaks_sasl_ssl() -> None:
    from shared.settings import KafkaSettings

    overlay = load_docs(OVERLAY / "config-patch.yaml")[0]["data"]
    assert overlay.get("EVIDENTIA_LOG_LEVEL", base_config()["EVIDENTIA_LOG_LEVEL"]).upper() in ("INFO", "WARNING")
    assert overlay["EVIDENTIA_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert overlay["EVIDENTIA_KAFKA_BOOTSTRAP"].endswith(":9093")
    # The settings the pods would get validate (the password comes from the Secret).
    kafka = {
        k.removeprefix("EVIDENTIA_KAFKA_").lower(): v for k, v in overlay.items() if k.startswith("EVIDENTIA_KAFKA_")
    }
    KafkaSettings(**kafka, sasl_password="from-the-secret")
    patch = yaml.safe_load((OVERLAY / "kafka-ca-patch.yaml").read_text())
    mount = next(op["value"] for op in patch if op["path"].endswith("volumeMounts/-"))
    assert overlay["EVIDENTIA_KAFKA_SSL_CAFILE"].startswith(mount["mountPath"] + "/")


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with its kustomize) is not on the PATH")
def test_overlay_mounts_the_kafka_ca_in_every_pod_that_talks_to_kafka() -> None:
    for doc in kustomize_build(OVERLAY):
        if doc["kind"] in ("Deployment", "Job"):
            spec = doc["spec"]["template"]["spec"]
            assert any(v["name"] == "kafka-ca" for v in spec["volumes"]), doc["metadata"]["name"]
            assert any(m["name"] == "kafka-ca" for m in spec["containers"][0]["volumeMounts"])


def test_worker_probes_listen_beyond_loopback_in_a_pod() -> None:
    assert base_config()["EVIDENTIA_PROBE_HOST"] == "0.0.0.0"


def test_kafka_user_may_use_every_evidentia_topic_and_group() -> None:
    user = load_docs(K8S / "strimzi" / "kafkauser.yaml")[0]
    acls = user["spec"]["authorization"]["acls"]

    def allowed(kind: str, name: str) -> bool:
        for acl in acls:
            r = acl["resource"]
            if r["type"] != kind:
                continue
            if (r.get("patternType") == "prefix" and name.startswith(r["name"])) or r.get("name") == name:
                return True
        return False

    names = [s.name for s in topic_names.standard_topics(3)] + [topic_names.reply_topic("gateway-pod-1")]
    for name in names:
        assert allowed("topic", name), name
    assert not allowed("topic", "payments.ledger")
    for service in CONSUMERS:
        assert allowed("group", consumed_by(service)[0]), service


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with its kustomize) is not on the PATH")
def test_overlay_autoscalers_read_lag_over_sasl_ssl_like_the_pods() -> None:
    rendered = kustomize_build(OVERLAY)
    config = next(d for d in rendered if d["kind"] == "ConfigMap")["data"]
    keda_names = {"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512"}
    mechanism = keda_names[config["EVIDENTIA_KAFKA_SASL_MECHANISM"]]
    auths = {d["metadata"]["name"]: d for d in rendered if d["kind"] == "TriggerAuthentication"}
    triggers = [t for d in rendered if d["kind"] == "ScaledObject" for t in d["spec"]["triggers"]]
    assert triggers
    for trigger in triggers:
        assert trigger["metadata"]["sasl"] == mechanism and trigger["metadata"]["tls"] == "enable", trigger
        auth = auths[trigger["authenticationRef"]["name"]]["spec"]
        params = {e["parameter"]: e["name"] for e in auth["env"]}
        assert params == {"username": "EVIDENTIA_KAFKA_SASL_USERNAME", "password": "EVIDENTIA_KAFKA_SASL_PASSWORD"}
        assert {r["parameter"] for r in auth["secretTargetRef"]} == {"ca"}


def test_monitoring_carries_the_rules_and_the_exporter_the_dashboard_needs() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for d in load_docs_in(K8S / "monitoring")}
    rule = docs[("PrometheusRule", "evidentia")]
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]  # the one source, unchanged
    exporter = docs[("Deployment", "kafka-exporter")]
    pod = exporter["spec"]["template"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/part-of"] == "evidentia"  # scraped by the PodMonitor
    c = container(exporter)
    assert {p["name"] for p in c["ports"]} == {"metrics"}
    assert any(a.startswith("--kafka.server=") for a in c["args"])
    assert "--group.filter=^evidentia-.*" in c["args"]  # the groups the alerts and the dashboard select
    podmonitor = docs[("PodMonitor", "evidentia")]
    assert "metrics" in {e["port"] for e in podmonitor["spec"]["podMetricsEndpoints"]}


def load_docs_in(folder: Path) -> list[dict[str, Any]]:
    return [doc for path, doc in all_docs() if path.parent == folder and doc["kind"] != "Kustomization"]


# ---------------------------------------------------------------------------------------------------
# Searches on a read replica: components/search-replica (docs/scaling.md, step 2)

ROLE_VARIABLE = "EVIDENTIA_RETRIEVAL_ROLE"


def role_of(deployment: dict[str, Any]) -> str | None:
    return next((e["value"] for e in container(deployment).get("env", []) if e["name"] == ROLE_VARIABLE), None)


def component_docs(kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in load_docs(SEARCH_REPLICA / "retriever-search.yaml") if d["kind"] == kind}


def anonymous_pod(deployment: dict[str, Any]) -> dict[str, Any]:
    """The Deployment without what tells the two retrievers apart: names, the name label, the role."""
    d = copy.deepcopy(deployment)
    name_key = "app.kubernetes.io/name"
    del d["metadata"]["name"]
    for labels in (
        d["metadata"]["labels"],
        d["spec"]["selector"]["matchLabels"],
        d["spec"]["template"]["metadata"]["labels"],
    ):
        del labels[name_key]
    c = container(d)
    del c["name"]
    c["env"] = [e for e in c["env"] if e["name"] != ROLE_VARIABLE]
    return d


def test_search_replica_pod_is_the_retrievers_but_for_name_and_role() -> None:
    """One owner for the pod: the component's copy may differ from the base's retriever in its name and its
    role only, so a change to one (a probe, a limit, a mount) that misses the other fails here."""
    from shared.settings import RetrievalSettings

    roles = set(get_args(RetrievalSettings.model_fields["role"].annotation))
    search = component_docs("Deployment")["retriever-search"]
    retriever = base_docs("Deployment")["retriever"]
    assert role_of(search) == "search" and role_of(search) in roles
    assert role_of(retriever) is None, "the base's retriever does both (role `all`) until the component says store"
    assert anonymous_pod(search) == anonymous_pod(retriever)
    assert search["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "retriever-search"
    assert (
        container(search)["name"] == "retriever-search"
        and container(search)["command"] == container(retriever)["command"]
    )
    pdb = component_docs("PodDisruptionBudget")["retriever-search"]
    assert pdb["spec"]["selector"]["matchLabels"] == search["spec"]["selector"]["matchLabels"]


def test_search_replica_pods_may_reach_postgres() -> None:
    policy = next(d for d in load_docs(K8S / "examples" / "cloudnativepg-cluster.yaml") if d["kind"] == "NetworkPolicy")
    labels = component_docs("Deployment")["retriever-search"]["spec"]["template"]["metadata"]["labels"]
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule["from"] if "podSelector" in peer]
    assert any(selects(peer["podSelector"], labels) for peer in peers)


@pytest.fixture(scope="module")
def base_with_search_replica(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An overlay of the bare base plus the component (kustomize takes relative paths only)."""
    folder = tmp_path_factory.mktemp("split")
    to = Path(os.path.relpath(K8S, folder))
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(to / "base")],
        "components": [str(to / "components" / "search-replica")],
    }
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return folder


@pytest.mark.skipif(kubectl() is None, reason="kubectl (with its kustomize) is not on the PATH")
@pytest.mark.parametrize("which", ["base", "example"])
def test_search_replica_splits_the_retrievers_work(which: str, base_with_search_replica: Path) -> None:
    from kubernetes_validate.utils import validate

    rendered = kustomize_build(base_with_search_replica if which == "base" else OVERLAY)
    for doc in rendered:
        if not is_custom(doc):
            validate(doc, K8S_VERSION, strict=True)
    by_kind: dict[str, dict[str, dict[str, Any]]] = {}
    for doc in rendered:
        by_kind.setdefault(doc["kind"], {})[doc["metadata"]["name"]] = doc
    deployments = by_kind["Deployment"]
    assert role_of(deployments["retriever"]) == "store" and role_of(deployments["retriever-search"]) == "search"
    # Each Deployment's autoscaler reads the lag of the topic it consumes, in the one group they share;
    # together they cover every topic the retriever subscribes to.
    group, subscribed = consumed_by("retriever")
    config = by_kind["ConfigMap"]["evidentia-config"]["data"]
    topics = {}
    for name in ("retriever", "retriever-search"):
        so = by_kind["ScaledObject"][name]
        assert so["spec"]["scaleTargetRef"]["name"] == name
        triggers = [t["metadata"] for t in so["spec"]["triggers"]]
        assert {t["consumerGroup"] for t in triggers} == {group}
        assert all(t["bootstrapServers"] == config["EVIDENTIA_KAFKA_BOOTSTRAP"] for t in triggers)
        assert so["spec"]["maxReplicaCount"] <= int(config["EVIDENTIA_KAFKA_TOPIC_PARTITIONS"])
        topics[name] = {t["topic"] for t in triggers}
    assert topics == {"retriever": {topic_names.CHUNKS_EMBEDDED}, "retriever-search": {topic_names.RETRIEVAL_REQUESTS}}
    assert topics["retriever"] | topics["retriever-search"] == subscribed
    search_pods = deployments["retriever-search"]["spec"]["template"]["metadata"]["labels"]
    assert selects(by_kind["PodDisruptionBudget"]["retriever-search"]["spec"]["selector"], search_pods)
    assert not selects(by_kind["PodDisruptionBudget"]["retriever"]["spec"]["selector"], search_pods)
    if which == "example":
        # The example's SASL patches reach the new autoscaler's trigger too.
        assert all(t["metadata"].get("sasl") for t in by_kind["ScaledObject"]["retriever-search"]["spec"]["triggers"])
