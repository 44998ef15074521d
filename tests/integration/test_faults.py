"""Delivery guarantees under faults, over the real Kafka broker, PostgreSQL and the six service processes.

Every test ingests its own, disjoint slice of ``data/samples/pubmedqa500.jsonl`` (or PubMed records made
from it and served by the fake E-utilities), breaks something in the middle, repairs it, and ends with an
exact count check (:func:`assert_exactly_once`): every document stored once, with exactly the chunks the
parser makes of it, every chunk with exactly one vector, the job done with no failure.

None can pass vacuously: each asserts that the faulted service still had work when the fault struck
(its own output short of the total at that moment, and work done after it), and duplicates are counted
on side effects, not only primary keys (:func:`assert_side_effects`: ``chunks.embedded`` events per chunk,
``documents.fetched`` events per document).

The tests that stop the Kafka broker or PostgreSQL are marked ``disruptive``: ``conftest.py`` runs them
after every other test of the session, and each leaves the stack ready again.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html import escape
from pathlib import Path

import asyncpg
import httpx
import pytest
from aiokafka import AIOKafkaProducer

from services.fetcher.bulk import iter_jsonl
from services.parser.chunking import Chunker, build_chunker
from services.parser.core import chunk_document, parse_content
from shared.events import ChunkEmbedded, DeadLetter, DocumentFetched
from shared.ingestion import document_event
from shared.kafka.topics import (
    CHUNKS_CREATED,
    CHUNKS_EMBEDDED,
    DOCUMENTS_FETCHED,
    INGEST_REQUESTS,
    PMIDS_DISCOVERED,
    RETRIEVAL_REQUESTS,
    SYNTHESIS_REQUESTS,
)
from shared.models import ParsedDocument
from shared.settings import Settings
from tests.integration.conftest import Stack
from tests.integration.db import active_vector_table, db_fetch, db_try
from tests.integration.dead_letters import read_dead_letters
from tests.integration.gateways import extra_gateway
from tests.integration.side_effects import per_key, read_events

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "samples" / "pubmedqa500.jsonl"
JOB_TIMEOUT_S = 180.0

# Disjoint slices of the sample, one per test (the fake E-utilities' own records are left out).
SLICES = {
    "fetcher": (0, 30),
    "parser": (30, 70),
    "embedder": (70, 110),
    "retriever": (110, 150),
    "poison": (150, 156),
    "kafka": (156, 216),
    "postgres": (216, 276),
}
#: Abstracts are cut to this many characters: the embedder on a shared 2-core CI machine is the slow
#: part. At 1,000 about a third of the documents still make two chunks (ordinals checked), the rest one.
ABSTRACT_CHARS = 1000


# ----------------------------------------------------------------------------------------- helpers


@functools.cache
def sample() -> list[ParsedDocument]:
    docs = []
    for item in iter_jsonl(SAMPLE):
        assert isinstance(item, DocumentFetched) and item.document is not None, item
        doc = item.document
        if doc.abstract and len(doc.abstract) > ABSTRACT_CHARS:
            cut = doc.abstract[:ABSTRACT_CHARS].rsplit(" ", 1)[0]
            doc = doc.model_copy(update={"abstract": cut + "."})
        docs.append(doc)
    return docs


def docs_for(stack: Stack, name: str) -> list[ParsedDocument]:
    start, stop = SLICES[name]
    reserved = {f"pubmed:{p}" for p in stack.fake.pubmed_ids}
    docs = [d for d in sample()[start:stop] if d.document_id not in reserved]
    assert len(docs) >= (stop - start) // 2
    return docs


@functools.cache
def chunker() -> Chunker:
    return build_chunker(Settings())


def expected_chunks(docs: list[ParsedDocument]) -> dict[str, int]:
    """What the parser makes of each document (the same code, in this process)."""
    return {d.document_id: len(d.chunks if d.chunks else chunk_document(d, chunker()).chunks) for d in docs}


def settings_of(stack: Stack) -> Settings:
    from shared.settings import DatabaseSettings, KafkaSettings

    return Settings(
        kafka=KafkaSettings(bootstrap=stack.infra.kafka.bootstrap),  # type: ignore[call-arg]
        database=DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": stack.infra.postgres.url}),
    )


async def _publish_job(stack: Stack, docs: list[ParsedDocument]) -> str:
    """What ``evidentia ingest --jsonl`` does: a job row, then one DocumentFetched per document."""
    from cli.ingest import publish_documents

    job_id = f"fault-{uuid.uuid4().hex[:12]}"
    events = [document_event(d, job_id=job_id) for d in docs]
    await publish_documents(settings_of(stack), list(events), job_id, "test_faults", follow=False)
    return job_id


def publish_job(stack: Stack, docs: list[ParsedDocument]) -> str:
    return asyncio.run(_publish_job(stack, docs))


@dataclass
class Progress:
    documents: int
    chunks: int
    vectors: int


def progress(stack: Stack, ids: list[str]) -> Progress | None:
    url = stack.infra.postgres.url
    table = active_vector_table(url)
    rows = db_try(
        url,
        f"""SELECT (SELECT count(*) FROM documents WHERE document_id = ANY($1::text[])) AS documents,
                   (SELECT count(*) FROM chunks WHERE document_id = ANY($1::text[])) AS chunks,
                   (SELECT count(*) FROM {table} WHERE document_id = ANY($1::text[])) AS vectors""",
        ids,
    )
    if not rows:
        return None
    return Progress(int(rows[0]["documents"]), int(rows[0]["chunks"]), int(rows[0]["vectors"]))


def wait_until(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.05) -> float:
    """Poll ``check`` until it holds; the seconds it took."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - start


