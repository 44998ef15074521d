"""The scalable BM25 index (migration 100) on a real PostgreSQL: exact ranking against a reference computed
from the chunks' own tsvectors, statistics kept in step by every write, filters, the top-M approximation,
and the backfill of a store that predates the index."""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator

import asyncpg
import pytest

from devstack.postgres import LocalPostgres
from services.parser.store import delete_document, store_document
from services.retriever.lexical_store import reimpact
from services.retriever.search import Bm25Params, CorpusStats, bm25_search
from shared.db import create_pool, list_migrations
from shared.models import Chunk, ParsedDocument, SearchFilters
from shared.settings import DatabaseSettings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

_VOCABULARY = (
    "aspirin statin insulin metformin warfarin heparin stroke infarction diabetes hypertension cancer tumour "
    "patients trial cohort placebo dose mortality risk outcome survival therapy chemotherapy radiotherapy "
    "biopsy lesion receptor kinase inhibitor antibody vaccine infection sepsis fever cough asthma"
)
WORDS = _VOCABULARY.split(" ")
N_DOCS = 160
RARE_YEAR = 1987  # documents i % 40 == 1


def _text(rng: random.Random, n: int) -> str:
    # Zipf-like: early words far more frequent, so df spans from a few chunks to most of them.
    weights = [1.0 / (i + 1) for i in range(len(WORDS))]
    return " ".join(rng.choices(WORDS, weights, k=n)) + "."


def _chunk(ordinal: int, text: str) -> Chunk:
    return Chunk(section="Abstract", ordinal=ordinal, text=text, token_count=60, char_start=0, char_end=len(text))


def _doc(i: int, rng: random.Random) -> ParsedDocument:
    chunks = [_chunk(o, _text(rng, rng.randint(5, 60))) for o in range(1 + i % 3)]
    return ParsedDocument(
        source="pubmed",
        source_id=str(50_000 + i),
        pmid=str(50_000 + i),
        title=_text(rng, rng.randint(2, 8)),
        year=RARE_YEAR if i % 40 == 1 else 2010 + i % 10,
        chunks=chunks,
    )


async def _pool(url: str) -> asyncpg.Pool:
    return await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}))


async def _fresh_database(pg: LocalPostgres, name: str) -> str:
    """A new empty database on the same server (created by the superuser, owned by the app role)."""
    other = LocalPostgres(pg.data_dir, port=pg.port, database=name)
    await asyncio.to_thread(other.provision)
    return other.url


@pytest.fixture(scope="module")
async def store(private_postgres: LocalPostgres) -> AsyncIterator[asyncpg.Pool]:
    pool = await _pool(private_postgres.url)
    rng = random.Random(14)
    for i in range(N_DOCS):
        await store_document(pool, _doc(i, rng))
    try:
        yield pool
    finally:
        await pool.close()


async def _reference(
    pool: asyncpg.Pool, query: str, params: Bm25Params, year: int | None = None
) -> list[tuple[str, float]]:
    """Exact BM25F from the chunks' tsvectors alone (no bm25_* table read)."""
    rows = await pool.fetch(
        "SELECT c.chunk_id, d.year, t.lexeme, t.weights FROM chunks c JOIN documents d USING (document_id), "
        "unnest(c.tsv) t"
    )
    terms = await pool.fetchval("SELECT tsvector_to_array(to_tsvector('english', $1::text))", query)
    weight = {"A": params.title_weight, "B": params.section_weight}
    tf: dict[tuple[str, str], float] = defaultdict(float)
    length: dict[str, float] = defaultdict(float)
    df: dict[str, int] = Counter()
    year_of: dict[str, int] = {}
    for r in rows:
        year_of[r["chunk_id"]] = r["year"]
        w = sum(weight.get(x, 1.0) for x in r["weights"])
        length[r["chunk_id"]] += w
        tf[(r["chunk_id"], r["lexeme"])] += w
        df[r["lexeme"]] += 1
    n = len(year_of)
    avgdl = sum(length.values()) / n
    scores: dict[str, float] = {}
    for cid in year_of:
        if year is not None and year_of[cid] != year:
            continue
        s = 0.0
        for term in terms:
            f = tf.get((cid, term), 0.0)
            if f > 0:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                s += idf * f * (params.k1 + 1) / (f + params.k1 * (1 - params.b + params.b * length[cid] / avgdl))
        if s > 0:
            scores[cid] = s
    return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))


