"""The local dev stack (devstack): configuration checks, then real start/stop cycles.

The ``integration`` tests start a real PostgreSQL and a real Kafka broker on free ports in
temporary directories (never the developer's ``.data`` stack), so they can run beside it.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack import KAFKA_VERSION, LocalKafka, LocalPostgres
from devstack.__main__ import main as devstack_main
from devstack.common import DevstackError
from devstack.kafka_tls import BrokerTls

REPO = Path(__file__).resolve().parents[2]


def free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


# ---------------------------------------------------------------- fast checks


def test_pom_pins_the_kafka_version_the_code_expects() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    pom = ET.parse(REPO / "infra" / "kafka" / "pom.xml").getroot()
    assert pom.findtext("m:properties/m:kafka.version", namespaces=ns) == KAFKA_VERSION
    artifacts = {d.findtext("m:artifactId", namespaces=ns) for d in pom.iterfind("m:dependencies/m:dependency", ns)}
    assert "kafka_2.13" in artifacts
    assert "log4j-slf4j-impl" in artifacts


def test_server_properties_single_node_kraft(tmp_path: Path) -> None:
    kafka = LocalKafka(tmp_path, port=19092, controller_port=19093)
    props = dict(
        line.split("=", 1) for line in kafka.render_server_properties().splitlines() if line and line[0] != "#"
    )
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["auto.create.topics.enable"] == "true"
    assert props["num.partitions"] == "3"
    assert props["offsets.topic.replication.factor"] == "1"
    assert props["transaction.state.log.replication.factor"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["log.dirs"] == str(tmp_path.resolve() / "kraft")
    assert kafka.bootstrap == "127.0.0.1:19092"


def test_server_properties_with_a_sasl_ssl_listener(tmp_path: Path) -> None:
    tls = BrokerTls(keystore=tmp_path / "broker.p12", password="ks-pw", ca_pem=tmp_path / "ca.pem")
    kafka = LocalKafka(
        tmp_path, port=19092, controller_port=19093, sasl_ssl_port=19094, tls=tls, sasl_users={"svc": "pw-1"}
    )
    props = dict(
        line.split("=", 1) for line in kafka.render_server_properties().splitlines() if line and line[0] != "#"
    )
    assert kafka.sasl_ssl_bootstrap == "127.0.0.1:19094"
    assert "SASL_SSL://127.0.0.1:19094" in props["listeners"].split(",")
    assert "SASL_SSL://127.0.0.1:19094" in props["advertised.listeners"].split(",")
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"]
    assert props["inter.broker.listener.name"] == "PLAINTEXT"  # the broker's own traffic stays on loopback
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    assert 'user_svc="pw-1"' in props["listener.name.sasl_ssl.plain.sasl.jaas.config"]
    assert props["ssl.keystore.location"] == str(tls.keystore) and props["ssl.keystore.password"] == "ks-pw"
    plain = LocalKafka(tmp_path, port=19092, controller_port=19093).render_server_properties()
    assert "SASL_SSL" not in plain and "ssl.keystore" not in plain


def test_a_sasl_listener_needs_tls_and_plain_credentials(tmp_path: Path) -> None:
    tls = BrokerTls(keystore=tmp_path / "k.p12", password="x", ca_pem=tmp_path / "ca.pem")
    with pytest.raises(DevstackError, match="TLS"):
        LocalKafka(tmp_path, sasl_ssl_port=19094)
    with pytest.raises(DevstackError, match="SASL user"):
        LocalKafka(tmp_path, sasl_ssl_port=19094, tls=tls, sasl_users={"svc": 'pw" injected'})


def test_cluster_ids_are_kafka_uuids() -> None:
    for _ in range(200):
        cluster_id = LocalKafka.new_cluster_id()
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id)
        assert not cluster_id.startswith("-")


def test_postgres_url_defaults(tmp_path: Path) -> None:
    assert LocalPostgres(tmp_path).url == "postgresql://evidentia:evidentia@127.0.0.1:5433/evidentia"
    assert LocalPostgres(tmp_path, port=6000).url.endswith("@127.0.0.1:6000/evidentia")


def test_cli_status_of_an_empty_stack_says_stopped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kafka_port, controller_port, pg_port = free_ports(3)
    argv = ["all", "status", "--dir", str(tmp_path), "--kafka-port", str(kafka_port)]
    argv += ["--kafka-controller-port", str(controller_port), "--postgres-port", str(pg_port)]
    assert devstack_main(argv) == 3
    out = capsys.readouterr().out
    assert f"kafka: stopped (would listen on 127.0.0.1:{kafka_port})" in out
    assert "postgres: stopped" in out


def test_cli_stop_when_nothing_runs_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert devstack_main(["all", "stop", "--dir", str(tmp_path)]) == 0
    assert "was not running" in capsys.readouterr().out


# ---------------------------------------------------------------- real processes


@pytest.fixture
def postgres() -> Iterator[LocalPostgres]:
    # Not under tmp_path: when we are root the server runs as another user that must traverse
    # every parent directory, and each new pytest session (ours or a concurrent one) resets
    # /tmp/pytest-of-<user> to 0700.
    data_dir = Path(tempfile.mkdtemp(prefix="evidentia-test-pg-"))
    (port,) = free_ports(1)
    server = LocalPostgres(data_dir, port=port)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[LocalKafka]:
    port, controller_port = free_ports(2)
    broker = LocalKafka(tmp_path / "kafka", port=port, controller_port=controller_port)
    try:
        yield broker
    finally:
        broker.stop()


async def _vector_version(url: str) -> str:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        version = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        await conn.execute("CREATE TEMP TABLE probe (v vector(3))")
        await conn.execute("INSERT INTO probe VALUES ('[1,2,3]')")
        distance = await conn.fetchval("SELECT v <-> '[1,2,4]' FROM probe")
        assert distance == pytest.approx(1.0)
        return str(version)
    finally:
        await conn.close()


@pytest.mark.integration
@pytest.mark.slow
async def test_postgres_starts_with_pgvector_and_restarts(postgres: LocalPostgres) -> None:
    assert await asyncio.to_thread(postgres.start) is True
    assert postgres.is_running()
    assert re.fullmatch(r"\d+\.\d+\.\d+", await _vector_version(postgres.url))

    assert await asyncio.to_thread(postgres.start) is False  # already running: reused
    assert await asyncio.to_thread(postgres.stop) is True
    assert not postgres.is_running()

    assert await asyncio.to_thread(postgres.start) is True  # same data directory, no re-init
    assert await _vector_version(postgres.url)
    assert await asyncio.to_thread(postgres.stop) is True
    assert await asyncio.to_thread(postgres.stop) is False


async def _produce(bootstrap: str, topic: str, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=b"k")
    finally:
        await producer.stop()


async def _consume_all(bootstrap: str, topic: str, wait_s: float = 30.0) -> list[bytes]:
    """Every value on ``topic`` from the beginning (no consumer group, so no rebalance wait)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    values: list[bytes] = []
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while not values and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            values += [record.value for records in batches.values() for record in records if record.value]
    finally:
        await consumer.stop()
    return values


@pytest.mark.integration
@pytest.mark.slow
async def test_kafka_round_trip_survives_a_restart(kafka: LocalKafka) -> None:
    assert await asyncio.to_thread(kafka.start) is True
    assert kafka.is_running()
    assert kafka.pid_file.exists()

    await _produce(kafka.bootstrap, "devstack-smoke", b"hello evidentia")
    assert await _consume_all(kafka.bootstrap, "devstack-smoke") == [b"hello evidentia"]

    assert await asyncio.to_thread(kafka.start) is False  # already running: reused
    assert await asyncio.to_thread(kafka.stop) is True
    assert not kafka.is_running()
    assert not kafka.pid_file.exists()

    assert await asyncio.to_thread(kafka.start) is True  # same data directory, no reformat
    assert await _consume_all(kafka.bootstrap, "devstack-smoke") == [b"hello evidentia"]
    assert await asyncio.to_thread(kafka.stop) is True
    assert await asyncio.to_thread(kafka.stop) is False
