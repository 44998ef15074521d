"""The parser through the running pipeline: hostile input is dead-lettered, re-ingesting is a no-op.

Real Kafka, PostgreSQL and the six service processes (``conftest.py``). The documents are PubMed records
no other integration test ingests: ``pubmed7.xml`` (PMID 29963580) is stored first and then attacked,
``pubmed6.xml`` (30108519) is the valid document behind the hostile ones, ``pubmed5.xml`` (28775130) is
re-ingested. Hostile events are published straight to ``documents.fetched`` with the id of the already
stored document, on every partition, so whatever comes next on any partition sits behind one.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from services.fetcher.bulk import iter_xml_file
from shared.chunk_wire import to_event
from shared.events import ChunkCreated, ChunkEmbedded, DeadLetter, DocumentFetched
from shared.kafka.topics import CHUNKS_CREATED, CHUNKS_EMBEDDED, DOCUMENTS_FETCHED
from shared.settings import DatabaseSettings, KafkaSettings, Settings
from tests.integration.conftest import Stack
from tests.integration.db import active_vector_table, db_fetch
from tests.integration.dead_letters import read_dead_letters

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
HOSTILE = FIXTURES / "hostile"
TARGET_FILE = FIXTURES / "pubmed" / "pubmed7.xml"
TARGET_ID = "pubmed:29963580"
AFTER_FILE = FIXTURES / "pubmed" / "pubmed6.xml"
AFTER_ID = "pubmed:30108519"
REINGEST_FILE = FIXTURES / "pubmed" / "pubmed5.xml"
REINGEST_ID = "pubmed:28775130"
JOB_TIMEOUT_S = 120.0

#: (case, fixture file, declared format, words of which the dead letter's reason must hold one).
HOSTILE_CASES: list[tuple[str, str, str, tuple[str, ...]]] = [
    ("xxe", "xxe.xml", "pubmed-xml", ("entit", "DTD")),
    ("xxe-jats", "xxe-jats.nxml", "jats-xml", ("entit", "DTD")),
    ("billion-laughs", "billion-laughs.xml", "pubmed-xml", ("entit", "DTD")),
    ("truncated-pubmed", "truncated-pubmed.xml", "pubmed-xml", ("not well-formed", "Premature end")),
    ("truncated-jats", "truncated-jats.nxml", "jats-xml", ("not well-formed", "Premature end")),
    ("png-as-xml", "image-as.xml", "pubmed-xml", ("not XML", "not well-formed", "format")),
    ("json-as-xml", "esearch-as.xml", "jats-xml", ("not XML", "not well-formed", "format")),
    ("esearch-as-pubmed", "esearch.xml", "pubmed-xml", ("not a PubMed XML set",)),
]


# ----------------------------------------------------------------------------------------- helpers


def settings_of(stack: Stack) -> Settings:
    return Settings(
        kafka=KafkaSettings(bootstrap=stack.infra.kafka.bootstrap),  # type: ignore[call-arg]
        database=DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": stack.infra.postgres.url}),
    )


def file_events(path: Path, job_id: str) -> list[DocumentFetched]:
    events = [e for e in iter_xml_file(path, job_id=job_id) if isinstance(e, DocumentFetched)]
    assert events, path
    return events


def ingest_file(stack: Stack, path: Path, tag: str) -> tuple[str, dict[str, Any]]:
    """What ``evidentia ingest --file`` does (a job, its events on ``documents.fetched``); the job when done."""
    from cli.ingest import publish_documents

    job_id = f"parser-{tag}-{uuid.uuid4().hex[:10]}"
    events = file_events(path, job_id)
    asyncio.run(publish_documents(settings_of(stack), list(events), job_id, str(path), follow=False))
    return job_id, wait_job(stack, job_id)


def wait_job(stack: Stack, job_id: str, timeout: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    from shared.db.jobs import job_status

    async def go() -> dict[str, Any] | None:
        conn = await asyncpg.connect(stack.infra.postgres.url, timeout=10)
        try:
            status = await job_status(conn, job_id)
            return None if status is None else status.model_dump(mode="json")
        finally:
            await conn.close()

    deadline = time.monotonic() + timeout
    status: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        status = asyncio.run(go())
        if status is not None and status["done"]:
            return status
        time.sleep(0.3)
    tails = "\n".join(f"--- {n}:\n{p.tail(15)}" for n, p in stack.services.processes.items())
    raise AssertionError(f"job {job_id} not done after {timeout:.0f}s: {status}\n{tails}")


def assert_embedded(status: dict[str, Any], n: int) -> None:
    assert status["total"] == n, status
    assert status["counts"]["embedded"] == n, status
    assert status["counts"]["failed"] == 0, status


@dataclass(frozen=True)
class Snapshot:
    """Everything stored for some documents: rows, content hashes, chunks, vectors, and the counts."""

    documents: list[dict[str, Any]]
    chunks: list[dict[str, Any]]
    vectors: list[tuple[str, str]]

    @property
    def counts(self) -> tuple[int, int, int]:
        return len(self.documents), len(self.chunks), len(self.vectors)


def snapshot(stack: Stack, ids: list[str]) -> Snapshot:
    url = stack.infra.postgres.url
    table = active_vector_table(url)
    docs = db_fetch(url, "SELECT * FROM documents WHERE document_id = ANY($1::text[]) ORDER BY document_id", ids)
    chunks = db_fetch(
        url,
        "SELECT * FROM chunks WHERE document_id = ANY($1::text[]) ORDER BY document_id, ordinal",
        ids,
    )
    vectors = db_fetch(
        url,
        f"SELECT chunk_id, embedding::text AS embedding FROM {table} "
        "WHERE document_id = ANY($1::text[]) ORDER BY chunk_id",
        ids,
    )
    return Snapshot(
        [dict(r) for r in docs],
        [dict(r) for r in chunks],
        [(str(r["chunk_id"]), str(r["embedding"])) for r in vectors],
    )


def partitions(stack: Stack) -> int:
    return int(stack.env.get("EVIDENTIA_KAFKA_TOPIC_PARTITIONS", "3"))


async def _publish_hostile(bootstrap: str, events: list[DocumentFetched], n_partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for event in events:
            for p in range(n_partitions):
                await producer.send_and_wait(
                    DOCUMENTS_FETCHED,
                    event.model_dump_json().encode(),
                    key=event.document_id.encode(),
                    partition=p,
                    headers=[("content-type", b"application/json")],
                )
    finally:
        await producer.stop()


async def _end_offsets(bootstrap: str, topic: str, n_partitions: int) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in range(n_partitions)]
        ends = await consumer.end_offsets(parts)
        return {tp.partition: int(off) for tp, off in ends.items()}
    finally:
        await consumer.stop()


async def _chunk_events_since(bootstrap: str, start: dict[int, int], job_ids: set[str]) -> list[ChunkCreated]:
    """``chunks.created`` events of ``job_ids`` published after the offsets ``start``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    await consumer.start()
    found: list[ChunkCreated] = []
    try:
        parts = {p: TopicPartition(CHUNKS_CREATED, p) for p in start}
        consumer.assign(list(parts.values()))
        ends = await consumer.end_offsets(list(parts.values()))
        for p, tp in parts.items():
            consumer.seek(tp, start[p])
        remaining = {tp for tp in parts.values() if ends[tp] > start[tp.partition]}
        deadline = time.monotonic() + 30
        while remaining and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for tp, records in batch.items():
                for record in records:
                    try:
                        event = to_event(record.value or b"")
                    except ValueError:
                        pass  # other tests' deliberate poison events share the topic
                    else:
                        if event.job_id in job_ids:
                            found.append(event)
                    if record.offset + 1 >= ends[tp]:
                        remaining.discard(tp)
        assert not remaining, f"could not read chunks.created up to its end: {remaining}"
        return found
    finally:
        await consumer.stop()


