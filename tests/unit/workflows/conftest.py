"""The workflows without Kafka: a fake backend (retrieval from fixed passages, the real synthesizer core,
PubMed counts from a table, ingestion jobs that finish at once) and the fake Anthropic server."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import anthropic
import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from services.gateway import deps
from services.gateway.app import create_app
from services.gateway.intelligence.cache import MemoryCache
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.store.consultations import MemoryConsultationStore
from services.gateway.workflows.base import WorkflowContext
from services.retriever.engine.queries import render
from services.synthesizer.core import Synthesizer
from services.synthesizer.llm import ClaudeAnswerer
from shared.db.jobs import JobStatus
from shared.events import RetrievalReply, RetrievalRequest, SourceRequest, SynthesisReply, SynthesisRequest
from shared.models import ParsedDocument, SearchFilters, SearchHit
from shared.settings import GatewaySettings, LlmSettings, Settings, WorkflowSettings
from tests.fakes.llm_steps import step_llm
from tests.fakes.workflow_anthropic import WorkflowAnthropic

MALARIA_BOOK = "Guidelines for the treatment of malaria (test edition)"


def label_hits(labels: list[ParsedDocument], filters: SearchFilters) -> list[SearchHit]:
    """As the store answers a label search: one hit per section of each label whose drug is among
    ``filters.drugs`` (its ``match_terms``), in the named ``filters.sections`` when there are some."""
    wanted = set(filters.drugs)
    hits: list[SearchHit] = []
    for doc in labels:
        if doc.drug_label is None or (wanted and not wanted & set(doc.drug_label.match_terms)):
            continue
        for sec in doc.sections:
            if filters.sections and sec.title not in filters.sections:
                continue
            hits.append(
                SearchHit(
                    chunk_id=f"{doc.document_id}#{sec.title}",
                    document_id=doc.document_id,
                    source=doc.source,
                    source_id=doc.source_id,
                    title=doc.title,
                    section=sec.title,
                    text=(doc.full_text or "")[sec.char_start : sec.char_end],
                    score=1.0,
                    rank=len(hits) + 1,
                    url=doc.url,
                )
            )
    return hits


def pubmed_hit(
    pmid: str,
    title: str,
    text: str,
    rank: int = 1,
    study_type: str = "randomized-controlled-trial",
    mesh_score: float = 0.8,
) -> SearchHit:
    return SearchHit(
        chunk_id=f"pubmed:{pmid}#a#0",
        document_id=f"pubmed:{pmid}",
        source="pubmed",
        source_id=pmid,
        pmid=pmid,
        title=title,
        journal="J Test",
        year=2010,
        study_type=study_type,
        text=text,
        score=1.0 / rank,
        dense_score=mesh_score,
        rank=rank,
        url=f"https://pubmed.ncbi.nlm.nih.gov/{pmid}/",
    )


def guideline_hit(nbk: str, chapter: str, section: str, text: str, rank: int) -> SearchHit:
    return SearchHit(
        chunk_id=f"bookshelf:{nbk}#{rank}",
        document_id=f"bookshelf:{nbk}",
        source="bookshelf",
        source_id=nbk,
        title=chapter,
        study_type="guideline",
        section=f"{MALARIA_BOOK} > {chapter} > {section}",
        text=text,
        score=1.0 / rank,
        dense_score=0.7,
        rank=rank,
        url=f"https://www.ncbi.nlm.nih.gov/books/{nbk}/",
    )


PUBMED = [
    pubmed_hit(
        "21593045",
        "Short-term metformin co-treatment in women with polycystic ovaries undergoing IVF",
        "Metformin co-treatment reduced the incidence of ovarian hyperstimulation syndrome in women with "
        "polycystic ovaries undergoing in vitro fertilisation.",
        1,
    ),
    pubmed_hit(
        "15125825",
        "Starting insulin in type 2 diabetes: continue oral hypoglycemic agents?",
        "Continuing metformin when starting insulin improved glycaemic control in type 2 diabetes.",
        2,
        "clinical-trial",
    ),
]
GUIDELINES = [
    guideline_hit(
        "NBK999002",
        "Treatment of uncomplicated malaria",
        "Artemisinin-based combination therapy",
        "Adults and children with uncomplicated P. falciparum malaria should be treated with an "
        "artemisinin-based combination therapy (ACT).",
        1,
    ),
    guideline_hit(
        "NBK999004",
        "Malaria in pregnancy",
        "First trimester of pregnancy",
        "For a pregnant woman in the first trimester with uncomplicated P. falciparum malaria, "
        "artemether plus lumefantrine is the recommended treatment.",
        2,
    ),
]


class FakeBackend:
    def __init__(self, synth: Synthesizer, counts: dict[str, int] | None = None, mesh: dict[str, int] | None = None):
        self.synth = synth
        self.counts = counts or {}
        self.mesh = mesh or {}
        self.retrievals: list[RetrievalRequest] = []
        self.syntheses: list[SynthesisRequest] = []
        self.count_terms: list[str] = []
        self.ingested: list[tuple[str, int]] = []
        self.source_jobs: list[tuple[SourceRequest, int]] = []
        self.trial_hits: list[SearchHit] = []
        self.guideline_hits = list(GUIDELINES)
        self.pubmed_hits = list(PUBMED)
        self.labels: list[ParsedDocument] = []
        self.openfda: list[ParsedDocument] = []
        """Labels openFDA serves (not stored): a label job stores those of the drugs it names."""
        self.label_jobs: list[list[str]] = []
        self.pubmed_terms: list[str] = []

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        """As the retriever: renders the query form (with the retriever's own rendering) and sends it back."""
        self.retrievals.append(request)
        rendered = render(request.query, request.query_form).rerank
        if request.filters.sources == ["clinicaltrials"]:
            return RetrievalReply(hits=self.trial_hits, rendered_query=rendered)
        if request.filters.sources == ["fda_label"]:
            return RetrievalReply(hits=label_hits(self.labels, request.filters), rendered_query=rendered)
        if request.filters.sources == ["bookshelf"]:
            hits = self.guideline_hits
            if "pregnan" in rendered.lower():
                hits = sorted(hits, key=lambda h: "pregnancy" not in (h.section or "").lower())
            return RetrievalReply(
                hits=[h.model_copy(update={"rank": i}) for i, h in enumerate(hits, 1)], rendered_query=rendered
            )
        return RetrievalReply(hits=self.pubmed_hits + self.guideline_hits, rendered_query=rendered)

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        self.syntheses.append(request)
        return await self.synth.answer(request)

    async def count(self, term: str, trace_id: str) -> int | None:
        self.count_terms.append(term)
        return self.counts.get(term, 0)

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str:
        self.ingested.append((query, max_results))
        return f"job-{len(self.ingested)}"

    async def ingest_source(self, source: SourceRequest, max_results: int, trace_id: str) -> str:
        self.source_jobs.append((source, max_results))
        return f"source-job-{len(self.source_jobs)}"

    async def job(self, job_id: str) -> JobStatus | None:
        return JobStatus(job_id=job_id, kind="query", state="discovered", total=2, counts={"embedded": 2})

    async def mesh_vocabulary(self) -> dict[str, int]:
        return self.mesh

    # the question-time fetch (``/v1/query``'s interaction check): openFDA's labels; PubMed finds nothing

    async def ingest_labels(self, drugs: Sequence[str], per_drug: int, trace_id: str) -> str:
        self.label_jobs.append(list(drugs))
        wanted = {d.lower() for d in drugs}
        self.labels += [d for d in self.openfda if d.drug_label and wanted & set(d.drug_label.match_terms)]
        return f"label-job-{len(self.label_jobs)}"

    async def search_pubmed(self, term: str, max_ids: int, trace_id: str, timeout_s: float) -> tuple[int, list[str]]:
        self.pubmed_terms.append(term)
        return 0, []

    async def unstored(self, document_ids: Sequence[str]) -> list[str]:
        return list(document_ids)

    async def ingest_pmids(self, pmids: Sequence[str], trace_id: str) -> str:
        return "pmid-job"

    async def stages(self, document_ids: Sequence[str]) -> dict[str, str]:
        return {}


@pytest.fixture(scope="module")
def fake_llm() -> Iterator[WorkflowAnthropic]:
    fake = WorkflowAnthropic()
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def llm_settings(fake: WorkflowAnthropic) -> LlmSettings:
    return LlmSettings(
        anthropic_api_key=SecretStr("k"),
        anthropic_base_url=fake.url,  # type: ignore[call-arg]
        model="claude-test",
    )


def workflow_llm(fake: WorkflowAnthropic | None) -> WorkflowLlm:
    """The gateway's step client; the steps run by the synthesizer's step runner in-process."""
    if fake is None:
        return step_llm(LlmSettings())  # type: ignore[call-arg]
    return step_llm(llm_settings(fake), anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0))


