"""``shared.ingestion.submit_documents``: the one sequence that starts every ingestion job (the gateway's
``/v1/ingest``, its evidence workflow, ``evidentia ingest --file``), against a recording database and
publisher. The SQL itself runs against PostgreSQL in the integration tests (test_provenance,
test_parser_pipeline, test_faults)."""

from __future__ import annotations

from typing import Any

from shared.events import DocumentFetched, Event, IngestRequested, ncbi_sources
from shared.ingestion import document_event, submit_documents
from shared.kafka.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS
from shared.models import ParsedDocument
from shared.settings import KafkaSettings


class RecordingDb:
    """Every statement, in order, reduced to its table and verb (and the ids it was given)."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    async def execute(self, sql: str, *args: Any) -> str:
        words = sql.split()
        verb = words[0].upper()
        table = words[2] if verb == "INSERT" else words[1]
        self.log.append((f"{verb} {table}", args))
        return f"{verb} 0 1"


def document(pmid: str, text: str = "Aspirin lowered the risk.") -> DocumentFetched:
    doc = ParsedDocument(source="pubmed", source_id=pmid, title=f"Study {pmid}", abstract=text)  # type: ignore[call-arg]
    return DocumentFetched(
        document_id=doc.document_id, source="pubmed", source_id=pmid, format="document-json", document=doc, job_id="j"
    )


async def test_documents_are_recorded_then_published_and_an_oversized_one_fails_with_its_reason() -> None:
    db = RecordingDb()
    published: list[tuple[str, str, str]] = []
    failed: list[tuple[str, str]] = []

    async def publish(event: Event, topic: str, key: str) -> None:
        published.append((type(event).__name__, topic, key))

    small, large = document("1"), document("2", "x" * 40_000)
    kafka = KafkaSettings(max_request_size=64 * 1024 + 30_000)  # type: ignore[call-arg]  # 30 kB usable
    n = await submit_documents(
        db,  # type: ignore[arg-type]
        publish,
        kafka,
        job_id="j",
        kind="documents",
        params={"n": 2},
        documents=[small, large],
        window=8,
        on_failed=lambda i, why: failed.append((i, why)),
    )
    assert n == 1
    assert published == [("DocumentFetched", DOCUMENTS_FETCHED, "pubmed:1")]
    assert [i for i, _ in failed] == ["pubmed:2"] and "over the Kafka message limit" in failed[0][1]
    steps = [s for s, _ in db.log]
    assert steps[0] == "INSERT ingest_jobs"  # the job exists before anything of it is published
    assert steps[1:3] == ["INSERT ingest_job_documents", "INSERT document_status"]  # attached, then `fetched`
    assert db.log[3][0] == "INSERT document_status" and db.log[3][1][:2] == (["pubmed:2"], "failed")
    assert steps[-1] == "UPDATE ingest_jobs" and db.log[-1][1][:2] == ("j", "discovered")


async def test_a_discovery_request_is_published_and_leaves_the_job_to_the_fetcher() -> None:
    db = RecordingDb()
    published: list[tuple[str, str, str]] = []

    async def publish(event: Event, topic: str, key: str) -> None:
        published.append((type(event).__name__, topic, key))

    request = IngestRequested(job_id="q1", sources=ncbi_sources(query="metformin AND pcos"), max_results=5)
    n = await submit_documents(
        db,  # type: ignore[arg-type]
        publish,
        KafkaSettings(),  # type: ignore[call-arg]
        job_id="q1",
        kind="query",
        params={"query": "metformin AND pcos"},
        request=request,
    )
    assert n == 0
    assert published == [("IngestRequested", INGEST_REQUESTS, "q1")]
    # only the job row: no document rows, and not marked discovered (the fetcher does that when it has)
    assert [s for s, _ in db.log] == ["INSERT ingest_jobs"]


def test_a_structured_document_becomes_the_document_json_event_the_parser_reads() -> None:
    doc = ParsedDocument(source="pmc", source_id="PMC42", title="Own full text", abstract="Metformin helped.")  # type: ignore[call-arg]
    event = document_event(doc, job_id="job-7", trace_id="t-1")
    assert (event.document_id, event.source, event.source_id) == ("pmc:PMC42", "pmc", "PMC42")
    assert event.format == "document-json" and event.content is None and event.content_ref is None
    assert event.document == doc and (event.job_id, event.trace_id) == ("job-7", "t-1")
    # it travels: the JSON a consumer reads back is the same event
    assert DocumentFetched.model_validate_json(event.model_dump_json()) == event


def test_without_a_trace_id_each_document_event_gets_a_trace_of_its_own() -> None:
    doc = ParsedDocument(source="pubmed", source_id="9", title="No trace given")  # type: ignore[call-arg]
    first, second = document_event(doc), document_event(doc)
    assert first.job_id is None and first.trace_id and second.trace_id
    assert first.trace_id != second.trace_id  # a fresh one each time (no tracing span is active here)
