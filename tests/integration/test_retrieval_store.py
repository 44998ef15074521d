"""The retriever's SQL on a real PostgreSQL 18 + pgvector 0.8: BM25, filters, iterative scans, hybrid.

Only PostgreSQL is started (a throw-away cluster in a temp dir on a free port), not the service stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import numpy as np
import pytest

from devstack.postgres import LocalPostgres
from services.parser.store import store_document
from services.retriever.engine.config import SearchConfig
from services.retriever.engine.filters import passing
from services.retriever.engine.filters.fields import where_clause, with_mesh_descendants
from services.retriever.engine.filters.passing import planned_rows
from services.retriever.engine.lexical import rank
from services.retriever.engine.lexical.rank import Bm25Params, bm25_search
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.scored import Scored
from services.retriever.engine.stages import filters as filters_stage
from services.retriever.engine.vector import search as vector_search
from services.retriever.engine.vector.search import (
    dense_search,
    nearest_chunks,
    nearest_chunks_settings,
    nearest_chunks_sql,
    vectors_of,
)
from services.retriever.engine.vector.tables import VectorIndex, create_index, upsert_vectors
from shared.db import create_pool
from shared.models import Chunk, MeshHeading, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
N_DOCS = 400
RARE_YEAR = 1999  # 8 of the 400 documents


def _doc(i: int) -> ParsedDocument:
    topic = ["cardiology", "oncology", "neurology", "infection"][i % 4]
    title = f"Study {i} of {topic}"
    text = f"Patients with {topic} conditions were followed. Outcome number {i} was measured."
    if i == 7:
        text += " Zolpidem overdose was rare."
    mesh = [MeshHeading(descriptor="Heart Diseases" if topic == "cardiology" else topic.title())]
    if i == 11:
        mesh = [MeshHeading(descriptor="Myocardial Infarction")]  # a descendant of Heart Diseases
    chunks = [Chunk(section="Abstract", ordinal=0, text=text, token_count=20, char_start=0, char_end=len(text))]
    if i % 10 == 0:  # some documents have two chunks
        chunks.append(
            Chunk(
                section="Abstract",
                ordinal=1,
                text=f"Second part about {topic}.",
                token_count=5,
                char_start=0,
                char_end=10,
            )
        )
    return ParsedDocument(
        source="pubmed",
        source_id=str(10_000 + i),
        pmid=str(10_000 + i),
        title=title,
        abstract=text,
        year=RARE_YEAR if i % 50 == 3 else 2015 + i % 8,
        mesh=mesh,
        retracted=(i == 5),
        chunks=chunks,
    )


@pytest.fixture(scope="module")
async def store(
    private_postgres: LocalPostgres,
) -> AsyncIterator[tuple[asyncpg.Pool, VectorIndex, dict[str, np.ndarray]]]:
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": private_postgres.url})
    pool = await create_pool(db)
    for i in range(N_DOCS):
        await store_document(pool, _doc(i))
    await pool.execute(
        "INSERT INTO mesh_tree (descriptor, tree_number) VALUES ('Heart Diseases', 'C14.280'), "
        "('Myocardial Infarction', 'C14.280.647.500'), ('Oncology', 'H02.403.429')"
    )
    index = await create_index(pool, "test-model", DIM, db, activate=True)
    rows = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id")
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(len(rows), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await upsert_vectors(pool, index, [r["chunk_id"] for r in rows], [r["document_id"] for r in rows], vectors)
    by_id = {r["chunk_id"]: v for r, v in zip(rows, vectors, strict=True)}
    try:
        yield pool, index, by_id
    finally:
        await pool.close()


async def test_iterative_scan_returns_k_under_a_selective_filter(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, vectors = store
    selective = SearchFilters(year_from=RARE_YEAR, year_to=RARE_YEAR, include_retracted=True)
    total = await pool.fetchval(
        "SELECT count(*) FROM chunks c JOIN documents d USING (document_id) WHERE d.year = $1", RARE_YEAR
    )
    assert 8 <= total < 20
    query = np.asarray(next(iter(vectors.values())))
    # ef_search 8 alone would leave almost nothing after the filter; iterative scans keep going.
    hits = [Scored(c, s) for c, s in await nearest_chunks(pool, index, query, 8, selective, ef_search=8)]
    assert len(hits) == 8
    years = await pool.fetch(
        "SELECT DISTINCT d.year FROM chunks c JOIN documents d USING (document_id) WHERE c.chunk_id = ANY($1::text[])",
        [h.chunk_id for h in hits],
    )
    assert {r["year"] for r in years} == {RARE_YEAR}
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    # similarity = 1 - cosine distance, of the vectors as the index holds them (the query cast to its type)
    q = query.astype(np.float16).astype(np.float32) if index.precision == "half" else query
    v = (await vectors_of(pool, index, [hits[0].chunk_id]))[hits[0].chunk_id]
    exact = float(q @ v) / float(np.linalg.norm(q) * np.linalg.norm(v))
    assert hits[0].score == pytest.approx(exact, abs=1e-5)


async def test_a_selective_filter_is_searched_exactly_over_its_chunks(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, _ = store
    selective = SearchFilters(year_from=RARE_YEAR, year_to=RARE_YEAR, include_retracted=True)
    passing = {
        r["chunk_id"]
        for r in await pool.fetch(
            "SELECT c.chunk_id FROM chunks c JOIN documents d USING (document_id) WHERE d.year = $1", RARE_YEAR
        )
    }
    rng = np.random.default_rng(3)
    for _ in range(5):
        query = rng.normal(size=DIM).astype(np.float32)
        query /= np.linalg.norm(query)
        stored = await vectors_of(pool, index, sorted(passing))  # as stored (half precision)
        expected = sorted(passing, key=lambda c: -float(query @ stored[c] / np.linalg.norm(stored[c])))[:6]
        # ef_search 1: an HNSW scan would see almost nothing; the filter passes so few chunks that the
        # search is exact over them instead.
        hits = await dense_search(pool, index, query, 6, selective, ef_search=1)
        assert [h.chunk_id for h in hits] == expected


async def test_bm25_matches_the_formula(store: tuple) -> None:  # type: ignore[type-arg]
    pool, _, _ = store
    params = Bm25Params(k1=1.2, b=0.75, title_weight=1.0, section_weight=0.0)
    hits = await bm25_search(pool, "zolpidem overdose", 5, SearchFilters(), params, CorpusStats())
    top = await pool.fetchrow("SELECT chunk_id FROM chunks WHERE document_id = 'pubmed:10007' AND ordinal = 0")
    assert hits[0].chunk_id == top["chunk_id"]
    # The same score by hand from the stored lexemes.
    lex = await pool.fetch(
        "SELECT c.chunk_id, t.lexeme, array_length(t.positions, 1) AS n, t.weights "
        "FROM chunks c, unnest(chunk_tsvector(c.doc_title, c.section, c.content)) t"
    )
    n_chunks = len({r["chunk_id"] for r in lex})
    length: dict[str, int] = {}
    for r in lex:
        length[r["chunk_id"]] = length.get(r["chunk_id"], 0) + sum(1 for w in r["weights"] if w != "B")
    avgdl = sum(length.values()) / n_chunks
    expected = 0.0
    for term in ("zolpidem", "overdos"):
        df = len({r["chunk_id"] for r in lex if r["lexeme"] == term})
        tf = sum(
            1 for r in lex if r["lexeme"] == term and r["chunk_id"] == top["chunk_id"] for w in r["weights"] if w != "B"
        )
        idf = math.log(1 + (n_chunks - df + 0.5) / (df + 0.5))
        expected += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * length[top["chunk_id"]] / avgdl))
    assert hits[0].score == pytest.approx(expected, rel=1e-4)


async def test_bm25_postings_follow_chunk_changes(store: tuple) -> None:  # type: ignore[type-arg]
    pool, _, _ = store
    doc = _doc(3).model_copy(update={"title": "Updated quetiapine study"})
    await store_document(pool, doc)
    hits = await bm25_search(pool, "quetiapine", 5, SearchFilters(include_retracted=True), Bm25Params(), CorpusStats())
    assert [h.chunk_id.split("#")[0] for h in hits] == ["pubmed:10003"]
    orphans = await pool.fetchval(
        "SELECT count(*) FROM bm25_chunks b LEFT JOIN chunks c USING (chunk_id) WHERE c.chunk_id IS NULL"
    )
    assert orphans == 0
    # The replaced chunks' keys are dead until compaction drops their postings.
    assert await pool.fetchval("SELECT count(*) FROM bm25_dead") > 0


async def test_hybrid_filters_mesh_descendants_and_per_document_limit(store: tuple) -> None:  # type: ignore[type-arg]
    pool, index, vectors = store
    searcher = SearchEngine(pool, index, SearchConfig(ef_search=40))
    query = np.asarray(vectors[next(iter(vectors))])
    mesh = SearchFilters(mesh=["Heart Diseases"])
    result = await searcher.search(
        "cardiology patients outcome", query, mode="hybrid", top_k=200, top_n=200, filters=mesh
    )
    docs = {h.document_id for h in result.hits}
    assert "pubmed:10011" in docs  # Myocardial Infarction, below Heart Diseases in the tree
    assert "pubmed:10005" not in docs  # retracted
    exact = await searcher.search(
        "cardiology patients outcome",
        query,
        mode="hybrid",
        top_k=200,
        top_n=200,
        filters=mesh.model_copy(update={"mesh_descendants": False}),
    )
    assert "pubmed:10011" not in {h.document_id for h in exact.hits}
    assert all(h.dense_score is not None or h.lexical_score is not None for h in result.hits)
    both = [h for h in result.hits if h.dense_score is not None and h.lexical_score is not None]
    assert both, "hybrid fuses both rankings"
    one_each = await searcher.search(
        "second part", query, mode="hybrid", top_k=50, top_n=50, filters=SearchFilters(max_chunks_per_document=1)
    )
    ids = [h.document_id for h in one_each.hits]
    assert len(ids) == len(set(ids))
    diverse = await searcher.search(
        "oncology", query, mode="hybrid", top_k=20, top_n=5, filters=SearchFilters(), mmr=True, mmr_lambda=0.3
    )
    assert len(diverse.hits) == 5 and [h.rank for h in diverse.hits] == [1, 2, 3, 4, 5]
    lexical = await searcher.search("oncology", None, mode="lexical", top_k=10, top_n=3, filters=SearchFilters())
    assert len(lexical.hits) == 3 and all("oncology" in h.title for h in lexical.hits)


@pytest.mark.parametrize("year_to", [RARE_YEAR, 2030])  # a few chunks (filter first) / most of them (checked)
async def test_hybrid_reads_a_filters_chunks_once_for_both_legs(
    store: tuple,  # type: ignore[type-arg]
    monkeypatch: pytest.MonkeyPatch,
    year_to: int,
) -> None:
    pool, index, vectors = store
    # The filter-first bound is then max(10, sqrt(100 * ~440 chunks)) = 209: the rare year passes 9 chunks,
    # 1999-2030 all but the retracted one's.
    monkeypatch.setattr(passing, "FILTER_FIRST_MAX_CHUNKS", 10)
    filters = SearchFilters(year_from=RARE_YEAR, year_to=year_to)
    searcher = SearchEngine(pool, index, SearchConfig(ef_search=40))
    query = np.asarray(vectors[next(iter(vectors))])
    # Each leg on its own (each resolves the filter itself), before counting.
    dense_alone = await searcher.dense_search(query, 100, filters, 40)
    lexical_alone = await searcher.lexical_search("patients outcome cardiology", 100, filters)
    reads: list[int] = []
    real = passing.passing_chunks

    async def counted(conn: Any, f: SearchFilters, cap: int) -> passing.PassingSet:
        result = await real(conn, f, cap)
        reads.append(-1 if result.chunks is None else len(result.chunks))
        return result

    # Patched where it is looked up: the filters stage resolves a search's filter; the legs would, handed none.
    for module in (filters_stage, rank, vector_search):
        monkeypatch.setattr(module, "passing_chunks", counted)
    result = await searcher.search(
        "patients outcome cardiology", query, mode="hybrid", top_k=100, top_n=300, filters=filters
    )
    assert len(reads) == 1, f"the filter's chunks were read {len(reads)} times"
    assert (reads[0] == -1) == (year_to != RARE_YEAR), reads  # over the bound: both legs check candidates
    dense = {h.chunk_id: h.dense_score for h in result.hits if h.dense_score is not None}
    lexical = {h.chunk_id: h.lexical_score for h in result.hits if h.lexical_score is not None}
    assert dense == {s.chunk_id: s.score for s in dense_alone if s.chunk_id in dense}
    assert set(dense) == {s.chunk_id for s in dense_alone}
    assert lexical == {s.chunk_id: s.score for s in lexical_alone}


class _CountingPool:
    """A pool that counts its connections in use at once; each of the first ``parties`` holders waits, with
    its connection, until all of them hold one (so statements that did not run at once fail the test)."""

    def __init__(self, pool: asyncpg.Pool, parties: int) -> None:
        self._pool = pool
        self._barrier = asyncio.Barrier(parties)
        self._parties = parties
        self.acquired = 0
        self.in_use = 0
        self.most_in_use = 0

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection]:
        async with self._pool.acquire() as conn:
            self.acquired += 1
            self.in_use += 1
            self.most_in_use = max(self.most_in_use, self.in_use)
            try:
                if self.acquired <= self._parties:
                    await asyncio.wait_for(self._barrier.wait(), timeout=20)
                yield conn
            finally:
                self.in_use -= 1


@pytest.mark.parametrize(("concurrency", "rows", "writers"), [(3, 400, 3), (3, 100, 1), (1, 400, 1)])
async def test_vectors_are_stored_by_several_statements_at_once(
    store: tuple,  # type: ignore[type-arg]
    concurrency: int,
    rows: int,
    writers: int,
) -> None:
    pool, _, _ = store
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": "postgresql://unused"})
    index = await create_index(pool, f"concurrency-model-{concurrency}-{rows}", DIM, db, activate=False)
    chunks = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id LIMIT $1", rows)
    ids = [r["chunk_id"] for r in chunks]
    vectors = np.random.default_rng(rows).normal(size=(len(ids), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # A redelivered row (same chunk, same vector) and a chunk that no longer exists ride along.
    ids_in = [*ids, ids[0], "pubmed:gone#0"]
    docs_in = [*(r["document_id"] for r in chunks), chunks[0]["document_id"], "pubmed:gone"]
    vectors_in = np.vstack([vectors, vectors[:1], vectors[:1]])
    counting = _CountingPool(pool, writers)
    written = await upsert_vectors(
        counting,  # type: ignore[arg-type]
        index,
        ids_in,
        docs_in,
        vectors_in,
        concurrency=concurrency,
    )
    assert written == len(ids)  # each existing chunk once; the missing chunk skipped
    assert (counting.acquired, counting.most_in_use) == (writers, writers)  # at once, a connection each
    stored = await vectors_of(pool, index, ids)
    assert set(stored) == set(ids)
    np.testing.assert_allclose(np.stack([stored[c] for c in ids]), vectors, atol=1e-3)  # half precision


async def test_a_part_that_fails_raises_its_own_error_and_leaves_no_writer_behind(
    store: tuple,  # type: ignore[type-arg]
) -> None:
    pool, _, _ = store
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": "postgresql://unused"})
    index = await create_index(pool, "concurrency-model-failing", DIM, db, activate=False)
    chunks = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id LIMIT 200")
    vectors = np.random.default_rng(3).normal(size=(len(chunks), DIM)).astype(np.float32)
    vectors[17] = np.inf  # pgvector refuses it: the part holding chunk 17 fails
    in_use_before = pool.get_size() - pool.get_idle_size()
    with pytest.raises(asyncpg.DataError):  # the statement's own error, as store_isolating expects it
        await upsert_vectors(
            pool,
            index,
            [r["chunk_id"] for r in chunks],
            [r["document_id"] for r in chunks],
            vectors,
            concurrency=2,
        )
    assert pool.get_size() - pool.get_idle_size() == in_use_before  # every part's connection is back
    assert chunks[17]["chunk_id"] not in await vectors_of(pool, index, [chunks[17]["chunk_id"]])


async def test_a_vector_row_takes_its_chunks_document_whatever_the_event_says(
    store: tuple,  # type: ignore[type-arg]
) -> None:
    """Dense search checks a candidate's document through the vector row's own document id (no chunk
    look-up); the row takes it from the stored chunk, so an event naming another document cannot move a
    chunk out of (or into) a filter."""
    pool, _, _ = store
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": "postgresql://unused"})
    index = await create_index(pool, "document-of-chunk-model", DIM, db, activate=False)
    chunks = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id LIMIT 3")
    vectors = np.random.default_rng(5).normal(size=(3, DIM)).astype(np.float32)
    await upsert_vectors(pool, index, [r["chunk_id"] for r in chunks], ["pubmed:somebody-else"] * 3, vectors)
    stored = await pool.fetch(f"SELECT chunk_id, document_id FROM {index.table_name} ORDER BY chunk_id")
    assert [(r["chunk_id"], r["document_id"]) for r in stored] == [(r["chunk_id"], r["document_id"]) for r in chunks]


async def test_a_broad_filter_is_searched_by_walking_the_hnsw_index(store: tuple) -> None:  # type: ignore[type-arg]
    """Past the filter-first bound the dense leg must walk the HNSW index: a MeSH filter with descendants
    compares against an array built by a subquery, whose share the planner guesses (1 %), and it then chose
    to sort every passing vector (295 ms at 10^5 chunks for a descriptor on 96 % of them)."""
    pool, index, _ = store
    broad = SearchFilters(mesh=["Heart Diseases"], mesh_descendants=True)
    sql, params = nearest_chunks_sql(index, broad)
    query = np.ones(DIM, dtype=np.float32) / math.sqrt(DIM)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(nearest_chunks_settings(100, 100, filtered=True))
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, query, 100, *params))
    assert f"{index.table_name}_hnsw" in plan, plan
    assert "Sort" not in plan.replace("Sort Key", ""), plan


async def test_mesh_descendants_looked_up_once_pass_the_same_chunks(store: tuple) -> None:  # type: ignore[type-arg]
    pool, _, _ = store
    count_sql = "SELECT count(*) FROM chunks c JOIN documents d ON d.document_id = c.document_id WHERE "
    for names in (["Heart Diseases"], ["heart diseases", "Oncology"], ["Myocardial Infarction"], ["Unknown"]):
        nested = SearchFilters(mesh=names)
        listed = await with_mesh_descendants(pool, nested)
        assert listed.mesh_descendants is False and listed.mesh[: len(names)] == names
        counts = [await pool.fetchval(count_sql + w, *p) for w, p in (where_clause(f, 1) for f in (nested, listed))]
        assert counts[0] == counts[1], (names, counts)
    listed = await with_mesh_descendants(pool, SearchFilters(mesh=["Heart Diseases"]))
    assert "Myocardial Infarction" in listed.mesh  # below it in the tree
    plain = SearchFilters(mesh=["Heart Diseases"], mesh_descendants=False)
    assert await with_mesh_descendants(pool, plain) is plain
    # The planner reads the listed array's share from the column's statistics instead of guessing.
    await pool.execute("ANALYZE documents")
    assert await planned_rows(pool, listed) > await planned_rows(pool, SearchFilters(mesh=["Heart Diseases"]))
