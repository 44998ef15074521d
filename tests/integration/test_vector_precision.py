"""Vector precision on a real PostgreSQL 18 + pgvector 0.8 (issue 14): new indexes store ``halfvec``, searched
through their HNSW index; an index recorded as ``single`` keeps working; a store moves from one precision to
the other by copying its vectors (``evidentia reindex``).

Only PostgreSQL is started (a private cluster), not the service stack.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator

import asyncpg
import numpy as np
import pytest

from services.parser.store import store_document
from services.retriever.engine.vector.search import nearest_chunks, nearest_chunks_sql, vectors_of
from services.retriever.engine.vector.tables import (
    VectorIndex,
    active_index,
    copy_vectors,
    create_index,
    get_index,
    index_name_with_precision,
    upsert_vectors,
)
from shared.db import create_pool
from shared.models import Chunk, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

DIM = 16
N_DOCS = 120
#: A half-precision component of a unit vector is within this of its float32 value (11-bit significand).
HALF_ATOL = 1e-3


def _doc(i: int) -> ParsedDocument:
    text = f"Passage number {i} about topic {i % 7}."
    chunk = Chunk(section="Abstract", ordinal=0, text=text, token_count=8, char_start=0, char_end=len(text))
    return ParsedDocument(
        source_id=str(40_000 + i), pmid=str(40_000 + i), title=f"Doc {i}", abstract=text, chunks=[chunk]
    )


def _half(v: np.ndarray) -> np.ndarray:
    """``v`` as PostgreSQL stores it in a ``halfvec``, read back as float32."""
    return v.astype(np.float16).astype(np.float32)


Corpus = tuple[asyncpg.Pool, str, list[str], list[str], np.ndarray]


@pytest.fixture(scope="module")
async def corpus(migrated_postgres_url: str) -> AsyncIterator[Corpus]:
    """The pool (pgvector types registered), its URL, chunk ids, their document ids, random unit vectors."""
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": migrated_postgres_url})
    pool = await create_pool(db)
    await pool.execute("TRUNCATE documents CASCADE")
    for i in range(N_DOCS):
        await store_document(pool, _doc(i))
    rows = await pool.fetch("SELECT chunk_id, document_id FROM chunks ORDER BY chunk_id")
    vectors = np.random.default_rng(14).normal(size=(len(rows), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    try:
        yield pool, migrated_postgres_url, [r["chunk_id"] for r in rows], [r["document_id"] for r in rows], vectors
    finally:
        await pool.close()


def _db(url: str, precision: str) -> DatabaseSettings:
    return DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url, "vector_precision": precision})


async def _column_type(pool: asyncpg.Pool, table: str) -> str:
    return str(
        await pool.fetchval(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = $1::regclass "
            "AND attname = 'embedding'",
            table,
        )
    )


async def _plan(pool: asyncpg.Pool, index: VectorIndex, query: np.ndarray) -> str:
    """The plan of :func:`nearest_chunks`'s statement, sequential scans disabled: an index scan appears only
    when the HNSW index can answer the ORDER BY (the query's type matches the operator class)."""
    sql, params = nearest_chunks_sql(index, SearchFilters())
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")
        rows = await conn.fetch("EXPLAIN " + sql, query, 5, *params)
    return "\n".join(r[0] for r in rows)


async def test_a_new_index_stores_halfvec_searched_through_its_hnsw_index(corpus: Corpus) -> None:
    pool, url, ids, doc_ids, vectors = corpus
    db = DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url})  # the default precision
    index = await create_index(pool, "half-model", DIM, db)
    assert index.precision == "half"
    assert await _column_type(pool, index.table_name) == f"halfvec({DIM})"
    indexdef = await pool.fetchval("SELECT indexdef FROM pg_indexes WHERE indexname = $1", f"{index.table_name}_hnsw")
    assert "hnsw (embedding halfvec_cosine_ops)" in indexdef
    assert await upsert_vectors(pool, index, ids, doc_ids, vectors) == len(ids)

    target = 17
    query = vectors[target] + 0.05 * vectors[target + 1]
    query /= np.linalg.norm(query)
    hits = await nearest_chunks(pool, index, query, 5, SearchFilters(), ef_search=40)
    assert hits[0][0] == ids[target]
    exact = float(_half(query) @ _half(vectors[target])) / float(
        np.linalg.norm(_half(query)) * np.linalg.norm(_half(vectors[target]))
    )
    assert hits[0][1] == pytest.approx(exact, abs=1e-4)
    assert f"Index Scan using {index.table_name}_hnsw" in await _plan(pool, index, query)


async def test_an_index_recorded_as_single_keeps_working(corpus: Corpus) -> None:
    pool, url, ids, doc_ids, vectors = corpus
    # An index from before migration 221: recorded without a precision, built as vector(dim).
    single = await create_index(pool, "single-model", DIM, _db(url, "single"))
    await pool.execute("UPDATE vector_indexes SET precision = DEFAULT WHERE name = $1", single.name)
    # A service configured for half precision finds it as it is.
    index = await create_index(pool, "single-model", DIM, _db(url, "half"), activate=True)
    assert index.precision == "single" and index.table_name == single.table_name
    assert await _column_type(pool, index.table_name) == f"vector({DIM})"

    assert await upsert_vectors(pool, index, ids, doc_ids, vectors) == len(ids)
    hits = await nearest_chunks(pool, index, vectors[3], 3, SearchFilters(), ef_search=40)
    assert hits[0][0] == ids[3] and hits[0][1] == pytest.approx(1.0, abs=1e-6)
    assert f"Index Scan using {index.table_name}_hnsw" in await _plan(pool, index, vectors[3])
    stored = await vectors_of(pool, index, ids[:4])
    np.testing.assert_array_equal(stored[ids[2]], vectors[2])  # single precision: exact