def build(
    fake: WorkflowAnthropic | None = None,
    *,
    counts: dict[str, int] | None = None,
    mesh: dict[str, int] | None = None,
    rxnav_url: str | None = None,
    gateway: GatewaySettings | None = None,
) -> tuple[FastAPI, WorkflowContext, FakeBackend]:
    settings = Settings(
        workflow=WorkflowSettings(rxnav_url=rxnav_url, ingest_wait_s=2),  # type: ignore[call-arg]
        gateway=gateway or GatewaySettings(),
    )
    app = create_app(settings)
    if fake is not None:
        client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
        synth = Synthesizer(settings, ClaudeAnswerer(llm_settings(fake), client))
    else:
        synth = Synthesizer(settings)
    backend = FakeBackend(synth, counts, mesh)
    cache, llm, rxnav = MemoryCache(), workflow_llm(fake), RxNavClient(rxnav_url)
    app.dependency_overrides[deps.get_workflow_backend] = lambda: backend
    app.dependency_overrides[deps.get_workflow_cache] = lambda: cache
    app.dependency_overrides[deps.get_workflow_llm] = lambda: llm
    app.dependency_overrides[deps.get_rxnav] = lambda: rxnav
    app.dependency_overrides[deps.get_pubmed_search] = lambda: backend
    app.dependency_overrides[deps.get_label_ingest] = lambda: backend
    consultations = MemoryConsultationStore()
    app.dependency_overrides[deps.get_consultation_store] = lambda: consultations
    return app, WorkflowContext(settings, backend, cache, llm, rxnav), backend


def client(app: FastAPI, key: str | None = None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway", headers=headers, timeout=30
    )
