"""The `sections` search filter on a real PostgreSQL 18 + pgvector: the store's ``section_names()`` rule
(migration 210) and the retriever's filter in dense, lexical (BM25 exact, BM25 top-M, full-text) and hybrid search.

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
from services.retriever.engine.lexical.rank import Bm25Params, bm25_rank
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.vector.search import dense_search
from services.retriever.engine.vector.tables import VectorIndex
from shared.db import create_pool
from shared.models import Chunk, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings
from tests.integration.db import index_random_vectors

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 8
# (section path as the parsers write it, text); every chunk mentions statins so every search matches all.
SECTIONS = [
    ("Background", "Statins lower cholesterol; dementia risk was the question."),
    ("Materials and Methods", "Statins were given to 400 patients in a cohort."),
    ("Methods > Statistical analysis", "Statins and dementia were compared with Cox models."),
    ("3. Results", "Statins reduced dementia incidence by a fifth."),
    ("Results > Subgroups", "Statins helped older patients most."),
    ("Discussion", "Statins may protect through vascular effects."),
    ("Conclusions/Significance", "Statins are associated with lower dementia risk."),
    ("CONCLUSION", "Statins should be studied in trials for dementia."),
]
N_DOCS = 12


def _doc(i: int) -> ParsedDocument:
    chunks = [
        Chunk(section=section, ordinal=n, text=f"{text} Paper {i}.", token_count=12, char_start=0, char_end=10)
        for n, (section, text) in enumerate(SECTIONS)
    ]
    return ParsedDocument(
        source="pmc",
        source_id=f"PMC{900 + i}",
        pmcid=f"PMC{900 + i}",
        title=f"Statins and dementia, paper {i}",
        year=2020,
        chunks=chunks,
    )


@pytest.fixture(scope="module")
async def store(migrated_postgres_url: str) -> AsyncIterator[tuple[asyncpg.Pool, VectorIndex, np.ndarray]]:
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": migrated_postgres_url})
    pool = await create_pool(db)
    for i in range(N_DOCS):
        await store_document(pool, _doc(i))
    index, vectors = await index_random_vectors(pool, db, "section-test-model", DIM, seed=3)
    try:
        yield pool, index, vectors[0]
    finally:
        await pool.close()


async def _sections_of(pool: asyncpg.Pool, chunk_ids: list[str]) -> set[str]:
    rows = await pool.fetch("SELECT DISTINCT section FROM chunks WHERE chunk_id = ANY($1::text[])", chunk_ids)
    return {r["section"] for r in rows}


@pytest.mark.parametrize(
    ("path", "names"),
    [
        ("Results", ["result"]),
        ("3. Results", ["result"]),
        ("Methods > Statistical analysis", ["method", "statistical analysi"]),
        ("Materials and Methods", ["material", "method"]),
        ("Results & Discussion", ["discussion", "result"]),
        ("Conclusions/Significance", ["conclusion", "significance"]),
        ("IV. CONCLUSIONS.", ["conclusion"]),
        ("2.1 Study design:", ["study design"]),
        ("Introduction", ["introduction"]),  # a leading "i" is not a roman numeral without its dot
        ("Abstract", ["abstract"]),
    ],
)
async def test_section_names_reads_a_heading_path(store: tuple, path: str, names: list[str]) -> None:  # type: ignore[type-arg]
    pool, _, _ = store
    assert await pool.fetchval("SELECT section_names($1)", path) == names
    assert await pool.fetchval("SELECT section_names(NULL)") is None


async def test_dense_search_keeps_only_the_named_sections(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = store
    hits = await dense_search(pool, index, query, 200, SearchFilters(sections=["results"]), ef_search=40)
    assert len(hits) == 2 * N_DOCS  # "3. Results" and "Results > Subgroups" of every paper, nothing else
    assert await _sections_of(pool, [h.chunk_id for h in hits]) == {"3. Results", "Results > Subgroups"}
    unfiltered = await dense_search(pool, index, query, 200, SearchFilters(), ef_search=40)
    assert len(unfiltered) == len(SECTIONS) * N_DOCS


@pytest.mark.parametrize("filter_first_max", [0, 20_000])
async def test_bm25_keeps_only_the_named_sections(store: tuple, filter_first_max: int) -> None:  # type: ignore[type-arg]
    pool, _, _ = store
    filters = SearchFilters(sections=["Conclusions", "Methods"])
    p = Bm25Params()
    scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, await CorpusStats().get(pool))
    # Both ways to a filtered ranking: the best chunks checked against the filter in passes, or filter first.
    hits = await bm25_rank(pool, "statins dementia", 200, filters, scoring, filter_first_max=filter_first_max)
    assert await _sections_of(pool, [h.chunk_id for h in hits]) == {
        "Materials and Methods",
        "Methods > Statistical analysis",
        "Conclusions/Significance",
        "CONCLUSION",
    }
    assert len(hits) == 4 * N_DOCS


async def test_hybrid_search_returns_the_section_of_each_hit(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, query = store
    searcher = SearchEngine(pool, index, SearchConfig(ef_search=40))
    result = await searcher.search(
        "statins dementia",
        query,
        mode="hybrid",
        top_k=100,
        top_n=100,
        filters=SearchFilters(sections=["Conclusion"]),
    )
    assert len(result.hits) == 2 * N_DOCS
    assert {h.section for h in result.hits} == {"Conclusions/Significance", "CONCLUSION"}
    none = await searcher.search(
        "statins", query, mode="hybrid", top_k=10, top_n=10, filters=SearchFilters(sections=["Acknowledgements"])
    )
    assert none.hits == []