def document_stage(stack: Stack, doc_id: str) -> tuple[str, str | None]:
    row = db_fetch(stack.infra.postgres.url, "SELECT stage, error FROM document_status WHERE document_id = $1", doc_id)[
        0
    ]
    return str(row["stage"]), row["error"]


# ----------------------------------------------------------------------------------------- tests


@pytest.fixture(scope="module")
def stored(stack: Stack) -> Snapshot:
    """``pubmed7.xml`` stored through the pipeline and embedded; what is stored for it."""
    _, status = ingest_file(stack, TARGET_FILE, "target")
    assert_embedded(status, 1)
    snap = snapshot(stack, [TARGET_ID])
    assert len(snap.documents) == 1 and snap.documents[0]["content_hash"], snap.documents
    assert snap.chunks and len(snap.vectors) == len(snap.chunks), snap.counts
    return snap


def test_hostile_input_is_dead_lettered_and_changes_nothing_stored(stack: Stack, stored: Snapshot) -> None:
    bootstrap = stack.infra.kafka.bootstrap
    marker = f"hostile-{uuid.uuid4().hex[:10]}"
    events = [
        DocumentFetched(
            trace_id=f"{marker}-{case}",
            document_id=TARGET_ID,
            source="pubmed",
            source_id=TARGET_ID.split(":", 1)[1],
            format=fmt,  # type: ignore[arg-type]
            # The event carries text: a binary file arrives as whatever its bytes decode to.
            content=(HOSTILE / name).read_bytes().decode("utf-8", errors="replace"),
        )
        for case, name, fmt, _ in HOSTILE_CASES
    ]
    n_partitions = partitions(stack)
    asyncio.run(_publish_hostile(bootstrap, events, n_partitions))

    # Behind them on every partition, a valid document: the parser is still consuming.
    _, status = ingest_file(stack, AFTER_FILE, "after")
    assert_embedded(status, 1)
    after = snapshot(stack, [AFTER_ID])
    assert after.counts[0] == 1 and after.counts[1] >= 1 and after.counts[2] == after.counts[1], after.counts

    want = len(HOSTILE_CASES) * n_partitions
    letters = asyncio.run(read_dead_letters(bootstrap, [DOCUMENTS_FETCHED], marker, want, 60))
    by_case: dict[str, list[DeadLetter]] = {}
    for letter in letters:
        case = next(c for c, *_ in HOSTILE_CASES if f'"{marker}-{c}"' in letter.payload)
        by_case.setdefault(case, []).append(letter)
    for case, name, fmt, reasons in HOSTILE_CASES:
        got = by_case.get(case, [])
        assert len(got) == n_partitions, (case, [(g.key, g.error) for g in got], len(letters))
        for letter in got:
            assert letter.topic == DOCUMENTS_FETCHED, letter.topic
            assert "parser" in letter.service, letter.service
            assert letter.error_type == "PoisonEvent", (case, letter.error_type, letter.error)
            assert letter.key == TARGET_ID, letter.key
            assert letter.attempts == 1, (case, letter.attempts)  # never retried: it can never work
            assert letter.partition is not None and letter.offset is not None
            assert TARGET_ID in letter.error and fmt in letter.error, (case, letter.error)
            assert any(r.lower() in letter.error.lower() for r in reasons), (case, name, letter.error)
            assert "Traceback" not in letter.error and len(letter.error) < 2000, letter.error
    assert len(letters) == want

    # Nothing stored for the attacked document changed: row (content hash, updated_at), chunks, vectors.
    now = snapshot(stack, [TARGET_ID])
    assert now.documents == stored.documents
    assert now.chunks == stored.chunks
    assert now.vectors == stored.vectors
    # It is still searchable: the failed re-fetch keeps `embedded` and records why.
    stage, error = document_stage(stack, TARGET_ID)
    assert stage == "embedded", (stage, error)
    assert error and "cannot parse" in error, error