async def test_vectors_of_round_trips_within_half_precision(corpus: Corpus) -> None:
    pool, url, ids, doc_ids, vectors = corpus
    index = await create_index(pool, "roundtrip-model", DIM, _db(url, "half"))
    await upsert_vectors(pool, index, ids, doc_ids, vectors)
    stored = await vectors_of(pool, index, ids)
    assert set(stored) == set(ids)
    for i, chunk_id in enumerate(ids):
        assert stored[chunk_id].dtype == np.float32
        np.testing.assert_array_equal(stored[chunk_id], _half(vectors[i]))
        np.testing.assert_allclose(stored[chunk_id], vectors[i], atol=HALF_ATOL)


async def test_one_connection_writes_indexes_of_both_precisions(corpus: Corpus) -> None:
    _, url, ids, doc_ids, vectors = corpus
    db = _db(url, "half")
    pool = await create_pool(db, run_migrations=False, max_size=1)  # every write on the same connection
    try:
        half = await create_index(pool, "mixed-half", DIM, db)
        single = await create_index(pool, "mixed-single", DIM, _db(url, "single"))
        assert await upsert_vectors(pool, half, ids[:10], doc_ids[:10], vectors[:10]) == 10
        assert await upsert_vectors(pool, single, ids[:10], doc_ids[:10], vectors[:10]) == 10
        assert await upsert_vectors(pool, half, ids[10:20], doc_ids[10:20], vectors[10:20]) == 10
        np.testing.assert_array_equal((await vectors_of(pool, single, [ids[5]]))[ids[5]], vectors[5])
        np.testing.assert_array_equal((await vectors_of(pool, half, [ids[15]]))[ids[15]], _half(vectors[15]))
    finally:
        await pool.close()


async def test_copying_moves_a_store_to_half_precision_and_switches(corpus: Corpus) -> None:
    pool, url, ids, doc_ids, vectors = corpus
    old = await create_index(pool, "moving-model", DIM, _db(url, "single"), activate=True)
    await upsert_vectors(pool, old, ids, doc_ids, vectors)
    # The model's name is taken by its single-precision index: the half one gets its own.
    assert await index_name_with_precision(pool, "moving-model", "single") == old.name
    name = await index_name_with_precision(pool, "moving-model", "half")
    assert name == f"{old.name}_half"
    new = await create_index(pool, "moving-model", DIM, _db(url, "half"), name=name)
    assert new.state == "building" and new.precision == "half"

    assert await copy_vectors(pool, old, new) == len(ids)
    assert (await active_index(pool)) == old  # the bulk copy switches nothing
    # Written to the old index meanwhile: caught by the copy that switches.
    turned = np.roll(vectors[7], 1)
    await upsert_vectors(pool, old, [ids[7]], [doc_ids[7]], turned[None, :])
    assert await copy_vectors(pool, old, new, activate=True) == 1
    active = await active_index(pool)
    assert active is not None and active.name == new.name and active.precision == "half"
    retired = await get_index(pool, old.name)
    assert retired is not None and retired.state == "retired"
    stored = await vectors_of(pool, new, ids)
    np.testing.assert_array_equal(stored[ids[7]], _half(turned))
    np.testing.assert_array_equal(stored[ids[8]], _half(vectors[8]))
    assert await copy_vectors(pool, old, new) == 0  # nothing differs any more


async def test_reindex_moves_the_active_index_to_the_configured_precision(
    corpus: Corpus, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``evidentia reindex --model X`` with X active in single precision and half configured: the vectors are
    converted (no embedder, no broker needed) and the half index activated."""
    from cli.reindex import reindex
    from shared.embedding import resolve
    from shared.settings import EmbeddingSettings, get_settings

    pool, url, ids, doc_ids, _ = corpus
    _, config = resolve(EmbeddingSettings(model="all-MiniLM-L6-v2"))
    dim = int(config.dim or 0)
    assert dim > 0
    wide = np.random.default_rng(1).normal(size=(len(ids), dim)).astype(np.float32)
    old = await create_index(pool, config.name, dim, _db(url, "single"), activate=True)
    await upsert_vectors(pool, old, ids, doc_ids, wide)

    monkeypatch.setenv("EVIDENTIA_DATABASE_URL", url)
    monkeypatch.setenv("EVIDENTIA_DATABASE_VECTOR_PRECISION", "half")
    get_settings.cache_clear()

    async def run(*, no_switch: bool) -> dict[str, object]:
        args = argparse.Namespace(
            model="all-MiniLM-L6-v2",
            spawn_embedder=False,
            no_switch=no_switch,
            timeout=60.0,
            stall_s=30.0,
            poll_s=0.5,
            batch=100,
            json=True,
        )
        assert await reindex(args) == 0
        result: dict[str, object] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        return result

    try:
        held = await run(no_switch=True)
        assert held["switched_to"] is None and held["vectors"] == len(ids)
        assert await active_index(pool) == old  # filled, not switched
        summary = await run(no_switch=False)
    finally:
        get_settings.cache_clear()
    assert summary["index"] == held["index"]  # the same half index, completed and switched
    assert summary["retired"] == old.name and summary["vectors"] == len(ids)
    active = await active_index(pool)
    assert active is not None and active.name == summary["switched_to"] != old.name
    assert active.precision == "half" and active.model == config.name
    assert await _column_type(pool, active.table_name) == f"halfvec({dim})"
    stored = await vectors_of(pool, active, ids[:3])
    np.testing.assert_array_equal(stored[ids[1]], _half(wide[1]))
