"""The bulk-load path (issue 34) on a real PostgreSQL 18 + pgvector: COPY-based batches with the lexical index
deferred, searches correct meanwhile, a replayed batch that writes nothing, and a finish whose postings and
statistics are exactly those the live path's trigger writes for the same chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import numpy as np
import pytest

from services.parser.store import store_document
from services.retriever.engine import bulk as bulk_store
from services.retriever.engine.lexical.blocks import POSTING
from services.retriever.engine.lexical.compaction import compact
from services.retriever.engine.lexical.postings import (
    Bm25Scoring,
    bm25_scores,
    corpus_counts,
    dead_keys,
    term_postings,
)
from services.retriever.engine.vector.ann_index import ann_indexes, maintain_ann_index
from services.retriever.engine.vector.search import nearest_chunks
from services.retriever.engine.vector.tables import VectorIndex, create_index, upsert_vectors
from shared.db import create_pool
from shared.models import Chunk, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 8
FIELDS = [f for f in POSTING.names or () if f != "key"]  # a posting's fields but its chunk key
WORDS = ["aspirin", "stroke", "trial", "cohort", "dose", "insulin", "glucose", "tumour", "lung", "heart"]


def _db(url: str) -> DatabaseSettings:
    return DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url})


def _doc(i: int) -> ParsedDocument:
    chunks = []
    for o in range(2):
        text = " ".join(WORDS[(i * 3 + o + k * k) % len(WORDS)] for k in range(4 + (i + o) % 5)) + f" finding{i}."
        if i % 13 == 5 and o == 1:
            text = "The and of it."  # stop words only: a chunk without a term, indexed with zero lengths
        chunks.append(Chunk(section="Abstract", ordinal=o, text=text, token_count=8, char_start=0, char_end=len(text)))
    return ParsedDocument(
        source="pubmed",
        source_id=str(70_000 + i),
        pmid=str(70_000 + i),
        title=f"{WORDS[i % len(WORDS)]} study {i}",
        abstract=" ".join(c.text for c in chunks),
        year=2000 + i % 20,
        chunks=chunks,
    )


@pytest.fixture
async def pool(migrated_postgres_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(_db(migrated_postgres_url))
    await pool.execute("TRUNCATE documents CASCADE")
    await pool.execute("DROP TABLE IF EXISTS chunk_vectors_bulk_test; DELETE FROM vector_indexes")
    try:
        yield pool
    finally:
        await pool.close()


async def _index(pool: asyncpg.Pool, url: str) -> VectorIndex:
    return await create_index(pool, "bulk-test-model", DIM, _db(url), name="bulk_test", activate=True)


async def _stored_rows(pool: asyncpg.Pool) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    docs = await pool.fetch(f"SELECT {', '.join(bulk_store.DOCUMENT_COLUMNS)} FROM documents ORDER BY document_id")
    chunks = await pool.fetch(f"SELECT {', '.join(bulk_store.CHUNK_COLUMNS)} FROM chunks ORDER BY chunk_id")
    return [tuple(r) for r in docs], [tuple(r) for r in chunks]


async def _lexical_index(pool: asyncpg.Pool) -> tuple[dict[str, int], dict[tuple[str, str], tuple[int, ...]]]:
    """df of every term with df > 0, and every live posting as (term, chunk id) -> its fields but the key."""
    df = {r["term"]: r["df"] for r in await pool.fetch("SELECT term, df FROM bm25_terms WHERE df > 0")}
    ids = {r["chunk_key"]: r["chunk_id"] for r in await pool.fetch("SELECT chunk_key, chunk_id FROM bm25_chunks")}
    postings: dict[tuple[str, str], tuple[int, ...]] = {}
    for r in await pool.fetch("SELECT t.term, b.postings FROM bm25_blocks b JOIN bm25_terms t USING (term_id)"):
        for p in np.frombuffer(r["postings"], dtype=POSTING):
            if int(p["key"]) in ids:
                postings[(r["term"], ids[int(p["key"])])] = tuple(int(p[f]) for f in FIELDS)
    return df, postings


async def _scores(pool: asyncpg.Pool, query: str) -> dict[str, float]:
    """The lexical leg's BM25F score of every chunk that ``query`` matches, by chunk id."""
    ids = {r["chunk_key"]: r["chunk_id"] for r in await pool.fetch("SELECT chunk_key, chunk_id FROM bm25_chunks")}
    scoring = Bm25Scoring(1.2, 0.75, 2.0, 0.5, await corpus_counts(pool))
    scores = bm25_scores(await term_postings(pool, query), scoring, await dead_keys(pool))
    return {ids[int(k)]: round(float(scores[k]), 9) for k in np.flatnonzero(scores)}