def job_state(stack: Stack, job_id: str) -> dict[str, object] | None:
    from shared.db.jobs import job_status

    async def go() -> dict[str, object] | None:
        conn = await asyncpg.connect(stack.infra.postgres.url, timeout=5)
        try:
            status = await job_status(conn, job_id)
            return None if status is None else status.model_dump(mode="json")
        finally:
            await conn.close()

    try:
        return asyncio.run(go())
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        return None


def wait_job(stack: Stack, job_id: str, timeout: float = JOB_TIMEOUT_S) -> dict[str, object]:
    """The job's status once it is done (read from PostgreSQL, tolerating it being down meanwhile)."""
    deadline = time.monotonic() + timeout
    status: dict[str, object] | None = None
    while time.monotonic() < deadline:
        status = job_state(stack, job_id)
        if status is not None and status["done"]:
            return status
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} not done after {timeout:.0f}s: {status}\n{service_tails(stack)}")


def service_tails(stack: Stack, lines: int = 15) -> str:
    return "\n".join(f"--- {n}:\n{p.tail(lines)}" for n, p in stack.services.processes.items())


def assert_exactly_once(stack: Stack, job_id: str, expected: dict[str, int]) -> None:
    """Every document stored once with exactly its chunks, each chunk with exactly one vector, job done."""
    url = stack.infra.postgres.url
    ids = sorted(expected)
    status = wait_job(stack, job_id)
    counts = status["counts"]
    assert isinstance(counts, dict)
    assert status["total"] == len(ids), status
    assert counts["embedded"] == len(ids), status
    assert counts["failed"] == 0 and not status["failures"], status

    docs = db_fetch(url, "SELECT document_id FROM documents WHERE document_id = ANY($1::text[])", ids)
    assert sorted(r["document_id"] for r in docs) == ids

    table = active_vector_table(url)
    rows = db_fetch(
        url,
        f"""SELECT c.document_id, count(*) AS chunks, count(DISTINCT c.ordinal) AS ordinals,
                   min(c.ordinal) AS first, max(c.ordinal) AS last,
                   count(DISTINCT split_part(c.chunk_id, '#', 2)) AS versions,
                   count(v.chunk_id) AS vectors
            FROM chunks c LEFT JOIN {table} v ON v.chunk_id = c.chunk_id
            WHERE c.document_id = ANY($1::text[]) GROUP BY c.document_id""",
        ids,
    )
    got = {r["document_id"]: r for r in rows}
    assert sorted(got) == ids, f"documents without chunks: {sorted(set(ids) - set(got))}"
    for doc_id, n in expected.items():
        r = got[doc_id]
        assert (r["chunks"], r["ordinals"], r["first"], r["last"], r["versions"]) == (n, n, 0, n - 1, 1), (
            doc_id,
            dict(r),
            n,
        )
        assert r["vectors"] == n, (doc_id, dict(r))
    total = db_fetch(
        url,
        f"SELECT count(*) AS n, count(DISTINCT chunk_id) AS d FROM {table} WHERE document_id = ANY($1::text[])",
        ids,
    )[0]
    assert total["n"] == total["d"] == sum(expected.values())