def test_reingesting_the_same_file_changes_no_counts_and_emits_no_chunks(stack: Stack) -> None:
    bootstrap = stack.infra.kafka.bootstrap
    first_job, status = ingest_file(stack, REINGEST_FILE, "reingest-1")
    assert_embedded(status, 1)
    first = snapshot(stack, [REINGEST_ID])
    assert first.counts[0] == 1 and first.counts[1] >= 1 and first.counts[2] == first.counts[1], first.counts

    start = asyncio.run(_end_offsets(bootstrap, CHUNKS_CREATED, partitions(stack)))
    again = []
    for n in (2, 3):
        job_id, status = ingest_file(stack, REINGEST_FILE, f"reingest-{n}")
        assert_embedded(status, 1)  # the job completes although nothing new is made
        assert not status["failures"], status
        again.append(job_id)
        now = snapshot(stack, [REINGEST_ID])
        assert now.counts == first.counts, (n, now.counts, first.counts)
        assert now.documents == first.documents  # same content hash, not even updated_at renewed
        assert now.chunks == first.chunks
        assert now.vectors == first.vectors

    emitted = asyncio.run(_chunk_events_since(bootstrap, start, set(again)))
    assert emitted == [], [(e.chunk_id, e.job_id) for e in emitted]
    # The detector works: the first ingest's chunk events are on the topic with its job id.
    first_events = asyncio.run(_chunk_events_since(bootstrap, dict.fromkeys(start, 0), {first_job}))
    assert {e.chunk_id for e in first_events} == {c["chunk_id"] for c in first.chunks}


