"""The scalable BM25 index (packed posting blocks, migration 220) on a real PostgreSQL: exact ranking against a
reference computed from the chunks' own tsvectors, statistics and postings kept in step by every write,
compaction (merging blocks, dropping removed chunks' postings) under concurrent writers, filters, and the
backfill of a store that predates the index."""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import numpy as np
import pytest

from devstack.postgres import LocalPostgres
from services.parser.store import delete_document, store_document
from services.retriever.engine.filters.passing import PLANNED_MARGIN, PassingSet, passing_chunks, planned_rows
from services.retriever.engine.lexical import pruning
from services.retriever.engine.lexical import rank as lexical_rank
from services.retriever.engine.lexical.blocks import BOUND_COLUMNS, POSTING, BlockBounds
from services.retriever.engine.lexical.compaction import compact
from services.retriever.engine.lexical.postings import (
    Bm25Scoring,
    KeyScores,
    query_blocks,
    read_terms,
    term_postings,
)
from services.retriever.engine.lexical.postings_cache import PostingsCache
from services.retriever.engine.lexical.rank import Bm25Params, PostingsTally, bm25_rank, bm25_search
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.scored import Scored
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


async def _stored(pool: asyncpg.Pool, seed: int, count: int, store: int | None = None) -> list[ParsedDocument]:
    """``count`` generated documents (seeded), the first ``store`` of them (default all) stored one by one."""
    rng = random.Random(seed)
    docs = [_doc(i, rng) for i in range(count)]
    for d in docs[:store]:
        await store_document(pool, d)
    return docs


async def _pool(url: str) -> asyncpg.Pool:
    return await create_pool(DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": url}))


async def _fresh_database(pg: LocalPostgres, name: str) -> str:
    """A new empty database on the same server (created by the superuser, owned by the app role)."""
    other = LocalPostgres(pg.data_dir, port=pg.port, database=name)
    await asyncio.to_thread(other.provision)
    return other.url


@asynccontextmanager
async def _fresh_pool(pg: LocalPostgres, name: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on a new, migrated database of its own, closed afterwards."""
    pool = await _pool(await _fresh_database(pg, name))
    try:
        yield pool
    finally:
        await pool.close()


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
        "unnest(chunk_tsvector(c.doc_title, c.section, c.content)) t"
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


_TSV = "unnest(chunk_tsvector(c.doc_title, c.section, c.content))"


async def _live_postings(pool: asyncpg.Pool) -> dict[tuple[int, int], tuple[int, ...]]:
    """Every posting in the blocks whose chunk is live, by (term id, chunk key): its packed fields."""
    dead = {r["chunk_key"] for r in await pool.fetch("SELECT chunk_key FROM bm25_dead")}
    out: dict[tuple[int, int], tuple[int, ...]] = {}
    for r in await pool.fetch("SELECT term_id, n, postings FROM bm25_blocks"):
        block = np.frombuffer(r["postings"], dtype=POSTING)
        assert len(block) == r["n"]
        for p in block:
            key = int(p["key"])
            if key not in dead:
                assert (r["term_id"], key) not in out, "a live posting stored twice"
                out[(r["term_id"], key)] = tuple(int(p[f]) for f in POSTING.names[1:])
    return out


async def _assert_statistics_consistent(pool: asyncpg.Pool) -> None:
    """df, lengths and the live postings equal what the chunks' text says, right now."""
    wrong_df = await pool.fetchval(
        f"""SELECT count(*) FROM (
               SELECT x.lexeme AS term, count(*) AS df FROM chunks c, {_TSV} x GROUP BY x.lexeme) e
           FULL JOIN (SELECT term, df FROM bm25_terms WHERE df > 0) t USING (term)
           WHERE e.df IS DISTINCT FROM t.df"""
    )
    assert wrong_df == 0
    assert await pool.fetchval("SELECT count(*) FROM bm25_terms WHERE df < 0") == 0
    assert await pool.fetchval("SELECT count(*) FROM chunks") == await pool.fetchval("SELECT count(*) FROM bm25_chunks")
    # The expected postings, from the chunks' text: per-field tf and the chunk's field lengths.
    rows = await pool.fetch(
        f"""SELECT t.term_id, b.chunk_key,
                   count(*) FILTER (WHERE w NOT IN ('A', 'B')) AS tf_text, count(*) FILTER (WHERE w = 'A') AS tf_title,
                   count(*) FILTER (WHERE w = 'B') AS tf_section, b.len_text, b.len_title, b.len_section
            FROM chunks c JOIN bm25_chunks b USING (chunk_id), {_TSV} x, unnest(x.weights) w, bm25_terms t
            WHERE t.term = x.lexeme
            GROUP BY t.term_id, b.chunk_key, b.len_text, b.len_title, b.len_section"""
    )
    expected = {(r["term_id"], r["chunk_key"]): tuple(r[f] for f in POSTING.names[1:]) for r in rows}
    assert await _live_postings(pool) == expected


QUERIES = ["aspirin stroke", "metformin diabetes mortality", "vaccine fever cough asthma", "patients trial"]


@pytest.mark.parametrize("params", [Bm25Params(), Bm25Params(k1=1.2, b=0.75, title_weight=2.0, section_weight=0.5)])
async def test_exact_mode_ranks_like_the_reference(store: asyncpg.Pool, params: Bm25Params) -> None:
    for query in QUERIES:
        expected = await _reference(store, query, params)
        hits = await bm25_search(store, query, 25, SearchFilters(), params, CorpusStats())
        assert len(expected) >= 25
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:25]]
        assert [h.score for h in hits] == pytest.approx([s for _, s in expected[:25]], rel=1e-6)


