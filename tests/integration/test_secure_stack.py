"""The whole stack over Kafka SASL_SSL, traced end to end through a stand-in OTLP collector.

This module starts its own Kafka: a broker whose only listener the services are told about is SASL_SSL
(TLS certificates made with the JDK's keytool for this run; SCRAM-SHA-512 users), its own PostgreSQL, the
fake E-utilities and Anthropic servers, a fake OTLP collector, and the six services with API keys on,
tracing on and Claude mode on. Then:

- the pipeline ingests the recorded PubMed sample (fetcher -> parser -> embedder -> retriever, every hop a
  Kafka topic over SASL_SSL) and answers a question from it;
- the broker refuses a wrong password, an unknown user, and a plaintext client on that listener;
- one ``/v1/ask`` is one trace: the gateway's HTTP span, the Kafka hops, the retriever's PostgreSQL
  queries and the synthesizer's Anthropic call all carry the trace id the gateway returned.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaConnectionError, KafkaError
from pydantic import SecretStr

from devstack.kafka import LocalKafka
from devstack.kafka_tls import BrokerTls, make_broker_tls
from devstack.postgres import LocalPostgres
from devstack.processes import ServiceStack
from shared.events import DeadLetter
from shared.kafka.security import client_options
from shared.kafka.topic_admin import ensure_topics
from shared.kafka.topics import TopicSpec
from shared.settings import KafkaSettings
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.eutils_server import FakeEutils
from tests.fakes.otlp_server import ExportedSpan, FakeCollector
from tests.integration.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USER, PASSWORD = "evidentia-svc", "scram-pw-4711"
API_KEY = "test-key-for-the-secure-stack"
ADMIN_KEY = "admin-key-for-the-secure-stack"
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SecureStack:
    kafka: LocalKafka
    tls: BrokerTls
    services: ServiceStack
    collector: FakeCollector
    eutils: FakeEutils

    @property
    def kafka_settings(self) -> KafkaSettings:
        assert self.kafka.sasl_ssl_bootstrap is not None
        return KafkaSettings(
            bootstrap=self.kafka.sasl_ssl_bootstrap,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_username=USER,
            sasl_password=PASSWORD,  # type: ignore[arg-type]
            ssl_cafile=str(self.tls.ca_pem),
        )

    def http(self, key: str = API_KEY) -> httpx.Client:
        port = self.services.processes["gateway"].port
        return httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=90, headers={"Authorization": f"Bearer {key}"})


@pytest.fixture(scope="module")
def secure() -> Iterator[SecureStack]:
    root = Path(tempfile.mkdtemp(prefix="evidentia-secure-"))
    os.chmod(root, 0o755)  # PostgreSQL runs as another user when we are root
    tls = make_broker_tls(root / "tls")
    kafka = LocalKafka(
        root / "kafka",
        port=free_port(),
        controller_port=free_port(),
        sasl_ssl_port=free_port(),
        tls=tls,
        sasl_users={USER: PASSWORD},
    )
    postgres = LocalPostgres(root / "postgres", port=free_port())
    with FakeEutils() as eutils, FakeAnthropic() as anthropic, FakeCollector() as collector:
        kafka.ensure_libs()
        kafka.start(timeout=120)
        postgres.start()
        services: ServiceStack | None = None
        try:
            from shared.db import migrate
            from shared.kafka.topic_admin import ensure_topics
            from shared.kafka.topics import standard_topics

            assert kafka.sasl_ssl_bootstrap is not None
            sasl_env = {
                "EVIDENTIA_KAFKA_BOOTSTRAP": kafka.sasl_ssl_bootstrap,  # the only Kafka address they get
                "EVIDENTIA_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
                "EVIDENTIA_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
                "EVIDENTIA_KAFKA_SASL_USERNAME": USER,
                "EVIDENTIA_KAFKA_SASL_PASSWORD": PASSWORD,
                "EVIDENTIA_KAFKA_SSL_CAFILE": str(tls.ca_pem),
            }
            settings = KafkaSettings(**{k.removeprefix("EVIDENTIA_KAFKA_").lower(): v for k, v in sasl_env.items()})
            asyncio.run(migrate(postgres.url))
            asyncio.run(ensure_topics(settings, standard_topics(3)))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("EVIDENTIA_", "OTEL_", "ANTHROPIC_"))}
            env.update(sasl_env)
            env.update(
                {
                    "EVIDENTIA_DATABASE_URL": postgres.url,
                    "EVIDENTIA_EUTILS_BASE_URL": eutils.url,
                    "EVIDENTIA_KAFKA_TOPIC_PARTITIONS": "3",
                    "EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": "60",
                    "EVIDENTIA_LLM_MODEL": "claude-test",
                    "ANTHROPIC_API_KEY": "test-key",
                    "ANTHROPIC_BASE_URL": anthropic.url,
                    "EVIDENTIA_GATEWAY_API_KEY_HASHES": hashlib.sha256(API_KEY.encode()).hexdigest()
                    + ":ingest,"
                    + hashlib.sha256(ADMIN_KEY.encode()).hexdigest()
                    + ":admin",
                    "EVIDENTIA_TRACING_OTLP_ENDPOINT": collector.url,
                    "OTEL_BSP_SCHEDULE_DELAY": "200",  # export within a fraction of a second
                }
            )
            names = ("fetcher", "parser", "embedder", "retriever", "synthesizer", "gateway")
            services = ServiceStack(log_dir=root / "logs", env=env, ports={name: free_port() for name in names})
            services.start(timeout=300)
            yield SecureStack(kafka, tls, services, collector, eutils)
        finally:
            if services is not None:
                services.stop()
            kafka.stop()
            postgres.stop()
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def ingested(secure: SecureStack) -> dict[str, object]:
    """The recorded PubMed sample ingested through the SASL_SSL pipeline; the job's final status."""
    pmids = secure.eutils.pubmed_ids
    with secure.http() as http:
        r = http.post("/v1/ingest", json={"pmids": pmids})
        assert r.status_code == 202, r.text
        job = r.json()["job_id"]
        deadline = time.monotonic() + 300
        while True:
            status: dict[str, object] = http.get(f"/v1/ingest/{job}").json()
            if status["done"] or status["state"] == "failed" or time.monotonic() > deadline:
                return status
            time.sleep(1)


