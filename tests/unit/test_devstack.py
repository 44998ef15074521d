"""The local dev stack (devstack): configuration checks (no process started; the real start/stop cycles are in
tests/integration/test_devstack_processes.py).
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from devstack import KAFKA_VERSION, LocalKafka, LocalPostgres
from devstack.__main__ import main as devstack_main
from devstack.common import DevstackError, free_ports
from devstack.kafka_tls import BrokerTls

REPO = Path(__file__).resolve().parents[2]


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


def test_postgres_server_settings_reach_the_postmaster_and_bad_ones_are_refused(tmp_path: Path) -> None:
    pg = LocalPostgres(tmp_path / "pg", port=55999, server_settings={"shared_buffers": "2GB", "work_mem": "64MB"})
    options = pg.server_options()
    assert options.startswith("-h 127.0.0.1 -p 55999 -k ")
    assert options.endswith(" -c shared_buffers=2GB -c work_mem=64MB")
    assert LocalPostgres(tmp_path / "plain").server_options().count(" -c ") == 0
    for bad in ({"shared_buffers": "1GB -c fsync=off"}, {"Shared Buffers": "1GB"}, {"work_mem": "64MB'"}):
        with pytest.raises(DevstackError, match="unexpected PostgreSQL setting"):
            LocalPostgres(tmp_path / "bad", server_settings=bad)


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


class _Kernel:
    """Sockets whose ``bind(0)`` gets ports from a fixed sequence, as a kernel may give a just-released port again."""

    AF_INET = socket.AF_INET
    SOCK_STREAM = socket.SOCK_STREAM

    def __init__(self, ports: list[int]) -> None:
        self.ports = iter(ports)

    def socket(self, *args: object) -> _Kernel._Socket:
        return _Kernel._Socket(next(self.ports))

    class _Socket:
        def __init__(self, port: int) -> None:
            self.port = port

        def bind(self, address: tuple[str, int]) -> None:
            pass

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

        def close(self) -> None:
            pass


def test_a_port_handed_out_is_not_handed_out_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel that gives a released port to the next caller (two services of a test stack once got one port):
    the second caller gets another."""
    from devstack import common

    monkeypatch.setattr(common, "_HANDED_OUT", set())
    monkeypatch.setattr(common, "socket", _Kernel([5000, 5000, 5001, 5001, 5000, 5002, 5003]))
    assert common.free_port() == 5000
    assert common.free_port() == 5001  # 5000 again from the kernel: refused
    assert common.free_ports(2) == [5002, 5003]  # 5001 and 5000 refused, a repeat within the call too


def test_services_given_one_port_are_refused(tmp_path: Path) -> None:
    from devstack.processes import ServiceStack

    with pytest.raises(ValueError, match="share a port"):
        ServiceStack(
            log_dir=tmp_path,
            env={},
            services=("embedder", "synthesizer"),
            ports={"embedder": 53245, "synthesizer": 53245},
        )
