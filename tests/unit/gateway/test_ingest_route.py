"""``POST /v1/ingest`` through the real app with its pool and Kafka client replaced by recording fakes
(``app.dependency_overrides``): what each form of request publishes, and in which order the job is
recorded. The statements themselves run against PostgreSQL in tests/integration/test_provenance.py."""

from __future__ import annotations

from typing import Any

from services.gateway import deps
from shared.events import DocumentFetched, Event, IngestRequested, SourceRequest
from shared.ingestion import document_event
from shared.kafka.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS
from shared.models import ParsedDocument
from tests.unit.gateway.conftest import build_app, client


class RecordingPool:
    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    async def fetch(self, query: str, *args: Any) -> list[dict[str, str]]:  # the provenance look-up: no NCBI ids
        return []

    async def execute(self, sql: str, *args: Any) -> str:
        words = sql.split()
        self.statements.append((f"{words[0]} {words[2] if words[0] == 'INSERT' else words[1]}", args))
        return f"{words[0]} 0 1"


class RecordingKafka:
    def __init__(self) -> None:
        self.published: list[tuple[Event, str, str]] = []

    async def publish(self, event: Event, topic: str, key: str) -> None:
        self.published.append((event, topic, key))


def app_with_fakes() -> tuple[Any, RecordingPool, RecordingKafka]:
    app, _, _ = build_app()
    pool, kafka = RecordingPool(), RecordingKafka()
    app.dependency_overrides[deps.get_pool] = lambda: pool
    app.dependency_overrides[deps.get_kafka] = lambda: kafka
    return app, pool, kafka


async def test_pmids_and_inline_documents_start_one_job_that_publishes_both() -> None:
    app, pool, kafka = app_with_fakes()
    own = {"source": "pubmed", "source_id": "555", "title": "An own document"}
    async with client(app) as http:
        r = await http.post("/v1/ingest", json={"pmids": [" 10808977 "], "documents": [own]})
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    assert r.json()["status_url"] == f"/v1/ingest/{job_id}"
    (request, t1, k1), (doc, t2, k2) = kafka.published
    assert isinstance(request, IngestRequested) and (t1, k1) == (INGEST_REQUESTS, job_id)
    assert request.sources == [SourceRequest(source="pubmed", ids=["10808977"])] and request.job_id == job_id
    assert isinstance(doc, DocumentFetched) and (t2, k2) == (DOCUMENTS_FETCHED, "pubmed:555")
    assert doc.job_id == job_id and doc.format == "document-json"
    # built as every structured document is (the JSON-lines import too), in the request's trace
    built = document_event(ParsedDocument.model_validate(own), job_id=job_id, trace_id=doc.trace_id)
    assert doc == built.model_copy(update={"created_at": doc.created_at})
    job = pool.statements[0]
    assert job[0] == "INSERT ingest_jobs" and job[1][:2] == (job_id, "documents")
    # a job that also discovers is left to the fetcher to mark discovered
    assert "UPDATE ingest_jobs" not in [s for s, _ in pool.statements]


async def test_inline_documents_alone_make_a_job_marked_discovered_once_published() -> None:
    app, pool, kafka = app_with_fakes()
    docs = [{"source": "pubmed", "source_id": str(i), "title": f"Own {i}"} for i in (1, 2)]
    async with client(app) as http:
        r = await http.post("/v1/ingest", json={"documents": docs})
    assert r.status_code == 202, r.text
    assert [(t, k) for _, t, k in kafka.published] == [(DOCUMENTS_FETCHED, "pubmed:1"), (DOCUMENTS_FETCHED, "pubmed:2")]
    last = pool.statements[-1]
    assert last[0] == "UPDATE ingest_jobs" and last[1][:2] == (r.json()["job_id"], "discovered")


async def test_a_query_and_ids_at_a_source_of_its_own_become_that_source_s_request() -> None:
    app, _, kafka = app_with_fakes()
    body = {"source": "clinicaltrials", "query": "metformin", "ids": ["nct01234567"]}
    async with client(app) as http:
        r = await http.post("/v1/ingest", json=body)
        assert r.status_code == 202, r.text
        pmc = await http.post("/v1/ingest", json={"source": "pmc", "ids": ["pmc5"], "full_text": True})
        assert pmc.status_code == 202, pmc.text
        by_condition = {"source": "clinicaltrials", "condition": "asthma", "intervention": "budesonide"}
        assert (await http.post("/v1/ingest", json=by_condition)).status_code == 202
        for wrong in (
            {"source": "clinicaltrials", "ids": ["NCT123"]},
            {"source": "bookshelf", "query": "malaria"},
            {"source": "pubmed", "ids": ["abc"]},
            {"condition": "asthma"},  # a ClinicalTrials.gov search at PubMed
        ):
            bad = await http.post("/v1/ingest", json=wrong)
            assert bad.status_code == 422, (wrong, bad.text)
    (request, topic, _), (at_pmc, _, _), (searched, _, _) = kafka.published
    assert isinstance(request, IngestRequested) and topic == INGEST_REQUESTS
    assert request.sources == [SourceRequest(source="clinicaltrials", query="metformin", ids=["NCT01234567"])]
    assert isinstance(at_pmc, IngestRequested)
    assert at_pmc.sources == [SourceRequest(source="pmc", ids=["PMC5"], options={"full_text": True})]
    assert isinstance(searched, IngestRequested)
    options = {"condition": "asthma", "intervention": "budesonide"}
    assert searched.sources == [SourceRequest(source="clinicaltrials", options=options)]