def test_the_pipeline_ingests_and_answers_over_sasl_ssl(secure: SecureStack, ingested: dict[str, Any]) -> None:
    assert ingested["done"] and ingested["state"] != "failed", ingested
    assert ingested["counts"]["embedded"] > 0, ingested
    with secure.http() as http:
        hits = http.post("/v1/search", json={"query": "treatment outcome", "top_n": 3}).json()["hits"]
        assert hits, "nothing retrievable: the vectors did not make it through SASL_SSL"
        answer = http.post("/v1/ask", json={"question": "What treatment outcomes were reported?"})
        assert answer.status_code == 200, answer.text
        assert answer.json()["citations"], answer.json()
    # The gateway refuses a caller without the key: authentication really is on in this stack.
    port = secure.services.processes["gateway"].port
    assert httpx.post(f"http://127.0.0.1:{port}/v1/search", json={"query": "x"}).status_code == 401


async def _first_embedded_record_headers(settings: KafkaSettings) -> dict[str, bytes]:
    consumer = AIOKafkaConsumer(
        "chunks.embedded", **client_options(settings), auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=20_000, max_records=1)
        (record,) = [r for records in batches.values() for r in records][:1]
        return {k: v for k, v in record.headers}
    finally:
        await consumer.stop()


def test_the_raw_vector_producer_carries_the_trace_context(secure: SecureStack, ingested: dict[str, Any]) -> None:
    # The embedder sends vectors through its own aiokafka producer (shared.kafka.publish.send_keyed), not FastStream:
    # its records must still carry the W3C traceparent, of the span of the chunks.created batch they came from.
    assert ingested["done"], ingested
    headers = asyncio.run(_first_embedded_record_headers(secure.kafka_settings))
    assert headers["evidentia-event"] == b"ChunkEmbedded"
    _, trace_id, span_id, _ = headers["traceparent"].decode().split("-")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        spans = secure.collector.spans_of(trace_id)
        if any(s.span_id == span_id for s in spans):
            break
        time.sleep(0.3)
    (parent,) = [s for s in secure.collector.spans_of(trace_id) if s.span_id == span_id]
    assert parent.service == "embedder" and parent.kind == "consumer" and "chunks.created" in parent.name


