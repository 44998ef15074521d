"""Evidence-aware ranking on a real PostgreSQL 18 + pgvector (issue #19): the stored evidence weight and year
reach the searcher, which re-scores equally relevant passages by them; weights 0 change nothing.

Only PostgreSQL is started (a private cluster), not the service stack.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import numpy as np
import pytest

from services.parser.store import store_document
from services.retriever.engine.config import SearchConfig
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.ranking.blends import EvidenceBlend
from services.retriever.engine.vector.tables import VectorIndex, create_index, upsert_vectors
from shared.db import create_pool
from shared.models import EVIDENCE_WEIGHTS, Chunk, ParsedDocument, SearchFilters, StudyType
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 8
TEXT = "Statins lower cardiovascular events in adults."
# pmid -> (study type or None, year): the same passage in each, so relevance is equal.
DOCS: dict[str, tuple[StudyType | None, int | None]] = {
    "21": ("editorial", 2024),
    "22": (None, None),
    "23": ("meta-analysis", 1996),
    "24": ("randomized-controlled-trial", 2025),
}


def doc(pmid: str, study_type: StudyType | None, year: int | None) -> ParsedDocument:
    chunk = Chunk(section="Abstract", ordinal=0, text=TEXT, token_count=8, char_start=0, char_end=len(TEXT))
    return ParsedDocument(
        source_id=pmid,
        pmid=pmid,
        title="Statins and cardiovascular events",
        abstract=TEXT,
        year=year,
        study_type=study_type,
        evidence_level=None if study_type is None else EVIDENCE_WEIGHTS[study_type],
        chunks=[chunk],
    )


@pytest.fixture(scope="module")
async def corpus(migrated_postgres_url: str) -> AsyncIterator[tuple[asyncpg.Pool, VectorIndex, np.ndarray]]:
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": migrated_postgres_url})
    pool = await create_pool(db)
    await pool.execute("TRUNCATE documents CASCADE")
    for pmid, (study_type, year) in DOCS.items():
        await store_document(pool, doc(pmid, study_type, year))
    index = await create_index(pool, "evidence-test-model", DIM, db, activate=True)
    rows = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id")
    vector = np.ones(DIM, dtype=np.float32) / np.sqrt(DIM)  # every passage as near the query as the others
    await upsert_vectors(
        pool, index, [r["chunk_id"] for r in rows], [r["document_id"] for r in rows], np.stack([vector] * len(rows))
    )
    try:
        yield pool, index, vector
    finally:
        await pool.close()


ARGS = {"top_k": 10, "top_n": 10, "filters": SearchFilters()}


async def test_equal_relevance_is_ordered_by_stored_evidence(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    plain = (
        await SearchEngine(pool, index, SearchConfig(ef_search=40)).search("statins", query, mode="dense", **ARGS)
    ).hits  # type: ignore[arg-type]
    graded = SearchEngine(pool, index, SearchConfig(ef_search=40, evidence=EvidenceBlend(0.2)))
    hits = (await graded.search("statins", query, mode="dense", **ARGS)).hits  # type: ignore[arg-type]
    assert [h.pmid for h in hits] == ["23", "24", "22", "21"]  # meta-analysis, RCT, unclassified, editorial
    assert [h.rank for h in hits] == [1, 2, 3, 4]
    levels = {h.pmid: h.evidence_level for h in hits}
    assert levels["22"] is None  # stored as `real`: 0.9 reads back as 0.8999999762
    assert [levels[p] for p in ("23", "24", "21")] == [pytest.approx(1.0), pytest.approx(0.9), pytest.approx(0.3)]
    before = {h.pmid: h.score for h in plain}
    after = {h.pmid: h.score for h in hits}
    assert after["23"] == pytest.approx(before["23"] * 1.1)
    assert after["22"] == pytest.approx(before["22"])  # unclassified: unchanged
    # Hybrid: the fused scores of equal passages differ by their (arbitrary) ranks, up to 5 %; weight 1 outweighs it.
    strong = SearchEngine(pool, index, SearchConfig(ef_search=40, evidence=EvidenceBlend(1.0)))
    hybrid = (await strong.search("statins", query, mode="hybrid", **ARGS)).hits  # type: ignore[arg-type]
    assert [h.pmid for h in hybrid] == ["23", "24", "22", "21"]


async def test_recency_orders_by_year_and_weights_zero_change_nothing(corpus: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = corpus
    recent = SearchEngine(
        pool, index, SearchConfig(ef_search=40, evidence=EvidenceBlend(0.0, 0.5, 10.0, this_year=2026))
    )
    hits = (await recent.search("statins", query, mode="dense", **ARGS)).hits  # type: ignore[arg-type]
    assert [h.pmid for h in hits] == ["24", "21", "22", "23"]  # 2025, 2024, undated (neutral), 1996
    off = SearchEngine(pool, index, SearchConfig(ef_search=40, evidence=EvidenceBlend(0.0, 0.0, 10.0, this_year=2026)))
    plain = SearchEngine(pool, index, SearchConfig(ef_search=40))
    for mode in ("dense", "lexical", "hybrid"):
        a = (await off.search("statins", query, mode=mode, **ARGS)).hits  # type: ignore[arg-type]
        b = (await plain.search("statins", query, mode=mode, **ARGS)).hits  # type: ignore[arg-type]
        assert [(h.chunk_id, h.score) for h in a] == [(h.chunk_id, h.score) for h in b]