async def _publish_vectors(bootstrap: str, events: list[ChunkEmbedded]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for event in events:
            await producer.send_and_wait(
                CHUNKS_EMBEDDED,
                event.model_dump_json(exclude_none=True).encode(),
                key=event.document_id.encode(),
                headers=[("content-type", b"application/json")],
            )
    finally:
        await producer.stop()


def _stored_vector(stack: Stack, table: str, chunk_id: str) -> np.ndarray:
    row = db_fetch(stack.infra.postgres.url, f"SELECT embedding::text AS e FROM {table} WHERE chunk_id = $1", chunk_id)
    # parse_int: a half-precision component that underflowed is printed "-0"; as an int it would lose its sign.
    return np.asarray(json.loads(str(row[0]["e"]), parse_int=float), dtype=np.float32)


def _wait_for_vector(stack: Stack, table: str, chunk_id: str, want: np.ndarray, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    got = _stored_vector(stack, table, chunk_id)
    while not np.allclose(got, want, atol=1e-6) and time.monotonic() < deadline:
        time.sleep(0.3)
        got = _stored_vector(stack, table, chunk_id)
    np.testing.assert_allclose(got, want, atol=1e-6)


def test_the_running_retriever_stores_vectors_of_both_event_versions(stack: Stack, stored: Snapshot) -> None:
    """A rolling upgrade: an embedder still writing v1 (a JSON list) and one writing v2 (packed float32)."""
    url = stack.infra.postgres.url
    index = db_fetch(url, "SELECT model, dim, table_name FROM vector_indexes WHERE state = 'active'")[0]
    table, model, dim = str(index["table_name"]), str(index["model"]), int(index["dim"])
    chunk_id = stored.vectors[0][0]
    original = _stored_vector(stack, table, chunk_id)
    assert original.shape == (dim,)
    marker = uuid.uuid4().hex[:8]
    # v1 with a different (still unit-length) vector: stored.
    turned = np.roll(original, 1)
    old = ChunkEmbedded(
        schema_version=1,
        trace_id=f"v1-{marker}",
        chunk_id=chunk_id,
        document_id=TARGET_ID,
        model=model,
        dim=dim,
        embedding=[float(x) for x in turned],
    )
    asyncio.run(_publish_vectors(stack.infra.kafka.bootstrap, [old]))
    _wait_for_vector(stack, table, chunk_id, turned)
    # v2 puts the original back, bit for bit (the vector as stored: exact at the index's precision).
    new = ChunkEmbedded(
        trace_id=f"v2-{marker}",
        chunk_id=chunk_id,
        document_id=TARGET_ID,
        model=model,
        dim=dim,
        embedding_f32=ChunkEmbedded.pack(original),
    )
    asyncio.run(_publish_vectors(stack.infra.kafka.bootstrap, [new]))
    _wait_for_vector(stack, table, chunk_id, original)
    assert snapshot(stack, [TARGET_ID]).vectors == stored.vectors