def db_now(stack: Stack) -> object:
    """PostgreSQL's clock now (the timestamps the tests compare are the server's own)."""
    return db_fetch(stack.infra.postgres.url, "SELECT now() AS t")[0]["t"]


def vectors_since(stack: Stack, ids: list[str], since: object) -> int:
    """Vectors of ``ids`` written after ``since``: work that was still to do when a fault struck."""
    table = active_vector_table(stack.infra.postgres.url)
    rows = db_fetch(
        stack.infra.postgres.url,
        f"SELECT count(*) AS n FROM {table} WHERE document_id = ANY($1::text[]) AND created_at > $2",
        ids,
        since,
    )
    return int(rows[0]["n"])


def embedded_events(stack: Stack, ids: list[str]) -> Counter[str]:
    """``chunks.embedded`` events per chunk of the documents ``ids`` so far."""
    wanted = set(ids)
    events = asyncio.run(
        read_events(stack.infra.kafka.bootstrap, CHUNKS_EMBEDDED, ChunkEmbedded, lambda e: e.document_id in wanted)
    )
    return per_key(events, lambda e: e.chunk_id)


def fetched_events(stack: Stack, ids: list[str]) -> Counter[str]:
    """``documents.fetched`` events per document of ``ids`` so far."""
    wanted = set(ids)
    events = asyncio.run(
        read_events(stack.infra.kafka.bootstrap, DOCUMENTS_FETCHED, DocumentFetched, lambda e: e.document_id in wanted)
    )
    return per_key(events, lambda e: e.document_id)


def assert_side_effects(stack: Stack, expected: dict[str, int], *, redone_at_most: int) -> Counter[str]:
    """Every chunk embedded (one ``chunks.embedded`` event at least), none more than twice, and at most
    ``redone_at_most`` chunks embedded twice: only work in flight at the fault may be redone."""
    ids = sorted(expected)
    rows = db_fetch(stack.infra.postgres.url, "SELECT chunk_id FROM chunks WHERE document_id = ANY($1::text[])", ids)
    chunk_ids = {r["chunk_id"] for r in rows}
    assert len(chunk_ids) == sum(expected.values())
    events = embedded_events(stack, ids)
    assert set(events) == chunk_ids, f"chunks never embedded: {sorted(chunk_ids - set(events))[:5]}"
    twice = {c: n for c, n in events.items() if n > 1}
    assert max(events.values()) <= 2, sorted(twice.items(), key=lambda kv: -kv[1])[:5]
    assert len(twice) <= redone_at_most, f"{len(twice)} chunks embedded twice, at most {redone_at_most} allowed"
    return events


def aiokafka_lines(log_path: Path) -> list[str]:
    """The messages aiokafka logged so far (first 60 characters each)."""
    try:
        with log_path.open("rb") as fh:
            lines = [line for line in fh if b'"logger": "aiokafka' in line]
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(str(json.loads(line).get("msg", ""))[:60])
        except ValueError:
            out.append("?")
    return out


# ----------------------------------------------------------------------------------------- PubMed records


def pubmed_xml(docs: list[ParsedDocument]) -> bytes:
    """A ``PubmedArticleSet`` made from sample documents (their real PMIDs, titles and abstracts)."""
    parts = ['<?xml version="1.0"?>\n<PubmedArticleSet>']
    for d in docs:
        assert d.pmid
        parts.append(
            f"""<PubmedArticle><MedlineCitation Owner="NLM" Status="MEDLINE"><PMID Version="1">{d.pmid}</PMID>
<Article PubModel="Print"><Journal><JournalIssue CitedMedium="Print"><PubDate><Year>2000</Year></PubDate>
</JournalIssue><Title>Test journal</Title><ISOAbbreviation>Test J</ISOAbbreviation></Journal>
<ArticleTitle>{escape(d.title)}</ArticleTitle>
<Abstract><AbstractText>{escape(d.abstract or d.title)}</AbstractText></Abstract><Language>eng</Language>
<PublicationTypeList><PublicationType UI="D016428">Journal Article</PublicationType></PublicationTypeList>
</Article></MedlineCitation><PubmedData><ArticleIdList><ArticleId IdType="pubmed">{d.pmid}</ArticleId>
</ArticleIdList></PubmedData></PubmedArticle>"""
        )
    parts.append("</PubmedArticleSet>")
    return "\n".join(parts).encode()