async def _assert_statistics_consistent(pool: asyncpg.Pool) -> None:
    """df, lengths and postings equal what the chunks' tsvectors say, right now."""
    wrong_df = await pool.fetchval(
        """SELECT count(*) FROM (
               SELECT x.lexeme AS term, count(*) AS df FROM chunks c, unnest(c.tsv) x GROUP BY x.lexeme) e
           FULL JOIN (SELECT term, df FROM bm25_terms WHERE df > 0) t USING (term)
           WHERE e.df IS DISTINCT FROM t.df"""
    )
    assert wrong_df == 0
    assert await pool.fetchval("SELECT count(*) FROM bm25_terms WHERE df < 0") == 0
    assert await pool.fetchval("SELECT count(*) FROM chunks") == await pool.fetchval("SELECT count(*) FROM bm25_chunks")
    postings = await pool.fetchval("SELECT count(*) FROM chunks c, unnest(c.tsv) x")
    assert postings == await pool.fetchval("SELECT count(*) FROM bm25_impacts")
    orphans = await pool.fetchval(
        "SELECT count(*) FROM bm25_impacts i LEFT JOIN bm25_chunks b USING (chunk_key) "
        "LEFT JOIN chunks c ON c.chunk_id = b.chunk_id WHERE c.chunk_id IS NULL"
    )
    assert orphans == 0


QUERIES = ["aspirin stroke", "metformin diabetes mortality", "vaccine fever cough asthma", "patients trial"]


@pytest.mark.parametrize("params", [Bm25Params(), Bm25Params(k1=1.2, b=0.75, title_weight=2.0, section_weight=0.5)])
async def test_exact_mode_ranks_like_the_reference(store: asyncpg.Pool, params: Bm25Params) -> None:
    for query in QUERIES:
        expected = await _reference(store, query, params)
        hits = await bm25_search(store, query, 25, SearchFilters(), params, CorpusStats())
        assert len(expected) >= 25
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:25]]
        assert [h.score for h in hits] == pytest.approx([s for _, s in expected[:25]], rel=1e-6)


async def test_top_m_reads_fewer_postings_but_a_deep_enough_m_is_exact(store: asyncpg.Pool) -> None:
    query = "patients trial"  # both among the most frequent words: df far above M
    exact = await _reference(store, query, Bm25Params())
    dfs = await store.fetch(
        "SELECT df FROM bm25_terms WHERE term = ANY(tsvector_to_array(to_tsvector('english', $1::text)))", query
    )
    max_df = max(r["df"] for r in dfs)
    assert max_df > 40
    deep = await bm25_search(store, query, 20, SearchFilters(), Bm25Params(top_m=max_df), CorpusStats())
    assert [h.chunk_id for h in deep] == [c for c, _ in exact[:20]]
    exact_score = dict(exact)
    best = {c for c, _ in exact[:10]}
    overlaps = []
    for top_m in (10, 30, 60):
        shallow = await bm25_search(store, query, 10, SearchFilters(), Bm25Params(top_m=top_m), CorpusStats())
        assert len(shallow) == 10
        # Impact order reads the heaviest postings first: the best chunk is always found, and a score is
        # exact BM25 or lower (a term whose posting was not read contributes nothing).
        assert shallow[0].chunk_id == exact[0][0]
        assert all(h.score <= exact_score[h.chunk_id] + 1e-9 for h in shallow)
        overlaps.append(len({h.chunk_id for h in shallow} & best))
    assert overlaps == sorted(overlaps) and overlaps[0] < overlaps[-1] and overlaps[-1] >= 7


async def test_a_selective_filter_still_gets_k_results_with_a_small_m(store: asyncpg.Pool) -> None:
    query = "patients trial cohort"
    filters = SearchFilters(year_from=RARE_YEAR, year_to=RARE_YEAR)
    expected = await _reference(store, query, Bm25Params(), year=RARE_YEAR)
    assert 5 <= len(expected) < 40
    for top_m in (None, 3):
        hits = await bm25_search(store, query, 5, filters, Bm25Params(top_m=top_m), CorpusStats())
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:5]]