async def test_compaction_merges_blocks_and_keeps_the_ranking(store: asyncpg.Pool) -> None:
    before = {q: await bm25_search(store, q, 25, SearchFilters(), Bm25Params(), CorpusStats()) for q in QUERIES}
    blocks = await store.fetchval("SELECT count(*) FROM bm25_blocks")
    postings = await store.fetchval("SELECT sum(n) FROM bm25_blocks")
    assert await store.fetchval("SELECT count(*) FROM bm25_pending") > 0  # one small block per term and write
    report = await compact(store, block_postings=64)
    assert report.blocks_read > report.blocks_written > 0
    assert await store.fetchval("SELECT count(*) FROM bm25_pending") == 0
    assert await store.fetchval("SELECT count(*) FROM bm25_blocks") < blocks / 3
    assert await store.fetchval("SELECT sum(n) FROM bm25_blocks") == postings  # nothing lost, nothing doubled
    assert await store.fetchval("SELECT max(n) FROM bm25_blocks") <= 64
    # Size-tiered: a term keeps few blocks below the cap, however many writes it came from.
    assert (
        await store.fetchval(
            "SELECT max(c) FROM (SELECT count(*) AS c FROM bm25_blocks WHERE n < 64 GROUP BY term_id) s"
        )
        <= 7
    )
    await _assert_statistics_consistent(store)
    for q in QUERIES:
        after = await bm25_search(store, q, 25, SearchFilters(), Bm25Params(), CorpusStats())
        assert [(h.chunk_id, h.score) for h in after] == [(h.chunk_id, h.score) for h in before[q]]


async def test_a_selective_filter_gets_k_results_either_way(store: asyncpg.Pool) -> None:
    query = "patients trial cohort"
    filters = SearchFilters(year_from=RARE_YEAR, year_to=RARE_YEAR)
    expected = await _reference(store, query, Bm25Params(), year=RARE_YEAR)
    assert 5 <= len(expected) < 40
    p = Bm25Params()
    scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, await CorpusStats().get(store))
    # The best chunks checked against the filter in passes (few pass: several passes), or the filter first.
    for filter_first_max in (0, 1_000):
        hits = await bm25_rank(store, query, 5, filters, scoring, filter_first_max=filter_first_max)
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:5]]
    assert [h.chunk_id for h in await bm25_search(store, query, 5, filters, p, CorpusStats())] == [
        c for c, _ in expected[:5]
    ]