async def _dead_letter_to_replay(settings: KafkaSettings, topic: str) -> None:
    await ensure_topics(settings, [TopicSpec(topic, 1), TopicSpec(f"{topic}.dlq", 1)])
    letter = DeadLetter(
        topic=topic,
        key="k1",
        service="itest",
        error_type="Boom",
        error="fixed since",
        attempts=3,
        payload_json={"n": 1},
    )
    producer = AIOKafkaProducer(**client_options(settings))
    await producer.start()
    try:
        await producer.send_and_wait(f"{topic}.dlq", letter.model_dump_json().encode(), key=b"k1")
    finally:
        await producer.stop()


async def _records_of(settings: KafkaSettings, topic: str) -> list[tuple[bytes, dict[str, bytes]]]:
    consumer = AIOKafkaConsumer(
        topic, **client_options(settings), auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=20_000)
        return [(r.value or b"", dict(r.headers)) for records in batches.values() for r in records]
    finally:
        await consumer.stop()


def test_dead_letters_are_listed_and_replayed_over_sasl_ssl(secure: SecureStack) -> None:
    # Issue #40 item 13: shared/kafka/dlq.py connected without TLS/SASL, so neither the CLI nor the gateway's admin
    # routes could read or replay dead letters on a SASL_SSL cluster.
    topic = f"itest-secure-dlq-{uuid.uuid4().hex[:8]}"
    asyncio.run(_dead_letter_to_replay(secure.kafka_settings, topic))
    env = dict(secure.services.processes["gateway"].env) | {"PYTHONPATH": str(ROOT)}
    cli = subprocess.run(
        [sys.executable, "-m", "cli.main", "dlq", "list", topic],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0 and f"1 dead letters in {topic}.dlq" in cli.stdout, cli.stdout + cli.stderr
    with secure.http(ADMIN_KEY) as http:
        listed = http.get(f"/v1/admin/dlq/{topic}")
        assert listed.status_code == 200, listed.text
        assert [(x["ref"], x["error_type"]) for x in listed.json()["letters"]] == [("0:0", "Boom")]
        replayed = http.post(f"/v1/admin/dlq/{topic}/replay", json={"all": True})
        assert replayed.status_code == 200, replayed.text
        assert [r["status"] for r in replayed.json()] == ["replayed"]
    ((body, headers),) = asyncio.run(_records_of(secure.kafka_settings, topic))
    assert json.loads(body) == {"n": 1} and headers["evidentia-replayed-from"] == f"{topic}.dlq:0:0".encode()


async def _connect(options: dict[str, object]) -> list[str]:
    admin = AIOKafkaAdminClient(**options, request_timeout_ms=5000)  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(admin.start(), 20)
        return list(await admin.list_topics())
    finally:
        await admin.close()


def test_the_listener_refuses_bad_credentials_and_plaintext(secure: SecureStack) -> None:
    good = secure.kafka_settings
    assert "chunks.embedded" in asyncio.run(_connect(client_options(good)))
    for mechanism in ("PLAIN", "SCRAM-SHA-256"):  # every mechanism the settings offer works with the same user
        other = good.model_copy(update={"sasl_mechanism": mechanism})
        assert "chunks.embedded" in asyncio.run(_connect(client_options(other)))
    wrong_password = good.model_copy(update={"sasl_password": SecretStr("not-the-password")})
    unknown_user = good.model_copy(update={"sasl_username": "mallory"})
    for bad in (wrong_password, unknown_user):
        with pytest.raises((KafkaConnectionError, KafkaError)):
            asyncio.run(_connect(client_options(bad)))
    with pytest.raises((KafkaConnectionError, KafkaError, TimeoutError)):
        asyncio.run(_connect({"bootstrap_servers": good.bootstrap}))  # no TLS, no SASL


def _complete(spans: list[ExportedSpan]) -> bool:
    """Every span the assertions need has arrived (parents end, and are exported, after their children)."""
    return (
        any(s.service == "gateway" and s.kind == "server" and not s.parent_span_id for s in spans)
        and any(s.service == "retriever" and s.kind == "consumer" for s in spans)
        and any(s.service == "synthesizer" and s.kind == "consumer" for s in spans)
        and any(_is_anthropic_call(s) for s in spans)
    )


def _is_anthropic_call(span: ExportedSpan) -> bool:
    """The Anthropic SDK's own span of an API call (OpenTelemetry GenAI conventions), from the synthesizer."""
    return (
        span.service == "synthesizer"
        and span.kind == "client"
        and span.attributes.get("gen_ai.provider.name") == "anthropic"
    )


def _wait_for_trace(collector: FakeCollector, trace_id: str, timeout: float = 30.0) -> list[ExportedSpan]:
    deadline = time.monotonic() + timeout
    while not _complete(collector.spans_of(trace_id)) and time.monotonic() < deadline:
        time.sleep(0.3)
    time.sleep(1.0)  # a few more export rounds (every 0.2 s): the spans that end last
    return collector.spans_of(trace_id)


def test_one_ask_is_one_trace_across_gateway_retriever_and_synthesizer(
    secure: SecureStack, ingested: dict[str, Any]
) -> None:
    assert ingested["done"], ingested  # evidence to answer from: the synthesizer calls Claude
    with secure.http() as http:
        r = http.post("/v1/ask", json={"question": "What treatment outcomes were reported?"})
    assert r.status_code == 200, r.text
    trace_id = r.headers["x-trace-id"]
    version, header_trace, parent, flags = r.headers["traceparent"].split("-")
    assert (version, header_trace) == ("00", trace_id) and len(parent) == 16
    assert int(flags, 16) & 1, "the trace is sampled"

    spans = _wait_for_trace(secure.collector, trace_id)
    by_service: dict[str, list[ExportedSpan]] = {}
    for span in spans:
        by_service.setdefault(span.service, []).append(span)
    assert {"gateway", "retriever", "synthesizer"} <= set(by_service), sorted(by_service)

    # HTTP: the gateway's server span is the root, and the one whose id the traceparent header carries.
    server = [s for s in by_service["gateway"] if s.kind == "server"]
    assert any(s.span_id == parent and not s.parent_span_id for s in server), server
    # Kafka: the gateway produced the requests, the services consumed them (the W3C header crossed over).
    assert any(s.kind == "producer" and "retrieval.requests" in s.name for s in by_service["gateway"])
    assert any(s.kind == "consumer" and "retrieval.requests" in s.name for s in by_service["retriever"])
    assert any(s.kind == "consumer" and "synthesis.requests" in s.name for s in by_service["synthesizer"])
    # PostgreSQL: the retriever's queries; Anthropic: the synthesizer's HTTP call to (the fake) Claude.
    db_systems = {
        str(s.attributes.get("db.system") or s.attributes.get("db.system.name")) for s in by_service["retriever"]
    }
    assert "postgresql" in db_systems, [(s.service, s.name) for s in spans]
    retriever_db = [s for s in by_service["retriever"] if "postgresql" in str(s.attributes)]
    assert retriever_db, [(s.name, s.attributes) for s in by_service["retriever"]]
    calls = [s for s in by_service["synthesizer"] if _is_anthropic_call(s)]
    # The answer on the main model; /v1/ask's classification step on the fast model (EVIDENTIA_LLM_FAST_MODEL).
    models = {s.attributes.get("gen_ai.request.model") for s in calls}
    assert {"claude-test", "claude-haiku-4-5"} <= models, by_service["synthesizer"]
    # Every span hangs off another span of the same trace, or is the root: nothing started a trace of its own.
    ids = {s.span_id for s in spans}
    orphans = [s for s in spans if s.parent_span_id and s.parent_span_id not in ids]
    assert len([s for s in spans if not s.parent_span_id]) == 1, "more than one root span"
    assert not orphans, orphans
