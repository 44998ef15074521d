"""deploy/helm/evidentia: linted and rendered offline by Helm's own Go SDK, and equal to the kustomize base.

No helm binary is needed: the PyPI package ``helm-python-sdk`` (a dev dependency) bundles ``libhelm_c``, Helm
v4's official Go SDK behind a C ABI, and calls it through ctypes: ``helm.lint`` and ``Chart.render`` are
``helm lint`` and ``helm template``. Every rendered built-in resource is validated strictly against the
Kubernetes 1.33 schemas (kubernetes-validate), and with default values the chart renders the same
Deployments, probes, resources, KEDA triggers, ConfigMap, PodDisruptionBudgets and gateway Service/HPA as
deploy/k8s/base, so the two packagings cannot drift apart unnoticed.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is a dev dependency (pip install -e '.[dev]')")

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "evidentia"
BASE = REPO / "deploy" / "k8s" / "base"
COMPONENTS = REPO / "deploy" / "k8s" / "components"
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yaml"
K8S_VERSION = "1.33.0"
SERVICES = ("fetcher", "parser", "embedder", "retriever", "synthesizer", "gateway")
REQUIRED = {"secrets": {"databaseUrl": "postgresql://evidentia:pw@db:5432/evidentia"}}


def merged(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = value
    return out


def render(values: dict[str, Any] | None = None, chart: Path = CHART) -> list[dict[str, Any]]:
    with helm.Chart.load(str(chart)) as loaded:
        files = loaded.render(merged(REQUIRED, values or {}), name="evidentia", namespace="evidentia")
    docs: list[dict[str, Any]] = []
    for path, text in sorted(files.items()):
        if path.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def base(kind: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for path in BASE.glob("*.yaml"):
        if path.name in ("kustomization.yaml", "secret.example.yaml"):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == kind:
                found[doc["metadata"]["name"]] = doc
    return found


def container(workload: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


@pytest.fixture(scope="module")
def default_docs() -> list[dict[str, Any]]:
    return render()


# ---------------------------------------------------------------------------------------------------------- lint


def test_helm_lint_is_clean_with_defaults() -> None:
    report = helm.lint(str(CHART), REQUIRED, strict=True, kube_version=f"v{K8S_VERSION}")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_helm_lint_catches_a_broken_template_and_bad_values(tmp_path: Path) -> None:
    # Guards the guard: the same calls must fail on a broken chart.
    broken = tmp_path / "evidentia"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "pdbs.yaml").write_text("{{- range .Values.nope }\n")
    report = helm.lint(str(broken), REQUIRED, strict=True)
    assert report["errors"] or any(m["severity"] >= 3 for m in report["messages"])
    with pytest.raises(helm.HelmError):
        render({"services": {"gateway": {"replicas": "two"}}})  # values.schema.json
    with pytest.raises(helm.HelmError, match=r"secrets\.databaseUrl is required"):
        render({"secrets": {"databaseUrl": ""}})


def test_every_rendered_resource_is_valid_kubernetes(default_docs: list[dict[str, Any]]) -> None:
    from kubernetes_validate.utils import validate

    everything = render(
        {
            "monitoring": {"podMonitor": True, "prometheusRule": True, "kafkaExporter": {"enabled": True}},
            "ingress": {"enabled": True, "tlsSecretName": "evidentia-tls"},
        }
    )
    kinds = {d["kind"] for d in everything}
    assert {"Deployment", "ScaledObject", "PrometheusRule", "PodMonitor", "Ingress", "Job", "Secret"} <= kinds
    for doc in everything:
        if doc["apiVersion"].split("/")[0] in ("keda.sh", "monitoring.coreos.com"):
            assert doc["spec"], doc["kind"]
            continue
        validate(doc, K8S_VERSION, strict=True)


# ------------------------------------------------------------------------------------- the same as kustomize base


@pytest.mark.parametrize("name", SERVICES)
def test_deployments_match_the_kustomize_base(default_docs: list[dict[str, Any]], name: str) -> None:
    chart = by_kind(default_docs, "Deployment")[name]
    kustomize = base("Deployment")[name]
    c, k = container(chart), container(kustomize)
    for field in ("command", "ports", "env", "resources", "startupProbe", "livenessProbe", "readinessProbe"):
        assert c[field] == k[field], f"{name}.{field}"
    assert c["envFrom"] == k["envFrom"]
    assert c["securityContext"] == k["securityContext"] and c.get("lifecycle") == k.get("lifecycle")
    assert c["image"] == k["image"] == f"evidentia-{name}:latest"
    pod, kpod = chart["spec"]["template"]["spec"], kustomize["spec"]["template"]["spec"]
    for field in ("securityContext", "volumes", "terminationGracePeriodSeconds", "nodeSelector", "tolerations"):
        assert pod.get(field) == kpod.get(field), f"{name}.{field}"
    assert chart["spec"]["strategy"] == kustomize["spec"]["strategy"]
    assert "replicas" not in chart["spec"]  # KEDA (consumers) or the HPA (gateway) owns the count
    annotations = chart["spec"]["template"]["metadata"]["annotations"]
    assert (
        annotations["prometheus.io/port"]
        == kustomize["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"]
    )


def test_scaling_config_and_budgets_match_the_kustomize_base(default_docs: list[dict[str, Any]]) -> None:
    scaled = by_kind(default_docs, "ScaledObject")
    assert set(scaled) == set(SERVICES) - {"gateway"}
    for name, so in base("ScaledObject").items():
        assert scaled[name]["spec"] == so["spec"], name
    assert (
        by_kind(default_docs, "ConfigMap")["evidentia-config"]["data"] == base("ConfigMap")["evidentia-config"]["data"]
    )
    for name, pdb in base("PodDisruptionBudget").items():
        assert by_kind(default_docs, "PodDisruptionBudget")[name]["spec"] == pdb["spec"], name
    assert by_kind(default_docs, "Service")["gateway"]["spec"] == base("Service")["gateway"]["spec"]
    assert (
        by_kind(default_docs, "HorizontalPodAutoscaler")["gateway"]["spec"]
        == base("HorizontalPodAutoscaler")["gateway"]["spec"]
    )
    jobs = by_kind(default_docs, "Job")
    assert sorted(container(j)["command"] for j in jobs.values()) == sorted(
        container(j)["command"] for j in base("Job").values()
    )
    assert all(j["spec"]["ttlSecondsAfterFinished"] > 0 for j in jobs.values())


# ------------------------------------------------------------------------------------------------------ values


def test_replicas_without_keda() -> None:
    docs = render({"keda": {"enabled": False}, "services": {"parser": {"replicas": 4}}})
    assert by_kind(docs, "ScaledObject") == {}
    deployments = by_kind(docs, "Deployment")
    assert deployments["parser"]["spec"]["replicas"] == 4
    assert deployments["fetcher"]["spec"]["replicas"] == 1
    assert "replicas" not in deployments["gateway"]["spec"]  # still the HPA's


def test_keda_bounds_and_triggers_are_values() -> None:
    docs = render(
        {
            "config": {"EVIDENTIA_KAFKA_BOOTSTRAP": "kafka.example:9093"},
            "services": {"embedder": {"autoscaling": {"minReplicas": 0, "maxReplicas": 8}}},
        }
    )
    so = by_kind(docs, "ScaledObject")["embedder"]["spec"]
    assert (so["minReplicaCount"], so["maxReplicaCount"]) == (0, 8)
    for spec in (s["spec"] for s in by_kind(docs, "ScaledObject").values()):
        assert {t["metadata"]["bootstrapServers"] for t in spec["triggers"]} == {"kafka.example:9093"}
    assert by_kind(docs, "ConfigMap")["evidentia-config"]["data"]["EVIDENTIA_KAFKA_BOOTSTRAP"] == "kafka.example:9093"


def test_gpu_is_a_value_of_the_embedder_only() -> None:
    on = by_kind(render(), "Deployment")
    assert container(on["embedder"])["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert [n for n, d in on.items() if "nvidia.com/gpu" in container(d)["resources"]["limits"]] == ["embedder"]
    two = by_kind(render({"services": {"embedder": {"gpu": {"count": 2}}}}), "Deployment")["embedder"]
    assert container(two)["resources"]["limits"]["nvidia.com/gpu"] == "2"
    off = by_kind(render({"services": {"embedder": {"gpu": {"enabled": False}}}}), "Deployment")["embedder"]
    assert "nvidia.com/gpu" not in container(off)["resources"]["limits"]
    assert "nodeSelector" not in off["spec"]["template"]["spec"]
    assert off["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_resources_images_and_scheduling_are_values() -> None:
    docs = render(
        {
            "image": {"registry": "registry.example.org/evidentia/", "tag": "0.1.0"},
            "services": {"retriever": {"resources": {"limits": {"cpu": "3", "memory": "3Gi"}}}},
            "nodeSelector": {"pool": "evidentia"},
        }
    )
    deployments = by_kind(docs, "Deployment")
    assert container(deployments["gateway"])["image"] == "registry.example.org/evidentia/evidentia-gateway:0.1.0"
    # Helm merges maps: the limits given replace theirs, the others stay
    assert container(deployments["retriever"])["resources"]["limits"] == {
        "cpu": "3",
        "memory": "3Gi",
        "ephemeral-storage": "1Gi",
    }
    assert deployments["embedder"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.present": "true",
        "pool": "evidentia",
    }
    assert {container(j)["image"] for j in by_kind(docs, "Job").values()} == {
        "registry.example.org/evidentia/evidentia-gateway:0.1.0"
    }


def test_secrets_created_from_values_or_taken_from_an_existing_secret() -> None:
    created = render({"secrets": {"anthropicApiKey": "sk-x", "gatewayApiKeyHashes": "a" * 64}})
    secret = by_kind(created, "Secret")["evidentia-secrets"]["stringData"]
    assert secret["EVIDENTIA_DATABASE_URL"].startswith("postgresql://")
    assert secret["ANTHROPIC_API_KEY"] == "sk-x" and secret["EVIDENTIA_GATEWAY_API_KEY_HASHES"] == "a" * 64
    existing = render({"secrets": {"existingSecret": "vault-evidentia", "databaseUrl": ""}})
    assert by_kind(existing, "Secret") == {}
    for workload in [*by_kind(existing, "Deployment").values(), *by_kind(existing, "Job").values()]:
        refs = [e.get("secretRef", {}).get("name") for e in container(workload)["envFrom"]]
        assert "vault-evidentia" in refs
    with pytest.raises(helm.HelmError):
        render({"secrets": {"gatewayApiKeyHashes": "not-a-digest"}})


def test_monitoring_prometheus_rule_and_kafka_exporter() -> None:
    assert not {"PodMonitor", "PrometheusRule"} & {d["kind"] for d in render()}
    docs = render({"monitoring": {"podMonitor": True, "prometheusRule": True, "kafkaExporter": {"enabled": True}}})
    rule = by_kind(docs, "PrometheusRule")["evidentia"]
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    exporter = container(by_kind(docs, "Deployment")["kafka-exporter"])
    assert "--kafka.server=evidentia-kafka-bootstrap.kafka.svc:9092" in exporter["args"]
    assert "--group.filter=^evidentia-.*" in exporter["args"]
    assert by_kind(docs, "PodMonitor")["evidentia"]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_the_alert_copies_are_in_sync_with_their_source() -> None:
    from docgen.monitoring import main as monitoring_check

    assert monitoring_check(["--check"]) == 0


def test_searches_apart_from_writes_is_a_second_retriever_deployment() -> None:
    from kubernetes_validate.utils import validate

    replica = "postgresql://evidentia:pw@evidentia-db-ro:5432/evidentia"
    docs = render({"services": {"retriever-search": {"enabled": True}}, "secrets": {"databaseSearchUrl": replica}})
    deployments = by_kind(docs, "Deployment")
    store, search = container(deployments["retriever"]), container(deployments["retriever-search"])

    def env(c: dict[str, Any]) -> dict[str, Any]:
        return {e["name"]: e.get("value") for e in c["env"]}

    assert (env(store)["EVIDENTIA_RETRIEVAL_ROLE"], env(search)["EVIDENTIA_RETRIEVAL_ROLE"]) == ("store", "search")
    assert "EVIDENTIA_KAFKA_GROUP_INSTANCE_ID" in env(search)  # a request consumer: static membership too
    assert search["command"] == store["command"] == ["python", "-m", "services.retriever"]
    assert search["image"] == store["image"] == "evidentia-retriever:latest"
    selectors = [d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] for d in deployments.values()]
    assert len(selectors) == len(set(selectors)) == 7  # no Deployment adopts another's pods
    scaled = by_kind(docs, "ScaledObject")

    def triggers(name: str) -> list[tuple[str, str]]:
        return [(t["metadata"]["consumerGroup"], t["metadata"]["topic"]) for t in scaled[name]["spec"]["triggers"]]

    assert triggers("retriever") == [("evidentia-retriever", "chunks.embedded")]
    assert triggers("retriever-search") == [("evidentia-retriever", "retrieval.requests")]
    assert scaled["retriever-search"]["spec"]["scaleTargetRef"]["name"] == "retriever-search"
    assert "retriever-search" in by_kind(docs, "PodDisruptionBudget")
    assert by_kind(docs, "Secret")["evidentia-secrets"]["stringData"]["EVIDENTIA_DATABASE_SEARCH_URL"] == replica
    for doc in docs:
        if doc["apiVersion"].split("/")[0] not in ("keda.sh", "monitoring.coreos.com"):
            validate(doc, K8S_VERSION, strict=True)

    # The kustomize Component that deploys the same split renders the same searching retriever.
    component = {
        d["kind"]: d
        for d in yaml.safe_load_all((COMPONENTS / "search-replica" / "retriever-search.yaml").read_text())
        if d
    }
    k = container(component["Deployment"])
    for field in ("name", "command", "ports", "env", "envFrom", "resources", "startupProbe", "readinessProbe"):
        assert search[field] == k[field], f"retriever-search.{field}"
    assert scaled["retriever-search"]["spec"] == component["ScaledObject"]["spec"]
    pdb = by_kind(docs, "PodDisruptionBudget")["retriever-search"]
    assert pdb["spec"] == component["PodDisruptionBudget"]["spec"]

    default = render()
    assert "retriever-search" not in by_kind(default, "Deployment")
    assert "EVIDENTIA_RETRIEVAL_ROLE" not in env(container(by_kind(default, "Deployment")["retriever"]))
    assert "EVIDENTIA_DATABASE_SEARCH_URL" not in by_kind(default, "Secret")["evidentia-secrets"]["stringData"]