def _vectors(n: int) -> np.ndarray:
    v = np.random.default_rng(5).normal(size=(n, DIM)).astype(np.float32)
    unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit


async def test_a_bulk_load_indexes_exactly_what_the_live_path_does(
    pool: asyncpg.Pool, migrated_postgres_url: str
) -> None:
    # The live path first: the parser's store_document, the insert trigger indexing each document.
    for i in range(40):
        await store_document(pool, _doc(i))
    live_docs, live_chunks = await _stored_rows(pool)
    live_lexical = await _lexical_index(pool)
    assert live_lexical[0] and live_lexical[1]
    live_lengths = await pool.fetch("SELECT chunk_id, len_title, len_section, len_text FROM bm25_chunks ORDER BY 1")
    assert any(r["len_text"] == 0 for r in live_lengths)
    queries = ["aspirin stroke", "insulin glucose dose", "heart study", "finding7 tumour lung cohort"]
    live_scores = [await _scores(pool, q) for q in queries]
    assert all(live_scores)
    await pool.execute("TRUNCATE documents CASCADE")

    index = await _index(pool, migrated_postgres_url)
    ids = [c[0] for c in live_chunks]
    vectors = _vectors(len(ids))
    async with bulk_store.bulk_load(pool, index) as conn:
        async with pool.acquire() as other:  # the retrievers' maintenance leaves the table to the load
            assert await maintain_ann_index(pool, index, _db(migrated_postgres_url)) is None
            with pytest.raises(bulk_store.BulkLoadBusy):
                await bulk_store.begin_bulk_load(other, index)
        assert await ann_indexes(conn, index.table_name) == []  # the HNSW index create_index made is gone
        half = len(live_docs) // 2
        first_chunks = [c for c in live_chunks if c[1] in {d[0] for d in live_docs[:half]}]
        first_ids = [c[0] for c in first_chunks]
        first = await bulk_store.write_batch(
            pool, index, live_docs[:half], first_chunks, (first_ids, vectors[: len(first_ids)])
        )
        assert first == bulk_store.BatchWritten(half, len(first_chunks), len(first_ids))
        # Replayed: nothing is written twice.
        again = await bulk_store.write_batch(
            pool, index, live_docs[:half], first_chunks, (first_ids, vectors[: len(first_ids)])
        )
        assert again == bulk_store.BatchWritten(0, 0, 0)
        # During the load: dense search reads the table exactly (every stored vector found), lexical search
        # does not see the deferred chunks yet, and the status says so.
        hits = await nearest_chunks(pool, index, vectors[3], 5, SearchFilters(), 40)
        assert hits[0][0] == first_ids[3]
        assert await pool.fetchval("SELECT count(*) FROM bm25_chunks") == 0
        status = await bulk_store.bulk_load_status(pool, index)
        assert (status.loading, status.ann_index, status.chunks_without_postings) == (True, False, len(first_ids))
        assert "exact" in status.searches
        rest = [c for c in live_chunks if c[0] not in set(first_ids)]
        await bulk_store.write_batch(
            pool, index, live_docs[half:], rest, ([c[0] for c in rest], vectors[len(first_ids) :])
        )
        done = await bulk_store.finish_bulk_load(
            pool, conn, index, _db(migrated_postgres_url), workers=1, maintenance_work_mem="64MB", lexical_batch=25
        )
    assert done.chunks_indexed == len(ids)
    assert done.ann_build is not None and "hnsw" in done.ann_build
    assert [a.method for a in await ann_indexes(pool, index.table_name)] == ["hnsw"]
    assert await _stored_rows(pool) == (live_docs, live_chunks)
    assert await _lexical_index(pool) == live_lexical  # the same df and postings as the trigger wrote
    # ... the same field lengths (N and the means with them), so every search scores each chunk the same
    assert await pool.fetch("SELECT chunk_id, len_title, len_section, len_text FROM bm25_chunks ORDER BY 1") == (
        live_lengths
    )
    assert [await _scores(pool, q) for q in queries] == live_scores
    assert await pool.fetchval("SELECT count(*) FROM bm25_pending") == 0  # compacted
    status = await bulk_store.bulk_load_status(pool, index)
    assert (status.loading, status.ann_index, status.chunks_without_postings) == (False, True, 0)