def expected_from_xml(xml: bytes) -> dict[str, int]:
    return {d.document_id: len(d.chunks) for d in parse_content("pubmed-xml", xml, chunker=chunker())}


# ----------------------------------------------------------------------------------------- kill -9


@pytest.mark.parametrize("service", ["parser", "embedder", "retriever"])
def test_kill_9_consumer_mid_ingest_stores_everything_exactly_once(stack: Stack, service: str) -> None:
    docs = docs_for(stack, service)
    expected = expected_chunks(docs)
    ids = sorted(expected)
    total_chunks = sum(expected.values())
    job_id = publish_job(stack, docs)

    # Kill it once it is busy: some of its output exists, not all of it.
    def busy() -> bool:
        p = progress(stack, ids)
        if p is None:
            return False
        if service == "parser":
            return p.documents >= 1
        if service == "embedder":
            return p.chunks >= 1
        return p.vectors >= 1

    wait_until(f"{service} to start working", busy, 60)
    stack.services.processes[service].kill()
    killed_at = db_now(stack)
    before = progress(stack, ids)
    assert before is not None
    # Its own output fell short of the total when it died: it still had work in flight.
    if service == "parser":
        assert before.documents < len(ids), f"the parser had stored everything before it was killed: {before}"
    elif service == "embedder":
        done = sum(embedded_events(stack, ids).values())
        assert done < total_chunks, f"the embedder had embedded every chunk before it was killed: {done}"
    else:
        assert before.vectors < total_chunks, f"the retriever had stored every vector before it was killed: {before}"
    time.sleep(1.0)
    stack.services.processes[service].start()
    stack.services.wait_ready(120, [service])
    assert_exactly_once(stack, job_id, expected)
    assert vectors_since(stack, ids, killed_at) >= total_chunks - before.vectors > 0
    # Side effects: the retriever is downstream of every chunks.embedded event, so killing it must not
    # make the embedder embed anything twice; a killed parser or embedder may redo only what was in flight.
    assert_side_effects(stack, expected, redone_at_most=0 if service == "retriever" else total_chunks - before.vectors)


def test_kill_9_fetcher_mid_efetch_stores_everything_exactly_once(stack: Stack) -> None:
    docs = docs_for(stack, "fetcher")
    xml = pubmed_xml(docs)
    stack.fake.add_pubmed_records(xml)
    expected = expected_from_xml(xml)
    assert len(expected) == len(docs)
    pmids = [d.pmid for d in docs if d.pmid]
    seen = len(stack.fake.requests)
    stack.fake.delay_s = 1.5  # an efetch in flight when the fetcher dies
    try:
        with stack.http() as http:
            r = http.post("/v1/ingest", json={"pmids": pmids})
            assert r.status_code == 202, r.text
            job_id = r.json()["job_id"]
        wait_until(
            "the fetcher's efetch call", lambda: any(q.utility == "efetch" for q in stack.fake.requests[seen:]), 60
        )
        stack.services.processes["fetcher"].kill()
        before = progress(stack, sorted(expected))
        assert before is not None and before.documents < len(expected), before
        published = fetched_events(stack, sorted(expected))
        assert sum(published.values()) < len(expected), f"the fetcher had published everything: {published}"
    finally:
        stack.fake.delay_s = 0.0
    time.sleep(1.0)
    stack.services.processes["fetcher"].start()
    stack.services.wait_ready(120, ["fetcher"])
    assert_exactly_once(stack, job_id, expected)
    # Side effects: each document fetched (published) at most twice, only the ones in flight twice.
    after = fetched_events(stack, sorted(expected))
    assert set(after) == set(expected) and max(after.values()) <= 2, after
    refetched = [d for d, n in after.items() if n > 1]
    assert len(refetched) <= len(expected) - sum(published.values()), (refetched, published)
    assert_side_effects(stack, expected, redone_at_most=sum(expected.values()) - before.vectors)


