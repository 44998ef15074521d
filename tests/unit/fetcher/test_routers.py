"""The fetcher's routers in process (FastStream's test broker, the fake E-utilities, a recording database):
an ingest request goes to its sources, discovered PMIDs come back as PubMed records with their PMC full text,
and a source fetched inline publishes its documents attached to the job."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from faststream.kafka import KafkaBroker, TestKafkaBroker

from services.fetcher.bookshelf import BookshelfClient
from services.fetcher.eutils import EutilsClient
from services.fetcher.routers import register
from services.fetcher.state import FetcherState
from shared.events import DocumentFetched, IngestRequested, PmidDiscovered, SourceRequest
from shared.kafka.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS, PMIDS_DISCOVERED
from shared.settings import Settings
from shared.sources import SourceRule
from tests.fakes.eutils_server import FakeEutils, fake_ncbi_settings

RECORD_WITH_FULL_TEXT = (
    b'<PubmedArticleSet><PubmedArticle><MedlineCitation><PMID Version="1">17299597</PMID>'
    b"<Article><ArticleTitle>An article with open-access full text</ArticleTitle></Article>"
    b"</MedlineCitation></PubmedArticle></PubmedArticleSet>"
)


class RecordingPool:
    """Answers as an empty database would and records every statement with its arguments."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    async def execute(self, sql: str, *args: Any) -> str:
        self.statements.append((" ".join(sql.split()), args))
        return "INSERT 0 1"

    async def fetch(self, sql: str, *args: Any) -> list[Any]:
        self.statements.append((" ".join(sql.split()), args))
        return []

    async def fetchrow(self, sql: str, *args: Any) -> None:
        self.statements.append((" ".join(sql.split()), args))
        return None

    async def fetchval(self, sql: str, *args: Any) -> None:
        self.statements.append((" ".join(sql.split()), args))
        return None

    def ids_staged(self, stage: str) -> list[str]:
        return [
            i
            for s, a in self.statements
            if s.startswith("INSERT INTO document_status") and stage in a
            for i in (a[0] if isinstance(a[0], list) else [])
        ]


def _state(fake: FakeEutils, pool: RecordingPool) -> FetcherState:
    ncbi = fake_ncbi_settings(fake)
    state = FetcherState(Settings(ncbi=ncbi))
    state._pool = pool  # type: ignore[assignment]
    state._client = EutilsClient(ncbi)
    state._bookshelf = BookshelfClient(ncbi)
    return state


async def _run(state: FetcherState, request: IngestRequested) -> tuple[list[PmidDiscovered], list[DocumentFetched]]:
    broker = KafkaBroker()
    register(broker, state)
    discovered: list[PmidDiscovered] = []
    fetched: list[DocumentFetched] = []

    @broker.subscriber(PMIDS_DISCOVERED, group_id="test-pmids")
    async def on_discovered(event: PmidDiscovered) -> None:
        discovered.append(event)

    @broker.subscriber(DOCUMENTS_FETCHED, group_id="test-documents")
    async def on_fetched(event: DocumentFetched) -> None:
        fetched.append(event)

    async with TestKafkaBroker(broker) as br:
        await br.publish(request, topic=INGEST_REQUESTS, key=request.job_id.encode())
    await state.client.aclose()
    await state.bookshelf.aclose()
    return discovered, fetched


async def test_a_version_1_request_for_pmids_with_full_text_fetches_records_and_full_text(
    fake_eutils: FakeEutils,
) -> None:
    fake_eutils.add_pubmed_records(RECORD_WITH_FULL_TEXT)
    pool = RecordingPool()
    v1 = {"schema_version": 1, "job_id": "job-1", "pmids": ["17299597", "9997"], "full_text": True}
    discovered, fetched = await _run(_state(fake_eutils, pool), IngestRequested.model_validate(v1))
    assert [(e.pmid, e.job_id, e.full_text) for e in discovered] == [
        ("17299597", "job-1", True),
        ("9997", "job-1", True),
    ]
    ids = {e.document_id: e for e in fetched}
    assert {"pubmed:17299597", "pubmed:9997", "pmc:PMC1790863"} <= set(ids)
    assert ids["pmc:PMC1790863"].format == "jats-xml" and ids["pmc:PMC1790863"].job_id == "job-1"
    assert ids["pubmed:9997"].format == "pubmed-xml" and ids["pubmed:9997"].job_id == "job-1"
    job_states = [a[1] for s, a in pool.statements if s.startswith("UPDATE ingest_jobs SET state")]
    assert job_states == ["discovered", "discovered"]  # by discovery, then by the router once all is published


class FakeTrials:
    """A source fetched inline: its units are its own ids, each one document."""

    rule = SourceRule(name="pubmed", citation_kind="PMID", record_url="https://example.org/{id}")

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[str]:
        return [*request.ids, "X2"][:max_results]

    async def fetch(
        self, units: Sequence[str], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[DocumentFetched]:
        for unit in units:
            yield DocumentFetched(
                document_id=f"pubmed:{unit}",
                source="pubmed",
                source_id=unit,
                format="pubmed-xml",
                content=f"<PubmedArticle>{unit}</PubmedArticle>",
                job_id=job_id,
            )

    def identify(self, event: DocumentFetched) -> list[str]:
        return [event.document_id]


async def test_a_source_without_a_topic_of_its_own_is_fetched_inline(fake_eutils: FakeEutils) -> None:
    pool = RecordingPool()
    state = _state(fake_eutils, pool)
    state.sources.by_pmid.clear()
    state.sources.inline["pubmed"] = FakeTrials()
    request = IngestRequested(job_id="job-2", sources=[SourceRequest(source="pubmed", ids=["X1"])], max_results=5)
    discovered, fetched = await _run(state, request)
    assert discovered == []  # nothing went the PubMed way
    assert [(e.document_id, e.job_id) for e in fetched] == [("pubmed:X1", "job-2"), ("pubmed:X2", "job-2")]
    attached = next(a for s, a in pool.statements if s.startswith("INSERT INTO ingest_job_documents"))
    assert attached[0] == "job-2" and attached[1] == ["pubmed:X1", "pubmed:X2"]
    assert [a[1] for s, a in pool.statements if s.startswith("UPDATE ingest_jobs SET state")] == ["discovered"]