async def test_passes_sized_by_a_share_are_exact_whether_the_share_is_right_or_wrong(
    store: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check passes are sized by the planner's share (:func:`next_pass`): a right share finds the k
    results in one pass; a share far too high (a first pass too short) or far too low (one too long) still
    gives exactly the results of the filter applied to every chunk (the passes' sizes: unit tests)."""
    query = "patients trial cohort"
    filters = SearchFilters(year_from=RARE_YEAR, year_to=RARE_YEAR)
    expected = [c for c, _ in (await _reference(store, query, Bm25Params(), year=RARE_YEAR))[:5]]
    p = Bm25Params()
    counts = await CorpusStats().get(store)
    scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, counts)
    passing_rare = await store.fetchval(
        "SELECT count(*) FROM chunks c JOIN documents d USING (document_id) WHERE d.year = $1", RARE_YEAR
    )
    passes: list[int] = []
    real_best = KeyScores.best

    def counted(scores: KeyScores, count: int) -> np.ndarray:
        passes.append(count)
        return real_best(scores, count)

    monkeypatch.setattr(KeyScores, "best", counted)  # each pass's candidates
    for planned in (float(passing_rare), float(counts.chunks), 1.0):
        passes.clear()
        hits = await bm25_rank(store, query, 5, filters, scoring, passing=PassingSet(None, planned))
        assert [h.chunk_id for h in hits] == expected, planned
        if planned == passing_rare:
            assert len(passes) == 1, passes  # the right share: one pass


async def test_statistics_follow_insert_replace_and_delete(private_postgres: LocalPostgres) -> None:
    async with _fresh_pool(private_postgres, "bm25_writes") as pool:
        docs = await _stored(pool, 3, 30)
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
        # Compaction drops the removed chunks' postings for good and keeps the ranking exact.
        assert await pool.fetchval("SELECT count(*) FROM bm25_dead") > 0
        before = await bm25_search(pool, "aspirin stroke", 10, SearchFilters(), Bm25Params(), CorpusStats())
        report = await compact(pool, terms_per_batch=7)
        assert report.dead_dropped > 0 and report.terms > 0
        assert await pool.fetchval("SELECT count(*) FROM bm25_dead") == 0
        assert await pool.fetchval("SELECT count(*) FROM bm25_pending") == 0
        await _assert_statistics_consistent(pool)
        stored = await pool.fetchval("SELECT sum(n) FROM bm25_blocks")
        assert stored == len(await _live_postings(pool))  # nothing dead left in any block
        expected = await _reference(pool, "aspirin stroke", Bm25Params())
        hits = await bm25_search(pool, "aspirin stroke", 10, SearchFilters(), Bm25Params(), CorpusStats())
        assert [h.chunk_id for h in hits] == [c for c, _ in expected[:10]] == [h.chunk_id for h in before]


async def test_concurrent_writers_neither_deadlock_nor_miscount(private_postgres: LocalPostgres) -> None:
    async with _fresh_pool(private_postgres, "bm25_concurrent") as pool:
        rng = random.Random(9)
        docs = [_doc(i, rng) for i in range(60)]
        # Eight writers at once, each document's chunks statement by statement, sharing the common terms.
        sem = asyncio.Semaphore(8)

        async def one(d: ParsedDocument) -> None:
            async with sem:
                await store_document(pool, d)

        async def compacting(writers: Awaitable[Any]) -> int:
            """Compaction over and over for as long as ``writers`` run: the blocks it merged meanwhile. (A fixed
            number of rounds could all end before the writers had written two blocks of a term: on a loaded
            machine, they did.)"""
            running = asyncio.ensure_future(writers)
            merged = 0
            while not running.done():
                merged += (await compact(pool, terms_per_batch=5, block_postings=16)).blocks_read
                await asyncio.sleep(0.002)
            await running
            return merged

        # Compaction runs all along: it merges blocks while writers append to the same terms.
        merged = await compacting(asyncio.gather(*(one(d) for d in docs)))
        await _assert_statistics_consistent(pool)
        await compacting(asyncio.gather(*(delete_document(pool, d.document_id) for d in docs[::3])))
        await _assert_statistics_consistent(pool)
        assert merged > 0  # it did merge while the writers ran
        await compact(pool, block_postings=16)
        await _assert_statistics_consistent(pool)
        assert await pool.fetchval("SELECT count(*) FROM bm25_dead") == 0


#: The lexical index's block migrations: 220 made them, 250 changed its functions (deferred bulk postings), 260
#: added the blocks' bounds.
LEXICAL_INDEX_MIGRATIONS = frozenset({220, 250, 260, 271})


async def test_migration_backfills_a_store_that_predates_the_index(private_postgres: LocalPostgres) -> None:
    url = await _fresh_database(private_postgres, "bm25_backfill")
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        # The store as it was before the lexical index (100-119, 220, and 250, 260 and 271, which change 220's work);
        # later, unrelated migrations (a column the parser writes today) are applied too, so today's
        # store_document can fill it.
        for mig in list_migrations():
            if not 100 <= mig.version < 120 and mig.version not in LEXICAL_INDEX_MIGRATIONS:
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


async def test_a_frequency_at_the_tsvector_limit_fits_its_byte(private_postgres: LocalPostgres) -> None:
    async with _fresh_pool(private_postgres, "bm25_caps") as pool:
        text = "zolpidem " * 300 + "insomnia."
        doc = ParsedDocument(source="pubmed", source_id="90001", pmid="90001", title="t", chunks=[_chunk(0, text)])
        await store_document(pool, doc)
        await store_document(pool, _doc(1, random.Random(1)))
        postings = await _live_postings(pool)
        term = await pool.fetchval("SELECT term_id FROM bm25_terms WHERE term = 'zolpidem'")
        [(tf_text, _, _, len_text, _, _)] = [v for (t, _), v in postings.items() if t == term]
        # A tsvector keeps at most 255 positions of a lexeme: the byte holds that whole, nothing wraps to 0.
        assert (tf_text, len_text) == (255, 256)
        hits = await bm25_search(pool, "zolpidem", 5, SearchFilters(), Bm25Params(), CorpusStats())
        assert [h.chunk_id.split("#")[0] for h in hits] == ["pubmed:90001"] and hits[0].score > 0


async def test_a_removal_rewrites_only_the_blocks_its_chunks_fall_in(private_postgres: LocalPostgres) -> None:
    async with _fresh_pool(private_postgres, "bm25_removal") as pool:
        docs = await _stored(pool, 8, 40)
        await compact(pool, block_postings=8)  # many full blocks per common term
        term = await pool.fetchval(
            "SELECT t.term_id FROM bm25_terms t JOIN chunks c ON c.document_id = $1 "
            "AND chunk_tsvector(c.doc_title, c.section, c.content) @@ to_tsquery('english', t.term) "
            "ORDER BY t.df DESC LIMIT 1",
            docs[20].document_id,
        )
        before = {r["block_id"] for r in await pool.fetch("SELECT block_id FROM bm25_blocks WHERE term_id = $1", term)}
        assert len(before) >= 6
        assert await delete_document(pool, docs[20].document_id)
        await compact(pool, block_postings=8)
        after = {r["block_id"] for r in await pool.fetch("SELECT block_id FROM bm25_blocks WHERE term_id = $1", term)}
        # One document's 1-3 chunks have adjacent keys: at most two of the term's blocks hold them.
        assert 1 <= len(before - after) <= 2
        assert await pool.fetchval("SELECT count(*) FROM bm25_dead") == 0
        await _assert_statistics_consistent(pool)
        ranges = await pool.fetch("SELECT min_key, max_key, postings FROM bm25_blocks")
        for r in ranges:
            keys = np.frombuffer(r["postings"], dtype=POSTING)["key"]
            assert (int(keys[0]), int(keys[-1])) == (r["min_key"], r["max_key"]) and (np.diff(keys) > 0).all()


def _prune_small_stores(monkeypatch: pytest.MonkeyPatch, *, seeds: bool = True) -> None:
    """Every step of a pruned search on, on a store this small: no minimum of postings, none a key too many, any
    share of essential terms; with ``seeds``, seeds of one term at least but no fixed size (a store this small
    would otherwise be one seed)."""
    monkeypatch.setattr(pruning, "PRUNE_FROM_POSTINGS", 0)
    monkeypatch.setattr(pruning, "PRUNE_UNTIL_PER_KEY", math.inf)
    monkeypatch.setattr(pruning, "ESSENTIAL_MAX_SHARE", 1.0)
    if seeds:
        monkeypatch.setattr(pruning, "SEED_POSTINGS", 0)
        monkeypatch.setattr(pruning, "SEED_SHARE", 0.0)


def _ranked(hits: list[Scored]) -> list[tuple[str, float]]:
    return [(h.chunk_id, h.score) for h in hits]


@pytest.mark.parametrize("pruning_on", [False, True], ids=["exhaustive", "pruned"])
async def test_cached_terms_answer_like_the_store_across_rewrites(
    private_postgres: LocalPostgres, monkeypatch: pytest.MonkeyPatch, pruning_on: bool
) -> None:
    _prune_small_stores(monkeypatch)
    async with _fresh_pool(private_postgres, "bm25_cache") as pool:
        docs = await _stored(pool, 21, 60, store=50)
        await compact(pool, block_postings=16)
        cache = PostingsCache(1 << 20, min_postings=4)
        params = Bm25Params(pruning=pruning_on)

        async def search(query: str, with_cache: PostingsCache | None) -> list[tuple[str, float]]:
            hits = await bm25_search(pool, query, 25, SearchFilters(), params, CorpusStats(), cache=with_cache)
            return _ranked(hits)

        first = {q: await search(q, cache) for q in QUERIES}
        assert cache.counts.hits == 0 and len(cache) > 0
        assert all(len(view) >= 4 for view in cache._terms.values())  # rare terms are not kept
        for q in QUERIES:
            assert await search(q, cache) == first[q] == await search(q, None)
        assert cache.counts.hits >= len(cache)
        # Removals and new writes add and rewrite blocks (new ids); the cache, holding the terms as they were,
        # answers exactly what the store does now, before and after compaction.
        for d in docs[:5]:
            assert await delete_document(pool, d.document_id)
        for d in docs[50:]:
            await store_document(pool, d)
        for when in ("before compaction", "after compaction"):
            for q in QUERIES:
                expected = [(c, pytest.approx(s, rel=1e-6)) for c, s in (await _reference(pool, q, Bm25Params()))[:25]]
                assert await search(q, cache) == await search(q, None) == expected, (when, q)
            await compact(pool, block_postings=16)


async def test_a_term_given_a_block_since_it_was_held_reads_that_block_alone(private_postgres: LocalPostgres) -> None:
    async with _fresh_pool(private_postgres, "bm25_cache_append") as pool:
        docs = await _stored(pool, 23, 60, store=40)
        cache = PostingsCache(1 << 20, min_postings=4)
        refs = await query_blocks(pool, "patients")
        held = (await read_terms(pool, refs, cache))[refs[0].term_id]
        assert cache.get(refs[0].term_id) is held and held.blocks == {(r.block_id, r.version) for r in refs}
        await store_document(pool, docs[40])  # one statement: one more block of "patients"
        now = await query_blocks(pool, "patients")
        added = [r for r in now if (r.block_id, r.version) not in held.blocks]
        assert len(added) == 1 and len(now) == len(refs) + 1
        recorder = _Recorder(pool)
        view = (await read_terms(recorder, now, cache))[refs[0].term_id]  # type: ignore[arg-type]
        assert len(recorder.statements) == 1 and len(recorder.args[0][1]) == 1  # the new block alone was read
        expected = np.sort(np.frombuffer((await term_postings(pool, "patients")).postings["key"].tobytes(), ">i4"))
        assert view.keys.tolist() == expected.tolist() and cache.get(refs[0].term_id) is view


class _RemovesBetweenReads:
    """A connection on which a document is removed and the index compacted between a search's listing of
    its blocks and its read of them (what a concurrent compaction can do)."""

    def __init__(self, pool: asyncpg.Pool, doc_id: str) -> None:
        self.pool, self.doc_id, self.struck = pool, doc_id, False
        self.statements: list[str] = []

    async def fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        self.statements.append(sql)
        if "block_id = ANY" in sql and not self.struck:
            self.struck = True
            assert await delete_document(self.pool, self.doc_id)
            await compact(self.pool, block_postings=16)
        return list(await self.pool.fetch(sql, *args))

    async def fetchval(self, sql: str, *args: object) -> object:
        return await self.pool.fetchval(sql, *args)

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[_RemovesBetweenReads]:
        yield self


@pytest.mark.parametrize("pruning_on", [False, True], ids=["exhaustive", "pruned"])
async def test_a_block_merged_away_between_the_listing_and_the_read_is_read_again(
    private_postgres: LocalPostgres, monkeypatch: pytest.MonkeyPatch, pruning_on: bool
) -> None:
    _prune_small_stores(monkeypatch, seeds=False)
    async with _fresh_pool(private_postgres, "bm25_cache_race") as pool:
        docs = await _stored(pool, 22, 40)
        await compact(pool, block_postings=16)
        gone = await pool.fetch(
            "SELECT b.chunk_key FROM bm25_chunks b JOIN chunks c USING (chunk_id) WHERE c.document_id = $1",
            docs[7].document_id,
        )
        gone_ids = {
            str(r["chunk_id"])
            for r in await pool.fetch("SELECT chunk_id FROM chunks WHERE document_id = $1", docs[7].document_id)
        }
        query = "patients trial cohort"
        assert set((await term_postings(pool, query)).postings["key"].tolist()) & {r["chunk_key"] for r in gone}
        conn = _RemovesBetweenReads(pool, docs[7].document_id)
        scoring = Bm25Scoring(0.9, 0.4, 1.0, 0.0, await CorpusStats().get(pool))
        cache = PostingsCache(1 << 20, min_postings=1)
        got = await bm25_rank(conn, query, 200, SearchFilters(), scoring, cache=cache, pruning=pruning_on)  # type: ignore[arg-type]
        assert conn.struck  # the removal and compaction happened between the listing and the read
        # Read again in one statement (the listing and the postings together) after the read that failed.
        struck_at = next(i for i, sql in enumerate(conn.statements) if "block_id = ANY" in sql)
        assert any("b.postings" in sql for sql in conn.statements[struck_at + 1 :])
        now = await bm25_rank(pool, query, 200, SearchFilters(), scoring, pruning=False)
        assert got == now and not {h.chunk_id for h in got} & gone_ids


class _Recorder:
    """A pool (or a connection of it) that records the statements run through it (and their arguments)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool, self.statements, self.args = pool, [], []  # type: list[str], list[tuple[object, ...]]

    async def fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        self.statements.append(sql)
        self.args.append(args)
        return list(await self.pool.fetch(sql, *args))

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[_Recorder]:
        yield self

    async def fetchval(self, sql: str, *args: object) -> object:
        self.statements.append(sql)
        self.args.append(args)
        return await self.pool.fetchval(sql, *args)


async def test_a_filter_the_planner_expects_broad_is_not_read_to_be_counted(store: asyncpg.Pool) -> None:
    await store.execute("ANALYZE chunks; ANALYZE documents")
    chunks = await store.fetchval("SELECT count(*) FROM chunks")
    broad = SearchFilters(year_from=2000)  # every document
    assert await planned_rows(store, broad) > PLANNED_MARGIN * 10
    recorder = _Recorder(store)
    assert (await passing_chunks(recorder, broad, 10)).chunks is None  # type: ignore[arg-type]
    assert len(recorder.statements) == 1 and recorder.statements[0].lstrip().startswith("EXPLAIN")
    # Under the margin it is read and counted as before: exact either way.
    assert (await passing_chunks(store, broad, chunks)).chunks is not None
    # Estimated under the margin but read past the bound: broad, and the estimate, proved wrong, is not kept
    # to size the check passes by.
    misjudged = await passing_chunks(store, broad, chunks // 2)
    assert misjudged.chunks is None and misjudged.planned is None
    assert (await passing_chunks(store, broad, 10)).planned == await planned_rows(store, broad)
    rare = SearchFilters(year_from=RARE_YEAR, year_to=RARE_YEAR)
    recorder = _Recorder(store)
    passing = await passing_chunks(recorder, rare, 10)  # type: ignore[arg-type]
    expected = await store.fetchval(
        "SELECT count(*) FROM chunks c JOIN documents d USING (document_id) WHERE d.year = $1", RARE_YEAR
    )
    assert len(recorder.statements) == 2  # the estimate, then the read
    assert 0 < expected <= 10 and passing.chunks is not None and len(passing.chunks) == expected


async def _stored_bounds_hold(pool: asyncpg.Pool, *, exact: bool) -> int:
    """Every block's stored bounds cover its postings (``exact``: equal what its postings give); the blocks."""
    rows = await pool.fetch(f"SELECT postings, {', '.join(BOUND_COLUMNS)} FROM bm25_blocks")
    for r in rows:
        stored = tuple(r[c] for c in BOUND_COLUMNS)
        actual = BlockBounds.of(np.frombuffer(r["postings"], dtype=POSTING)).as_tuple()
        assert None not in stored
        if exact:
            assert stored == actual
        assert all(s >= a for s, a in zip(stored[:3], actual[:3], strict=True))  # frequencies: at least
        assert all(s <= a for s, a in zip(stored[3:], actual[3:], strict=True))  # lengths: at most
    return len(rows)


async def test_pruned_search_equals_the_exhaustive_one_through_writes_removals_and_compaction(
    private_postgres: LocalPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On random queries, filters and k the pruned lexical leg returns the exhaustive one's hits and scores,
    after live writes, removals (dead postings, bounds left loose), compaction and blocks without bounds."""
    _prune_small_stores(monkeypatch)
    rng = random.Random(38)
    async with _fresh_pool(private_postgres, "bm25_pruning") as pool:
        docs = await _stored(pool, 38, 90, store=70)
        pruned_reads, exhaustive_reads = PostingsTally(), PostingsTally()

        async def same_answers(when: str) -> None:
            scoring = Bm25Scoring(0.9, 0.4, 1.0, 0.0, await CorpusStats().get(pool))
            for _ in range(25):
                query = " ".join(rng.sample(WORDS, rng.randint(1, 14)))
                k = rng.randint(1, 30)
                year = rng.choice([None, RARE_YEAR, 2012, 2015])
                filters = SearchFilters() if year is None else SearchFilters(year_from=year, year_to=year + 1)
                first = rng.choice([0, 1_000])  # checked in passes, or the filter resolved first
                args = (pool, query, k, filters, scoring)
                pruned = await bm25_rank(*args, filter_first_max=first, pruning=True, tally=pruned_reads)
                exhaustive = await bm25_rank(*args, filter_first_max=first, pruning=False, tally=exhaustive_reads)
                assert pruned == exhaustive, (when, query, k, filters, first)

        await same_answers("live writes")
        assert await _stored_bounds_hold(pool, exact=True)
        await compact(pool, block_postings=16)
        await same_answers("compacted")
        for d in rng.sample(docs[:70], 15):
            assert await delete_document(pool, d.document_id)
        for d in docs[70:]:
            await store_document(pool, d)
        await _stored_bounds_hold(pool, exact=False)  # the removed chunks' blocks keep their (looser) bounds
        await same_answers("removals not compacted")
        await compact(pool, block_postings=16)
        assert not await pool.fetchval("SELECT count(*) FROM bm25_dead")
        await _stored_bounds_hold(pool, exact=False)
        await same_answers("removals compacted")
        # Blocks written before blocks had bounds: searched as unbounded, then given bounds by compaction.
        await pool.execute(f"UPDATE bm25_blocks SET {', '.join(f'{c} = NULL' for c in BOUND_COLUMNS)}")
        await same_answers("no bounds")
        await compact(pool, block_postings=16)
        assert await _stored_bounds_hold(pool, exact=True)
        await same_answers("bounds filled in")
        assert pruned_reads.postings < exhaustive_reads.postings  # it did skip postings


async def test_a_pruned_search_checks_no_chunk_against_the_filters_twice(
    private_postgres: LocalPostgres, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The threshold's check of the best partial scores and the leg's check of its best chunks share what they
    learnt: no chunk key is sent to SQL twice in a search, and the answers are the exhaustive ones."""
    _prune_small_stores(monkeypatch)
    monkeypatch.setattr(pruning, "SKIP_FROM_SHARE", 0.0)
    rng = random.Random(41)
    async with _fresh_pool(private_postgres, "bm25_checked_once") as pool:
        await _stored(pool, 41, 120)
        scoring = Bm25Scoring(0.9, 0.4, 1.0, 0.0, await CorpusStats().get(pool))
        checked_twice_in_a_search = 0
        for _ in range(20):
            query = " ".join(rng.sample(WORDS, rng.randint(6, 20)))
            filters = SearchFilters(year_from=2012, year_to=2016)
            recorder = _Recorder(pool)
            got = await bm25_rank(recorder, query, 3, filters, scoring, pruning=True)  # type: ignore[arg-type]
            assert got == await bm25_rank(pool, query, 3, filters, scoring, pruning=False), query
            checks = [
                args[0]
                for sql, args in zip(recorder.statements, recorder.args, strict=True)
                if "b.chunk_key = ANY" in sql
            ]
            sent = [key for keys in checks for key in keys]  # type: ignore[attr-defined]
            assert len(sent) == len(set(sent)), query
            checked_twice_in_a_search += len(checks) >= 2
        assert checked_twice_in_a_search  # some searches did check in both places (the memo was needed)


@pytest.mark.parametrize("pruned", [False, True])
async def test_under_the_default_filters_a_search_checks_about_k_candidates(
    private_postgres: LocalPostgres, monkeypatch: pytest.MonkeyPatch, pruned: bool
) -> None:
    """Few chunks fail the default filters (retracted papers, priority 0): the first check pass is ``k`` and a
    margin, not :data:`~services.retriever.engine.lexical.rank.FIRST_PASS` (each candidate checked costs random
    reads); when enough of the best do fail, the next pass finds the rest, and the answers are the reference's
    without the retracted chunks. Pruned (every step forced on) or exhaustive."""
    if pruned:
        _prune_small_stores(monkeypatch)
    async with _fresh_pool(private_postgres, f"bm25_few_checked_{int(pruned)}") as pool:
        await _stored(pool, 43, N_DOCS)
        query = "patients trial cohort aspirin statin"
        p = Bm25Params()
        scoring = Bm25Scoring(p.k1, p.b, p.title_weight, p.section_weight, await CorpusStats().get(pool))
        k = 10
        expected = [c for c, _ in await _reference(pool, query, p)]
        assert len(expected) > lexical_rank.FIRST_PASS
        first = math.ceil(k * lexical_rank.PASS_MARGIN)
        for retract in (0, first - k + 2):  # none; then enough of the best that the first pass finds < k
            await pool.execute(
                "UPDATE documents SET retracted = true WHERE document_id IN "
                "(SELECT document_id FROM chunks WHERE chunk_id = ANY ($1::text[]))",
                expected[:retract],
            )
            gone = set(
                await pool.fetchval(
                    "SELECT coalesce(array_agg(chunk_id), '{}') FROM chunks JOIN documents USING (document_id) "
                    "WHERE retracted"
                )
            )
            recorder = _Recorder(pool)
            hits = await bm25_rank(recorder, query, k, SearchFilters(), scoring, pruning=pruned)  # type: ignore[arg-type]
            assert [h.chunk_id for h in hits] == [c for c in expected if c not in gone][:k], retract
            checks = [
                len(args[0])  # type: ignore[arg-type]
                for sql, args in zip(recorder.statements, recorder.args, strict=True)
                if "b.chunk_key = ANY" in sql
            ]
            assert checks[0] == first, checks
            if retract:
                assert len(checks) >= 2 and len(gone) >= retract, checks
            else:
                assert sum(checks) <= 2 * first, checks
