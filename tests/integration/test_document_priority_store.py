"""Document priority on a real PostgreSQL 18 + pgvector (migration 211): how the parser's store sets it (own,
job's, kept, default), the job trigger for documents already stored, and search: priority 0 never returned
(dense, BM25, full-text, hybrid, chunks re-offered by a conversation), ``min_priority``, the boost.

Only PostgreSQL is started (a private cluster), not the service stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import numpy as np
import pytest

from services.parser.store import store_document
from services.retriever.engine.config import SearchConfig
from services.retriever.engine.lexical.postings import Bm25Scoring
from services.retriever.engine.lexical.rank import Bm25Params, bm25_rank, bm25_search
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.scored import Scored
from services.retriever.engine.vector.search import dense_search
from services.retriever.engine.vector.tables import VectorIndex
from shared.db import create_pool
from shared.db.jobs import add_job_documents, create_job
from shared.models import Chunk, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings
from tests.integration.db import index_random_vectors

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 8


def doc(pmid: str, text: str = "Aspirin lowers the risk of stroke.", priority: int | None = None) -> ParsedDocument:
    chunk = Chunk(section="Abstract", ordinal=0, text=text, token_count=8, char_start=0, char_end=len(text))
    return ParsedDocument(
        source_id=pmid, pmid=pmid, title=f"Aspirin study {pmid}", abstract=text, chunks=[chunk], priority=priority
    )


async def priority_of(pool: asyncpg.Pool, pmid: str) -> int:
    return int(await pool.fetchval("SELECT priority FROM documents WHERE document_id = $1", f"pubmed:{pmid}"))


async def test_the_stores_priority_rules(private_pool: asyncpg.Pool) -> None:
    pool = private_pool
    assert (await store_document(pool, doc("1"))).outcome == "inserted"
    assert await priority_of(pool, "1") == 50  # default: normal
    await store_document(pool, doc("2", priority=100))
    assert await priority_of(pool, "2") == 100

    again = await store_document(pool, doc("2", priority=10))  # same content, new priority
    assert again.outcome == "unchanged" and again.chunks == []  # nothing re-chunked or re-embedded
    assert await priority_of(pool, "2") == 10
    changed = await store_document(pool, doc("2", text="Aspirin, revised text."))  # no priority given
    assert changed.outcome == "updated" and await priority_of(pool, "2") == 10  # kept

    await create_job(pool, "job-high", "pmids", {"pmids": ["3"], "priority": 100})
    await create_job(pool, "job-plain", "pmids", {"pmids": ["3"]})
    await store_document(pool, doc("3"), job_id="job-high")
    assert await priority_of(pool, "3") == 100  # the job's
    await store_document(pool, doc("4", priority=0), job_id="job-high")
    assert await priority_of(pool, "4") == 0  # the document's own wins
    await store_document(pool, doc("3", text="New text."), job_id="job-plain")
    assert await priority_of(pool, "3") == 100  # a job without priority changes nothing
    with pytest.raises(asyncpg.CheckViolationError):
        await pool.execute("UPDATE documents SET priority = 101 WHERE document_id = 'pubmed:1'")


async def test_a_job_gives_its_priority_to_documents_already_stored(private_pool: asyncpg.Pool) -> None:
    pool = private_pool
    for pmid in ("5", "6"):
        await store_document(pool, doc(pmid))
    await create_job(pool, "exclude", "query", {"query": "aspirin", "priority": 0, "priority_stored": True})  # admin
    await create_job(pool, "plain", "query", {"query": "aspirin"})
    await add_job_documents(pool, "exclude", ["pubmed:5", "pubmed:999"])  # 999: not stored (yet)
    await add_job_documents(pool, "plain", ["pubmed:6"])
    assert await priority_of(pool, "5") == 0
    assert await priority_of(pool, "6") == 50
    await store_document(pool, doc("999"), job_id="exclude")  # fetched later: the parser applies it
    assert await priority_of(pool, "999") == 0


async def test_without_the_admin_right_a_jobs_priority_reaches_only_the_documents_it_creates(
    private_pool: asyncpg.Pool,
) -> None:
    """Migration 230: an ``ingest`` key's job (no ``priority_stored``) cannot hide a stored record, neither
    through the job trigger (a stored PMID attached, not fetched again) nor through the parser's store (the
    record fetched again, unchanged or changed); a document it creates takes the job's priority."""
    pool = private_pool
    await store_document(pool, doc("20"))  # an NCBI record stored before, priority 50
    await create_job(pool, "ingest-key", "pmids", {"pmids": ["20", "21"], "priority": 0})
    await add_job_documents(pool, "ingest-key", ["pubmed:20", "pubmed:21"])
    assert await priority_of(pool, "20") == 50  # the trigger left the stored record alone
    assert (await store_document(pool, doc("20"), job_id="ingest-key")).outcome == "unchanged"  # refresh
    assert await priority_of(pool, "20") == 50
    updated = await store_document(pool, doc("20", text="Aspirin, a revised abstract."), job_id="ingest-key")
    assert updated.outcome == "updated" and await priority_of(pool, "20") == 50
    await store_document(pool, doc("21"), job_id="ingest-key")  # created by the job
    assert await priority_of(pool, "21") == 0
    await create_job(pool, "admin-key", "pmids", {"pmids": ["20"], "priority": 10, "priority_stored": True})
    await add_job_documents(pool, "admin-key", ["pubmed:20"])
    assert await priority_of(pool, "20") == 10