async def test_statistics_follow_insert_replace_and_delete(private_postgres: LocalPostgres) -> None:
    pool = await _pool(await _fresh_database(private_postgres, "bm25_writes"))
    try:
        rng = random.Random(3)
        docs = [_doc(i, rng) for i in range(30)]
        for d in docs:
            await store_document(pool, d)
        await _assert_statistics_consistent(pool)
        before = await pool.fetchval("SELECT df FROM bm25_terms WHERE term = 'zolpidem'")
        assert before is None
        # Re-ingest with a changed text: the old chunks' terms leave, the new ones arrive.
        text = "Zolpidem zolpidem overdose."
        changed = docs[4].model_copy(update={"abstract": text, "chunks": [_chunk(0, text)]})
        assert (await store_document(pool, changed)).outcome == "updated"
        await _assert_statistics_consistent(pool)
        assert await pool.fetchval("SELECT df FROM bm25_terms WHERE term = 'zolpidem'") == 1
        hits = await bm25_search(pool, "zolpidem", 5, SearchFilters(), Bm25Params(), CorpusStats())
        assert [h.chunk_id.split("#")[0] for h in hits] == ["pubmed:50004"]
        # An unchanged re-ingest changes nothing.
        assert (await store_document(pool, changed)).outcome == "unchanged"
        await _assert_statistics_consistent(pool)
        # A direct UPDATE of a chunk's text re-indexes that chunk only.
        await pool.execute("UPDATE chunks SET content = 'heparin sepsis' WHERE document_id = 'pubmed:50004'")
        await _assert_statistics_consistent(pool)
        assert await pool.fetchval("SELECT df FROM bm25_terms WHERE term = 'zolpidem'") == 0
        assert await bm25_search(pool, "zolpidem", 5, SearchFilters(), Bm25Params(), CorpusStats()) == []
        # Withdrawn documents: their chunks, postings and df contributions go.
        for d in docs[:10]:
            assert await delete_document(pool, d.document_id)
        await _assert_statistics_consistent(pool)
        assert await pool.fetchval("SELECT count(*) FROM bm25_chunks") == sum(len(d.chunks) for d in docs[10:])
        # Re-weighing the postings (new reference parameters) keeps the index exact.
        assert await reimpact(pool, 1.2, 0.75) == await pool.fetchval("SELECT count(*) FROM bm25_impacts")
        expected = await _reference(pool, "aspirin stroke", Bm25Params())
        hits = await bm25_search(pool, "aspirin stroke", 10, SearchFilters(), Bm25Params(), CorpusStats())
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:10]]
    finally:
        await pool.close()


async def test_concurrent_writers_neither_deadlock_nor_miscount(private_postgres: LocalPostgres) -> None:
    pool = await _pool(await _fresh_database(private_postgres, "bm25_concurrent"))
    try:
        rng = random.Random(9)
        docs = [_doc(i, rng) for i in range(60)]
        # Eight writers at once, each document's chunks statement by statement, sharing the common terms.
        sem = asyncio.Semaphore(8)

        async def one(d: ParsedDocument) -> None:
            async with sem:
                await store_document(pool, d)

        await asyncio.gather(*(one(d) for d in docs))
        await asyncio.gather(*(delete_document(pool, d.document_id) for d in docs[::3]))
        await _assert_statistics_consistent(pool)
    finally:
        await pool.close()


async def test_migration_backfills_a_store_that_predates_the_index(private_postgres: LocalPostgres) -> None:
    url = await _fresh_database(private_postgres, "bm25_backfill")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        # The store as it was before the lexical index (100-119); later, unrelated migrations (a column the
        # parser writes today) are applied too, so today's store_document can fill it.
        for mig in list_migrations():
            if not 100 <= mig.version < 120:
                await conn.execute(mig.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", mig.version, mig.name
                )
    finally:
        await conn.close()
    # Documents stored by the previous schema (its row triggers fill bm25_postings) ...
    old = await asyncpg.create_pool(url, min_size=1, max_size=2)
    rng = random.Random(5)
    try:
        for i in range(25):
            await store_document(old, _doc(i, rng))
        assert await old.fetchval("SELECT count(*) FROM bm25_postings") > 0
    finally:
        await old.close()
    # ... then the new migration: the old tables go, every existing chunk is in the new index.
    pool = await _pool(url)
    try:
        assert await pool.fetchval("SELECT to_regclass('bm25_postings')") is None
        await _assert_statistics_consistent(pool)
        expected = await _reference(pool, "insulin therapy", Bm25Params())
        hits = await bm25_search(pool, "insulin therapy", 10, SearchFilters(), Bm25Params(), CorpusStats())
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:10]]
    finally:
        await pool.close()