async def test_removing_a_chunk_that_awaits_its_postings_keeps_the_statistics(
    pool: asyncpg.Pool, migrated_postgres_url: str
) -> None:
    await store_document(pool, _doc(1))  # indexed by the trigger
    df_before = dict(await pool.fetch("SELECT term, df FROM bm25_terms WHERE df > 0"))
    index = await _index(pool, migrated_postgres_url)
    doc = _doc(1).model_copy(update={"source_id": "79999", "pmid": "79999"})  # the same words, deferred
    row: tuple[Any, ...] = ("pubmed:79999", "pubmed", "79999", "79999", None, None, doc.title, doc.abstract,
                            None, None, doc.year, None, None, [], False, "h")  # fmt: skip
    chunks = [("pubmed:79999#0", "pubmed:79999", 0, "Abstract", doc.title, doc.chunks[0].text, 8, None, None)]
    await bulk_store.write_batch(pool, index, [row], chunks, (["pubmed:79999#0"], _vectors(1)))
    await pool.execute("DELETE FROM documents WHERE document_id = 'pubmed:79999'")
    # The deleted chunk never added its terms: the df of the indexed document's terms stands.
    assert dict(await pool.fetch("SELECT term, df FROM bm25_terms WHERE df > 0")) == df_before
    assert await pool.fetchval("SELECT count(*) FROM bm25_dead") == 0
    await compact(pool)


async def test_the_live_path_still_indexes_at_once(pool: asyncpg.Pool, migrated_postgres_url: str) -> None:
    index = await _index(pool, migrated_postgres_url)
    result = await store_document(pool, _doc(2))
    ids = [c.chunk_id for c in result.chunks]
    await upsert_vectors(pool, index, ids, [result.document_id] * len(ids), _vectors(len(ids)))
    assert await pool.fetchval("SELECT count(*) FROM bm25_chunks") == len(ids)
    assert (await bulk_store.bulk_load_status(pool, index)).chunks_without_postings == 0


async def test_a_load_cut_short_is_finished_later(pool: asyncpg.Pool, migrated_postgres_url: str) -> None:
    index = await _index(pool, migrated_postgres_url)
    db = _db(migrated_postgres_url)
    async with bulk_store.bulk_load(pool, index):
        row: tuple[Any, ...] = ("pubmed:78888", "pubmed", "78888", "78888", None, None, "aspirin trial",
                                "aspirin dose", None, None, 2001, None, None, [], False, "h")  # fmt: skip
        chunk = ("pubmed:78888#0", "pubmed:78888", 0, "Abstract", "aspirin trial", "aspirin dose", 4, None, None)
        await bulk_store.write_batch(pool, index, [row], [chunk], (["pubmed:78888#0"], _vectors(1)))
        with pytest.raises(bulk_store.BulkLoadBusy):  # the load's session still holds the store
            await bulk_store.finish_left_load(pool, index, db)
    # The load's session let go without finishing: the chunk waits for its postings, the table has no index.
    status = await bulk_store.bulk_load_status(pool, index)
    assert (status.loading, status.ann_index, status.chunks_without_postings) == (False, False, 1)
    done = await bulk_store.finish_left_load(pool, index, db, maintenance_work_mem="64MB")
    assert done.chunks_indexed == 1 and done.ann_build is not None
    status = await bulk_store.bulk_load_status(pool, index)
    assert (status.loading, status.ann_index, status.chunks_without_postings) == (False, True, 0)
    df = dict(await pool.fetch("SELECT term, df FROM bm25_terms WHERE df > 0"))
    assert df == {"aspirin": 1, "trial": 1, "dose": 1, "abstract": 1}  # title, text and section