PRIORITIES = {"10": 0, "11": 10, "12": 50, "13": 100, "14": 50, "15": 50}


@pytest.fixture(scope="module")
async def corpus(migrated_postgres_url: str) -> AsyncIterator[tuple[asyncpg.Pool, VectorIndex, np.ndarray]]:
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": migrated_postgres_url})
    pool = await create_pool(db)
    await pool.execute("TRUNCATE documents CASCADE")
    for pmid, priority in PRIORITIES.items():
        await store_document(pool, doc(pmid, f"Aspirin and stroke prevention, trial {pmid}.", priority))
    index, vectors = await index_random_vectors(pool, db, "priority-test-model", DIM, seed=5)
    try:
        yield pool, index, vectors[0]
    finally:
        await pool.close()


def pmids(ids: list[str], chunk_doc: dict[str, str]) -> set[str]:
    return {chunk_doc[c].split(":")[1] for c in ids}


async def test_priority_zero_is_never_returned_and_min_priority_bounds(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    chunk_doc = {r["chunk_id"]: r["document_id"] for r in await pool.fetch("SELECT chunk_id, document_id FROM chunks")}
    visible = {p for p, v in PRIORITIES.items() if v > 0}
    everything = SearchFilters(include_retracted=True)
    dense = await dense_search(pool, index, query, 50, everything, ef_search=40)
    assert pmids([h.chunk_id for h in dense], chunk_doc) == visible
    bm25 = await bm25_search(pool, "aspirin stroke", 50, everything, Bm25Params(), CorpusStats())
    assert pmids([h.chunk_id for h in bm25], chunk_doc) == visible
    first = await _bm25_filter_first(pool, "aspirin", everything)
    assert pmids([h.chunk_id for h in first], chunk_doc) == visible
    high = SearchFilters(min_priority=50)
    assert pmids([h.chunk_id for h in await dense_search(pool, index, query, 50, high, 40)], chunk_doc) == {
        "12",
        "13",
        "14",
        "15",
    }


async def test_hybrid_hits_carry_priority_and_drop_excluded_re_offered_chunks(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    excluded = await pool.fetchval("SELECT chunk_id FROM chunks WHERE document_id = 'pubmed:10'")
    low = await pool.fetchval("SELECT chunk_id FROM chunks WHERE document_id = 'pubmed:11'")
    searcher = SearchEngine(pool, index, SearchConfig(ef_search=40))
    result = await searcher.search(
        "aspirin stroke",
        query,
        mode="hybrid",
        top_k=2,
        top_n=2,
        filters=SearchFilters(min_priority=100),
        extra_chunk_ids=[excluded, low],  # cited by earlier turns of a conversation
    )
    by_doc = {h.document_id: h.priority for h in result.hits}
    assert by_doc == {"pubmed:13": 100, "pubmed:11": 10}  # the low one re-offered, the excluded one not


async def test_the_boost_lifts_high_priority_documents(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    plain = SearchEngine(pool, index, SearchConfig(ef_search=40))
    boosted = SearchEngine(pool, index, SearchConfig(ef_search=40, priority_boost=1.0))
    args = {"mode": "hybrid", "top_k": 10, "top_n": 10, "filters": SearchFilters()}
    before = {h.document_id: h.score for h in (await plain.search("aspirin stroke", query, **args)).hits}  # type: ignore[arg-type]
    hits = (await boosted.search("aspirin stroke", query, **args)).hits  # type: ignore[arg-type]
    after = {h.document_id: h.score for h in hits}
    assert set(before) == set(after) and "pubmed:10" not in after
    assert after["pubmed:13"] == pytest.approx(2 * before["pubmed:13"])  # high (100) at boost 1.0: doubled
    assert after["pubmed:11"] == pytest.approx(0.2 * before["pubmed:11"])  # low (10): a fifth
    assert after["pubmed:12"] == pytest.approx(before["pubmed:12"])  # normal: unchanged
    assert hits[0].document_id == "pubmed:13" and hits[-1].document_id == "pubmed:11"


async def _bm25_filter_first(pool: asyncpg.Pool, query: str, filters: SearchFilters) -> list[Scored]:
    """BM25 with the filter resolved first (the path of a selective filter)."""
    p = Bm25Params()
    scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, await CorpusStats().get(pool))
    return await bm25_rank(pool, query, 50, filters, scoring, filter_first_max=10_000)