# ----------------------------------------------------------------------------------------- poison


RawRecord = tuple[str, int, bytes, bytes, list[tuple[str, bytes]]]  # topic, partition, key, value, headers


async def _publish_raw(bootstrap: str, records: list[RawRecord]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for topic, partition, key, value, headers in records:
            await producer.send_and_wait(topic, value, key=key, partition=partition, headers=headers)
    finally:
        await producer.stop()


POISON_TOPICS = [
    INGEST_REQUESTS,
    PMIDS_DISCOVERED,
    DOCUMENTS_FETCHED,
    CHUNKS_CREATED,
    CHUNKS_EMBEDDED,
    RETRIEVAL_REQUESTS,
    SYNTHESIS_REQUESTS,
]


def poison_values(topic: str, marker: str) -> Iterator[tuple[str, bytes, list[tuple[str, bytes]]]]:
    """(kind, body, headers): not JSON; JSON of the wrong shape; JSON declared but broken."""
    yield "not-json", f"{{{marker} not json".encode(), []
    yield (
        "wrong-shape",
        json.dumps(
            {"schema_version": 1, "marker": marker, "pmid": "x", "document_id": 7, "chunk_id": [], "query": ""}
        ).encode(),
        [],
    )
    yield "broken-json", f'{{"marker": "{marker}", '.encode(), [("content-type", b"application/json")]


def test_poison_event_on_every_topic_goes_to_its_dlq_and_the_rest_is_processed(stack: Stack) -> None:
    marker = f"poison-{uuid.uuid4().hex[:10]}"
    bootstrap = stack.infra.kafka.bootstrap
    records: list[RawRecord] = []
    partitions = int(stack.env.get("EVIDENTIA_KAFKA_TOPIC_PARTITIONS", "3"))
    for topic in POISON_TOPICS:
        for kind, body, headers in poison_values(topic, marker):
            for p in range(partitions):  # on every partition: whatever comes next is behind a poison event
                records.append((topic, p, f"{marker}-{kind}".encode(), body, headers))
    asyncio.run(_publish_raw(bootstrap, records))

    # Behind them: an ingest (ingest.requests -> pmids.discovered -> documents.fetched -> chunks.*),
    # then a search and an answer (retrieval.requests, synthesis.requests).
    docs = docs_for(stack, "poison")
    xml = pubmed_xml(docs)
    stack.fake.add_pubmed_records(xml)
    expected = expected_from_xml(xml)
    with stack.http() as http:
        r = http.post("/v1/ingest", json={"pmids": [d.pmid for d in docs]})
        assert r.status_code == 202, r.text
        job_id = r.json()["job_id"]
    assert_exactly_once(stack, job_id, expected)
    with stack.http() as http:
        r = http.post("/v1/search", json={"query": docs[0].title, "mode": "hybrid", "top_n": 3})
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["pmid"] == docs[0].pmid
        r = http.post("/v1/ask", json={"question": f"What is known about {docs[1].title}?"})
        assert r.status_code == 200, r.text

    want = len(POISON_TOPICS) * 3 * partitions
    letters = asyncio.run(read_dead_letters(bootstrap, POISON_TOPICS, marker, want, 60))
    by_topic: dict[str, list[DeadLetter]] = {}
    for letter in letters:
        by_topic.setdefault(letter.topic, []).append(letter)
    for topic in POISON_TOPICS:
        got = by_topic.get(topic, [])
        assert len(got) == 3 * partitions, (topic, [(g.key, g.error_type) for g in got])
        for letter in got:
            assert letter.error_type and letter.error, letter
            assert marker in letter.payload
            assert letter.attempts == 1, letter  # poison is never retried
            assert letter.partition is not None and letter.offset is not None


# ----------------------------------------------------------------------------------------- retriever down


def test_search_answers_504_in_time_while_the_retriever_is_down(stack: Stack) -> None:
    """A gateway with a 3 s request timeout (the session stack's is 30 s), the retriever killed."""
    timeout_s = 3.0
    retriever = stack.services.processes["retriever"]
    with extra_gateway(stack, "short-timeout", {"EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": str(timeout_s)}) as url:
        retriever.kill()
        try:
            with httpx.Client(base_url=url, timeout=timeout_s + 30) as http:
                for _ in range(2):
                    start = time.monotonic()
                    r = http.post("/v1/search", json={"query": "aspirin and stroke prevention"})
                    took = time.monotonic() - start
                    assert r.status_code in (503, 504), r.text
                    assert "did not answer" in r.text or "unavailable" in r.text, r.text
                    # It gives up after its configured timeout: not before, and well before the
                    # session stack's 30 s (a loose upper bound: a busy CI machine is slow, not wrong).
                    assert timeout_s - 0.5 <= took < 25.0, took
        finally:
            retriever.start()
            stack.services.wait_ready(120, ["retriever"])
        # Back: once it has rejoined its consumer group, searches are answered again.
        deadline = time.monotonic() + 60
        with httpx.Client(base_url=url, timeout=60) as http:
            while True:
                r = http.post("/v1/search", json={"query": "aspirin and stroke prevention"})
                if r.status_code == 200 or time.monotonic() > deadline:
                    break
            assert r.status_code == 200, r.text


# ----------------------------------------------------------------------------------------- broker, database


@pytest.mark.disruptive
def test_kafka_broker_restart_mid_ingest_resumes_by_itself(stack: Stack) -> None:
    docs = docs_for(stack, "kafka")
    expected = expected_chunks(docs)
    ids = sorted(expected)
    job_id = publish_job(stack, docs)
    wait_until("the first vectors", lambda: (p := progress(stack, ids)) is not None and p.vectors >= 1, 90)
    kafka = stack.infra.kafka
    logged = {name: aiokafka_lines(p.log_path) for name, p in stack.services.processes.items()}
    outage_start = time.monotonic()
    struck_at = db_now(stack)
    kafka.stop()
    before = progress(stack, ids)
    assert before is not None and before.vectors < sum(expected.values()), before
    try:
        time.sleep(5.0)
    finally:
        kafka.start(timeout=120)
    outage_s = time.monotonic() - outage_start
    assert_exactly_once(stack, job_id, expected)
    assert vectors_since(stack, ids, struck_at) > 0  # work was in flight when the broker went away
    assert_side_effects(stack, expected, redone_at_most=sum(expected.values()) - before.vectors)
    # aiokafka's producer used to retry metadata in a busy loop while the broker was away: 1,600-3,700
    # error lines a second in the parser (shared.kafka.metadata_backoff.install_metadata_backoff). Its clients' normal
    # retries every retry_backoff_ms (100 ms) log ~140 lines/s in the fetcher (one producer, two
    # consumers): the bound sits between the two.
    for name, p in stack.services.processes.items():
        new = aiokafka_lines(p.log_path)[len(logged[name]) :]
        rate = len(new) / outage_s
        top = Counter(new).most_common(4)
        assert rate < 400, f"{name}: {rate:.0f} aiokafka log lines/s during a {outage_s:.0f}s outage: {top}"
    stack.services.wait_ready(60)  # every service reconnected by itself: nothing was restarted
    with stack.http() as http:
        r = http.post("/v1/search", json={"query": docs[0].title, "top_n": 3})
        assert r.status_code == 200, r.text
        assert r.json()["hits"][0]["pmid"] == docs[0].pmid


@pytest.mark.disruptive
def test_postgres_down_10s_mid_ingest_parser_and_retriever_recover(stack: Stack) -> None:
    docs = docs_for(stack, "postgres")
    expected = expected_chunks(docs)
    ids = sorted(expected)
    job_id = publish_job(stack, docs)
    wait_until("the first vectors", lambda: (p := progress(stack, ids)) is not None and p.vectors >= 1, 90)
    postgres = stack.infra.postgres
    struck_at = db_now(stack)
    before = progress(stack, ids)
    postgres.stop()
    try:
        time.sleep(10.0)
    finally:
        postgres.start()
    assert before is not None and before.vectors < sum(expected.values()), before
    assert_exactly_once(stack, job_id, expected)
    # Vectors written after the database came back: the ingest was under way when it went down.
    assert vectors_since(stack, ids, struck_at) >= sum(expected.values()) - before.vectors > 0
    assert_side_effects(stack, expected, redone_at_most=sum(expected.values()) - before.vectors)
    stack.services.wait_ready(60)
